"""Two daphne processes on one PostgreSQL database and one Redis: a reviewer signed in through
process 1 watches its inbox there; an admin deactivates it through process 2 (a `manage` key).
The socket on process 1 closes within 5 s (the channel layer, not the periodic re-check, set
far off), and the reviewer decides nothing any more: its `decide` key is 401 and its session
has ended. A key revoked through process 2 is 401 at once on process 1. Reactivation makes
the key work again and sign-in possible (the ended session stays ended)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid

import httpx
import pytest
import websockets

from tests.support.daphne import daphne, hold
from tests.support.live_console import last_line, live_env, manage

pytestmark = pytest.mark.postgres

TENANT = "deact-live"
ADMIN = "admin@deact.example"
REVIEWER = "reviewer@deact.example"
PASSWORD = "reviewer-pass-123"


def _env(tmp_path) -> dict:
    env = live_env(tmp_path, "deact2p")
    env["REDIS_URL"] = os.environ["REDIS_URL"]
    env["REDIS_PREFIX"] = f"{os.environ.get('REDIS_PREFIX', 'gavel')}-deact-{uuid.uuid4().hex[:8]}"
    env["GAVEL_WS_RECHECK_SECONDS"] = "600"  # only the channel layer can close it in time
    return env


def _key(env: dict, name: str, scope: str, principal: str) -> str:
    return last_line(
        manage(env, "create_api_key", "--tenant", TENANT, "--name", name,
               "--scope", scope, "--principal", principal)
    )  # fmt: skip


def _provision(env: dict) -> dict:
    manage(env, "migrate", "--verbosity", "0")
    manage(env, "create_tenant", TENANT)
    manage(env, "create_principal", "--tenant", TENANT, ADMIN, "--role", "admin")
    manage(env, "create_principal", "--tenant", TENANT, REVIEWER, "--role", "reviewer",
           "--password", PASSWORD)  # fmt: skip
    return {
        "ingest": last_line(manage(env, "create_api_key", "--tenant", TENANT, "--name", "rt")),
        "manage": _key(env, "admin", "manage", ADMIN),
        "decide": _key(env, "reviewer bot", "decide", REVIEWER),
        "spare": _key(env, "spare", "decide", REVIEWER),
    }


def _sign_in(url: str) -> httpx.Client:
    """A real sign-in through the form: the client keeps the session and CSRF cookies."""
    client = httpx.Client(base_url=url, timeout=10)
    form = client.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    done = client.post(
        "/accounts/login/",
        data={"csrfmiddlewaretoken": token, "username": REVIEWER, "password": PASSWORD},
        headers={"Referer": f"{url}/accounts/login/"},
    )
    assert done.status_code == 302, done.text[-2000:]
    assert "sessionid" in client.cookies
    return client


def _session_decide(client: httpx.Client, approval_id: str) -> httpx.Response:
    return client.post(
        f"/api/v1/approvals/{approval_id}/decision",
        json={"decision": "approve"},
        headers={
            "X-CSRFToken": client.cookies.get("csrftoken") or "",
            "Referer": str(client.base_url),
        },
    )


async def _open_inbox(url: str, session: str):
    ws_url = url.replace("http://", "ws://") + "/ws/inbox/"
    socket = await websockets.connect(
        ws_url, origin=url, additional_headers={"Cookie": f"sessionid={session}"}
    )
    while True:  # up to the `hello` control frame: the socket was accepted and subscribed
        frame = await asyncio.wait_for(socket.recv(), 10)
        if frame.startswith("{") and json.loads(frame).get("live") == "hello":
            return socket


async def _closed_within(socket, seconds: float) -> int | None:
    started = time.monotonic()
    try:
        while True:
            await asyncio.wait_for(socket.recv(), seconds - (time.monotonic() - started))
    except websockets.ConnectionClosed as closed:
        assert time.monotonic() - started < seconds
        return closed.rcvd.code if closed.rcvd else None


def test_deactivation_through_one_process_takes_effect_on_the_other(tmp_path):
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://...")
    if not os.environ.get("REDIS_URL"):
        pytest.skip("needs Redis (REDIS_URL): the processes share the channel layer through it")
    env = _env(tmp_path)
    keys = _provision(env)
    with (
        daphne(env, tmp_path / "one.log") as url_1,
        daphne(env, tmp_path / "two.log") as url_2,
        httpx.Client(base_url=url_1, headers={"Authorization": f"Bearer {keys['ingest']}"}) as rt,
        httpx.Client(base_url=url_1, headers={"Authorization": f"Bearer {keys['decide']}"}) as bot,
        httpx.Client(base_url=url_1, headers={"Authorization": f"Bearer {keys['spare']}"}) as spare,
        httpx.Client(
            base_url=url_2, headers={"Authorization": f"Bearer {keys['manage']}"}
        ) as admin,
    ):
        for n in range(3):
            assert hold(rt, f"run_{n}", "email.send")["pending"] == ["c1"]
        pending = bot.get("/api/v1/approvals", params={"status": "pending"})
        assert pending.status_code == 200, pending.text
        approvals = [a["id"] for a in pending.json()["items"]]
        assert len(approvals) == 3

        browser = _sign_in(url_1)
        assert browser.get("/approvals/").status_code == 200

        async def deactivate_while_watching() -> int | None:
            socket = await _open_inbox(url_1, browser.cookies["sessionid"])
            answer = await asyncio.to_thread(
                admin.patch, f"/api/v1/principals/{REVIEWER}", json={"active": False}
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["active"] is False
            return await _closed_within(socket, 5)

        assert asyncio.run(deactivate_while_watching()) == 4403

        refused = bot.post(
            f"/api/v1/approvals/{approvals[0]}/decision", json={"decision": "approve"}
        )
        assert refused.status_code == 401, refused.text
        page = browser.get("/approvals/")
        assert page.status_code == 302 and page.headers["location"].startswith("/accounts/login/")
        by_session = _session_decide(browser, approvals[0])
        assert by_session.status_code == 401, by_session.text  # the session is anonymous now
        assert rt.get("/api/v1/runs/run_0/decisions", params={"wait": "0"}).json()["pending"] == [
            "c1"
        ]

        again = admin.patch(f"/api/v1/principals/{REVIEWER}", json={"active": True})
        assert again.status_code == 200 and again.json()["active"] is True, again.text
        decided = bot.post(
            f"/api/v1/approvals/{approvals[0]}/decision", json={"decision": "approve"}
        )
        assert decided.status_code == 200, decided.text
        assert decided.json()["status"] == "approved"
        assert browser.get("/approvals/").status_code == 302  # the ended session stays ended
        fresh = _sign_in(url_1)
        assert fresh.get("/approvals/").status_code == 200
        assert _session_decide(fresh, approvals[1]).status_code == 200

        assert spare.get("/api/v1/approvals", params={"status": "pending"}).status_code == 200
        listed = admin.get("/api/v1/keys", params={"limit": 200}).json()["items"]
        spare_id = next(k["id"] for k in listed if k["name"] == "spare")
        assert admin.delete(f"/api/v1/keys/{spare_id}").status_code == 204
        gone = spare.post(
            f"/api/v1/approvals/{approvals[2]}/decision", json={"decision": "approve"}
        )
        assert gone.status_code == 401, gone.text  # the very next request, on the other process
        assert spare.get("/api/v1/approvals").status_code == 401
        assert bot.get("/api/v1/approvals").status_code == 200  # the other key goes on
        for client in (browser, fresh):
            client.close()
