"""Absolute links the console puts in mail, webhooks and notifications.

The base is `GAVEL_PUBLIC_URL`; unset, the address of the request that caused the message
(`console.middleware.RequestBaseMiddleware` remembers the request for the code under it),
else `http://localhost:8000` (a sweep, a management command).
"""

import logging
import threading
from contextvars import ContextVar
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import DisallowedHost

OFF_REQUEST_BASE = "http://localhost:8000"
current_request: ContextVar = ContextVar("gavel_current_request", default=None)
log = logging.getLogger("console.links")
_after_response: list = []  # work waiting for a response to be sent (any request's)
_after_response_lock = threading.Lock()


def after_response(func) -> bool:
    """Run `func` once a response is sent, off the answer's path: the request being served
    ends with its response's close (Django's handlers and the test client close every
    response once it is sent; `run_after_response` runs then). False when no request is being
    served: the caller runs `func` itself. Only for work that may also run late or early
    (sealing committed audit entries: the sweep catches up if the process dies first)."""
    if current_request.get() is None:
        return False
    with _after_response_lock:
        _after_response.append(func)
    return True


def run_after_response(**kwargs) -> None:
    """Everything `after_response` holds (a response was closed: ours, or a concurrent
    request's a moment earlier, which only runs the work sooner)."""
    with _after_response_lock:
        pending = _after_response[:]
        _after_response.clear()
    for func in pending:
        try:
            func()
        except Exception:  # one failure must not skip the rest (close() hides errors)
            log.exception("work after the response failed")


def public_base() -> str:
    if settings.GAVEL_PUBLIC_URL:
        return settings.GAVEL_PUBLIC_URL
    request = current_request.get()
    if request is not None:
        try:
            return request.build_absolute_uri("/").rstrip("/")
        except DisallowedHost:
            pass
    return OFF_REQUEST_BASE


def public_url(path: str) -> str:
    """`/budgets/bud_1/` → `https://gavel.example.com/budgets/bud_1/`; absolute URLs stay."""
    if urlsplit(path).scheme:
        return path
    return public_base() + "/" + path.lstrip("/")
