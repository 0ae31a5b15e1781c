"""notify(): rows written in the caller's transaction (nothing if it rolls back), one per
recipient, mail for those with an address, a signed webhook per subscribed endpoint, and the
bell published on commit."""

import pytest
from django.db import transaction

from approvals.models import DeliveryStatus, WebhookDelivery
from approvals.services import webhooks
from console.core import outbox
from console.live import realtime
from console.models import Principal
from notifications.models import EmailState, Notification, OutboundEmail
from notifications.services import notification_mark_read, notifications_mark_all_read, notify
from tests.support.factories import PrincipalFactory
from tests.support.mail import budget_alert

pytestmark = pytest.mark.django_db


@pytest.fixture
def leads(tenant_a, lead_a, admin_a):
    Principal.objects.filter(pk=lead_a.pk).update(email="lena@a.example", name="Lena")
    lead_a.refresh_from_db()
    return [lead_a, admin_a]  # the admin has no email address


def test_notify_writes_a_notification_per_recipient_and_mail_for_those_with_an_address(
    tenant_a, leads
):
    lead, admin = leads
    written = budget_alert(tenant=tenant_a, recipients=[lead, admin, lead])  # lead twice: once
    assert [n.principal for n in written] == [lead, admin]
    assert {n.public_id for n in written} == set(
        Notification.objects.values_list("public_id", flat=True)
    )
    first = Notification.objects.get(principal=lead)
    assert first.public_id.startswith("ntf_") and first.kind == "budget.threshold_crossed"
    assert first.url == "https://gavel.example.com/budgets/bud_1/"  # GAVEL_PUBLIC_URL
    assert first.read_at is None and first.tenant == tenant_a
    mail = OutboundEmail.objects.get()
    assert mail.to == "lena@a.example" and mail.state == EmailState.PENDING
    assert mail.notification == first and mail.attempts == 0
    assert mail.subject == "[Gavel] Budget 'support' reached 80%"
    assert "Hello Lena," in mail.text_body
    assert "8.00 USD of 10.00 USD spent this month." in mail.text_body
    assert "https://gavel.example.com/budgets/bud_1/" in mail.text_body
    assert '<a href="https://gavel.example.com/budgets/bud_1/"' in mail.html_body


def test_nothing_is_written_when_the_callers_transaction_rolls_back(tenant_a, leads):
    webhooks.webhook_create(tenant=tenant_a, url="https://hooks.example/")
    with pytest.raises(RuntimeError), transaction.atomic():
        budget_alert(tenant=tenant_a, recipients=leads)
        assert Notification.objects.count() == 2  # inside: written with what it reports
        assert OutboundEmail.objects.count() == 1 and WebhookDelivery.objects.count() == 1
        raise RuntimeError("the ingest failed after the crossing")
    assert not Notification.objects.exists()
    assert not OutboundEmail.objects.exists()
    assert not WebhookDelivery.objects.exists()


