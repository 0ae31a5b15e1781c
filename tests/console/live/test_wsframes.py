"""Live frames written straight to daphne's transport (console/wsframes.py), and the fan-out's
paused cycle collector (console/realtime.py): the frame is byte for byte what daphne's own send
writes, built once per text for every socket, declined whenever daphne must decide, and never
out of order with frames sent the ordinary way. Against a fake-free daphne socket (daphne's
own Server and WebSocketProtocol on a Twisted StringTransport)."""

from __future__ import annotations

import asyncio
import gc
import json
import struct
from functools import partial

import pytest
from daphne.server import Server
from daphne.ws_protocol import WebSocketFactory
from twisted.internet.testing import StringTransport

from console.live import frames as wsframes
from console.live import realtime
from console.web.sockets import LiveConsumer


def daphne_socket(server: Server | None = None):
    """(server, protocol, transport): an open daphne WebSocket, as daphne builds it."""
    if server is None:
        server = Server(application=None, endpoints=["tcp:port=0"])
        server.connections = {}
        server.ws_factory = WebSocketFactory(server, server="daphne")
        server.ws_factory.setProtocolOptions(maxMessagePayloadSize=1 << 20, allowNullOrigin=True)
    protocol = server.ws_factory.buildProtocol(("127.0.0.1", 40000))
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.client_addr = ["127.0.0.1", 40000]
    protocol.state = protocol.STATE_OPEN  # the handshake done
    server.connections[protocol] = {"connected": 0}
    return server, protocol, transport


def frames_in(data: bytes) -> list[str]:
    """The unmasked text frames a server wrote (RFC 6455 5.2), decoded."""
    texts, i = [], 0
    while i < len(data):
        assert data[i] == 0x81, "one final text frame each"
        size, i = data[i + 1], i + 2
        if size == 126:
            size, i = struct.unpack("!H", data[i : i + 2])[0], i + 2
        elif size == 127:
            size, i = struct.unpack("!Q", data[i : i + 8])[0], i + 8
        texts.append(data[i : i + size].decode("utf-8"))
        i += size
    assert i == len(data)
    return texts


async def daphne_send(server, protocol, text: str) -> None:
    await server.handle_reply(protocol, {"type": "websocket.send", "text": text})


@pytest.mark.parametrize("size", [5, 200, 70_000])
async def test_a_frame_is_byte_for_byte_what_daphnes_own_send_writes(size):
    server, protocol, transport = daphne_socket()
    text = ("é" + "x" * size)[:size]
    await daphne_send(server, protocol, text)
    ordinary = transport.value()
    transport.clear()
    assert wsframes.for_scope({wsframes.SCOPE_KEY: partial(server.handle_reply, protocol)})
    assert wsframes.DaphneFrames(server, protocol).send_text(text) is True
    assert transport.value() == ordinary
    assert frames_in(ordinary) == [text]


def test_the_frame_is_built_once_per_text_however_many_sockets():
    server, *_ = daphne_socket()
    sockets = [daphne_socket(server) for _ in range(3)]
    text = "<div id='x'>shared render</div>" + "!" * 300
    built = wsframes.built
    for _, protocol, _ in sockets:
        assert wsframes.DaphneFrames(server, protocol).send_text(text)
    assert wsframes.built == built + 1
    assert len({transport.value() for *_, transport in sockets}) == 1


async def test_only_daphnes_own_send_gives_direct_frames():
    server, protocol, _ = daphne_socket()

    async def other_server_send(message):
        pass

    assert wsframes.for_scope({}) is None
    assert wsframes.for_scope({wsframes.SCOPE_KEY: other_server_send}) is None
    assert wsframes.for_scope({wsframes.SCOPE_KEY: partial(print, protocol)}) is None
    assert wsframes.for_scope({wsframes.SCOPE_KEY: partial(server.handle_reply, object())}) is None
    direct = wsframes.for_scope({wsframes.SCOPE_KEY: partial(server.handle_reply, protocol)})
    assert direct.protocol is protocol and direct.server is server

    seen = {}

    async def app(scope, receive, send):
        seen.update(scope)

    await wsframes.capture(app)({"type": "websocket"}, None, other_server_send)
    assert seen[wsframes.SCOPE_KEY] is other_server_send


