"""Text frames written straight to daphne's transport: one frame built per text, however many
sockets of the process it goes to.

The ordinary send path of a frame costs each socket Channels' session wrapper, daphne's reply
dispatch, a UTF-8 encode of the whole text and autobahn's framing (with its debug-log
arguments computed even when nothing is logged), then Twisted's writer registered with the
loop and removed after the next poll: about a third of what a socket paid for a fanned-out
event (the profile: docs/benchmarks.md, "Fan-out over two processes"). Here the frame
(header + UTF-8 payload, built by autobahn's own `PreparedMessage`) is made once per distinct
text and written to each socket's transport, sent at once when nothing is queued on it
(`_write`); what a frame contains is unchanged.

`capture` (console/asgi.py, the outermost layer of the socket stack) notes daphne's own send
in the scope; `for_scope` gives a socket's `DaphneFrames`, or None when the server is not
daphne (tests' communicators, another ASGI server): then the consumer sends as usual. Every
write is synchronous, as daphne's own send is, so a frame written here never overtakes (nor is
overtaken by) one sent the ordinary way to the same socket. When a frame cannot be written
here (the socket is not open, compression was negotiated, autobahn has queued writes, the text
is over the size limit), `send_text` says so and the caller takes the ordinary path, which
behaves exactly as before (including its errors).
"""

from __future__ import annotations

import functools
from collections import OrderedDict

from autobahn.websocket.protocol import PreparedMessage
from twisted.internet.tcp import Server as TCPServer

SCOPE_KEY = "gavel.daphne_send"
FRAMES_KEPT = 16  # distinct texts whose frame is kept (one fan-out needs one at a time)

_frames: OrderedDict = OrderedDict()  # id(text) -> (text, frame bytes); the loop's thread only
built = 0  # frames built (tests read it)


def frame(text: str) -> bytes:
    """The unmasked, uncompressed single-frame text message for `text`, built once while the
    same string object is being sent (the renders the sockets share are one object)."""
    global built
    key = id(text)
    hit = _frames.get(key)
    if hit is not None and hit[0] is text:
        return hit[1]
    built += 1
    data = PreparedMessage(text.encode("utf-8"), False, False, True).payloadHybi
    _frames[key] = (text, data)
    while len(_frames) > FRAMES_KEPT:
        _frames.popitem(last=False)
    return data


class DaphneFrames:
    """One daphne socket (its server and autobahn protocol) that frames can be written to."""

    __slots__ = ("protocol", "server")

    def __init__(self, server, protocol):
        self.server = server
        self.protocol = protocol

    def send_text(self, text: str) -> bool:
        """Write `text` as one text frame; True when done (or dropped, as daphne drops a reply
        to a connection it has already forgotten), False when the caller must send it the
        ordinary way."""
        protocol = self.protocol
        connection = self.server.connections.get(protocol)
        if connection is None or connection.get("disconnected"):
            return True  # daphne's handle_reply returns without a word here too
        if (
            protocol.state != protocol.STATE_OPEN
            or protocol._perMessageCompress is not None
            or protocol.send_queue
        ):
            return False
        data = frame(text)
        size = len(data)  # >= the payload: a limit it nearly meets goes the ordinary way
        if 0 < protocol.maxMessagePayloadSize < size or 0 < protocol.autoFragmentSize < size:
            return False
        _write(protocol.transport, data)
        return True


def _write(transport, data: bytes) -> None:
    """`transport.write(data)`, except that a plain TCP transport with nothing queued sends at
    once, as asyncio's own transports do: Twisted would register a writer with the loop and
    remove it after the next poll, two selector changes per socket. What is not sent at once
    is queued the ordinary way, behind nothing."""
    if (
        isinstance(transport, TCPServer)
        and not transport.TLS
        and transport.connected
        and not transport.disconnecting
        and not transport._writeDisconnected
        and not transport.dataBuffer
        and not transport._tempDataBuffer
        and len(data) <= transport.SEND_LIMIT
    ):
        sent = transport.writeSomeData(data)  # an int, or ConnectionLost (then write() sees it)
        if isinstance(sent, int) and sent >= 0:
            if sent == len(data):
                return
            data = data[sent:]
    transport.write(data)


def for_scope(scope) -> DaphneFrames | None:
    """The socket's daphne transport, when `capture` found the server to be daphne."""
    send = scope.get(SCOPE_KEY)
    if not isinstance(send, functools.partial) or len(send.args) != 1 or send.keywords:
        return None
    server = getattr(send.func, "__self__", None)
    protocol = send.args[0]
    if getattr(send.func, "__name__", "") != "handle_reply" or not _is_daphne(server, protocol):
        return None
    return DaphneFrames(server, protocol)


def _is_daphne(server, protocol) -> bool:
    try:
        from daphne.server import Server
        from daphne.ws_protocol import WebSocketProtocol
    except ImportError:  # pragma: no cover - daphne is a dependency
        return False
    return isinstance(server, Server) and isinstance(protocol, WebSocketProtocol)


def capture(app):
    """ASGI middleware: notes the server's own `send` in the scope (under SCOPE_KEY), before
    the middlewares that wrap it (none of which acts on a `websocket.send`)."""

    async def middleware(scope, receive, send):
        return await app({**scope, SCOPE_KEY: send}, receive, send)

    return middleware
