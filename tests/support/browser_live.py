"""A provisioned tenant and a real daphne for the live browser tests.
(Moved from tests/browser/test_live.py, which imports it from here.)"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.daphne import daphne as _daphne
from tests.support.live_console import last_line, manage
from tests.support.workers import free_port

TENANT = "live"


REVIEWER, PASSWORD = "reviewer@live.example", "reviewer-pass-123"


RUN = "run_live_browser"


def _port() -> int:
    return free_port(range(8500, 8600))


def provision(env: dict) -> str:
    """Schema, tenant, a reviewer who signs in, and the runtime's key (returned)."""
    manage(env, "migrate", "--verbosity", "0")
    manage(env, "create_tenant", TENANT)
    manage(env, "create_principal", "--tenant", TENANT, REVIEWER, "--password", PASSWORD,
           "--role", "reviewer")  # fmt: skip
    return last_line(manage(env, "create_api_key", "--tenant", TENANT, "--name", "runtime"))


def daphne(env: dict, log: Path):
    """A daphne on a free port of 8500-8599 (tests/support/daphne.py)."""
    return _daphne(env, log, port=_port())


def runtime(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10)


def admit(client: httpx.Client) -> None:
    body = {"id": RUN, "agentId": "support-bot", "agentVersion": 1, "principalId": "a@x.example"}
    assert client.post("/api/v1/runs", json=body).status_code in (200, 201)


def post(client: httpx.Client, *events) -> None:
    response = client.post(f"/api/v1/runs/{RUN}/events", json={"events": list(events)})
    assert response.status_code == 200, response.text


STEP = {"seq": 1, "type": "step.started", "step": 1, "agentId": "support-bot", "model": "m-1"}
HELD = {
    "seq": 2,
    "type": "approval.requested",
    "step": 1,
    "calls": [{"toolCallId": "call_live", "toolName": "refund_payment", "arguments": {"n": 1}}],
}
