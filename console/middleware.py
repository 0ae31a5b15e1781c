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
