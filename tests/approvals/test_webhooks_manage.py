"""Managing webhooks over the wire (admin): list, delete, deliveries, "send test event".
The secret is never answered again after creation; a deleted webhook hears nothing more and
its pending deliveries are given up; the test event is a signed delivery through the same
outbox; another tenant's webhook is a 404 telling nothing of it; no admin, 403; each change
audited webhook.created|deleted|tested."""

import json

import pytest

from approvals.models import DeliveryStatus, Webhook, WebhookDelivery
from approvals.services import webhooks
from console.directory import signin
from console.models import AuditEvent
from tests.support.api import ApiClient
from tests.support.factories import make_key
from tests.support.webhooks import Receiver

pytestmark = pytest.mark.django_db
HOOKS = "/api/v1/webhooks"
BODY = {"url": "https://hooks.example/gavel", "events": ["approval.requested"]}


@pytest.fixture(autouse=True)
def no_worker_thread(settings):
    settings.GAVEL_WEBHOOK_WORKER = False  # the tests run deliveries themselves


@pytest.fixture
def manage_admin(client, tenant_a, admin_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))


@pytest.fixture
def created(manage_admin):
    response = manage_admin.post(HOOKS, BODY)
    assert response.status_code == 201
    return response.json()


def test_the_list_shows_the_tenants_webhooks_newest_first_without_secrets(manage_admin, created):
    manage_admin.post(HOOKS, {**BODY, "url": "https://hooks.example/second", "format": "slack"})
    response = manage_admin.get(HOOKS)
    assert response.status_code == 200
    items = response.json()["items"]
    assert [w["url"] for w in items] == ["https://hooks.example/second", BODY["url"]]
    assert items[0]["format"] == "slack" and items[1]["format"] == "gavel"
    assert set(items[1]) == {"id", "url", "events", "format", "active", "createdAt"}
    assert created["secret"] not in response.content.decode()
    page = manage_admin.get(HOOKS, limit=1).json()
    assert len(page["items"]) == 1 and page["nextCursor"]
    rest = manage_admin.get(HOOKS, limit=1, cursor=page["nextCursor"]).json()
    assert rest["items"][0]["id"] == created["id"] and rest["nextCursor"] is None


def test_slack_format_is_stored(manage_admin):
    response = manage_admin.post(HOOKS, {**BODY, "format": "slack"})
    assert response.status_code == 201
    assert Webhook.objects.get().format == "slack"


def test_send_test_event_writes_a_signed_delivery_through_the_outbox(
    manage_admin, created, admin_a
):
    response = manage_admin.post(f"{HOOKS}/{created['id']}/test")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["event"] == "webhook.test" and body["state"] == "pending"
    assert body["attempts"] == 0
    delivery = WebhookDelivery.objects.get()
    assert delivery.delivery_id == body["id"]
    receiver = Receiver(200)
    assert webhooks.webhook_deliveries_run_due(client=receiver.client()) == 1
    sent = receiver.requests[0]
    assert sent.headers["Gavel-Event"] == "webhook.test"
    payload = json.loads(sent.content)
    assert payload["event"] == "webhook.test" and payload["webhook"]["id"] == created["id"]
    assert webhooks.verify(
        secret=created["secret"], body=sent.content, header=sent.headers["Gavel-Signature"]
    )
    event = AuditEvent.objects.get(action="webhook.tested")
    assert event.actor_principal == admin_a and event.data["deliveryId"] == body["id"]
    # The deliveries list now shows it delivered.
    listed = manage_admin.get(f"{HOOKS}/{created['id']}/deliveries").json()["items"]
    assert listed[0]["id"] == body["id"] and listed[0]["state"] == "delivered"
    assert listed[0]["attempts"] == 1 and listed[0]["lastStatusCode"] == 200
    assert listed[0]["deliveredAt"] and listed[0]["lastError"] is None


def test_deliveries_show_attempts_status_error_and_state_in_pages(manage_admin, created):
    for _ in range(3):
        manage_admin.post(f"{HOOKS}/{created['id']}/test")
    webhooks.webhook_deliveries_run_due(client=Receiver(500, 200, "refuse").client())
    response = manage_admin.get(f"{HOOKS}/{created['id']}/deliveries", limit=2)
    assert response.status_code == 200
    page = response.json()
    assert set(page["items"][0]) == {
        "id",
        "event",
        "state",
        "attempts",
        "lastStatusCode",
        "lastError",
        "createdAt",
        "nextAttemptAt",
        "deliveredAt",
    }
    rest = manage_admin.get(f"{HOOKS}/{created['id']}/deliveries", cursor=page["nextCursor"])
    items = page["items"] + rest.json()["items"]
    assert len(items) == 3 and rest.json()["nextCursor"] is None
    # Oldest first they met 500, 200 and a refused connection.
    oldest = items[::-1]
    assert [d["state"] for d in oldest] == ["pending", "delivered", "pending"]
    assert [d["lastStatusCode"] for d in oldest] == [500, 200, None]
    assert oldest[0]["lastError"] == "HTTP 500" and oldest[1]["lastError"] is None
    assert oldest[2]["lastError"] == "connection failed" and oldest[2]["nextAttemptAt"]
    assert all(d["attempts"] == 1 for d in oldest)
    bad = manage_admin.get(f"{HOOKS}/{created['id']}/deliveries", cursor="nope")
    assert bad.status_code == 422
    assert bad.json()["error"]["details"][0]["path"] == "query.cursor"


