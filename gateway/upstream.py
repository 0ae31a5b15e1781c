"""The gateway's client side: one MCP client session per upstream server per server process
(the official SDK's `ClientSession` over Streamable HTTP, or over stdio to a subprocess the
operator configured), opened on first use, reopened when it dies (a stdio process that exits
is started again on the next call; its stderr goes to the server's log).

Outbound rules (console/core/outbound.py's, reused): the URL's policy (`url_refusal`), every
address the host resolves to checked (`resolve`, `address_allowed`; loopback only with the
development flag GAVEL_MCP_ALLOW_HTTP or GAVEL_OUTBOUND_ALLOW_LOOPBACK) when the upstream is
opened and again at every connection, which goes to a checked address, never to the name
(gateway/network.py: no DNS-rebinding window), no redirects, no
proxies from the environment, each request within GAVEL_MCP_UPSTREAM_DEADLINE_SECONDS, and
each streamed event within GAVEL_OUTBOUND_MAX_RESPONSE_BYTES."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from console.core import outbound
from gateway import network
from gateway.models import McpServer, Transport
from gateway.services import headers_of

log = logging.getLogger(__name__)
TOOLS_TTL_SECONDS = 30.0  # how long a server process trusts its copy of an upstream's tools


class UpstreamError(Exception):
    """The upstream could not be reached or failed; the text is safe to show a client."""


@dataclass(frozen=True)
class Spec:
    """What a connection is made from (a changed server row makes a new connection)."""

    pk: int
    name: str
    transport: str
    url: str
    command: tuple
    version: float

    @classmethod
    def of(cls, server: McpServer) -> Spec:
        return cls(
            pk=server.pk,
            name=server.name,
            transport=server.transport,
            url=server.url,
            command=tuple(server.command or ()),
            version=server.updated_at.timestamp(),
        )


def _loopback() -> bool:
    return outbound.loopback_allowed(settings.GAVEL_MCP_ALLOW_HTTP)


def _check_destination(url: str) -> None:
    """console/core/outbound.py's address policy, before a connection is opened."""
    refusal = outbound.url_refusal(url, allow_loopback=_loopback())
    parts = urlsplit(url)
    if refusal or not parts.hostname:
        raise UpstreamError(outbound.REFUSED)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = outbound.resolve(parts.hostname, port)
    except OSError:
        raise UpstreamError(outbound.NOT_RESOLVED) from None
    if not addresses or not all(
        outbound.address_allowed(a, allow_loopback=_loopback()) for a in addresses
    ):
        raise UpstreamError(outbound.REFUSED)


