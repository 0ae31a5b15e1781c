"""H4: one tenant's webhook endpoint costs that tenant at most a failed delivery after the
deadline: never a stalled sender, a server's memory, another tenant's deliveries, mail, or an
expiry. Hostile endpoints are loopback servers of the test (tests/support/endpoints.py);
the deadline is test-sized and every bound is generous (these are not benchmarks)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, DeliveryStatus, WebhookDelivery
from approvals.services import webhooks
from console.core import outbox
from console.directory.services import sso as sso_services
from console.models import TenantOidc
from notifications.models import EmailState, OutboundEmail
from ops.context import Lifecycle
from ops.worker import Worker
from tests.support.endpoints import Endpoint
from tests.support.factories import ApprovalFactory, RunFactory

pytestmark = pytest.mark.django_db(transaction=True)

MiB = 1024 * 1024


@pytest.fixture
def endpoints(settings):
    settings.GAVEL_WEBHOOK_ALLOW_HTTP = True  # loopback endpoints speak plain http
    settings.GAVEL_WEBHOOK_WORKER = False  # each test says which thread sends
    made: list[Endpoint] = []

    def make(mode: str, **kwargs) -> Endpoint:
        made.append(Endpoint(mode, **kwargs))
        return made[-1]

    yield make
    outbox.stop()
    for endpoint in made:
        endpoint.close()


def within(seconds: float, work):
    """`work()` in a thread of its own: (its result, the seconds it took); the test fails
    if it is still running after `seconds` (the old senders never returned)."""
    box: dict = {}

    def run():
        try:
            box["value"] = work()
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return box["value"], time.monotonic() - started


def eventually(check, seconds: float = 10.0) -> bool:
    """`check` true within `seconds`. On SQLite's shared in-memory test database a read that
    meets the sweep thread's write answers "table is locked" at once (shared-cache locks do
    not wait): that read is tried again, as a busy database's would be."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except OperationalError:
            pass
        time.sleep(0.05)
    return check()


def retried(write, seconds: float = 10.0):
    """`write()`, tried again while SQLite's shared in-memory test database answers "table is
    locked" because the sweep thread is writing (as `eventually` does for reads); its result."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return write()
        except OperationalError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def hook(tenant, endpoint: Endpoint):
    webhook, _ = webhooks.webhook_create(tenant=tenant, url=endpoint.url)
    return webhook


def test_h4_an_endpoint_trickling_its_answer_fails_within_the_deadline(
    tenant_a, endpoints, settings
):
    settings.GAVEL_OUTBOUND_DEADLINE_SECONDS = 2
    drip = endpoints("trickle_headers")  # a byte every 0.5 s, forever: no read ever times out
    webhooks.webhook_test_send(webhook=hook(tenant_a, drip))
    attempted, took = within(30, webhooks.webhook_deliveries_run_due)
    assert attempted == 1 and took < 12
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.PENDING and delivery.attempts == 1
    assert delivery.last_status_code is None and delivery.last_error == "timed out"


def test_h4_an_endpoint_trickling_its_body_costs_nothing(tenant_a, endpoints, settings):
    """A webhook's answer is its status: the body is never waited for."""
    settings.GAVEL_OUTBOUND_DEADLINE_SECONDS = 20
    drip = endpoints("trickle")
    webhooks.webhook_test_send(webhook=hook(tenant_a, drip))
    attempted, took = within(30, webhooks.webhook_deliveries_run_due)
    assert attempted == 1 and took < 10
    assert WebhookDelivery.objects.get().status == DeliveryStatus.DELIVERED


def test_h4_a_huge_answer_is_not_read(tenant_a, endpoints):
    huge = endpoints("huge", size=96 * MiB)
    webhooks.webhook_test_send(webhook=hook(tenant_a, huge))
    attempted, _ = within(60, webhooks.webhook_deliveries_run_due)
    assert attempted == 1
    assert WebhookDelivery.objects.get().status == DeliveryStatus.DELIVERED
    assert huge.done.wait(20)  # the client hung up: the endpoint's writes failed
    assert huge.sent < 24 * MiB  # socket buffers at most, never the answer


def test_h4_an_identity_providers_answer_has_a_deadline_and_a_size_cap(
    tenant_a, admin_a, endpoints, settings
):
    settings.GAVEL_OIDC_ALLOW_HTTP = True
    settings.GAVEL_OUTBOUND_DEADLINE_SECONDS = 2
    settings.GAVEL_OUTBOUND_MAX_RESPONSE_BYTES = 64 * 1024
    fields = {"client_id": "gavel", "client_secret": "s3cret-s3cret"}

    def update(issuer: str):
        try:
            sso_services.oidc_update(tenant=tenant_a, fields={**fields, "issuer": issuer},
                                     viewer=admin_a)  # fmt: skip
        except Exception as error:  # noqa: BLE001 - the refusal is what the test reads
            return str(getattr(error, "details", error))
        return "saved"

    drip = endpoints("trickle")
    said, took = within(30, lambda: update(drip.url.rsplit("/", 1)[0]))
    assert "timed out" in said and took < 12
    huge = endpoints("huge", size=96 * MiB)
    said, _ = within(60, lambda: update(huge.url.rsplit("/", 1)[0]))
    assert "response too large" in said
    assert huge.done.wait(20) and huge.sent < 24 * MiB
    assert not TenantOidc.objects.exists()


