"""PostgreSQL stopped for 10 s mid-traffic (a cluster of the test's own, not the shared one):
every request answers what it would have, or 503 with Retry-After (the contract's JSON body
under /api/v1/, a page that reloads itself elsewhere), never a 500 and never after 30 s; and
once the cluster is back, the same daphne process answers everything again (no restart)."""

from __future__ import annotations

import itertools
import json
import re
import time

import httpx
import pytest

from tests.support.live_console import LiveConsole
from tests.support.processes import PostgresCluster, postgres_bin
from tests.support.traffic import Traffic

pytestmark = [pytest.mark.postgres, pytest.mark.outage]

PASSWORD = "reviewer-pass-123"
OUTAGE = 10.0
RECOVERY = 8.0  # after the cluster is back, every kind of request has answered 2xx by then
SLOWEST = 30.0  # no request may be held longer than this, outage or not


@pytest.fixture
def cluster():
    if postgres_bin() is None:
        pytest.skip("needs PostgreSQL's server binaries (initdb, pg_ctl) for a cluster of its own")
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def console(cluster, tmp_path):
    console = LiveConsole(tmp_path, database_url=cluster.create_database("gavel_outage"))
    # Each kind of request meets the 10 s outage at least twice (the default is 10 s: the
    # same code, one answer per outage).
    console.env["DB_POOL_TIMEOUT"] = "4"
    console.provision(password=PASSWORD)
    console.start()
    try:
        yield console
    finally:
        console.stop()


def _sign_in(console) -> httpx.Client:
    client = httpx.Client(base_url=console.url, timeout=60)
    form = client.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    done = client.post(
        "/accounts/login/",
        data={"csrfmiddlewaretoken": token, "username": console.REVIEWER, "password": PASSWORD},
        headers={"Referer": f"{console.url}/accounts/login/"},
    )
    assert done.status_code == 302, done.text[-2000:]
    return client


def _held() -> dict:
    call = {"toolCallId": "c1", "toolName": "email.send", "arguments": {"to": "b@x"}}
    return {"events": [{"seq": 1, "type": "approval.requested", "step": 1, "calls": [call]}]}


def _run(run_id: str) -> dict:
    return {"id": run_id, "agentId": "outage-bot", "agentVersion": 1, "principalId": "p@x"}


class Workload:
    """What a runtime, a reviewer bot and a browser do at once: admit runs, hold a call in
    each, read a run, long-poll a held run's decisions, decide the traffic's calls, open pages."""

    def __init__(self):
        self.numbers = itertools.count()
        self.admitted: list[str] = []
        self.refused: list[str] = []  # admissions answered 503: none may exist afterwards

    def admit(self, client):
        run_id = f"run_t{next(self.numbers)}"
        response = client.post("/api/v1/runs", json=_run(run_id))
        if response.status_code == 201:
            self.admitted.append(run_id)
        elif response.status_code == 503:
            self.refused.append(run_id)
        return response

    def events(self, client):
        """A held call in the next admitted run; none (admission is down too): the held run's
        batch again (a replay, answered from the database like any batch)."""
        run_id = self.admitted[0] if self.admitted else "run_hold"
        response = client.post(f"/api/v1/runs/{run_id}/events", json=_held())
        if response.status_code == 200 and run_id in self.admitted:
            self.admitted.remove(run_id)
        return response

    @staticmethod
    def read(client):
        return client.get("/api/v1/runs/run_hold")

    @staticmethod
    def poll(client):
        return client.get("/api/v1/runs/run_hold/decisions", params={"wait": "3"}, timeout=60)

    @staticmethod
    def decide(client):
        listed = client.get("/api/v1/approvals", params={"status": "pending", "limit": "20"})
        if listed.status_code != 200:
            return listed
        mine = [a for a in listed.json()["items"] if a["runId"].startswith("run_t")]
        if not mine:
            return None
        return client.post(f"/api/v1/approvals/{mine[0]['id']}/decision",
                           json={"decision": "approve"})  # fmt: skip

    pages = itertools.cycle(["/approvals/", "/runs/", "/runs/run_hold/"])

    def page(self, client):
        return client.get(next(self.pages))


def _is_unavailable(answer) -> bool:
    if answer.status != 503 or not (answer.retry_after or "").isdigit():
        return False
    if answer.kind == "page":
        return answer.content_type.startswith("text/html") and "Temporarily unavailable" in (
            answer.body  # the page's <title>
        )
    error = json.loads(answer.body)["error"]
    return error["code"] == "database_unavailable" and error["message"]


def test_postgres_stopped_for_10s_answers_503_with_retry_after_and_recovers(cluster, console):
    runtime = console.api()
    assert runtime.post("/api/v1/runs", json=_run("run_hold")).status_code == 201
    assert runtime.post("/api/v1/runs/run_hold/events", json=_held()).status_code == 200
    browser = _sign_in(console)
    pid = console.proc.pid
    work = Workload()
    clients = {
        "admit": console.api(),
        "events": console.api(),
        "read": console.api(),
        "poll": console.api(),
        "decide": console.api(console.decide_key),
        "page": browser,
    }
    for client in clients.values():
        client.timeout = httpx.Timeout(60)
    kinds = {kind: getattr(work, kind) for kind in clients}
    with Traffic(clients, kinds) as traffic:
        time.sleep(3)
        cluster.stop()
        stopped = time.monotonic()
        time.sleep(OUTAGE)
        cluster.start()
        back = time.monotonic()
        deadline = back + RECOVERY + SLOWEST
        while time.monotonic() < deadline and not all(
            any(a.status in (200, 201) for a in traffic.of(kind, since=back + RECOVERY))
            for kind in kinds
        ):
            time.sleep(0.5)
    answers = traffic.answers

    assert console.proc.poll() is None and console.proc.pid == pid  # never restarted
    assert not [a for a in answers if a.status is None], "a request got no HTTP answer"
    wrong = [a for a in answers if a.status not in (200, 201, 409) and not _is_unavailable(a)]
    assert not wrong, f"neither an answer nor a proper 503: {wrong[:3]}"
    assert max(a.seconds for a in answers) < SLOWEST, max(answers, key=lambda a: a.seconds)
    for kind in kinds:  # the outage was felt by each kind of request ...
        during = [a for a in traffic.of(kind, until=back) if a.started + a.seconds > stopped]
        assert any(a.status == 503 for a in during), (kind, during[:3])
        # ... and each recovered: all it sent from RECOVERY seconds after the restart is served
        after = traffic.of(kind, since=back + RECOVERY)
        assert after and all(a.status in (200, 201, 409) for a in after), (kind, after[:3])
        recovered = min(a.started for a in traffic.of(kind, since=back) if a.status in (200, 201))
        print(f"{kind}: {len(during)} answers in the outage, served again "
              f"{recovered - back:.1f} s after the restart")  # fmt: skip
    assert work.refused
    for run_id in work.refused:  # a 503 changed nothing
        assert runtime.get(f"/api/v1/runs/{run_id}").status_code == 404, run_id
    slowest = max(a.seconds for a in answers if a.status == 503)
    print(f"{len(answers)} answers; slowest 503 after {slowest:.1f} s")
