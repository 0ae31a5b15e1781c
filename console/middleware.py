from asgiref.sync import iscoroutinefunction, markcoroutinefunction

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


def _api_error_body(request, response):
    """Django's own 404 (no such route) and ninja's bare 405 answer the contract's JSON body."""
    if not request.path.startswith(API_PREFIX) or response.status_code not in (404, 405):
        return response
    if response.get("Content-Type", "").startswith("application/json"):
        return response
    from django.http import JsonResponse

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


class ApiErrorBodyMiddleware(ResponseMiddleware):
    """Every 4xx under /api/v1/ has the contract's JSON error body, even Django's own."""

    def process(self, request, response):
        return _api_error_body(request, response)


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
