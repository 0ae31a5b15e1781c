"""SIGTERM to a real daphne (a subprocess on a free port) holding a decisions long-poll and an
open WebSocket: the poll is answered at once with what the server holds (`complete: false`,
the call still pending), the socket is closed with 1012 (service restart), new connections
are refused, and the process exits within 10 s. Before SIGTERM, /readyz says why it is not
ready (no worker here) and /healthz answers."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import threading
import time

import httpx
import pytest
import websockets

from tests.support.live_console import LiveConsole

pytestmark = [pytest.mark.outage]

PASSWORD = "reviewer-pass-123"


def _session(console) -> str:
    client = httpx.Client(base_url=console.url, timeout=30)
    form = client.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    done = client.post(
        "/accounts/login/",
        data={"csrfmiddlewaretoken": token, "username": console.REVIEWER, "password": PASSWORD},
        headers={"Referer": f"{console.url}/accounts/login/"},
    )
    assert done.status_code == 302, done.text[-2000:]
    return client.cookies["sessionid"]


@pytest.fixture
def console(tmp_path):
    console = LiveConsole(tmp_path, db_suffix="graceful")
    console.env.update(DEBUG="0", SESSION_COOKIE_SECURE="0", CSRF_COOKIE_SECURE="0")
    console.env.update(ALLOWED_HOSTS="127.0.0.1,localhost", LOG_LEVEL="INFO")
    console.provision(password=PASSWORD)
    console.start()
    try:
        yield console
    finally:
        console.stop(kill=True)


def test_sigterm_answers_held_polls_closes_sockets_1012_and_exits_within_10s(console):
    api = console.api()
    run = {"id": "run_term", "agentId": "bot", "agentVersion": 1, "principalId": "p@x"}
    assert api.post("/api/v1/runs", json=run).status_code == 201
    call = {"toolCallId": "c1", "toolName": "email.send", "arguments": {"to": "b@x"}}
    held = {"events": [{"seq": 1, "type": "approval.requested", "step": 1, "calls": [call]}]}
    assert api.post("/api/v1/runs/run_term/events", json=held).status_code == 200

    health = httpx.get(f"{console.url}/healthz", timeout=5)
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    ready = httpx.get(f"{console.url}/readyz", timeout=5)
    assert ready.status_code == 503  # no worker runs beside this server
    assert ready.json()["checks"]["worker"] == "no heartbeat"
    assert ready.json()["checks"]["database"] == "ok"
    assert "server" not in ready.json()["checks"]  # warm, not draining

    answer: dict = {}

    def poll():
        started = time.monotonic()
        with console.api() as client:
            response = client.get(
                "/api/v1/runs/run_term/decisions", params={"wait": "30"}, timeout=40
            )
        answer.update(status=response.status_code, body=response.json(),
                      at=time.monotonic(), took=time.monotonic() - started)  # fmt: skip

    session = _session(console)
    ws_url = console.url.replace("http://", "ws://") + "/ws/inbox/"
    closed: dict = {}

    async def socket_and_term():
        async with websockets.connect(
            ws_url, origin=console.url, additional_headers={"Cookie": f"sessionid={session}"},
            open_timeout=30,
        ) as socket:  # fmt: skip
            while True:  # subscribed once `hello` arrives
                frame = await asyncio.wait_for(socket.recv(), 30)
                if frame.startswith("{") and json.loads(frame).get("live") == "hello":
                    break
            poller = threading.Thread(target=poll)
            poller.start()
            await asyncio.sleep(1.5)  # the poll is held (nothing decided, the call waits)
            assert "status" not in answer
            closed["sent"] = time.monotonic()
            console.proc.send_signal(signal.SIGTERM)
            try:
                while True:
                    await asyncio.wait_for(socket.recv(), 15)
            except websockets.ConnectionClosed as exc:
                closed["code"] = exc.rcvd.code if exc.rcvd else None
                closed["at"] = time.monotonic()
            return poller

    poller = asyncio.run(socket_and_term())
    poller.join(15)
    console.proc.wait(15)
    exited = time.monotonic()

    assert closed["code"] == 1012, closed
    assert answer["status"] == 200, answer
    assert answer["body"]["complete"] is False
    assert answer["body"]["pending"] == ["c1"]
    assert answer["body"]["decisions"] == []
    assert answer["at"] - closed["sent"] < 10
    assert answer["took"] < 20  # answered on shutdown, not at the end of its 30 s
    assert exited - closed["sent"] < 10
    assert console.proc.returncode is not None
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{console.url}/healthz", timeout=2)
    log = console.log.read_text()
    assert "sockets closed with 1012: 1" in log
    assert "held long-polls answered: 1" in log
    assert "Killed 0 pending application instances" in log or "Killed" not in log