def test_everything_leaves_only_after_commit(
    tenant_a, leads, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []
    monkeypatch.setattr(
        realtime, "_send", lambda groups, message: sent.extend((g, message) for g in groups)
    )
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        budget_alert(tenant=tenant_a, recipients=leads)
        assert not sent  # nothing published inside the transaction
    lead, admin = leads
    # Mail is the sweep process's to send (no webhook endpoint here): this process's outbox
    # thread is not even woken for the lead's mail.
    assert outbox.kick not in callbacks
    assert OutboundEmail.objects.get(to=lead.email).state == EmailState.PENDING
    expected = {(realtime.user_group(p.user_id), p.pk) for p in (lead, admin)}
    assert {(group, m["principal"]) for group, m in sent} == expected and len(sent) == 2
    for _, message in sent:  # ids only, never the notification's content
        assert set(message) == {"type", "principal", "id"}
        assert message["type"] == "notifications.updated"


def test_a_principal_without_a_login_gets_the_notification_and_no_publish(
    tenant_a, monkeypatch, django_capture_on_commit_callbacks
):
    sent = []
    monkeypatch.setattr(realtime, "_send", lambda groups, message: sent.extend(groups))
    bot = PrincipalFactory(tenant=tenant_a, external_id="ops-bot", email="ops@a.example")
    with django_capture_on_commit_callbacks(execute=True):
        budget_alert(tenant=tenant_a, recipients=[bot])
    assert Notification.objects.get().principal == bot
    assert OutboundEmail.objects.get().to == "ops@a.example"
    assert sent == []  # no user, no sockets to tell


def test_inactive_recipients_are_skipped_and_another_tenants_are_refused(
    tenant_a, tenant_b, leads, reviewer_b
):
    lead, admin = leads
    Principal.objects.filter(pk=admin.pk).update(is_active=False)
    admin.refresh_from_db()
    assert [n.principal for n in budget_alert(tenant=tenant_a, recipients=[lead, admin])] == [lead]
    with pytest.raises(ValueError, match="not of tenant"):
        budget_alert(tenant=tenant_a, recipients=[reviewer_b])
    with pytest.raises(ValueError, match="kind"):
        budget_alert(tenant=tenant_a, recipients=[lead], kind="budget.typo")
    assert Notification.objects.count() == 1


def test_a_webhook_per_subscribed_endpoint_with_the_payload_and_a_delivery_id(
    tenant_a, tenant_b, leads
):
    subscribed, _ = webhooks.webhook_create(
        tenant=tenant_a, url="https://a.example/", events=["budget.threshold_crossed"]
    )
    webhooks.webhook_create(
        tenant=tenant_a, url="https://other.example/", events=["approval.decided"]
    )
    webhooks.webhook_create(tenant=tenant_b, url="https://b.example/")
    budget_alert(tenant=tenant_a, recipients=leads)
    delivery = WebhookDelivery.objects.get()
    assert delivery.webhook == subscribed and delivery.event == "budget.threshold_crossed"
    assert delivery.payload == {
        "event": "budget.threshold_crossed",
        "budget": {"id": "bud_1", "name": "support"},
        "threshold": 80,
        "spentMinorUnits": 800,
    }
    with pytest.raises(ValueError, match="deliveryId"):
        budget_alert(tenant=tenant_a, recipients=leads, webhook_payload={"deliveryId": "x"})
    with pytest.raises(ValueError, match="unknown webhook event"):
        budget_alert(tenant=tenant_a, recipients=leads, webhook_event="budget.nope")


def test_webhooks_fire_without_recipients_and_none_without_an_event(tenant_a):
    webhooks.webhook_create(tenant=tenant_a, url="https://a.example/")
    assert budget_alert(tenant=tenant_a, recipients=[]) == []
    assert WebhookDelivery.objects.count() == 1
    budget_alert(tenant=tenant_a, recipients=[], webhook_event=None)
    assert WebhookDelivery.objects.count() == 1


def test_the_signed_webhook_reaches_a_real_http_endpoint(tenant_a, leads, endpoint):
    webhook, secret = webhooks.webhook_create(
        tenant=tenant_a, url=endpoint.url, events=["budget.threshold_crossed"]
    )
    budget_alert(tenant=tenant_a, recipients=leads)
    assert webhooks.webhook_deliveries_run_due() == 1
    request = endpoint.requests[0]
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert request["path"] == "/hooks/gavel"
    assert headers["gavel-event"] == "budget.threshold_crossed"
    assert webhooks.verify(secret=secret, body=request["body"], header=headers["gavel-signature"])
    assert not webhooks.verify(
        secret="whsec_wrong", body=request["body"], header=headers["gavel-signature"]
    )
    delivery = WebhookDelivery.objects.get()
    assert endpoint.json() == {
        "event": "budget.threshold_crossed",
        "deliveryId": delivery.delivery_id,
        "budget": {"id": "bud_1", "name": "support"},
        "threshold": 80,
        "spentMinorUnits": 800,
    }
    assert headers["gavel-delivery"] == delivery.delivery_id
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED and delivery.last_status_code == 204


def test_links_use_the_public_url_else_localhost_off_request(tenant_a, leads, settings):
    settings.GAVEL_PUBLIC_URL = ""
    (first, _) = budget_alert(tenant=tenant_a, recipients=leads)
    assert first.url == "http://localhost:8000/budgets/bud_1/"
    (absolute, _) = budget_alert(tenant=tenant_a, recipients=leads, url="https://x.example/a")
    assert absolute.url == "https://x.example/a"


def test_links_use_the_address_of_the_request_that_caused_them(tenant_a, leads, settings, rf):
    from console.core.links import current_request, public_url

    settings.GAVEL_PUBLIC_URL = ""
    settings.ALLOWED_HOSTS = ["gavel.internal"]
    request = rf.get("/api/v1/runs/r/events", HTTP_HOST="gavel.internal", secure=True)
    token = current_request.set(request)
    try:
        assert public_url("/budgets/bud_1/") == "https://gavel.internal/budgets/bud_1/"
    finally:
        current_request.reset(token)


def test_marking_read_is_one_principals_own_and_publishes_the_bell(
    tenant_a, leads, reviewer_a, django_capture_on_commit_callbacks, monkeypatch
):
    from console.core.errors import NotFound

    lead, admin = leads
    mine, theirs = budget_alert(tenant=tenant_a, recipients=[lead, admin])
    sent = []
    monkeypatch.setattr(realtime, "_send", lambda groups, message: sent.append(message))
    with django_capture_on_commit_callbacks(execute=True):
        read = notification_mark_read(viewer=lead, notification_id=mine.public_id)
    assert read.read_at is not None
    assert [m["principal"] for m in sent] == [lead.pk]
    with django_capture_on_commit_callbacks(execute=True):
        again = notification_mark_read(viewer=lead, notification_id=mine.public_id)
    assert again.read_at == read.read_at and len(sent) == 1  # already read: no change
    with pytest.raises(NotFound):
        notification_mark_read(viewer=lead, notification_id=theirs.public_id)
    with pytest.raises(NotFound):
        notification_mark_read(viewer=reviewer_a, notification_id=mine.public_id)
    budget_alert(tenant=tenant_a, recipients=[admin])
    assert notifications_mark_all_read(viewer=admin) == 2
    assert notifications_mark_all_read(viewer=admin) == 0
    assert Notification.objects.get(pk=theirs.pk).read_at is not None


def test_a_kind_specific_mail_template_wins_over_the_generic_one(
    tenant_a, leads, settings, tmp_path
):
    folder = tmp_path / "notifications" / "email"
    folder.mkdir(parents=True)
    (folder / "approval.reminder.subject.txt").write_text("Reminder: {{ notification.title }}")
    settings.TEMPLATES = [
        {**settings.TEMPLATES[0], "DIRS": [tmp_path, *settings.TEMPLATES[0]["DIRS"]]}
    ]
    notify(
        tenant=tenant_a,
        kind="approval.reminder",
        recipients=leads,
        title="send_email waits for you",
        body="",
        url="/approvals/apr_1/",
    )
    mail = OutboundEmail.objects.get()
    assert mail.subject == "Reminder: send_email waits for you"
    assert "send_email waits for you" in mail.text_body  # the generic body
