"""Webhooks over the wire (`manage` scope with `admin`, or an admin's browser session):
register, list, delete, and each one's deliveries. Handlers only translate."""

from ninja import Query, Router

from approvals import access as approvals_access
from approvals import schemas_webhooks as s
from approvals import selectors_webhooks as selectors
from approvals.services import webhooks as services
from console.core.wire import errors
from console.directory import access, signin
from console.models import ApiKey
from console.web.auth import CapableSession, PrincipalKeyAuth

router = Router(tags=["webhooks"])

ADMIN = [PrincipalKeyAuth("manage", "admin"), CapableSession("admin")]


def _actor(request) -> dict:
    """Who acts, for the audit row: the principal, and the key when a key acted."""
    viewer = request.auth
    key = viewer if isinstance(viewer, ApiKey) else None
    return {"principal": access.acting_principal(viewer), "key": key}


@router.get(
    "/webhooks",
    auth=ADMIN,
    response={200: s.WebhookListOut, **errors(422)},
    by_alias=True,
    summary="The tenant's webhooks, newest first (deleted ones are not listed; no secrets)",
)
def webhooks_index(request, query: Query[s.ListQuery]):
    page = selectors.webhooks_page(viewer=request.auth, **query.model_dump())
    items = [services.webhook_resource(w) for w in page["items"]]
    return {"items": items, "next_cursor": page["next_cursor"]}


@router.post(
    "/webhooks",
    auth=ADMIN,
    response={201: s.WebhookCreatedOut, **errors(413, 422)},
    by_alias=True,
    summary="Register a webhook endpoint (admin; a browser needs a recent password); the "
    "signing secret is answered once",
)
def webhooks_create(request, payload: s.WebhookIn):
    signin.require_recent_auth_api(request)
    webhook, secret = services.webhook_create(
        tenant=request.auth.tenant,
        url=payload.url,
        events=payload.events,
        format=payload.format,
        **_actor(request),
    )
    return 201, {**services.webhook_resource(webhook), "secret": secret}


@router.delete(
    "/webhooks/{webhook_id}",
    auth=ADMIN,
    response={204: None, **errors(404)},
    summary="Delete a webhook: it hears nothing more, pending deliveries are given up",
)
def webhooks_delete(request, webhook_id: str):
    webhook = approvals_access.webhook_for(viewer=request.auth, webhook_id=webhook_id)
    services.webhook_delete(webhook=webhook, **_actor(request))
    return 204, None


@router.get(
    "/webhooks/{webhook_id}/deliveries",
    auth=ADMIN,
    response={200: s.DeliveryListOut, **errors(404, 422)},
    by_alias=True,
    summary="A webhook's deliveries, newest first, with attempts, last status and state",
)
def webhooks_deliveries(request, webhook_id: str, query: Query[s.ListQuery]):
    webhook = approvals_access.webhook_for(viewer=request.auth, webhook_id=webhook_id)
    page = selectors.webhook_deliveries_page(webhook=webhook, **query.model_dump())
    items = [services.webhook_delivery_resource(d) for d in page["items"]]
    return {"items": items, "next_cursor": page["next_cursor"]}


@router.post(
    "/webhooks/{webhook_id}/test",
    auth=ADMIN,
    response={201: s.DeliveryOut, **errors(404)},
    by_alias=True,
    summary="Send a `webhook.test` event to this endpoint (a delivery like any other)",
)
def webhooks_test(request, webhook_id: str):
    webhook = approvals_access.webhook_for(viewer=request.auth, webhook_id=webhook_id)
    delivery = services.webhook_test_send(webhook=webhook, **_actor(request))
    return 201, services.webhook_delivery_resource(delivery)
