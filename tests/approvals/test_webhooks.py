"""Webhooks: HTTPS only, HMAC-SHA256 signed, queued in the deciding transaction, sent after
commit by a worker (never in the request), retried with backoff, every outcome recorded."""

import json

import httpx
import pytest
from django.utils import timezone

from approvals.models import DeliveryStatus, Webhook, WebhookDelivery
from approvals.services import webhooks
from approvals.services.decisions import approval_decide
from console.core import outbound
from console.core.errors import Invalid
from tests.support.factories import ApprovalFactory, RunFactory
from tests.support.webhooks import Receiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_worker_thread(settings):
    settings.GAVEL_WEBHOOK_WORKER = False  # the tests run deliveries themselves


@pytest.fixture
def hook(tenant_a):
    webhook, secret = webhooks.webhook_create(tenant=tenant_a, url="https://hooks.example/gavel")
    return webhook, secret


def test_only_https_endpoints_and_known_events(tenant_a):
    with pytest.raises(Invalid):
        webhooks.webhook_create(tenant=tenant_a, url="http://hooks.example/")
    with pytest.raises(Invalid):
        webhooks.webhook_create(tenant=tenant_a, url="https://hooks.example/", events=["nope"])
    assert not Webhook.objects.exists()


def test_a_decision_queues_a_signed_delivery_sent_after_commit(
    hook, tenant_a, reviewer_a, django_capture_on_commit_callbacks
):
    webhook, secret = hook
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a))
    with django_capture_on_commit_callbacks() as callbacks:
        approval_decide(approval=approval, viewer=reviewer_a, decision="deny", message="no")
    assert webhooks.kick_worker in callbacks  # the request never sends it itself
    delivery = WebhookDelivery.objects.get()
    assert delivery.event == "approval.decided" and delivery.status == DeliveryStatus.PENDING
    receiver = Receiver(200)
    assert webhooks.webhook_deliveries_run_due(client=receiver.client()) == 1
    request = receiver.requests[0]
    assert str(request.url) == "https://hooks.example/gavel"
    assert request.headers["Gavel-Event"] == "approval.decided"
    assert webhooks.verify(
        secret=secret, body=request.content, header=request.headers["Gavel-Signature"]
    )
    assert not webhooks.verify(
        secret="whsec_wrong", body=request.content, header=request.headers["Gavel-Signature"]
    )
    body = json.loads(request.content)
    assert body["event"] == "approval.decided"
    assert body["deliveryId"] == delivery.delivery_id
    assert body["approval"]["id"] == approval.public_id
    assert body["approval"]["status"] == "denied" and body["approval"]["message"] == "no"
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED
    assert delivery.attempts == 1 and delivery.last_status_code == 200


def test_failures_are_retried_with_backoff_and_recorded(hook, tenant_a):
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a))
    webhooks.webhooks_approval_requested(approvals=[approval])
    delivery = WebhookDelivery.objects.get()
    assert delivery.event == "approval.requested"
    receiver = Receiver(500, "refuse", 204)
    now = timezone.now()
    assert webhooks.webhook_deliveries_run_due(client=receiver.client(), now=now) == 1
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.PENDING
    assert (delivery.attempts, delivery.last_status_code) == (1, 500)
    assert delivery.last_error == "HTTP 500"
    assert delivery.next_attempt_at == now + timezone.timedelta(seconds=5)
    assert webhooks.webhook_deliveries_run_due(client=receiver.client(), now=now) == 0  # not due
    later = now + timezone.timedelta(seconds=6)
    webhooks.webhook_deliveries_run_due(client=receiver.client(), now=later)
    delivery.refresh_from_db()
    assert delivery.attempts == 2 and delivery.last_status_code is None
    assert delivery.last_error == "connection failed"  # generic: no exception text
    assert delivery.next_attempt_at == later + timezone.timedelta(seconds=30)
    webhooks.webhook_deliveries_run_due(
        client=receiver.client(), now=later + timezone.timedelta(seconds=31)
    )
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED and delivery.attempts == 3
    assert len(receiver.requests) == 3
    ids = {r.headers["Gavel-Delivery"] for r in receiver.requests}
    assert ids == {delivery.delivery_id}  # receivers can de-duplicate retries