@pytest.mark.parametrize(
    "change",
    [
        lambda protocol: setattr(protocol, "state", protocol.STATE_CONNECTING),
        lambda protocol: setattr(protocol, "state", protocol.STATE_CLOSING),
        lambda protocol: setattr(protocol, "_perMessageCompress", object()),
        lambda protocol: protocol.send_queue.append((b"queued", True)),
        lambda protocol: setattr(protocol, "maxMessagePayloadSize", 10),
    ],
    ids=["connecting", "closing", "compressed", "queued-writes", "over-the-limit"],
)
def test_what_daphne_must_decide_is_declined_and_nothing_is_written(change):
    server, protocol, transport = daphne_socket()
    change(protocol)
    assert wsframes.DaphneFrames(server, protocol).send_text("a frame of some length") is False
    assert transport.value() == b""


def test_a_socket_daphne_has_forgotten_drops_the_frame_as_daphne_does():
    server, protocol, transport = daphne_socket()
    server.connections[protocol]["disconnected"] = 1.0
    assert wsframes.DaphneFrames(server, protocol).send_text("late") is True
    del server.connections[protocol]
    assert wsframes.DaphneFrames(server, protocol).send_text("later") is True
    assert transport.value() == b""


def live_consumer(server, protocol) -> LiveConsumer:
    consumer = LiveConsumer()
    consumer.base_send = partial(server.handle_reply, protocol)  # as daphne hands it over
    consumer.frames = wsframes.DaphneFrames(server, protocol)
    return consumer


async def test_the_bell_and_control_frames_keep_their_order_on_the_direct_path():
    server, protocol, transport = daphne_socket()
    consumer = live_consumer(server, protocol)
    consumer.bell = "<span id='bell'>3</span>"
    await consumer.control("hello", seq=4)  # the bell first, alone, then the JSON
    await consumer.push("<div id='a'></div>")
    consumer.bell = "<span id='bell'>4</span>"
    await consumer.push("<div id='b'></div>")  # the bell rides in front of this one
    assert frames_in(transport.value()) == [
        "<span id='bell'>3</span>",
        json.dumps({"live": "hello", "seq": 4}),
        "<div id='a'></div>",
        "<span id='bell'>4</span><div id='b'></div>",
    ]


async def test_frames_never_overtake_a_write_autobahn_queued():
    server, protocol, transport = daphne_socket()
    consumer = live_consumer(server, protocol)
    await consumer.push("first")
    protocol.triggered = True  # autobahn is trickling out a queued write: it goes first
    protocol.send_queue.append((wsframes.frame("queued"), True))
    await consumer.push("second")  # declined: queued behind it, by daphne's ordinary send
    assert frames_in(transport.value()) == ["first"]
    while protocol.send_queue:  # the reactor drains the queue
        transport.write(protocol.send_queue.popleft()[0])
    protocol.triggered = False
    await consumer.push("third")
    assert frames_in(transport.value()) == ["first", "queued", "second", "third"]


async def test_without_daphne_the_consumer_sends_the_ordinary_way():
    sent = []

    async def communicator_send(message):
        sent.append(message)

    consumer = LiveConsumer()
    consumer.base_send = communicator_send
    consumer.frames = wsframes.for_scope({wsframes.SCOPE_KEY: communicator_send})
    await consumer.push("<p>x</p>")
    await consumer.control("resync")
    assert [m["text"] for m in sent] == ["<p>x</p>", '{"live": "resync"}']


class Listener:
    def __init__(self, seen, pause=0.0):
        self.seen, self.pause = seen, pause

    async def deliver(self, message):
        self.seen.append(gc.isenabled())
        await asyncio.sleep(self.pause)
        self.seen.append(gc.isenabled())


async def until(condition, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


@pytest.mark.django_db(transaction=True)
async def test_the_cycle_collector_is_paused_for_a_fan_out_and_back_after_the_last():
    from channels.layers import get_channel_layer

    layer, fanout = get_channel_layer(), realtime.Fanout.here()
    seen_a, seen_b = [], []
    a, b = Listener(seen_a, pause=0.2), Listener(seen_b, pause=0.0)
    await fanout.join("test.gc.a", a)
    await fanout.join("test.gc.b", b)
    try:
        assert gc.isenabled()
        await layer.group_send("test.gc.a", {"type": "test"})
        await until(lambda: len(seen_a) == 1)
        await layer.group_send("test.gc.b", {"type": "test"})  # overlaps a's fan-out
        await until(lambda: len(seen_a) == 2 and len(seen_b) == 2)
        assert seen_a == [False, False] and seen_b == [False, False]
        await until(gc.isenabled, timeout=1)

        gc.disable()  # someone else's choice is left alone
        try:
            await layer.group_send("test.gc.b", {"type": "test"})
            await until(lambda: len(seen_b) == 4)
            await asyncio.sleep(0.05)
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        await fanout.leave("test.gc.a", a)
        await fanout.leave("test.gc.b", b)
