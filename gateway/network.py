"""The network under the gateway's http upstream client: every connection goes to an address
console/core/outbound.py's policy checked at that moment (`checked_addresses`: the name
resolved once, every address allowed), never to the name, so a name that resolves to a public
address when the upstream is opened and to an internal one a moment later (DNS rebinding)
reaches nothing. TLS still verifies the certificate for the URL's name (httpcore2 passes the
origin's host as `server_hostname`; `Host` is the URL's). Unix sockets are refused.

It is httpcore2's network backend (the one the mcp SDK's httpx2 client runs on); httpx2's
transport takes no backend argument, so `transport()` gives the pool it built this one
(outbound.py does the same for httpx by replacing the pool)."""

from __future__ import annotations

import asyncio
import functools

import anyio
import httpcore2
import httpx2
from django.conf import settings
from httpcore2._backends.anyio import AnyIOBackend

from console.core import outbound


class PinnedBackend(httpcore2.AsyncNetworkBackend):
    """Resolve, check, connect to a checked address. `refused` tells the caller that a
    connection was refused by the policy (the SDK turns the error into a generic one)."""

    def __init__(self, *, allow_loopback: bool):
        self.allow_loopback = allow_loopback
        self.refused = False
        self._inner = AnyIOBackend()

    async def connect_tcp(
        self, host, port, timeout=None, local_address=None, socket_options=None
    ) -> httpcore2.AsyncNetworkStream:
        seconds = timeout or float(settings.GAVEL_MCP_UPSTREAM_DEADLINE_SECONDS)
        check = functools.partial(
            outbound.checked_addresses,
            host,
            port,
            allow_loopback=self.allow_loopback,
            timeout=seconds,
        )
        try:
            # the loop's default executor, not anyio's worker threads: those are not daemon
            # threads and linger idle for 10 s, which held a server's exit after SIGTERM
            addresses = await asyncio.get_running_loop().run_in_executor(None, check)
        except outbound.Refused:
            self.refused = True
            raise httpcore2.ConnectError(outbound.REFUSED) from None
        except outbound.Expired:
            raise httpcore2.ConnectTimeout(outbound.TIMED_OUT) from None
        except outbound.NotResolved:
            raise httpcore2.ConnectError(outbound.NOT_RESOLVED) from None
        last_error: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, socket_options=socket_options
                )
            except httpcore2.ConnectError as error:
                last_error = error
        raise httpcore2.ConnectError(outbound.CONNECTION_FAILED) from last_error

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        self.refused = True
        raise httpcore2.ConnectError(outbound.REFUSED)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


def transport(backend: PinnedBackend) -> httpx2.AsyncHTTPTransport:
    """httpx2's transport (no proxies from the environment) over a pool on `backend`."""
    made = httpx2.AsyncHTTPTransport(trust_env=False)
    pool = made._pool
    if not isinstance(pool, httpcore2.AsyncConnectionPool):  # httpx2 changed: fail closed
        raise RuntimeError("httpx2's transport has no connection pool to pin")
    pool._network_backend = backend  # the pool's own limits and TLS context unchanged
    return made