def test_a_delivery_gives_up_after_the_last_attempt(hook, tenant_a):
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a))
    webhooks.webhooks_approval_requested(approvals=[approval])
    receiver = Receiver(*([503] * webhooks.MAX_ATTEMPTS))
    moment = timezone.now()
    for _ in range(webhooks.MAX_ATTEMPTS):
        webhooks.webhook_deliveries_run_due(client=receiver.client(), now=moment)
        moment += timezone.timedelta(hours=2)
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED
    assert delivery.attempts == webhooks.MAX_ATTEMPTS
    webhooks.webhook_deliveries_run_due(client=receiver.client(), now=moment)
    assert len(receiver.requests) == webhooks.MAX_ATTEMPTS


def test_only_subscribed_active_endpoints_of_the_tenant_hear(tenant_a, tenant_b, reviewer_a):
    webhooks.webhook_create(
        tenant=tenant_a, url="https://a.example/", events=["approval.requested"]
    )
    webhooks.webhook_create(tenant=tenant_b, url="https://b.example/")
    off, _ = webhooks.webhook_create(tenant=tenant_a, url="https://off.example/")
    Webhook.objects.filter(pk=off.pk).update(is_active=False)
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a))
    approval_decide(approval=approval, viewer=reviewer_a, decision="approve")
    assert not WebhookDelivery.objects.exists()  # a: not subscribed to decided; b: other tenant
    webhooks.webhooks_approval_requested(approvals=[approval])
    assert [d.webhook.url for d in WebhookDelivery.objects.all()] == ["https://a.example/"]


@pytest.mark.parametrize("endpoint", ["none", "inactive", "other tenant", "active"])
def test_a_decision_looks_for_endpoints_only_when_its_tenant_has_an_active_one(
    tenant_a, tenant_b, reviewer_a, endpoint, monkeypatch
):
    """The run's lock tells whether the tenant has an active endpoint: without one, deciding
    runs no webhook query; with one, the decision is delivered."""
    if endpoint != "none":
        tenant = tenant_b if endpoint == "other tenant" else tenant_a
        made, _ = webhooks.webhook_create(tenant=tenant, url="https://x.example/")
        Webhook.objects.filter(pk=made.pk).update(is_active=endpoint != "inactive")
    looked = []
    real = webhooks.webhooks_approval_decided
    monkeypatch.setattr(
        "approvals.services.settle.webhooks_approval_decided",
        lambda **kw: looked.append(kw) or real(**kw),
    )
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a))
    approval_decide(approval=approval, viewer=reviewer_a, decision="approve")
    assert bool(looked) is (endpoint == "active")
    assert WebhookDelivery.objects.exists() is (endpoint == "active")


def test_a_stale_or_malformed_signature_is_refused():
    body = b'{"a":1}'
    old = webhooks.sign(secret="s", body=body, timestamp=1_000_000)
    assert not webhooks.verify(secret="s", body=body, header=old)
    assert not webhooks.verify(secret="s", body=body, header="garbage")


@pytest.mark.django_db(transaction=True)
def test_the_worker_thread_delivers_after_commit(hook, tenant_a, reviewer_a, settings, monkeypatch):
    """A decision commits; the background worker (a daemon thread) delivers on its own."""
    import time

    settings.GAVEL_WEBHOOK_WORKER = True
    receiver = Receiver(200)
    monkeypatch.setattr(
        outbound, "_client", lambda *a: httpx.Client(transport=httpx.MockTransport(receiver))
    )
    approval = ApprovalFactory(run=RunFactory(tenant=tenant_a))
    try:
        approval_decide(approval=approval, viewer=reviewer_a, decision="approve")
        deadline = time.monotonic() + 10
        while not receiver.requests and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        webhooks.stop_worker()
    assert len(receiver.requests) == 1
    assert WebhookDelivery.objects.get().status == DeliveryStatus.DELIVERED


def test_the_create_webhook_command_prints_the_secret_once(tenant_a):
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command(
        "create_webhook", "--tenant", "tenant-a", "--url", "https://h.example/", stdout=out
    )
    secret = out.getvalue().strip().splitlines()[-1]
    assert Webhook.objects.get().secret == secret and secret.startswith("whsec_")
    with pytest.raises(CommandError, match="https"):
        call_command("create_webhook", "--tenant", "tenant-a", "--url", "http://h.example/")
    with pytest.raises(CommandError, match="tenant"):
        call_command("create_webhook", "--tenant", "nope", "--url", "https://h.example/")
