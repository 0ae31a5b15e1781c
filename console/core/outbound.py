"""Every HTTP request the console makes to an address someone else chose goes through here:
a tenant's webhook endpoints (Gavel or Slack format), Slack's `response_url`, a tenant's
OpenID provider (discovery, JWKS, token). One request at a time, with four rules:

- **A total deadline** (`GAVEL_OUTBOUND_DEADLINE_SECONDS`, default 10): name resolution,
  connect, TLS, sending, the answer's headers and its body, all within it. httpx's timeouts
  bound each read, not the whole (a server trickling a byte every few seconds never trips
  them), so every socket operation's timeout is cut to what is left, and a timer shuts the
  connection down when the deadline passes, whatever is blocked on it (a trickled TLS
  handshake too). Name resolution runs in a small pool and is waited for no longer.
- **A size cap** (`GAVEL_OUTBOUND_MAX_RESPONSE_BYTES`, default 1 MiB): the body is read only
  when the caller needs it (OIDC), streamed, and reading stops at the cap; the connection
  counts every byte received and stops at the cap plus the headers' allowance.
- **An address policy**: the URL may not carry a user name or password; the host's every
  address (resolved once, here: httpcore never resolves) must be globally reachable and
  not multicast (`ipaddress.is_global`: no loopback, private, link-local, shared, reserved
  or unspecified address), and so must the IPv4 address inside an IPv4-mapped, 6to4 or NAT64
  one (Teredo is refused); the connection is then made to a checked address, so a name that
  resolves differently a moment later (DNS rebinding) changes nothing. TLS still verifies the
  certificate for the URL's name (SNI and `Host` are the name's). Loopback (127.0.0.0/8,
  ::1, localhost), and only loopback, is allowed for development and tests: the caller
  passes `allow_loopback` (`loopback_allowed()`).
- **No redirects, no proxies from the environment, and generic errors**: what is recorded
  is one of the texts below, never an exception's text (which names ports, TLS alerts,
  refusals: a port scanner for whoever reads a delivery's `lastError`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings

log = logging.getLogger("console.outbound")

REFUSED = "destination not allowed"
TIMED_OUT = "timed out"
TLS_ERROR = "TLS error"
CONNECTION_FAILED = "connection failed"
NOT_RESOLVED = "name not resolved"
TOO_LARGE = "response too large"
BAD_ANSWER = "invalid response"
FAILED = "request failed"
HEADERS_ALLOWANCE = 128 * 1024  # h11 refuses an answer's headers over 100 KiB by itself

INTERNAL = "may not point to a loopback, private, link-local or other internal address"
USERINFO = "may not carry a user name or password"

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def loopback_allowed(development_flag: bool) -> bool:
    """Loopback destinations: with GAVEL_OUTBOUND_ALLOW_LOOPBACK, or with the caller's own
    development flag (GAVEL_WEBHOOK_ALLOW_HTTP, GAVEL_OIDC_ALLOW_HTTP)."""
    return bool(development_flag or settings.GAVEL_OUTBOUND_ALLOW_LOOPBACK)


def address_allowed(address, *, allow_loopback: bool) -> bool:
    """May a connection go to this IP address?"""
    if isinstance(address, str):
        address = ipaddress.ip_address(address.split("%", 1)[0])
    if address.version == 6:
        if address.ipv4_mapped is not None:
            return address_allowed(address.ipv4_mapped, allow_loopback=allow_loopback)
        if address.teredo is not None:
            return False
        inner = address.sixtofour
        if inner is None and address in _NAT64:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None and not address_allowed(inner, allow_loopback=False):
            return False
    if allow_loopback and address.is_loopback:
        return True
    return address.is_global and not address.is_multicast


def _numeric_host(name: str):
    """The IP address a host written as a number names (also the legacy IPv4 forms the C
    resolver accepts: `2130706433`, `0x7f000001`, `0177.1`), else None."""
    try:
        return ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(name))
    except (OSError, ValueError):
        return None


def url_refusal(url: str, *, allow_loopback: bool) -> str | None:
    """Why this URL may not be used (without resolving any name: a name is checked when a
    request connects), else None. The message follows "the URL ..."."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return None  # the caller's own URL check says what is wrong with it
    if parts.username is not None or parts.password is not None:
        return USERINFO
    name = (host or "").rstrip(".").lower()
    if not name:
        return None
    if name == "localhost" or name.endswith(".localhost"):
        return None if allow_loopback else INTERNAL
    number = _numeric_host(name)
    if number is not None and not address_allowed(number, allow_loopback=allow_loopback):
        return INTERNAL
    return None


