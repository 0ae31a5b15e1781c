"""10,000 WebSocket connect/disconnect cycles on one daphne (each socket signed in, subscribed,
sent its state and `hello`, then closed): the process's resident memory after them is less
than 10 % above what it was after a warm-up of 500. On the Redis channel layer when REDIS_URL
is set (each socket joins and leaves layer groups), else the in-process one."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from pathlib import Path

import httpx
import pytest
import websockets

from tests.support.live_console import LiveConsole

pytestmark = [pytest.mark.outage]

PASSWORD = "reviewer-pass-123"
WARM_UP = 500
CYCLES = 10_000
AT_ONCE = 8  # sockets opening and closing concurrently
GROWTH = 0.10


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _session(console) -> str:
    with httpx.Client(base_url=console.url, timeout=30) as client:
        form = client.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        done = client.post(
            "/accounts/login/",
            data={"csrfmiddlewaretoken": token, "username": console.REVIEWER, "password": PASSWORD},
            headers={"Referer": f"{console.url}/accounts/login/"},
        )
        assert done.status_code == 302, done.text[-2000:]
        return client.cookies["sessionid"]


async def _cycle(url: str, session: str) -> None:
    """One socket: open, wait for `hello` (subscribed, state sent), close."""
    async with websockets.connect(
        url, origin=url.replace("ws://", "http://").split("/ws/")[0],
        additional_headers={"Cookie": f"sessionid={session}"}, open_timeout=30,
    ) as socket:  # fmt: skip
        while True:
            frame = await asyncio.wait_for(socket.recv(), 30)
            if frame.startswith("{") and json.loads(frame).get("live") == "hello":
                return


async def _cycles(url: str, session: str, count: int) -> None:
    left = iter(range(count))

    async def worker():
        for _ in left:
            await _cycle(url, session)

    await asyncio.gather(*(worker() for _ in range(AT_ONCE)))


def test_10000_socket_cycles_grow_server_memory_less_than_10_percent(tmp_path):
    console = LiveConsole(tmp_path, db_suffix="churn")
    # As deployed, but on http:// (the test signs in without TLS).
    console.env.update(DEBUG="0", SESSION_COOKIE_SECURE="0", CSRF_COOKIE_SECURE="0")
    if os.environ.get("REDIS_URL"):
        console.env["REDIS_URL"] = os.environ["REDIS_URL"]
        console.env["REDIS_PREFIX"] = f"gavel-churn-{uuid.uuid4().hex[:8]}"
    console.provision(password=PASSWORD)
    console.start()
    try:
        session = _session(console)
        url = console.url.replace("http://", "ws://") + "/ws/inbox/"
        asyncio.run(_cycles(url, session, WARM_UP))
        time.sleep(1)  # the last disconnects are handled
        before = rss_bytes(console.proc.pid)
        started = time.monotonic()
        asyncio.run(_cycles(url, session, CYCLES))
        seconds = time.monotonic() - started
        time.sleep(1)
        after = rss_bytes(console.proc.pid)
        assert console.proc.poll() is None
    finally:
        console.stop()
    growth = after / before - 1
    print(f"{CYCLES} cycles in {seconds:.1f} s; RSS {before / 2**20:.1f} MiB after "
          f"{WARM_UP} → {after / 2**20:.1f} MiB ({growth:+.1%})")  # fmt: skip
    assert growth < GROWTH, f"RSS grew {growth:.1%} ({before} → {after} bytes)"
