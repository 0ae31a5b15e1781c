"""Request bodies over their path's limit are refused before they are read, and before any key,
session or CSRF token is looked at: the API's `GAVEL_MAX_BODY_BYTES` (the contract's 2 MiB)
under /api/, `GAVEL_MAX_FORM_BODY_BYTES` everywhere else (pages, sign-in, SCIM, Slack).

Two places enforce it with the same limits and the same answers: `BodyLimit`, the ASGI
middleware in front of Django (console/asgi.py), which refuses by Content-Length and stops a
streamed body at the limit; and, under daphne, which reads a whole body before the application
hears of the request, the server's own HTTP channel (console/serving.py). Django's
`DATA_UPLOAD_MAX_MEMORY_SIZE` stays behind both. The answer is a 413 in the path's own
protocol: the contract's error body under /api/, SCIM's error under /scim/, a small page
elsewhere.
"""

from __future__ import annotations

import json

API_PREFIX = "/api/"
SCIM_PREFIX = "/scim/"
SCIM_ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"
PAGE = (
    "<!doctype html><html lang=en><head><meta charset=utf-8><title>Request too large</title>"
    "</head><body><h1>Request too large</h1><p>{message}.</p></body></html>"
)


def limit_for(path: str) -> int:
    """The largest body, in bytes, a request to `path` may carry."""
    from django.conf import settings

    if path.startswith(API_PREFIX):
        return settings.GAVEL_MAX_BODY_BYTES
    return settings.GAVEL_MAX_FORM_BODY_BYTES


def too_large(path: str, limit: int) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The 413's headers and body for `path` (the connection is closed after it)."""
    message = f"the body is over the {limit}-byte limit"
    if path.startswith(API_PREFIX):
        error = {"code": "payload_too_large", "message": message, "details": {"limitBytes": limit}}
        body, kind = json.dumps({"error": error}).encode(), b"application/json"
    elif path.startswith(SCIM_PREFIX):
        error = {"schemas": [SCIM_ERROR], "status": "413", "detail": message}
        body, kind = json.dumps(error).encode(), b"application/scim+json"
    else:
        body, kind = PAGE.format(message=message.capitalize()).encode(), b"text/html; charset=utf-8"
    headers = [
        (b"content-type", kind),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    return headers, body


def declared_length(headers) -> int | None:
    """The Content-Length of ASGI headers, None when absent or not a number."""
    for name, value in headers:
        if name.lower() == b"content-length":
            return int(value) if value.strip().isdigit() else None
    return None


class BodyLimit:
    """ASGI middleware: a declared Content-Length over the path's limit is answered 413 without
    calling the application; a body that grows past it while it streams is answered 413 and
    the application hears `http.disconnect` (Django then answers nothing itself)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        limit = limit_for(path)
        declared = declared_length(scope.get("headers", []))
        if declared is not None and declared > limit:
            return await _refuse(send, path, limit)
        state = {"received": 0, "started": False, "refused": False}

        async def limited_receive():
            if state["refused"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                state["received"] += len(message.get("body", b""))
                if state["received"] > limit:
                    state["refused"] = True
                    if not state["started"]:
                        await _refuse(send, path, limit)
                    return {"type": "http.disconnect"}
            return message

        async def noted_send(message):
            if state["refused"]:
                return  # the 413 is the answer
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        await self.app(scope, limited_receive, noted_send)


async def _refuse(send, path: str, limit: int) -> None:
    headers, body = too_large(path, limit)
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