def resolve(host: str, port: int) -> list[str]:
    """The addresses of `host` (the one seam tests stub: no test resolves a real name)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


class Refused(Exception):
    """The destination is not allowed (raised before any connection is made)."""


class TooLarge(Exception):
    """The answer is over the size cap."""


class Expired(Exception):
    """The request's deadline passed."""


class NotResolved(Exception):
    """The host's name has no address."""


_resolver = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gavel-resolve")


def checked_addresses(host: str, port: int, *, allow_loopback: bool, timeout: float) -> list[str]:
    """The addresses a connection to `host` may be made to: resolved once (within `timeout`),
    every one allowed, else Refused / NotResolved / Expired. The caller connects to one of
    these, never to the name (the MCP gateway's upstream client does the same)."""
    number = _numeric_host(host)
    if number is not None:
        addresses = [str(number)]
    else:
        future = _resolver.submit(resolve, host, port)
        try:
            addresses = future.result(timeout=timeout)
        except FutureTimeout:
            raise Expired from None
        except (OSError, UnicodeError):
            raise NotResolved from None
    if not addresses:
        raise NotResolved
    if not all(address_allowed(a, allow_loopback=allow_loopback) for a in addresses):
        raise Refused
    return addresses


class _Guard(httpcore.NetworkBackend):
    """One request's network: its deadline, its byte budget, its address policy. It resolves
    and checks the host itself and connects to a checked address."""

    def __init__(self, *, seconds: float, budget: int, allow_loopback: bool):
        self.deadline = time.monotonic() + seconds
        self.budget = budget
        self.allow_loopback = allow_loopback
        self.expired = False
        self._lock = threading.Lock()
        self._watched: list[socket.socket] = []

    def left(self, timeout: float | None = None) -> float:
        remaining = self.deadline - time.monotonic()
        if self.expired or remaining <= 0:
            self.expired = True
            raise Expired
        return remaining if timeout is None else min(timeout, remaining)

    def received(self, count: int) -> None:
        self.budget -= count
        if self.budget < 0:
            raise TooLarge

    def expire(self) -> None:
        """The deadline: whatever waits on the connection returns at once."""
        with self._lock:
            self.expired = True
            for sock in self._watched:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def release(self) -> None:
        with self._lock:
            for sock in self._watched:
                sock.close()
            self._watched.clear()

    def _addresses(self, host: str, port: int) -> list[str]:
        try:
            return checked_addresses(
                host, port, allow_loopback=self.allow_loopback, timeout=self.left()
            )
        except Expired:
            self.expired = True
            raise

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        last_error: Exception | None = None
        for address in self._addresses(host, port):
            try:
                stream = httpcore.SyncBackend().connect_tcp(address, port, self.left(timeout))
            except httpcore.ConnectError as error:
                last_error = error
                continue
            with self._lock:
                self._watched.append(stream.get_extra_info("socket").dup())
                if self.expired:
                    stream.close()
                    raise Expired
            return _Stream(stream, self)
        self.left()
        raise httpcore.ConnectError(CONNECTION_FAILED) from last_error

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise Refused

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, self.left()))


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, guard: _Guard):
        self._inner = inner
        self._guard = guard

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._inner.read(max_bytes, self._guard.left(timeout))
        self._guard.received(len(data))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._guard.left(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        inner = self._inner.start_tls(ssl_context, server_hostname, self._guard.left(timeout))
        return _Stream(inner, self._guard)

    def get_extra_info(self, info: str):
        return self._inner.get_extra_info(info)


@cache
def _ssl_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


class _Transport(httpx.HTTPTransport):
    """httpx's transport over a connection pool whose network is the guard. httpx has no
    argument for a network backend, so the pool it built is replaced by one that has."""

    def __init__(self, guard: _Guard):
        super().__init__(verify=_ssl_context(), trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=_ssl_context(), max_connections=1, network_backend=guard
        )


def _client(guard: _Guard, seconds: float) -> httpx.Client:
    return httpx.Client(
        transport=_Transport(guard), timeout=seconds, follow_redirects=False, trust_env=False
    )


@dataclass(frozen=True)
class Answer:
    status_code: int | None  # None: no answer came
    error: str  # "" when an answer came (whatever its status), else one generic text
    body: bytes = b""

    @property
    def outcome(self) -> tuple[int | None, str]:
        """(status code or None, error or "" when 2xx): what an outbox row records."""
        if self.status_code is not None and not self.error and 200 <= self.status_code < 300:
            return self.status_code, ""
        return self.status_code, self.error or f"HTTP {self.status_code}"


def _chain(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _error_text(error: Exception, guard: _Guard) -> str:
    kinds = {type(e) for e in _chain(error)}
    errors = list(_chain(error))
    if Refused in kinds:
        return REFUSED
    if guard.expired or any(isinstance(e, httpx.TimeoutException | Expired) for e in errors):
        return TIMED_OUT
    if TooLarge in kinds:
        return TOO_LARGE
    if NotResolved in kinds:
        return NOT_RESOLVED
    if any(isinstance(e, ssl.SSLError | ssl.CertificateError) for e in errors):
        return TLS_ERROR
    if any(isinstance(e, httpx.RemoteProtocolError | httpx.DecodingError) for e in errors):
        return BAD_ANSWER
    if any(isinstance(e, httpx.TransportError | OSError) for e in errors):
        return CONNECTION_FAILED
    log.warning("outbound request failed unexpectedly", exc_info=error)
    return FAILED


def _read(response: httpx.Response, guard: _Guard, cap: int) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > cap:
            raise TooLarge
        guard.left()
    if guard.expired:  # the deadline shut the connection: an end of body that is not one
        raise Expired
    return bytes(body)


def request(
    method: str,
    url: str,
    *,
    allow_loopback: bool,
    headers: dict | None = None,
    content: bytes | None = None,
    read_body: bool = False,
    client: httpx.Client | None = None,
) -> Answer:
    """One request under the rules above. Never raises: an answer (any status; its body when
    `read_body`, at most the cap) or a generic error. `client`: tests' stand-in endpoint
    (an httpx.Client on a MockTransport); the deadline and the cap still hold."""
    seconds = float(settings.GAVEL_OUTBOUND_DEADLINE_SECONDS)
    cap = settings.GAVEL_OUTBOUND_MAX_RESPONSE_BYTES
    guard = _Guard(seconds=seconds, budget=cap + HEADERS_ALLOWANCE, allow_loopback=allow_loopback)
    if url_refusal(url, allow_loopback=allow_loopback):
        return Answer(None, REFUSED)
    own = client is None
    client = client or _client(guard, seconds)
    timer = threading.Timer(seconds, guard.expire)
    timer.daemon = True
    timer.start()
    try:
        with client.stream(method, url, headers=headers, content=content) as response:
            body = _read(response, guard, cap) if read_body else b""
            return Answer(response.status_code, "", body)
    except Exception as error:  # noqa: BLE001 - every failure becomes one generic text
        return Answer(None, _error_text(error, guard))
    finally:
        timer.cancel()
        guard.release()
        if own:
            client.close()
