from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.signals import got_request_exception

from console.core import db, links
from console.core.errors import DatabaseUnavailable

# Only our own scripts and styles; images may be inline data (from `$bytes` envelopes).
CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class ResponseMiddleware:
    """A middleware that only rewrites the response (`process`), on the sync and the async
    request path alike, so that it never forces the async stack into a thread."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        return self.process(request, self.get_response(request))

    async def _acall(self, request):
        return self.process(request, await self.get_response(request))

    def process(self, request, response):
        raise NotImplementedError


class ContentSecurityPolicyMiddleware(ResponseMiddleware):
    """Adds the CSP header."""

    def process(self, request, response):
        response.headers.setdefault("Content-Security-Policy", CSP)
        return response


API_PREFIX = "/api/v1/"
SCIM_PREFIX = "/scim/v2/"
SCIM_ROOT = "/scim/"


def _api_error_body(request, response):
    """Django's own 404 (no such route), ninja's bare 405 and Django's 500 page (an exception
    outside an API operation, e.g. in a middleware) answer the contract's JSON body; under
    /scim/, every error Django answers itself (its 400, 404 and 500 pages) answers SCIM's."""
    if request.path.startswith(SCIM_ROOT):
        return _scim_error_body(request, response)
    if not request.path.startswith(API_PREFIX) or response.status_code not in (404, 405, 500):
        return response
    if response.get("Content-Type", "").startswith("application/json"):
        return response
    from django.http import JsonResponse

    if response.status_code == 500:
        return _internal_error(request)
    if response.status_code == 404:
        body = {"code": "not_found", "message": f"no API endpoint at {request.path}"}
    else:
        allowed = response.get("Allow", "")
        body = {
            "code": "method_not_allowed",
            "message": f"{request.method} is not allowed here (allowed: {allowed})",
        }
    new = JsonResponse({"error": {**body, "details": None}}, status=response.status_code)
    if response.has_header("Allow"):
        new["Allow"] = response["Allow"]
    return new


def _scim_error_body(request, response):
    """SCIM clients read SCIM's error shape (RFC 7644 3.12), whatever failed."""
    kind = response.get("Content-Type", "")
    if response.status_code < 400 or "json" in kind:
        return response
    from django.http import JsonResponse
    from scim2_models import Error as ScimError

    status = response.status_code
    detail = {404: f"no SCIM endpoint at {request.path}"}.get(status, "the request is invalid")
    rid = _logged_failure(request) if status >= 500 else None
    if rid:
        detail = f"the server failed to answer this request; it has been logged as {rid}"
    body = ScimError(status=status, detail=detail).model_dump()
    new = JsonResponse(body, status=status, content_type="application/scim+json")
    for name in ("Allow", "Retry-After"):
        if response.has_header(name):
            new[name] = response[name]
    if rid:
        new["X-Request-Id"] = rid
    return new


def _logged_failure(request) -> str:
    """Django has logged the traceback ("Internal Server Error: <path>"); this line ties it to
    the request id the client is given."""
    import logging

    from ops.context import current_request_id

    rid = current_request_id()
    logging.getLogger("console.api").error(
        "internal_error %s on %s %s (traceback above)", rid, request.method, request.path
    )
    return rid


def _internal_error(request):
    from django.http import JsonResponse

    rid = _logged_failure(request)
    body = {
        "code": "internal_error",
        "message": "the server failed to answer this request; it has been logged",
        "details": {"requestId": rid},
    }
    response = JsonResponse({"error": body}, status=500)
    response["X-Request-Id"] = rid
    return response


class ApiErrorBodyMiddleware(ResponseMiddleware):
    """Every 4xx under /api/v1/ has the contract's JSON error body, even Django's own."""

    def process(self, request, response):
        return _api_error_body(request, response)


class DatabaseUnavailableMiddleware(ResponseMiddleware):
    """A request that cannot reach the database answers 503 with Retry-After, never a 500 or
    a hang: the contract's JSON body under /api/v1/ (ninja's own operations map it in
    console/api.py), a page that reloads itself elsewhere. The page is rendered without the
    request, so no context processor asks the database again.

    A view's (or its template's) error comes to `process_exception` before Django's 500
    handling, which would read the database again (the DEBUG page's `request.user`). One
    raised in another middleware's hook (a session saved on the way out) has already become
    a 500 there: the `got_request_exception` receiver below marks the request, and `process`
    answers 503 instead."""

    def process_exception(self, request, exception):
        if db.unreachable(exception):
            return database_unavailable_response(request, exception)
        return None

    def process(self, request, response):
        exception = getattr(request, "gavel_database_error", None)
        if response.status_code == 500 and exception is not None:
            return database_unavailable_response(request, exception)
        return response


def _mark_database_error(sender, request=None, **kwargs):
    import sys

    exception = sys.exc_info()[1]
    if request is not None and exception is not None and db.unreachable(exception):
        request.gavel_database_error = exception


got_request_exception.connect(_mark_database_error, dispatch_uid="gavel-database-unavailable")


