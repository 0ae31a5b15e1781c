"""The gateway's upstream http client connects only to an address that passed
console/core/outbound.py's policy at connect time (gateway/network.py). Names resolve through a
stub; no test resolves a real name or sends traffic off loopback (tests/loopback_only)."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from httpcore2._backends.anyio import AnyIOBackend

from console.core import outbound
from gateway import network, upstream


def _stub_resolver(monkeypatch, answers):
    """`outbound.resolve` answers the next address list of `answers` on each call."""
    asked = []

    def stub(host, port):
        asked.append((host, port))
        return answers[min(len(asked), len(answers)) - 1]

    monkeypatch.setattr(outbound, "resolve", stub)
    return asked


def _count_connects(monkeypatch):
    connects = []
    real = AnyIOBackend.connect_tcp

    async def counted(self, host, port, *args, **kwargs):
        connects.append((host, port))
        return await real(self, host, port, *args, **kwargs)

    monkeypatch.setattr(AnyIOBackend, "connect_tcp", counted)
    return connects


def test_a_name_rebound_to_an_internal_address_after_the_check_is_refused_at_connect(
    settings, monkeypatch
):
    settings.GAVEL_MCP_ALLOW_HTTP = False
    settings.GAVEL_OUTBOUND_ALLOW_LOOPBACK = False
    settings.GAVEL_MCP_UPSTREAM_DEADLINE_SECONDS = 5
    # public when the upstream is opened (the check passes), private when the client connects
    asked = _stub_resolver(monkeypatch, [["93.184.216.34"], ["10.0.0.7"]])
    connects = _count_connects(monkeypatch)
    spec = upstream.Spec(
        pk=1, name="rebind", transport="http", url="https://rebind.example/mcp",
        command=(), version=0.0,
    )  # fmt: skip
    one = upstream.Upstream(spec, {})

    async def open_it():
        try:
            await one.session()
        finally:
            one.close()

    with pytest.raises(upstream.UpstreamError) as refused:
        asyncio.run(open_it())
    assert str(refused.value) == outbound.REFUSED
    assert asked[:2] == [("rebind.example", 443), ("rebind.example", 443)]
    assert connects == []  # no socket was opened to any address


def test_the_client_connects_to_the_checked_address_and_keeps_the_name_for_host(monkeypatch):
    asked = _stub_resolver(monkeypatch, [["127.0.0.1"]])
    connects = _count_connects(monkeypatch)
    heads = []

    async def serve(reader, writer):
        heads.append((await reader.readuntil(b"\r\n\r\n")).decode())
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    async def run():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        backend = network.PinnedBackend(allow_loopback=True)
        async with server, httpx2.AsyncClient(transport=network.transport(backend)) as client:
            answer = await client.get(f"http://upstream.example:{port}/mcp")
        return port, answer

    port, answer = asyncio.run(run())
    assert answer.status_code == 200 and answer.text == "ok"
    assert asked == [("upstream.example", port)]
    assert connects == [("127.0.0.1", port)]
    assert f"Host: upstream.example:{port}" in heads[0]


def test_loopback_is_refused_at_connect_without_the_development_flag(monkeypatch):
    _stub_resolver(monkeypatch, [["127.0.0.1"]])
    connects = _count_connects(monkeypatch)
    backend = network.PinnedBackend(allow_loopback=False)

    async def run():
        async with httpx2.AsyncClient(transport=network.transport(backend)) as client:
            await client.get("http://upstream.example:9/mcp")

    with pytest.raises(httpx2.ConnectError):
        asyncio.run(run())
    assert backend.refused and connects == []
