"""Webhooks: tell a tenant's HTTPS endpoints about approvals, budgets and reminders.

Deliveries are rows written in the same transaction as the change they report, then sent after
commit by the process's outbox thread (console/outbox.py) and the sweep, so a request never
waits on an endpoint. Each body is signed: `Gavel-Signature: t=<unix time>,v1=<hex
HMAC-SHA256(secret, "<t>.<body>")>`. A failed attempt (non-2xx, timeout, refused) is retried
with the outbox's backoff; after the last one the delivery is `failed`. Every attempt's outcome
is recorded on the delivery row, as one of console/outbound.py's generic texts.

Every request goes through console/outbound.py (a total deadline, a size cap, no internal
destination: checked here when the URL is saved, and again when each attempt connects), and
deliveries are claimed round-robin by tenant, at most a few of one tenant and one per
endpoint in flight (console/outbox.py's Dispatcher): one tenant's slow endpoint delays no
other tenant's deliveries.
"""

import hashlib
import hmac
import json
import logging
import secrets
import time
from functools import partial
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from approvals.models import (
    Approval,
    DeliveryStatus,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    WebhookFormat,
)
from approvals.schemas import ApprovalOut, approval_resource
from budgets.spend import run_costs
from console.core import outbound, outbox
from console.core.errors import Invalid
from console.directory.services import audit
from notifications.slack import slack_message
from runs.models import Run

log = logging.getLogger(__name__)

BACKOFF_SECONDS = outbox.BACKOFF_SECONDS
MAX_ATTEMPTS = outbox.MAX_ATTEMPTS
SENDER = "webhook deliveries"
URL_MAX_LENGTH = 500
TEST_EVENT = "webhook.test"  # "send test event": to one endpoint, never subscribed to
kick_worker = outbox.kick  # wakes the outbox thread (webhooks; mail is the sweep's)
stop_worker = outbox.stop


def sign(*, secret: str, body: bytes, timestamp: int) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(*, secret: str, body: bytes, header: str, tolerance: int = 300) -> bool:
    """What a receiver does (and the tests): check the signature and its age."""
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    expected = sign(secret=secret, body=body, timestamp=timestamp).split("v1=", 1)[1]
    fresh = abs(time.time() - timestamp) <= tolerance
    return fresh and hmac.compare_digest(expected, parts.get("v1", ""))


def _invalid(path: str, message: str, *, code: str = "validation_error") -> Invalid:
    return Invalid(message, code=code, details=[{"path": path, "message": message}])


def _loopback_allowed() -> bool:
    return outbound.loopback_allowed(settings.GAVEL_WEBHOOK_ALLOW_HTTP)


def webhook_url_check(url: str) -> None:
    """https:// only; http:// too with GAVEL_WEBHOOK_ALLOW_HTTP=1 (development, tests). No
    user name or password, no internal address (console/outbound.py; loopback only in
    development): a name is checked again whenever a delivery connects."""
    schemes = ("https", "http") if settings.GAVEL_WEBHOOK_ALLOW_HTTP else ("https",)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise _invalid("url", f"'{url}' is not a URL") from None
    if parts.scheme not in schemes or not parts.hostname:
        allowed = " or ".join(f"{s}://host/..." for s in schemes)
        raise _invalid("url", f"a webhook URL must be {allowed}", code="webhook_not_https")
    if len(url) > URL_MAX_LENGTH:
        raise _invalid("url", f"a webhook URL has at most {URL_MAX_LENGTH} characters")
    refusal = outbound.url_refusal(url, allow_loopback=_loopback_allowed())
    if refusal:
        raise _invalid("url", f"a webhook URL {refusal}")


def webhook_events_check(events: list[str]) -> None:
    known = [e.value for e in WebhookEvent]
    if not events:
        raise _invalid("events", f"name at least one event (known: {', '.join(known)})")
    for index, event in enumerate(events):
        if event not in known:
            raise _invalid(
                f"events.{index}", f"unknown webhook event '{event}' (known: {', '.join(known)})"
            )


def webhook_resource(webhook: Webhook) -> dict:
    """The management API's webhook (the secret is never part of it)."""
    return {
        "id": webhook.public_id,
        "url": webhook.url,
        "events": list(webhook.events),
        "format": webhook.format,
        "active": webhook.is_active,
        "created_at": webhook.created_at,
    }


@transaction.atomic
def webhook_create(
    *,
    tenant,
    url: str,
    events: list[str] | None = None,
    format: str = WebhookFormat.GAVEL,
    principal=None,
    key=None,
):
    """Register an endpoint. Returns (webhook, secret); the secret is shown once.
    `events` None: every event. Audited as `webhook.created` (before → after)."""
    webhook_url_check(url)
    events = list(dict.fromkeys(events)) if events is not None else [e.value for e in WebhookEvent]
    webhook_events_check(events)
    if format not in WebhookFormat.values:
        known = ", ".join(WebhookFormat.values)
        raise _invalid("format", f"unknown webhook format '{format}' (known: {known})")
    secret = "whsec_" + secrets.token_urlsafe(32)
    webhook = Webhook.objects.create(
        tenant=tenant, url=url, secret=secret, events=events, format=format
    )
    _audit(webhook, "webhook.created", principal=principal, key=key, before=None)
    return webhook, secret


