"""daphne's HTTP edge, bounded from inside the ASGI entry (console/asgi.py calls `install`).

daphne (on Twisted's HTTP channel) reads a request's whole body, into memory or a temporary
file, before the application hears of the request; and nothing bounds how long a client may
take to send its request's headers or its body (Twisted's idle timeout restarts with every
byte, and daphne's `--http-timeout` starts only once the request is read). None of daphne's
options reach this, so the documented command (`daphne … console.asgi:application`) gets it
from the application's import: `install` puts `GuardedFactory` where daphne's server builds
its HTTP factory. Every connection's channel then

- refuses a body over its path's limit (console/bodylimit.py) from the Content-Length, before
  the first body byte is read (and before `100 Continue`), and a chunked body once it passes
  the limit: a 413 in the path's protocol, written at once; then the connection's write side
  is closed and what the client still sends is discarded for at most `LINGER_SECONDS` /
  `LINGER_BYTES` (so the client reads the 413 rather than a reset) before it is cut;
- closes a connection whose request headers are not complete `GAVEL_HTTP_HEADER_TIMEOUT`
  seconds after it opened (on a kept-alive connection: after the next request's first byte;
  an idle one keeps Twisted's idle timeout, 60 s, so a load balancer's pooled connection is
  not closed under it sooner than before), and one whose body is not complete
  `GAVEL_HTTP_BODY_TIMEOUT` seconds after its headers.

WebSocket handshakes are requests like any other until daphne hands the connection over.
HTTP/2 (TLS with ALPN only; daphne here serves plain HTTP behind the load balancer) keeps
Twisted's own channel.
"""

from __future__ import annotations

import logging
import sys
from http import HTTPStatus
from urllib.parse import unquote, urlsplit

from daphne import http_protocol
from twisted.web import http

from console.core import bodylimit

log = logging.getLogger("console.serving")
PHRASES = {status.value: status.phrase.encode("ascii") for status in HTTPStatus}
LINGER_SECONDS = 2.0
LINGER_BYTES = 256 * 1024


def target_path(target: bytes) -> str:
    """The path of a request target (origin or absolute form), decoded as daphne decodes it."""
    try:
        return unquote(urlsplit(target.decode("ascii")).path) or "/"
    except (UnicodeDecodeError, ValueError):
        return "/"


class GuardedRequest(http_protocol.WebRequest):
    """daphne's request, counting a streamed body against its limit, and handing its body to
    the application unparsed: Twisted parses every POST's Content-Type (through the `email`
    package) and a form or multipart body into `request.args` unless told not to, and daphne
    never reads `args` (the application gets the body itself). That parse was ~4 % of a
    serving process's CPU under the MCP gateway's throughput test, and a multipart body of
    any path was parsed in memory for nothing."""

    gavel_limit: int | None = None
    gavel_received = 0

    def __init__(self, *args, **kwargs):
        kwargs["parsePOSTFormSubmission"] = False
        super().__init__(*args, **kwargs)

    def setResponseCode(self, code, message=None):
        """The status line's reason phrase from the standard library's table when Twisted's
        has none (422, 429 and others: "422 Unknown Status" on the wire otherwise)."""
        if message is None and code not in http.RESPONSES:
            message = PHRASES.get(code)
        super().setResponseCode(code, message)

    def handleContentChunk(self, data):
        self.gavel_received += len(data)
        if self.gavel_limit is not None and self.gavel_received > self.gavel_limit:
            self.channel.gavel_refuse(self)
            return
        super().handleContentChunk(data)


class GuardedChannel(http.HTTPChannel):
    """Twisted's HTTP/1.1 channel with the body limit and the header and body deadlines."""

    gavel_refused = False
    gavel_deadline = None
    gavel_lingered = 0
    gavel_between = False  # kept alive after an answer: the next request's deadline is unset

    def connectionMade(self):
        super().connectionMade()
        self._arm(_setting("GAVEL_HTTP_HEADER_TIMEOUT"), "headers")

    def dataReceived(self, data):
        if self.gavel_between:  # the next request begins
            self.gavel_between = False
            self._arm(_setting("GAVEL_HTTP_HEADER_TIMEOUT"), "headers")
        super().dataReceived(data)

    def allHeadersReceived(self):
        self._disarm()
        self.gavel_between = False
        request = self.requests[-1]
        request.gavel_path = path = target_path(self._path)
        request.gavel_limit = limit = bodylimit.limit_for(path)
        if self.length is not None and self.length > limit:
            request.gotLength(0)  # nothing will be read into it
            self.gavel_refuse(request)
            return
        super().allHeadersReceived()
        if self.length != 0:
            self._arm(_setting("GAVEL_HTTP_BODY_TIMEOUT"), "body")

    def allContentReceived(self):
        if self.gavel_refused:
            return
        self._disarm()
        super().allContentReceived()

    def requestDone(self, request):
        self.gavel_between = bool(self.persistent)  # (a pipelined request's bytes are in)
        super().requestDone(request)

    def connectionLost(self, reason):
        self._disarm()
        super().connectionLost(reason)

    # --- the body limit ---

    def gavel_refuse(self, request) -> None:
        """Answer 413 now, read no more of this request, and close."""
        if self.gavel_refused:
            return
        self.gavel_refused = True
        self._disarm()
        self.persistent = False
        path = getattr(request, "gavel_path", "/")
        headers, body = bodylimit.too_large(path, request.gavel_limit)
        head = [b"HTTP/1.1 413 Content Too Large"]
        head += [name + b": " + value for name, value in headers]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        log.warning("413 for %s: a body over %s bytes, not read", path, request.gavel_limit)
        # What the client still sends is read and dropped, briefly: closing with unread data
        # would reset the connection, and the client might lose the 413 with it.
        self.lineReceived = self.rawDataReceived = self._linger
        half_close = getattr(self.transport, "loseWriteConnection", None)
        if half_close is not None:
            half_close()
            self.callLater(LINGER_SECONDS, self.transport.abortConnection)
        else:
            self.transport.loseConnection()

    def _linger(self, data) -> None:
        self.gavel_lingered += len(data)
        if self.gavel_lingered > LINGER_BYTES:
            self.transport.abortConnection()

    # --- the deadlines ---

    def _arm(self, seconds: int, what: str) -> None:
        self._disarm()
        self.gavel_deadline = self.callLater(seconds, self._expired, what)

    def _disarm(self) -> None:
        deadline, self.gavel_deadline = self.gavel_deadline, None
        if deadline is not None and deadline.active():
            deadline.cancel()

    def _expired(self, what: str) -> None:
        self.gavel_deadline = None
        log.info("closing a connection whose request %s did not arrive in time", what)
        self.timeoutConnection()  # Twisted's idle close: lose the connection, abort if stuck


def _setting(name: str) -> int:
    from django.conf import settings

    return getattr(settings, name)


def _guarded_protocol(factory) -> http._GenericHTTPChannelProtocol:
    return http._GenericHTTPChannelProtocol(GuardedChannel())


class GuardedFactory(http_protocol.HTTPFactory):
    """daphne's HTTP factory, building guarded channels and requests."""

    protocol = _guarded_protocol

    def buildProtocol(self, addr):
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = GuardedRequest
        return protocol


def install() -> bool:
    """Under daphne (its server module loaded, as `daphne …` and `runserver` load it before the
    application), make its server build guarded HTTP channels. True when installed."""
    server = sys.modules.get("daphne.server")
    if server is None:
        return False
    if not issubclass(server.HTTPFactory, GuardedFactory):
        server.HTTPFactory = GuardedFactory
    return True
