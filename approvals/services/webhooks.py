"""Webhooks: tell a tenant's HTTPS endpoints about `approval.requested` / `approval.decided`.

Deliveries are rows written in the same transaction as the change they report, then sent by a
background worker thread after commit, so a request never waits on an endpoint. Each body is
signed: `Gavel-Signature: t=<unix time>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`. A failed
attempt (non-2xx, timeout, refused) is retried with backoff; after the last one the delivery is
`failed`. Every attempt's outcome is recorded on the delivery row.
"""

import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from approvals.models import Approval, DeliveryStatus, Webhook, WebhookDelivery, WebhookEvent
from approvals.schemas import ApprovalOut, approval_resource
from console.errors import Invalid
from console.services import audit

log = logging.getLogger(__name__)

BACKOFF_SECONDS = (5, 30, 120, 600, 3600)  # after attempts 1..5; attempt 6 is the last
MAX_ATTEMPTS = len(BACKOFF_SECONDS) + 1
LEASE = timedelta(seconds=60)  # a claimed delivery is not retried by another worker meanwhile
TIMEOUT_SECONDS = 10


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


@transaction.atomic
def webhook_create(*, tenant, url: str, events: list[str] | None = None, principal=None):
    """Register an HTTPS endpoint. Returns (webhook, secret); the secret is shown once."""
    known = [e.value for e in WebhookEvent]
    events = events or known
    unknown = sorted(set(events) - set(known))
    if unknown:
        raise Invalid(f"unknown webhook events: {', '.join(unknown)} (known: {', '.join(known)})")
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise Invalid("a webhook URL must be https://host/...", code="webhook_not_https")
    secret = "whsec_" + secrets.token_urlsafe(32)
    webhook = Webhook.objects.create(tenant=tenant, url=url, secret=secret, events=events)
    audit(
        tenant=tenant,
        action="webhook.created",
        object_type="webhook",
        object_id=webhook.pk,
        principal=principal,
        data={"url": url, "events": events},
    )
    return webhook, secret


def _approval_payload(approval) -> dict:
    return ApprovalOut.model_validate(approval_resource(approval)).model_dump(
        by_alias=True, mode="json"
    )


def _enqueue(*, tenant_id: int, event: str, approvals) -> int:
    hooks = [
        h for h in Webhook.objects.filter(tenant_id=tenant_id, is_active=True) if event in h.events
    ]
    if not hooks:
        return 0
    rows = [
        WebhookDelivery(webhook=h, event=event, payload={"event": event, "approval": payload})
        for payload in (_approval_payload(a) for a in approvals)
        for h in hooks
    ]
    WebhookDelivery.objects.bulk_create(rows)
    transaction.on_commit(kick_worker)
    return len(rows)


def webhooks_approval_decided(*, approval_id: int) -> int:
    """Queue `approval.decided` (call inside the deciding transaction)."""
    approval = Approval.objects.select_related("run", "decided_by").get(pk=approval_id)
    return _enqueue(tenant_id=approval.tenant_id, event="approval.decided", approvals=[approval])


def webhooks_approval_requested(*, approvals) -> int:
    """Queue `approval.requested` for new approvals (call inside the requesting transaction)."""
    approvals = list(approvals)
    if not approvals:
        return 0
    return _enqueue(
        tenant_id=approvals[0].tenant_id, event="approval.requested", approvals=approvals
    )


def _claim(delivery, now) -> bool:
    return (
        WebhookDelivery.objects.filter(
            pk=delivery.pk,
            status=DeliveryStatus.PENDING,
            attempts=delivery.attempts,
            next_attempt_at__lte=now,
        ).update(next_attempt_at=now + LEASE)
        == 1
    )


def _post(delivery, client) -> tuple[int | None, str]:
    body = json.dumps(
        {**delivery.payload, "deliveryId": delivery.delivery_id}, separators=(",", ":")
    ).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Gavel-Webhooks/1",
        "Gavel-Event": delivery.event,
        "Gavel-Delivery": delivery.delivery_id,
        "Gavel-Signature": sign(
            secret=delivery.webhook.secret, body=body, timestamp=int(time.time())
        ),
    }
    try:
        response = client.post(delivery.webhook.url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:1000]
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, f"HTTP {response.status_code}"


def _record(delivery, status_code, error, now) -> None:
    attempts = delivery.attempts + 1
    fields = {"attempts": attempts, "last_status_code": status_code, "last_error": error}
    if not error:
        fields.update(status=DeliveryStatus.DELIVERED, delivered_at=now)
    elif attempts >= MAX_ATTEMPTS:
        fields.update(status=DeliveryStatus.FAILED)
    else:
        fields.update(next_attempt_at=now + timedelta(seconds=BACKOFF_SECONDS[attempts - 1]))
    WebhookDelivery.objects.filter(pk=delivery.pk).update(**fields)


def webhook_deliveries_run_due(*, now=None, client: httpx.Client | None = None, limit=50) -> int:
    """Attempt every due delivery once. Returns how many were attempted."""
    now = now or timezone.now()
    due = WebhookDelivery.objects.select_related("webhook").filter(
        status=DeliveryStatus.PENDING, next_attempt_at__lte=now
    )
    attempted = 0
    owns_client = client is None
    client = client or httpx.Client(timeout=TIMEOUT_SECONDS, follow_redirects=False)
    try:
        for delivery in list(due.order_by("next_attempt_at", "id")[:limit]):
            if not _claim(delivery, now):
                continue
            status_code, error = _post(delivery, client)
            _record(delivery, status_code, error, timezone.now() if now is None else now)
            attempted += 1
    finally:
        if owns_client:
            client.close()
    return attempted


def _seconds_to_next_due() -> float:
    nxt = (
        WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING)
        .order_by("next_attempt_at")
        .values_list("next_attempt_at", flat=True)
        .first()
    )
    if nxt is None:
        return 30.0
    return min(30.0, max(0.0, (nxt - timezone.now()).total_seconds()))


_wake = threading.Event()
_stop = threading.Event()
_worker_lock = threading.Lock()
_worker: threading.Thread | None = None


def _worker_loop() -> None:
    while not _stop.is_set():
        _wake.clear()
        try:
            webhook_deliveries_run_due()
            wait = _seconds_to_next_due()
        except Exception:  # keep the worker alive: the rows say what is left to do
            log.exception("webhook worker iteration failed")
            wait = 5.0
        finally:
            close_old_connections()
        _wake.wait(timeout=wait)
    connection.close()


def kick_worker() -> None:
    """Wake (and on first use start) this process's delivery thread. Disabled with
    GAVEL_WEBHOOK_WORKER=False (tests call webhook_deliveries_run_due themselves)."""
    global _worker
    if not getattr(settings, "GAVEL_WEBHOOK_WORKER", True):
        return
    with _worker_lock:
        if _worker is None or not _worker.is_alive():
            _stop.clear()
            _worker = threading.Thread(target=_worker_loop, name="gavel-webhooks", daemon=True)
            _worker.start()
    _wake.set()


def stop_worker(timeout: float = 5.0) -> None:
    """Stop this process's delivery thread (tests; a clean shutdown)."""
    global _worker
    with _worker_lock:
        worker, _worker = _worker, None
    if worker is not None:
        _stop.set()
        _wake.set()
        worker.join(timeout)