class Upstream:
    """One live client session to one upstream, run by a task of its own (the SDK's context
    managers are entered and left in that task); requests from any task share it."""

    def __init__(self, spec: Spec, headers: dict):
        self.spec = spec
        self._headers = headers
        self._session: ClientSession | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._error: BaseException | None = None
        self._task: asyncio.Task | None = None
        self._backend: network.PinnedBackend | None = None
        self.tools: dict | None = None
        self.tools_at = 0.0

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    async def session(self) -> ClientSession:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        deadline = settings.GAVEL_MCP_UPSTREAM_DEADLINE_SECONDS
        try:
            await asyncio.wait_for(self._ready.wait(), deadline)
        except TimeoutError:
            self.close()
            raise UpstreamError(outbound.TIMED_OUT) from None
        if self._session is None:
            if self._backend is not None and self._backend.refused:
                raise UpstreamError(outbound.REFUSED)
            raise UpstreamError(_error_text(self._error))
        return self._session

    async def _run(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.spec.transport == Transport.STDIO:
                    command, *args = self.spec.command
                    streams = await stack.enter_async_context(
                        stdio_client(StdioServerParameters(command=command, args=list(args)))
                    )
                else:
                    await sync_to_async(_check_destination)(self.spec.url)
                    deadline = settings.GAVEL_MCP_UPSTREAM_DEADLINE_SECONDS
                    self._backend = network.PinnedBackend(allow_loopback=_loopback())
                    client = await stack.enter_async_context(
                        httpx2.AsyncClient(
                            headers=self._headers,
                            timeout=httpx2.Timeout(deadline),
                            follow_redirects=False,
                            trust_env=False,
                            transport=network.transport(self._backend),
                        )
                    )
                    streams = await stack.enter_async_context(
                        streamable_http_client(
                            self.spec.url,
                            http_client=client,
                            max_sse_event_size=settings.GAVEL_OUTBOUND_MAX_RESPONSE_BYTES,
                        )
                    )
                read, write = streams[0], streams[1]
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self._session = session
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - recorded; the next use reconnects
            self._error = exc
            if not isinstance(exc, asyncio.CancelledError):
                log.warning(
                    "MCP upstream %s (%s) failed: %s",
                    self.spec.name,
                    self.spec.transport,
                    type(exc).__name__,
                )
        finally:
            self._session = None
            self._ready.set()

    def close(self) -> None:
        self._stop.set()
        if self._task is not None and not self._task.done():
            self._task.cancel()


def _error_text(error: BaseException | None) -> str:
    if isinstance(error, UpstreamError):
        return str(error)
    if isinstance(error, TimeoutError):
        return outbound.TIMED_OUT
    return outbound.CONNECTION_FAILED


class Pool:
    """This process's upstream sessions, by server (a changed server row replaces its entry)."""

    by_pk: dict[int, Upstream] = {}

    @classmethod
    async def get(cls, server: McpServer) -> Upstream:
        spec = Spec.of(server)
        current = cls.by_pk.get(spec.pk)
        if (
            current is not None
            and current.spec == spec
            and (current.alive or current._task is None)
        ):
            return current
        if current is not None:
            current.close()
        headers = await sync_to_async(headers_of)(server) if server.headers_encrypted else {}
        fresh = Upstream(spec, headers)
        cls.by_pk[spec.pk] = fresh
        return fresh

    @classmethod
    def drop(cls, upstream: Upstream) -> None:
        if cls.by_pk.get(upstream.spec.pk) is upstream:
            del cls.by_pk[upstream.spec.pk]
        upstream.close()


async def request(server: McpServer, call):
    """`await call(session)` on the server's upstream session, within the deadline; a
    session found dead is reopened once."""
    deadline = settings.GAVEL_MCP_UPSTREAM_DEADLINE_SECONDS
    for attempt in (1, 2):
        upstream = await Pool.get(server)
        try:
            session = await upstream.session()
            with anyio.fail_after(deadline):
                return await call(session)
        except UpstreamError:
            Pool.drop(upstream)
            if attempt == 2:
                raise
        except TimeoutError:
            Pool.drop(upstream)
            raise UpstreamError(outbound.TIMED_OUT) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            Pool.drop(upstream)
            if attempt == 2:
                raise UpstreamError(outbound.CONNECTION_FAILED) from None
    raise UpstreamError(outbound.CONNECTION_FAILED)


async def call_tool(server: McpServer, tool: str, arguments: dict) -> types.CallToolResult:
    """`tools/call` on the upstream, its result as the upstream sent it. Not checked against
    the tool's output schema here (the SDK's `call_tool` does, and reads `tools/list` first
    on a session that has not listed): the client at the other end checks the result it
    receives, so the gateway's check would only cost a call's time."""
    call = types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=arguments))
    return await request(server, lambda s: s.send_request(call, types.CallToolResult))


async def tools_of(server: McpServer, *, fresh: bool = False) -> dict:
    """The upstream's tools by name (their annotations say `readOnlyHint`), cached briefly."""
    upstream = await Pool.get(server)
    now = time.monotonic()
    if not fresh and upstream.tools is not None and now - upstream.tools_at < TOOLS_TTL_SECONDS:
        return upstream.tools
    tools: dict = {}
    cursor = None
    while True:
        params = {"cursor": cursor} if cursor else None
        page = await request(server, lambda s, p=params: s.list_tools(params=p))
        tools.update({t.name: t for t in page.tools})
        cursor = page.next_cursor
        if not cursor:
            break
    upstream = await Pool.get(server)
    upstream.tools, upstream.tools_at = tools, time.monotonic()
    return tools
