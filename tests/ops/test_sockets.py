"""ops.serving.sockets: open sockets counted (gavel_websocket_connections) and closed with
1012 by a shutdown; what the application sends after that close is dropped."""

from __future__ import annotations

import pytest
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.testing import WebsocketCommunicator

from ops import instruments, serving


class Echo(AsyncWebsocketConsumer):
    async def connect(self):
        await self.accept()

    async def receive(self, text_data=None, bytes_data=None):
        await self.send(text_data=text_data)


def _open() -> float:
    return instruments.WEBSOCKETS._value.get()


@pytest.mark.django_db
@pytest.mark.asyncio
async def test_sockets_counted_and_closed_with_1012():
    app = serving.sockets(Echo.as_asgi())
    before = _open()
    first = WebsocketCommunicator(app, "/ws/x/")
    second = WebsocketCommunicator(app, "/ws/y/")
    assert (await first.connect())[0] and (await second.connect())[0]
    assert _open() == before + 2

    assert await serving.close_sockets() == 2
    for socket in (first, second):
        assert await socket.receive_output(1) == {"type": "websocket.close", "code": 1012}
    await first.send_to(text_data="after the close")
    assert await first.receive_nothing(0.2)  # dropped: the socket is closing

    await first.disconnect()
    await second.disconnect()
    assert _open() == before
    assert await serving.close_sockets() == 0
