"""`/healthz`, `/readyz` and `/metrics` (the contract's "Processes, health and metrics"). None
needs a session or a key; `/metrics` needs the operator's bearer token, and is 404 without
one configured."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import Http404, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ops import checks, collect

NO_STORE = {"Cache-Control": "no-store"}


@require_GET
async def healthz(request):
    """The process serves: nothing else is touched (no database, no session)."""
    return JsonResponse({"status": "ok"}, headers=NO_STORE)


@require_GET
async def readyz(request):
    ready, results = await checks.readiness()
    body = {"status": "ready" if ready else "not ready", "checks": results}
    response = JsonResponse(body, status=200 if ready else 503, headers=NO_STORE)
    # A balancer probes every second or so: Django's "Service Unavailable" line each time would
    # bury the log. The failing check itself is logged (ops/checks.py) where it says more.
    response._has_been_logged = True
    return response


@require_GET
def metrics(request):
    token = settings.GAVEL_METRICS_TOKEN
    if not token:
        raise Http404("no metrics here")
    given = request.headers.get("Authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        value.strip().encode(), token.encode()
    ):
        response = JsonResponse(
            {
                "error": {
                    "code": "unauthorized",
                    "message": "a metrics token is required",
                    "details": None,
                }
            },
            status=401,
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(
        generate_latest(collect.registry()), content_type=CONTENT_TYPE_LATEST, headers=NO_STORE
    )