def test_deleting_a_webhook_stops_it_and_gives_up_its_pending_deliveries(
    manage_admin, created, tenant_a, admin_a
):
    manage_admin.post(f"{HOOKS}/{created['id']}/test")
    response = manage_admin.delete(f"{HOOKS}/{created['id']}")
    assert response.status_code == 204
    webhook = Webhook.objects.get(public_id=created["id"])
    assert webhook.is_active is False
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILED and delivery.last_error == "webhook deleted"
    assert webhooks.webhook_deliveries_run_due(client=Receiver().client()) == 0
    assert (
        webhooks.webhooks_enqueue(
            tenant_id=tenant_a.pk, event="approval.requested", payloads=[{"x": 1}]
        )
        == []
    )
    assert manage_admin.get(HOOKS).json()["items"] == []
    assert manage_admin.delete(f"{HOOKS}/{created['id']}").status_code == 404
    assert manage_admin.get(f"{HOOKS}/{created['id']}/deliveries").status_code == 404
    event = AuditEvent.objects.get(action="webhook.deleted")
    assert event.actor_principal == admin_a
    assert event.before["active"] is True and event.after["active"] is False
    assert created["secret"] not in str(event.data)


def test_another_tenants_webhook_is_404_with_nothing_of_it(manage_admin, tenant_b):
    theirs, secret = webhooks.webhook_create(tenant=tenant_b, url="https://b-secret.example/x")
    for call in (
        lambda: manage_admin.delete(f"{HOOKS}/{theirs.public_id}"),
        lambda: manage_admin.get(f"{HOOKS}/{theirs.public_id}/deliveries"),
        lambda: manage_admin.post(f"{HOOKS}/{theirs.public_id}/test"),
    ):
        response = call()
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "webhook_not_found"
        assert "b-secret" not in response.content.decode()
    assert "b-secret" not in manage_admin.get(HOOKS).content.decode()
    theirs.refresh_from_db()
    assert theirs.is_active and not WebhookDelivery.objects.exists()


def test_without_admin_every_operation_is_403(client, tenant_a, lead_a, admin_a, created):
    lead = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))
    for response in (
        lead.get(HOOKS),
        lead.delete(f"{HOOKS}/{created['id']}"),
        lead.get(f"{HOOKS}/{created['id']}/deliveries"),
        lead.post(f"{HOOKS}/{created['id']}/test"),
    ):
        assert response.status_code == 403
    assert Webhook.objects.get().is_active and not WebhookDelivery.objects.exists()
    ingest = ApiClient(client, make_key(tenant_a, scopes=("ingest",)))
    assert ingest.get(HOOKS).status_code == 403
    assert ApiClient(client, None).get(HOOKS).status_code == 401


def test_an_admins_browser_session_registers_only_after_a_recent_password(client, admin_a):
    client.force_login(admin_a.user)
    session = client.session
    session[signin.AUTH_AT_SESSION_KEY] = 0
    session.save()
    browser = ApiClient(client, None)
    assert browser.get(HOOKS).status_code == 200
    response = browser.post(HOOKS, BODY)
    assert response.status_code == 403 and response.json()["error"]["code"] == "reauth_required"
    assert not Webhook.objects.exists()
    session = client.session
    signin.auth_record(session)
    session.save()
    assert browser.post(HOOKS, BODY).status_code == 201
    assert AuditEvent.objects.get(action="webhook.created").actor_key is None


def test_a_deleted_webhooks_delivery_is_never_sent_even_if_left_pending(manage_admin, created):
    """A delivery being sent while its webhook is deleted is not retried afterwards: the
    sender takes only live webhooks' deliveries, and its outcome does not undo the give-up."""
    manage_admin.post(f"{HOOKS}/{created['id']}/test")
    delivery = WebhookDelivery.objects.get()
    manage_admin.delete(f"{HOOKS}/{created['id']}")
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.PENDING)
    receiver = Receiver()
    assert webhooks.webhook_deliveries_run_due(client=receiver.client()) == 0
    assert receiver.requests == [] and webhooks.webhook_next_due() is None
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.FAILED)
    webhooks._record(delivery, 200, "", delivery.created_at)  # an attempt that was in flight
    assert WebhookDelivery.objects.get().status == DeliveryStatus.FAILED