# PostgreSQL only: on SQLite's shared in-memory test database the outbox thread's write of
# the delivered row meets this test's polling read and fails at once ("table is locked":
# shared-cache locks do not wait), so the row stays pending (flaky there, 2 runs in 4, on
# main before this note too); what the test proves does not depend on the database.
@pytest.mark.postgres
def test_h4_a_slow_tenant_does_not_hold_another_tenants_deliveries_in_the_server_thread(
    tenant_a, tenant_b, endpoints, settings
):
    """The server process's outbox thread (woken on commit)."""
    settings.GAVEL_OUTBOUND_DEADLINE_SECONDS = 30
    settings.GAVEL_WEBHOOK_WORKER = True
    drip, healthy = endpoints("trickle_headers"), endpoints("ok")
    slow = webhooks.webhook_test_send(webhook=hook(tenant_b, drip))
    assert drip.received.wait(10)  # tenant B's delivery is in flight, and will hang
    fast = webhooks.webhook_test_send(webhook=hook(tenant_a, healthy))
    assert healthy.received.wait(10), "tenant A's delivery waited behind tenant B's endpoint"

    def delivered():
        return WebhookDelivery.objects.get(pk=fast.pk).status == DeliveryStatus.DELIVERED

    assert eventually(delivered)
    slow.refresh_from_db()
    assert slow.status == DeliveryStatus.PENDING and slow.attempts == 0  # still in flight


def test_h4_the_sweep_expires_and_sends_mail_and_webhooks_beside_a_hanging_endpoint(
    tenant_a, tenant_b, endpoints, settings, monkeypatch
):
    """`expire_approvals --loop` (the sweep): a hanging endpoint of tenant B delays neither a
    due expiry, nor tenant A's mail, nor tenant A's webhook."""
    settings.GAVEL_OUTBOUND_DEADLINE_SECONDS = 30
    drip, healthy = endpoints("trickle_headers"), endpoints("ok")
    worker = Worker(interval=0.2)  # what `expire_approvals --loop` runs
    monkeypatch.setattr(Lifecycle, "draining", False)  # restored after request_stop
    slow = webhooks.webhook_test_send(webhook=hook(tenant_b, drip))

    def loop():
        try:
            worker.run()
        finally:
            connection.close()

    sweeper = threading.Thread(target=loop, daemon=True)
    sweeper.start()
    try:
        assert drip.received.wait(10)  # the sweep is sending tenant B's delivery
        approval = retried(
            lambda: ApprovalFactory(
                run=RunFactory(tenant=tenant_a), expires_at=timezone.now() + timedelta(seconds=1)
            )
        )
        mail = retried(
            lambda: OutboundEmail.objects.create(
                tenant=tenant_a, to="lead@a.example", subject="Budget", text_body="80%"
            )
        )
        fast = retried(lambda: webhooks.webhook_test_send(webhook=hook(tenant_a, healthy)))

        def expired():
            return Approval.objects.get(pk=approval.pk).status == ApprovalStatus.EXPIRED

        assert eventually(expired), "the expiry waited behind tenant B's endpoint"
        assert eventually(lambda: OutboundEmail.objects.get(pk=mail.pk).state == EmailState.SENT)
        assert healthy.received.wait(10), "tenant A's delivery waited behind tenant B's"
        assert eventually(
            lambda: WebhookDelivery.objects.get(pk=fast.pk).status == DeliveryStatus.DELIVERED
        )
        slow.refresh_from_db()
        assert slow.attempts == 0  # tenant B's request is still hanging, on its own
    finally:
        worker.request_stop()
        sweeper.join(10)


def test_h4_due_deliveries_are_claimed_round_robin_by_tenant(tenant_a, tenant_b, settings):
    """Tenant B's backlog (older) does not come first: claims alternate between tenants, at
    most GAVEL_OUTBOUND_PER_TENANT of one tenant and one per endpoint in flight."""
    settings.GAVEL_WEBHOOK_WORKER = False  # the test claims; no thread sends
    settings.GAVEL_OUTBOUND_WORKERS = 4
    settings.GAVEL_OUTBOUND_PER_TENANT = 2
    backlog = [
        webhooks.webhook_create(tenant=tenant_b, url=f"https://b{i}.example/")[0] for i in range(6)
    ]
    for webhook in backlog + backlog:
        webhooks.webhook_test_send(webhook=webhook)
    webhooks.webhook_test_send(
        webhook=webhooks.webhook_create(tenant=tenant_a, url="https://a.example/")[0]
    )
    dispatcher = outbox.Dispatcher()
    try:
        jobs = webhooks.webhook_deliveries_claim(room=dispatcher.room())
    finally:
        dispatcher.close()
    assert [job.tenant_id for job in jobs] == [tenant_b.pk, tenant_a.pk, tenant_b.pk]
    assert len({job.endpoint for job in jobs}) == 3
