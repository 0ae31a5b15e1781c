"""Absolute links the console puts in mail, webhooks and notifications.

The base is `GAVEL_PUBLIC_URL`; unset, the address of the request that caused the message
(`console.middleware.RequestBaseMiddleware` remembers the request for the code under it),
else `http://localhost:8000` (a sweep, a management command).
"""

from contextvars import ContextVar
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import DisallowedHost

OFF_REQUEST_BASE = "http://localhost:8000"
current_request: ContextVar = ContextVar("gavel_current_request", default=None)


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
