"""deploy/haproxy.cfg with Debian's haproxy in front of two daphnes started by
deploy/scripts/web.sh and a worker by deploy/scripts/worker.sh (PostgreSQL and Redis shared;
HAProxy probes /readyz): the API and a WebSocket upgrade through
the balancer, then deploy/scripts/rolling-restart.sh restarts both servers, one after the
other, under a runtime's steady ingest and a decider: no event and no decision is lost, and
the clients see no 5xx. Skipped with the reason where haproxy, socat, PostgreSQL or Redis is
missing (.ci/run installs haproxy)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.db import connection

from approvals.models import Approval, ApprovalStatus
from runs.models import RunEvent
from tests.support.factories import make_key
from tests.support.live_console import ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

SCRIPTS = ROOT / "deploy" / "scripts"


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _database_url() -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _wait(url: str, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} never answered 200")


class Web:
    """One daphne through deploy/scripts/web.sh; its pid in a file the restart command uses."""

    def __init__(self, name: str, env: dict, folder: Path):
        self.name, self.port = name, _port()
        self.pidfile, self.log = folder / f"{name}.pid", folder / f"{name}.log"
        self.env = {**env, "HOST": "127.0.0.1", "PORT": str(self.port)}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start_command(self) -> str:
        return (
            f"HOST=127.0.0.1 PORT={self.port} nohup {SCRIPTS}/web.sh >> {self.log} 2>&1 & "
            f"echo $! > {self.pidfile}"
        )

    def restart_command(self) -> str:
        return (
            f"kill -TERM $(cat {self.pidfile}); "
            f"while kill -0 $(cat {self.pidfile}) 2>/dev/null; do sleep 0.1; done; "
            + self.start_command()
        )

    def start(self) -> None:
        subprocess.run(["bash", "-c", self.start_command()], env=self.env, check=True, timeout=30)  # noqa: S603, S607

    def stop(self) -> None:
        if self.pidfile.exists():
            subprocess.run(
                ["bash", "-c", f"kill -TERM $(cat {self.pidfile}) 2>/dev/null"], timeout=30
            )  # noqa: S603, S607


class Traffic:
    """A runtime ingesting steadily (10-event batches, every 4th holding a call; a lost
    response is resent with the same seqs, as the SDK does) and a decider approving each held
    call, both through the balancer, recording every status they get."""

    def __init__(self, base: str, ingest: str, decide: str):
        self.base, self.ingest, self.decide = base, ingest, decide
        self.stop = threading.Event()
        self.statuses: list[int] = []
        self.transport_errors = 0
        self.seq = 0
        self.calls: list[str] = []
        self.decided: set[str] = set()
        self.failures: list[str] = []

    def _post(self, client, path, body) -> httpx.Response | None:
        try:
            response = client.post(path, json=body)
        except httpx.TransportError:
            self.transport_errors += 1
            return None
        self.statuses.append(response.status_code)
        return response

    def runtime(self) -> None:
        headers = {"Authorization": f"Bearer {self.ingest}"}
        with httpx.Client(base_url=self.base, headers=headers, timeout=30) as client:
            admission = {
                "id": "run_lb",
                "agentId": "lb-bot",
                "agentVersion": 1,
                "principalId": "lb@x",
            }
            while (admitted := self._post(client, "/api/v1/runs", admission)) is None:
                time.sleep(0.2)
            if admitted.status_code not in (200, 201):
                self.failures.append(f"admission {admitted.status_code} {admitted.text[:300]}")
                return
            batch_no = 0
            while not self.stop.is_set():
                batch_no += 1
                events = []
                for _ in range(10):
                    self.seq += 1
                    events.append(
                        {
                            "seq": self.seq,
                            "type": "step.started",
                            "step": self.seq,
                            "agentId": "lb-bot",
                            "model": "m",
                        }
                    )  # noqa: E501
                if batch_no % 4 == 0:
                    call = f"call_{batch_no}"
                    self.seq += 1
                    events.append(
                        {
                            "seq": self.seq,
                            "type": "approval.requested",
                            "step": self.seq - 1,
                            "calls": [
                                {
                                    "toolCallId": call,
                                    "toolName": "send_email",
                                    "arguments": {},
                                    "reason": "r",
                                    "rejectionMessage": "no",
                                }
                            ],
                        }
                    )  # noqa: E501
                    self.calls.append(call)
                for _ in range(300):  # a lost response or a refusal: the same batch again
                    response = self._post(client, "/api/v1/runs/run_lb/events", {"events": events})
                    if response is not None and response.status_code == 200:
                        break
                    time.sleep(0.2)
                time.sleep(0.05)

    def decider(self) -> None:
        headers = {"Authorization": f"Bearer {self.decide}"}
        with httpx.Client(base_url=self.base, headers=headers, timeout=30) as client:
            while not self.stop.is_set():
                try:
                    listed = client.get("/api/v1/approvals", params={"status": "pending"})
                except httpx.TransportError:
                    self.transport_errors += 1
                    continue
                self.statuses.append(listed.status_code)
                for item in listed.json().get("items", []) if listed.status_code == 200 else []:
                    response = self._post(
                        client, f"/api/v1/approvals/{item['id']}/decision", {"decision": "approve"}
                    )  # noqa: E501
                    if response is not None and response.status_code in (200, 409):
                        self.decided.add(item["toolCallId"])
                time.sleep(0.2)


def _socket_through(base_ws: str, origin: str) -> int:
    """An anonymous inbox socket through the balancer: the upgrade goes through, and the
    console closes it with 4403 (the contract's refusal): the close code."""
    import websockets

    async def go() -> int:
        async with websockets.connect(f"{base_ws}/ws/inbox/", origin=origin, open_timeout=10) as ws:
            try:
                await asyncio.wait_for(ws.recv(), 10)
            except websockets.ConnectionClosed as closed:
                return closed.rcvd.code if closed.rcvd else -1
        return 0

    return asyncio.run(go())


def test_two_daphnes_behind_haproxy_restart_one_by_one_without_loss_or_5xx(
    on_postgres, tenant_a, reviewer_a, tmp_path
):
    if not on_postgres:
        pytest.skip("needs PostgreSQL (two processes share it)")
    missing = [tool for tool in ("haproxy", "socat") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt-get install -y {' '.join(missing)})")
    redis_url = os.environ.get("REDIS_URL")
    if not redis_url:
        pytest.skip("needs REDIS_URL: two servers share live updates through Redis")
    ingest = make_key(tenant_a, scopes=("ingest",))
    decide = make_key(tenant_a, scopes=("decide",), principal=reviewer_a)
    lb_port = _port()
    env = {
        **os.environ,
        "GAVEL_HOME": str(ROOT),
        "GAVEL_VENV": str(ROOT / ".venv"),
        "DATABASE_URL": _database_url(),
        "REDIS_URL": redis_url,
        "REDIS_PREFIX": f"lbtest-{os.getpid()}",
        "DEBUG": "0",
        "ALLOWED_HOSTS": "localhost,127.0.0.1",
        "CSRF_TRUSTED_ORIGINS": f"http://localhost:{lb_port}",
        "GAVEL_TRUSTED_PROXY_CIDRS": "127.0.0.1/32",
        "LOG_LEVEL": "WARNING",
        "GAVEL_DEFAULT_RATE_PER_MINUTE": "100000",
        "GAVEL_DEFAULT_RATE_BURST": "10000",
        "GAVEL_VAR_DIR": str(tmp_path / "var"),
    }
    if os.getuid() == 0:
        env["GAVEL_ALLOW_ROOT"] = "1"  # this machine runs its tests as root; deployments do not
    webs = [Web("web1", env, tmp_path), Web("web2", env, tmp_path)]
    worker_log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(  # noqa: S603 - the worker's heartbeat is part of /readyz
        [str(SCRIPTS / "worker.sh")], env=env, stdout=worker_log, stderr=subprocess.STDOUT
    )
    lb = None
    try:
        for web in webs:
            web.start()
        for web in webs:  # ready: database, migrations, Redis, the worker's heartbeat, warm
            _wait(f"http://{web.address}/readyz")
        for web in webs:  # warm: a cold server's first API request is slow (OPS_AUDIT §2.4)
            httpx.get(f"http://{web.address}/api/v1/runs", timeout=60)
        check_path = "/readyz"  # HAProxy's probe: a draining or cold server fails it
        env.update(
            GAVEL_LB_BIND=f"127.0.0.1:{lb_port}",
            GAVEL_WEB1=webs[0].address,
            GAVEL_WEB2=webs[1].address,
            GAVEL_LB_CHECK_PATH=check_path,
            GAVEL_LB_HOST="localhost",
            GAVEL_LB_SOCKET=str(tmp_path / "lb.sock"),
        )
        lb_log = (tmp_path / "lb.log").open("wb")
        lb = subprocess.Popen(
            [str(SCRIPTS / "lb.sh")], env=env, stdout=lb_log, stderr=subprocess.STDOUT
        )  # noqa: S603
        base = f"http://localhost:{lb_port}"
        _wait(f"{base}/static/favicon.svg", 30)
        time.sleep(2.5)  # both servers pass their health checks (rise 2, every 1 s)

        # the API and a socket through the balancer
        api = httpx.get(f"{base}/api/v1/runs", headers={"Authorization": f"Bearer {ingest}"})
        assert api.status_code == 200, api.text
        assert _socket_through(f"ws://localhost:{lb_port}", base) == 4403

        # a rolling restart of both servers under steady ingest and decisions
        traffic = Traffic(base, ingest, decide)
        threads = [
            threading.Thread(target=traffic.runtime),
            threading.Thread(target=traffic.decider),
        ]
        for thread in threads:
            thread.start()
        time.sleep(3)
        for web in webs:
            done = subprocess.run(  # noqa: S603
                [str(SCRIPTS / "rolling-restart.sh"), web.name, web.restart_command(), web.address],
                env={**env, "GAVEL_LB_CHECK_PATH": check_path, "GAVEL_DRAIN_SECONDS": "40"},
                capture_output=True,
                text=True,
                timeout=480,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            time.sleep(3)
        traffic.stop.set()
        for thread in threads:
            thread.join(60)
        deadline = time.monotonic() + 30  # the last calls get decided
        while set(traffic.calls) - traffic.decided and time.monotonic() < deadline:
            time.sleep(0.5)
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {decide}"}) as c:
                for item in c.get("/api/v1/approvals", params={"status": "pending"}).json()[
                    "items"
                ]:
                    if c.post(
                        f"/api/v1/approvals/{item['id']}/decision", json={"decision": "approve"}
                    ).status_code in (200, 409):  # noqa: E501
                        traffic.decided.add(item["toolCallId"])
    finally:
        if lb is not None:
            lb.terminate()
            lb.wait(10)
        for web in webs:
            web.stop()
        worker.terminate()  # SIGTERM: the worker finishes what it holds and exits 0
        assert worker.wait(30) == 0
    server_errors = [s for s in traffic.statuses if s >= 500]
    assert not server_errors, f"the clients saw {server_errors}"
    assert not traffic.failures, traffic.failures
    assert traffic.seq > 50 and len(traffic.calls) >= 3, (
        traffic.seq,
        sorted(set(traffic.statuses)),
    )
    stored = set(RunEvent.objects.filter(run__external_id="run_lb").values_list("seq", flat=True))
    assert stored == set(range(1, traffic.seq + 1))  # no event lost, none doubled
    decided = Approval.objects.filter(run__external_id="run_lb", status=ApprovalStatus.APPROVED)
    assert set(decided.values_list("tool_call_id", flat=True)) == set(traffic.calls)