def _wire(webhook: Webhook) -> dict:
    """The webhook's wire form for the audit row (camelCase, ISO time, never the secret)."""
    resource = webhook_resource(webhook)
    return {
        **{k: v for k, v in resource.items() if k != "created_at"},
        "createdAt": webhook.created_at.isoformat(),
    }


def _audit(webhook, action, *, principal, key, before, after=..., data=None) -> None:
    audit(
        tenant=webhook.tenant,
        action=action,
        object_type="webhook",
        object_id=webhook.public_id,
        principal=principal,
        key=key,
        data={**(data or {}), "before": before, "after": _wire(webhook) if after is ... else after},
    )


@transaction.atomic
def webhook_delete(*, webhook: Webhook, principal=None, key=None) -> Webhook:
    """DELETE /webhooks/{id}: the endpoint hears nothing more. The row is kept (inactive, no
    longer listed) with its deliveries' history; deliveries still pending are given up
    (`failed`, "webhook deleted"). Audited `webhook.deleted` (before → after)."""
    webhook = Webhook.objects.select_for_update().select_related("tenant").get(pk=webhook.pk)
    if not webhook.is_active:
        return webhook
    before = _wire(webhook)
    webhook.is_active = False
    webhook.save(update_fields=["is_active"])
    WebhookDelivery.objects.filter(webhook=webhook, status=DeliveryStatus.PENDING).update(
        status=DeliveryStatus.FAILED, last_error="webhook deleted"
    )
    _audit(webhook, "webhook.deleted", principal=principal, key=key, before=before)
    return webhook


@transaction.atomic
def webhook_test_send(*, webhook: Webhook, principal=None, key=None) -> WebhookDelivery:
    """ "Send test event": one `webhook.test` delivery to this endpoint alone, through the same
    durable outbox as every event (signed, retried, recorded). Its body: `{"event":
    "webhook.test", "deliveryId", "webhook": {"id", "url"}, "sentAt"}`. Audited
    `webhook.tested`."""
    payload = {
        "webhook": {"id": webhook.public_id, "url": webhook.url},
        "sentAt": timezone.now().isoformat(),
    }
    (delivery,) = _deliveries_create(hooks=[webhook], event=TEST_EVENT, payloads=[payload])
    _audit(
        webhook,
        "webhook.tested",
        principal=principal,
        key=key,
        before=None,
        after=None,
        data={"deliveryId": delivery.delivery_id},
    )
    return delivery


def webhook_delivery_resource(delivery: WebhookDelivery) -> dict:
    """One delivery as GET /webhooks/{id}/deliveries shows it (not its body)."""
    return {
        "id": delivery.delivery_id,
        "event": delivery.event,
        "state": delivery.status,
        "attempts": delivery.attempts,
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error or None,
        "created_at": delivery.created_at,
        "next_attempt_at": delivery.next_attempt_at
        if delivery.status == DeliveryStatus.PENDING
        else None,
        "delivered_at": delivery.delivered_at,
    }


def _approval_payload(approval, costs: dict) -> dict:
    resource = approval_resource(approval, costs=costs)
    return ApprovalOut.model_validate(resource).model_dump(by_alias=True, mode="json")


def _subscribed(*, tenant_id: int, event: str) -> list[Webhook]:
    hooks = Webhook.objects.filter(tenant_id=tenant_id, is_active=True)
    return [h for h in hooks if event in h.events]


def webhook_payloads_check(*, event: str, payloads: list[dict]) -> None:
    """A programming error, not a user's: ValueError."""
    if event not in WebhookEvent.values:
        raise ValueError(f"unknown webhook event {event!r}")
    for payload in payloads:
        if {"event", "deliveryId"} & set(payload):
            raise ValueError("a webhook payload may not set 'event' or 'deliveryId'")


def webhooks_enqueue(*, tenant_id: int, event: str, payloads: list[dict]) -> list:
    """Queue one delivery per payload per active endpoint of the tenant subscribed to `event`
    (call inside the transaction of what it reports). Each body is `{"event", "deliveryId",
    **payload}`; sent after commit."""
    webhook_payloads_check(event=event, payloads=payloads)
    hooks = _subscribed(tenant_id=tenant_id, event=event) if payloads else []
    return _deliveries_create(hooks=hooks, event=event, payloads=payloads)


def _deliveries_create(*, hooks, event: str, payloads: list[dict]) -> list:
    rows = [
        WebhookDelivery(webhook=h, event=event, payload={"event": event, **payload})
        for payload in payloads
        for h in hooks
    ]
    if rows:
        WebhookDelivery.objects.bulk_create(rows)
        transaction.on_commit(kick_worker)
    return rows


