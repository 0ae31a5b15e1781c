"""A provisioned tenant and a real daphne for the live browser tests.
(Moved from tests/browser/test_live.py, which imports it from here.)"""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

import httpx

from tests.sdk.live import DAPHNE, ROOT, last_line, manage
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


@contextlib.contextmanager
def daphne(env: dict, log: Path):
    port = _port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [DAPHNE, "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"daphne did not start: {log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/accounts/login/", timeout=2).status_code == 200:
                    break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def runtime(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10)


def admit(client: httpx.Client) -> None:
    body = {"id": RUN, "agentId": "support-bot", "agentVersion": 1, "principalId": "a@x.example"}
    assert client.post("/api/v1/runs", json=body).status_code in (200, 201)


def post(client: httpx.Client, *events) -> None:
    response = client.post(f"/api/v1/runs/{RUN}/events", json={"events": list(events)})
    assert response.status_code == 200, response.text


HELD = {
    "seq": 2,
    "type": "approval.requested",
    "step": 1,
    "calls": [{"toolCallId": "call_live", "toolName": "refund_payment", "arguments": {"n": 1}}],
}
