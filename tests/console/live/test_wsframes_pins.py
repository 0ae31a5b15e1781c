"""console/live/frames.py writes frames straight to daphne's transport and so reads private
attributes of autobahn's WebSocket protocol and of Twisted's TCP transport. pyproject.toml pins
both libraries; these tests fail loudly on an upgrade that renames or retypes what it reads
(rather than letting the direct path decline every frame and the live layer silently slow down),
and on a change to frames.py that reads a private attribute nobody checks here."""

from __future__ import annotations

import ast
import inspect
import socket

import pytest
from autobahn.websocket.protocol import PreparedMessage
from daphne.server import Server as DaphneServer
from daphne.ws_protocol import WebSocketFactory
from twisted.internet import reactor
from twisted.internet.protocol import Protocol
from twisted.internet.tcp import Server as TCPServer
from twisted.internet.testing import StringTransport

from console.live import frames

# (attribute, expected type) on an open autobahn protocol (daphne's WebSocketProtocol)
PROTOCOL = {
    "_perMessageCompress": type(None),  # None unless permessage-deflate was negotiated
    "send_queue": object,  # a deque: truthy when autobahn queued writes
    "maxMessagePayloadSize": int,
    "autoFragmentSize": int,
    "state": int,
    "STATE_OPEN": int,
    "transport": object,
}
# (attribute, expected type) on a connected twisted.internet.tcp.Server
TRANSPORT = {
    "TLS": bool,
    "SEND_LIMIT": int,
    "connected": int,
    "disconnecting": int,
    "_writeDisconnected": bool,
    "dataBuffer": bytes,
    "_tempDataBuffer": list,
}
PRIVATE_READ = {"_perMessageCompress", "_writeDisconnected", "_tempDataBuffer"}


def test_frames_reads_no_private_attribute_that_is_not_checked_here():
    tree = ast.parse(inspect.getsource(frames))
    private = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    }
    assert private == PRIVATE_READ
    assert set(PROTOCOL) | set(TRANSPORT) >= PRIVATE_READ


def test_autobahns_protocol_has_what_frames_reads():
    server = DaphneServer(application=None, endpoints=["tcp:port=0"])
    server.connections = {}
    server.ws_factory = WebSocketFactory(server, server="daphne")
    protocol = server.ws_factory.buildProtocol(("127.0.0.1", 40000))
    protocol.makeConnection(StringTransport())
    for name, kind in PROTOCOL.items():
        assert hasattr(protocol, name), f"autobahn's protocol lost `{name}`: frames.py reads it"
        assert isinstance(getattr(protocol, name), kind), (name, type(getattr(protocol, name)))
    assert not protocol.send_queue  # nothing queued on a fresh socket
    assert "handle_reply" in vars(DaphneServer)
    assert list(inspect.signature(DaphneServer.handle_reply).parameters) == [
        "self",
        "protocol",
        "message",
    ]


def test_prepared_message_still_builds_the_unmasked_frame():
    assert list(inspect.signature(PreparedMessage.__init__).parameters) == [
        "self",
        "payload",
        "isBinary",
        "applyMask",
        "doNotCompress",
    ]
    data = PreparedMessage(b"hi", False, False, True).payloadHybi
    assert data == b"\x81\x02hi"


@pytest.fixture
def tcp_server():
    ours, theirs = socket.socketpair()

    class Port:
        _realPortNumber = 0

    transport = TCPServer(ours, Protocol(), ("127.0.0.1", 1), Port(), 1, reactor)
    yield transport, theirs
    transport.stopReading()
    transport.stopWriting()
    ours.close()
    theirs.close()


def test_twisteds_tcp_transport_has_what_frames_reads(tcp_server):
    transport, peer = tcp_server
    for name, kind in TRANSPORT.items():
        assert hasattr(transport, name), (
            f"Twisted's TCP transport lost `{name}`: frames.py reads it"
        )
        assert type(getattr(transport, name)) is kind, (name, type(getattr(transport, name)))
    assert transport.connected and not transport.disconnecting
    assert not transport._writeDisconnected and not transport.dataBuffer
    assert transport._tempDataBuffer == []
    assert transport.writeSomeData(b"hi") == 2  # the count of bytes sent, as frames._write expects
    assert peer.recv(10) == b"hi"


def test_the_direct_write_sends_at_once_on_a_real_tcp_transport(tcp_server):
    transport, peer = tcp_server
    frames._write(transport, b"\x81\x02hi")
    assert peer.recv(10) == b"\x81\x02hi"
    assert not transport.dataBuffer and transport._tempDataBuffer == []
