"""Webhooks over the wire (`manage` scope, `admin`): registering an endpoint. The management
issue adds the list, deletion and the deliveries; the model and the service are in place."""

from datetime import datetime
from typing import Literal

from ninja import Router
from pydantic import ConfigDict
from pydantic.alias_generators import to_camel

from approvals.services.webhooks import webhook_create, webhook_resource
from console.auth import manage_admin_auth
from console.schemas import CamelSchema, errors

router = Router(tags=["webhooks"])


class WebhookIn(CamelSchema):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    url: str
    events: list[str]
    format: Literal["gavel"] = "gavel"


class WebhookOut(CamelSchema):
    id: str
    url: str
    events: list[str]
    format: str
    active: bool
    created_at: datetime


class WebhookCreatedOut(WebhookOut):
    secret: str  # the signing secret, shown this once


@router.post(
    "/webhooks",
    auth=manage_admin_auth,
    response={201: WebhookCreatedOut, **errors(413, 422)},
    by_alias=True,
    summary="Register a webhook endpoint (admin); the signing secret is answered once",
)
def webhooks_create(request, payload: WebhookIn):
    key = request.auth
    webhook, secret = webhook_create(
        tenant=key.tenant,
        url=payload.url,
        events=payload.events,
        format=payload.format,
        principal=key.principal,
        key=key,
    )
    return 201, {**webhook_resource(webhook), "secret": secret}
