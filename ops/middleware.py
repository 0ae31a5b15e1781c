"""The first middleware: each request's id (an incoming sane `X-Request-Id`, else a new one)
on every log line written while it is served and on its response; its Prometheus count and
duration by route (the URL pattern, never the path) and status class; its OpenTelemetry span
when tracing is on. Async-capable: on the async path it adds no thread hop."""

from __future__ import annotations

import time

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings

from ops import instruments, telemetry
from ops.context import accept_request_id, request_id

_children: dict[tuple[str, str, str], tuple] = {}  # label values -> (counter, histogram)
_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}


def _route(request) -> str:
    match = getattr(request, "resolver_match", None)
    if match is not None:
        return "/" + match.route if match.route else match.view_name or "unnamed"
    static = settings.STATIC_URL or "/static/"
    if request.path.startswith(static if static.startswith("/") else "/" + static):
        return "static"
    return "unmatched"  # a 404 from the resolver: the path itself is the client's, not a label


def observe(request, status: int, seconds: float) -> None:
    method = request.method if request.method in _METHODS else "other"
    key = (method, _route(request), f"{status // 100}xx")
    children = _children.get(key)
    if children is None:
        children = _children[key] = (
            instruments.HTTP_REQUESTS.labels(*key),
            instruments.HTTP_DURATION.labels(*key),
        )
    children[0].inc()
    children[1].observe(seconds)


class RequestMiddleware:
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
        rid, start = self._begin(request)
        if not telemetry.enabled():
            return self._end(request, self.get_response(request), rid, start, None)
        with telemetry.request_span(
            method=request.method, headers=request.headers, request_id=rid
        ) as finish:
            response = self.get_response(request)
            return self._end(request, response, rid, start, finish)

    async def _acall(self, request):
        rid, start = self._begin(request)
        if not telemetry.enabled():
            return self._end(request, await self.get_response(request), rid, start, None)
        with telemetry.request_span(
            method=request.method, headers=request.headers, request_id=rid
        ) as finish:
            response = await self.get_response(request)
            return self._end(request, response, rid, start, finish)

    @staticmethod
    def _begin(request):
        """The id is set for the rest of the request, Django's own "Not Found" / "Internal
        Server Error" lines included (they are written after the middleware returns): under
        daphne ops/asgi.py has set it for the request's task already; elsewhere (WSGI, the
        test client) it is set here and cleared on `request_finished` (ops/apps.py)."""
        rid = request_id.get()
        if rid is None:
            rid = accept_request_id(request.META.get("HTTP_X_REQUEST_ID"))
            request_id.set(rid)
        request.request_id = rid
        return rid, time.perf_counter()

    @staticmethod
    def _end(request, response, rid, start, finish):
        response.headers.setdefault("X-Request-Id", rid)
        observe(request, response.status_code, time.perf_counter() - start)
        if finish is not None:
            finish(_route(request), response.status_code)
        return response
