"""The first middleware: each request's id (an incoming sane `X-Request-Id`, else a new one)
on every log line written while it is served and on its response; its Prometheus count and
duration by route (the URL pattern, never the path) and status class; its OpenTelemetry span
when tracing is on. Async-capable: on the async path it adds no thread hop."""

from __future__ import annotations

from time import perf_counter

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings

from ops import instruments, telemetry
from ops.context import accept_request_id, request_id

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# (method, the URL pattern's route, status // 100) -> (counter, histogram) children:
# `.labels()` (a lock, a tuple of strings, a dict) and the label's text are made once per
# route, method and status class, never per request. The key holds the resolver's own route
# string, so the set is bounded by the URLconf.
_children: dict[tuple, tuple] = {}


def _route(request) -> str:
    match = getattr(request, "resolver_match", None)
    if match is not None:
        return "/" + match.route if match.route else match.view_name or "unnamed"
    static = settings.STATIC_URL or "/static/"
    if request.path.startswith(static if static.startswith("/") else "/" + static):
        return "static"
    return "unmatched"  # a 404 from the resolver: the path itself is the client's, not a label


def _children_for(request, status: int) -> tuple:
    method = request.method if request.method in _METHODS else "other"
    match = getattr(request, "resolver_match", None)
    # The common case keys by the pattern's route string itself; the rest (no route, no match)
    # by their label in a 1-tuple, which no route string equals.
    route = match.route if match is not None and match.route else (_route(request),)
    key = (method, route, status // 100)
    children = _children.get(key)
    if children is None:
        labels = (method, _route(request), f"{status // 100}xx")
        children = _children[key] = (
            instruments.HTTP_REQUESTS.labels(*labels),
            instruments.HTTP_DURATION.labels(*labels),
        )
    return children


def observe(request, status: int, seconds: float) -> None:
    counter, histogram = _children_for(request, status)
    counter.inc()
    histogram.observe(seconds)


class RequestMiddleware:
    """Per request: one contextvar read and set, a counter's id (ops/context.py), two clock
    reads, one header, a cached counter and histogram child (`_children`); with tracing off no
    span and no header copy. bench/ops.py measures what it adds to an authenticated GET."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self._async = iscoroutinefunction(get_response)  # once: inspect is slow per request
        if self._async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self._async:
            return self._acall(request)
        rid = _begin(request)
        start = perf_counter()
        if not telemetry.enabled():
            return _end(request, self.get_response(request), rid, start, None)
        with telemetry.request_span(
            method=request.method, headers=request.headers, request_id=rid
        ) as finish:
            response = self.get_response(request)
            return _end(request, response, rid, start, finish)

    async def _acall(self, request):
        rid = _begin(request)
        start = perf_counter()
        if not telemetry.enabled():
            return _end(request, await self.get_response(request), rid, start, None)
        with telemetry.request_span(
            method=request.method, headers=request.headers, request_id=rid
        ) as finish:
            response = await self.get_response(request)
            return _end(request, response, rid, start, finish)


def _begin(request) -> str:
    """The id is set for the rest of the request, Django's own "Not Found" / "Internal Server
    Error" lines included (they are written after the middleware returns, in the same task
    under ASGI); under WSGI and the test client it is cleared on `request_finished`
    (ops/apps.py)."""
    rid = request_id.get()
    if rid is None:
        rid = accept_request_id(request.META.get("HTTP_X_REQUEST_ID"))
        request_id.set(rid)
    request.request_id = rid
    return rid


def _end(request, response, rid: str, start: float, finish):
    status = response.status_code
    counter, histogram = _children_for(request, status)
    histogram.observe(perf_counter() - start)
    counter.inc()
    response.headers.setdefault("X-Request-Id", rid)
    if finish is not None:
        finish(_route(request), status)
    return response
