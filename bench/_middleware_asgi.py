"""bench/ops.py's server for the request middleware's cost: one daphne serving console.asgi's
application, with beside its Django handler a second one built from the same settings without
`ops.middleware.RequestMiddleware`. A request carrying `X-Bench-Middleware: off` is served by
the second. Both go through the same body limit and /mcp/ mount, in one process with one
connection pool and the same warm caches, so the only difference the bench sees between its
two kinds of requests is the middleware (the header is looked at for both).

`GET /__bench__/cpu` answers the process's CPU time in nanoseconds (CLOCK_PROCESS_CPUTIME_ID:
every thread's, those that ended included, to the nanosecond), read by the bench before and
after each round; /proc's figure counts 10 ms clock ticks.

Served as `daphne bench._middleware_asgi:application` (never in production)."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.test.utils import override_settings

from console import asgi as console_asgi
from console.core.bodylimit import BodyLimit
from gateway.asgi import mount as mcp_beside

MIDDLEWARE = "ops.middleware.RequestMiddleware"
SWITCH = b"x-bench-middleware"
CPU_PATH = "/__bench__/cpu"


class WithoutRequestMiddleware(ASGIHandler):
    def load_middleware(self, is_async=False):
        kept = [m for m in settings.MIDDLEWARE if m != MIDDLEWARE]
        with override_settings(MIDDLEWARE=kept):
            super().load_middleware(is_async=is_async)


if MIDDLEWARE not in settings.MIDDLEWARE:
    raise RuntimeError(f"{MIDDLEWARE} is not in MIDDLEWARE: nothing to compare")

with_it = BodyLimit(mcp_beside(console_asgi.django_asgi_app))
without_it = BodyLimit(mcp_beside(WithoutRequestMiddleware()))


async def application(scope, receive, send):
    if scope["type"] == "http":
        if scope["path"] == CPU_PATH:
            body = str(time.process_time_ns()).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/plain")]})  # fmt: skip
            return await send({"type": "http.response.body", "body": body})
        off = any(name == SWITCH and value == b"off" for name, value in scope["headers"])
        return await (without_it if off else with_it)(scope, receive, send)
    return await console_asgi.application(scope, receive, send)