def _enqueue(*, tenant_id: int, event: str, approvals, hooks=None) -> int:
    if hooks is None:
        hooks = _subscribed(tenant_id=tenant_id, event=event)
    if not hooks:
        return 0
    costs = run_costs(runs=[a.run for a in approvals])
    payloads = [{"approval": _approval_payload(a, costs)} for a in approvals]
    return len(_deliveries_create(hooks=hooks, event=event, payloads=payloads))


def webhooks_approval_decided(*, approval_id: int, tenant_id: int) -> int:
    """Queue `approval.decided` (call inside the deciding transaction). The decided approval
    is read only when the tenant has an endpoint subscribed."""
    hooks = _subscribed(tenant_id=tenant_id, event="approval.decided")
    if not hooks:
        return 0
    approval = Approval.objects.select_related("run", "decided_by", "decided_by_rule").get(
        pk=approval_id
    )
    return _enqueue(
        tenant_id=tenant_id, event="approval.decided", approvals=[approval], hooks=hooks
    )


def webhooks_approval_requested(*, approvals) -> int:
    """Queue `approval.requested` for new approvals (call inside the requesting transaction)."""
    approvals = list(approvals)
    if not approvals:
        return 0
    return _enqueue(
        tenant_id=approvals[0].tenant_id, event="approval.requested", approvals=approvals
    )


def _claim(delivery, now) -> bool:
    return outbox.claim(delivery, now, pending=DeliveryStatus.PENDING)


def _body(delivery) -> dict:
    """The delivery's JSON body in its webhook's format (gavel: the wire body; slack: Block
    Kit, notifications/slack.py, which also says whom the run is for)."""
    message = {**delivery.payload, "deliveryId": delivery.delivery_id}
    if delivery.webhook.format != WebhookFormat.SLACK:
        return message
    approval = message.get("approval") if isinstance(message.get("approval"), dict) else {}
    run = (
        Run.objects.filter(tenant_id=delivery.webhook.tenant_id, external_id=approval.get("runId"))
        .select_related("principal")
        .first()
    )
    run_for = run.principal.external_id if run is not None and run.principal_id else None
    decide = delivery.webhook.tenant.slack_decisions == "decide"
    return slack_message(message, run_for=run_for, decide=decide)


def _request(delivery) -> tuple[bytes, dict]:
    body = json.dumps(_body(delivery), separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Gavel-Webhooks/1",
        "Gavel-Event": delivery.event,
        "Gavel-Delivery": delivery.delivery_id,
        "Gavel-Signature": sign(
            secret=delivery.webhook.secret, body=body, timestamp=int(time.time())
        ),
    }
    return body, headers


def _send(url: str, body: bytes, headers: dict, client) -> tuple[int | None, str]:
    """In a pool thread: the HTTP request alone."""
    answer = outbound.request(
        "POST", url, content=body, headers=headers, allow_loopback=_loopback_allowed(),
        client=client,
    )  # fmt: skip
    return answer.outcome


def _record(delivery, status_code, error, now) -> None:
    fields = outbox.attempt_fields(
        attempts=delivery.attempts, status_code=status_code, error=error,
        now=timezone.now() if now is None else now,
        delivered=DeliveryStatus.DELIVERED, failed=DeliveryStatus.FAILED,
    )  # fmt: skip
    # Still pending: a webhook deleted meanwhile gave the delivery up, and that stands.
    WebhookDelivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.PENDING).update(**fields)


def webhook_deliveries_claim(*, now=None, room: outbox.Room, client=None) -> list[outbox.Job]:
    """Claim due deliveries as the room allows (round-robin by tenant, one per endpoint in
    flight), each with its signed body; the dispatcher sends them."""
    moment = now or timezone.now()
    due = (
        WebhookDelivery.objects.select_related("webhook", "webhook__tenant")
        .filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=moment)
        .filter(webhook__is_active=True)
        .exclude(webhook__tenant_id__in=room.busy_tenants())
        .exclude(webhook_id__in=room.busy_endpoints())
        .order_by("next_attempt_at", "id")
    )
    picked = room.pick(
        list(due[: room.window]),
        tenant_of=lambda d: d.webhook.tenant_id,
        endpoint_of=lambda d: d.webhook_id,
    )
    jobs = []
    for delivery in picked:
        if not _claim(delivery, moment):
            continue
        body, headers = _request(delivery)
        jobs.append(
            outbox.Job(
                tenant_id=delivery.webhook.tenant_id,
                endpoint=delivery.webhook_id,
                send=partial(_send, delivery.webhook.url, body, headers, client),
                record=partial(_record, delivery, now=now),
            )
        )
    return jobs


def webhook_deliveries_run_due(*, now=None, client: httpx.Client | None = None, limit=50) -> int:
    """Attempt every due delivery once, here and now (`client`: tests' stand-in endpoint).
    Returns how many were attempted."""
    return outbox.dispatch_due(SENDER, now=now, client=client, limit=limit)


def webhook_next_due():
    """When the soonest pending delivery is due (None: nothing pending)."""
    pending = WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, webhook__is_active=True)
    return outbox.soonest_due(pending)
