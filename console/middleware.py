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


class ContentSecurityPolicyMiddleware:
    """Adds the CSP header; works in both the sync and the async request path."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        return response

    async def _acall(self, request):
        response = await self.get_response(request)
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


class ApiErrorBodyMiddleware:
    """Every 4xx under /api/v1/ has the contract's JSON error body, even Django's own."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        return _api_error_body(request, self.get_response(request))

    async def _acall(self, request):
        return _api_error_body(request, await self.get_response(request))
