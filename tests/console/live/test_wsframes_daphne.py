"""Through a real daphne: sockets watching one run get the frames written straight to daphne's
transport (console/wsframes.py) intact and in order: small and large (over 64 KiB) updates
posted back to back, the same frames on every socket, and the ping still answered."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import websockets

from tests.support.daphne import daphne
from tests.support.live_console import last_line, live_env, manage

TENANT = "wsframes-live"
REVIEWER = "reviewer@wsframes.example"
PASSWORD = "reviewer-pass-123"
RUN = "run_wsframes"


def _provision(env: dict) -> str:
    manage(env, "migrate", "--verbosity", "0")
    manage(env, "create_tenant", TENANT)
    manage(env, "create_principal", "--tenant", TENANT, REVIEWER, "--role", "reviewer",
           "--password", PASSWORD)  # fmt: skip
    return last_line(manage(env, "create_api_key", "--tenant", TENANT, "--name", "rt"))


def _session(url: str) -> str:
    with httpx.Client(base_url=url, timeout=10) as client:
        form = client.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        done = client.post(
            "/accounts/login/",
            data={"csrfmiddlewaretoken": token, "username": REVIEWER, "password": PASSWORD},
            headers={"Referer": f"{url}/accounts/login/"},
        )
        assert done.status_code == 302, done.text[-2000:]
        return client.cookies["sessionid"]


async def _watch(url: str, session: str):
    socket = await websockets.connect(
        url.replace("http://", "ws://") + f"/ws/runs/{RUN}/?seq=0",
        origin=url,
        additional_headers={"Cookie": f"sessionid={session}"},
        max_size=None,
    )
    while True:
        frame = await asyncio.wait_for(socket.recv(), 10)
        if frame.startswith("{") and json.loads(frame).get("live") == "hello":
            return socket


def _todos(i: int) -> list[dict]:
    if i % 2:  # a small update
        return [{"id": "t1", "content": f"marker-{i}", "status": "pending"}]
    # a large one: a frame with a 64-bit length, more than one socket send may take at once
    return [{"id": f"t{n}", "content": f"marker-{i} " + "y" * 800, "status": "pending"}
            for n in range(120)]  # fmt: skip


async def _until_marker(socket, last: int) -> list[str]:
    frames = []
    while not any(f"marker-{last}" in frame for frame in frames[-1:]):
        frames.append(await asyncio.wait_for(socket.recv(), 20))
    return frames


def test_frames_arrive_intact_and_in_order_through_daphne(tmp_path):
    env = live_env(tmp_path, "wsframes")
    ingest = _provision(env)
    with (
        daphne(env, tmp_path / "daphne.log") as url,
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ingest}"}) as api,
    ):
        run = {"id": RUN, "agentId": "bot", "agentVersion": 1, "principalId": "p@x"}
        assert api.post("/api/v1/runs", json=run).status_code == 201
        session = _session(url)

        async def scenario():
            sockets = [await _watch(url, session) for _ in range(3)]
            for i in range(1, 7):
                event = {"seq": i, "type": "todos.updated", "todos": _todos(i)}
                response = await asyncio.to_thread(
                    api.post, f"/api/v1/runs/{RUN}/events", json={"events": [event]}
                )
                assert response.status_code == 200, response.text
            seen = [await _until_marker(socket, 6) for socket in sockets]
            await sockets[0].send("ping")
            pong = await asyncio.wait_for(sockets[0].recv(), 10)
            for socket in sockets:
                await socket.close()
            return seen, pong

        seen, pong = asyncio.run(scenario())
    assert pong == "pong"
    assert seen[0] == seen[1] == seen[2]  # every socket, the same frames
    markers = [int(m) for frame in seen[0] for m in re.findall(r"marker-(\d+)", frame)[:1]]
    assert markers == sorted(markers) and markers[-1] == 6  # in order, none overtaken
    assert {1, 6} <= set(markers)
    assert any(len(frame.encode()) > 65535 for frame in seen[0])  # large frames arrived whole
