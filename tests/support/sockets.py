"""Helpers for the consumer tests: a WebsocketCommunicator on the FULL ASGI app (Origin check,
session, routing), signed in through a real session cookie."""

from __future__ import annotations

import json

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

ORIGIN = b"http://localhost"


def _cookie(principal) -> bytes:
    from django.test import Client

    client = Client()
    client.force_login(principal.user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def session_for(principal) -> bytes:
    return await sync_to_async(_cookie)(principal)


async def open_socket(path: str, principal=None, *, origin: bytes = ORIGIN, cookie=None):
    """(communicator, connected). A refused socket is accepted and then closed with a code."""
    from console.asgi import application

    headers = [(b"origin", origin), (b"host", b"localhost")]
    if principal is not None or cookie is not None:
        headers.append((b"cookie", cookie or await session_for(principal)))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    return communicator, connected


async def close_code(communicator, timeout: float = 5) -> int | None:
    """The code the server closed the socket with (skipping any frames before it)."""
    while True:
        output = await communicator.receive_output(timeout)
        if output["type"] == "websocket.close":
            return output.get("code")


async def frames_until(communicator, predicate, timeout: float = 5) -> list[str]:
    """Text frames received until one satisfies `predicate` (that one included)."""
    seen = []
    while True:
        frame = await communicator.receive_from(timeout)
        seen.append(frame)
        if predicate(frame):
            return seen


def control(frame: str) -> dict | None:
    if frame.startswith("{"):
        return json.loads(frame)
    return None


async def hello(communicator, timeout: float = 15) -> list[str]:
    """Everything up to the `hello` control frame (the state sent on subscribe). Waits up to
    15 s a frame: a socket's first render took over 5 s once under CI's load."""
    return await frames_until(
        communicator, lambda f: (control(f) or {}).get("live") == "hello", timeout
    )
