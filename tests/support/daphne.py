"""A real daphne subprocess and a held call posted to it.
(Moved from tests/approvals/test_rules_live.py, which imports it from here.)"""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.live_console import DAPHNE, ROOT, free_port


@contextlib.contextmanager
def daphne(env: dict, log: Path, *, port: int | None = None):
    """A daphne on `port` (else a free one of 8600-8699) until the block ends: its URL."""
    port = port or free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(  # noqa: S603 - our own daphne and arguments
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


def hold(client: httpx.Client, run_id: str, tool: str) -> dict:
    """Admit a run, hold one call, and read its decisions at once (wait 0)."""
    run = {"id": run_id, "agentId": "support-bot", "agentVersion": 1, "principalId": "p@x"}
    assert client.post("/api/v1/runs", json=run).status_code == 201
    call = {"toolCallId": "c1", "toolName": tool, "arguments": {"to": "bob@acme.com"}}
    event = {"seq": 1, "type": "approval.requested", "step": 1, "calls": [call]}
    response = client.post(f"/api/v1/runs/{run_id}/events", json={"events": [event]})
    assert response.status_code == 200, response.text
    return client.get(f"/api/v1/runs/{run_id}/decisions", params={"wait": "0"}).json()