def database_unavailable_response(request, exception):
    import logging

    from django.http import HttpResponse, JsonResponse
    from django.template.loader import render_to_string

    logging.getLogger("console.db").warning(
        "database_unavailable on %s %s: %s", request.method, request.path, exception
    )
    error = DatabaseUnavailable()
    if request.path.startswith(API_PREFIX):
        body = {"code": error.code, "message": error.message, "details": error.details}
        response = JsonResponse({"error": body}, status=error.status)
    elif request.path.startswith(SCIM_PREFIX):  # SCIM clients read SCIM's error shape
        from scim2_models import Error as ScimError

        body = ScimError(status=error.status, detail=error.message).model_dump()
        response = JsonResponse(body, status=error.status, content_type="application/scim+json")
    else:
        page = render_to_string("503.html", {"retry_after": error.retry_after})
        response = HttpResponse(page, status=error.status)
    response["Retry-After"] = str(error.retry_after)
    return response


from whitenoise.middleware import WhiteNoiseMiddleware  # noqa: E402


class AsyncWhiteNoiseMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, usable on the async path.

    WhiteNoise's middleware is sync-only, and one sync-only middleware makes Django run the
    whole stack below it in the single thread-sensitive worker, async views included: a
    decisions long-poll (approvals/api.py) would hold that thread for its whole wait and
    stall every other request of the process. This serves static files exactly as WhiteNoise
    does, and passes everything else down the async path untouched.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response=None):
        super().__init__(get_response)
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        return super().__call__(request)

    async def _acall(self, request):
        from asgiref.sync import sync_to_async

        if self.autorefresh:  # looks at the disk: not on the event loop
            find = sync_to_async(self.find_file, thread_sensitive=False)
            static_file = await find(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is not None:
            return self.serve(static_file, request)
        return await self.get_response(request)


# --- Django's own middleware, without a thread hop per hook on the async path ---
#
# On the async path Django's MiddlewareMixin runs every `process_request` / `process_response`
# through `sync_to_async`: a hop to a worker thread and back per hook, per middleware, per
# request. Seven of Django's middleware made that thirteen hops, about 2.5 ms of a process's
# CPU per request (measured with an empty async view under daphne: 4.3 ms with them, 1.8 ms
# without). Their hooks only compute (headers, cookies, lazy objects), so here they run on the
# event loop; the two hooks that can reach the database — saving a modified session, storing
# flash messages in it — still go to a thread, exactly when they would. The sync path (the
# test client, `manage.py runserver`) is Django's own.

from asgiref.sync import sync_to_async  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import middleware as auth_middleware  # noqa: E402
from django.contrib.messages import middleware as messages_middleware  # noqa: E402
from django.contrib.sessions import middleware as sessions_middleware  # noqa: E402
from django.middleware import clickjacking, common, csrf, security  # noqa: E402


class OnTheLoop:
    """Mixed in before a Django MiddlewareMixin: its hooks run inline on the async path."""

    def response_needs_thread(self, request, response) -> bool:
        """True when `process_response` may do I/O for this request (then it hops)."""
        return False

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.response_needs_thread(request, response):
                hook = sync_to_async(self.process_response, thread_sensitive=True)
                response = await hook(request, response)
            else:
                response = self.process_response(request, response)
        return response


class SecurityMiddleware(OnTheLoop, security.SecurityMiddleware):
    pass


class SessionMiddleware(OnTheLoop, sessions_middleware.SessionMiddleware):
    """Creating `request.session` reads nothing (the store loads lazily); saving writes."""

    def response_needs_thread(self, request, response) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class CommonMiddleware(OnTheLoop, common.CommonMiddleware):
    pass


class CsrfViewMiddleware(OnTheLoop, csrf.CsrfViewMiddleware):
    """With the secret in a cookie (CSRF_USE_SESSIONS off, as configured) every hook only
    computes, and `process_view` is offered as a coroutine on the async path, so Django does
    not wrap it in a thread hop either. With the secret in the session: Django's own hops."""

    async def __acall__(self, request):
        if settings.CSRF_USE_SESSIONS:
            return await csrf.CsrfViewMiddleware.__acall__(self, request)
        return await super().__acall__(request)

    @property
    def process_view(self):
        hook = super().process_view
        if not iscoroutinefunction(self) or settings.CSRF_USE_SESSIONS:
            return hook

        async def process_view(request, callback, callback_args, callback_kwargs):
            return hook(request, callback, callback_args, callback_kwargs)

        return process_view


class AuthenticationMiddleware(OnTheLoop, auth_middleware.AuthenticationMiddleware):
    """`request.user` and `request.auser` are lazy: nothing is read until a view asks."""


class MessageMiddleware(OnTheLoop, messages_middleware.MessageMiddleware):
    """Messages are stored (maybe into the session) only when a view added or read some."""

    def response_needs_thread(self, request, response) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)


class XFrameOptionsMiddleware(OnTheLoop, clickjacking.XFrameOptionsMiddleware):
    pass


class RequestBaseMiddleware:
    """Remembers the request for the code under it (`console.links`: without
    GAVEL_PUBLIC_URL, links in mail point at the address of the request that caused them).
    Sync and async capable, like every middleware here."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        token = links.current_request.set(request)
        try:
            return self.get_response(request)
        finally:
            links.current_request.reset(token)

    async def _acall(self, request):
        token = links.current_request.set(request)
        try:
            return await self.get_response(request)
        finally:
            links.current_request.reset(token)
