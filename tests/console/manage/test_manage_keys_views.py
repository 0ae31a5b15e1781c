"""/manage/keys/, /manage/webhooks/, /manage/settings/ over HTTP: admins only (403 page
otherwise), another tenant's key or webhook is a 404 page, the forms refuse what the API
refuses (the error on its field, nothing written) and save through the same services
(audited), a new secret is shown once, and creating or changing settings with an old
sign-in asks for the password first and then resumes."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from approvals.models import Webhook, WebhookDelivery
from approvals.services.webhooks import webhook_create
from console.accounts.views import REAUTH_FIELD
from console.directory import signin
from console.models import ApiKey, AuditEvent, Tenant
from console.models import _hash_key as hash_key
from tests.support.factories import make_key

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.GAVEL_WEBHOOK_WORKER = False


def browser(principal) -> Client:
    client = Client()
    client.force_login(principal.user)  # records a fresh sign-in
    return client


@pytest.fixture
def admin(admin_a):
    return browser(admin_a)


def _stale(client):
    session = client.session
    session[signin.AUTH_AT_SESSION_KEY] = 0
    session.save()


def _secret(html: str) -> str:
    return re.search(r'<code id="new-secret" class="secret-value">([^<]+)</code>', html).group(1)


def test_an_mcp_key_for_the_gateway_is_made_from_the_page(admin, reviewer_a):
    # docs/mcp.md: an MCP client's key has the `mcp` scope and acts as a principal
    page = admin.get("/manage/keys/").content.decode()
    assert 'value="mcp"' in page
    response = admin.post(
        "/manage/keys/",
        {"name": "claude code", "scopes": ["mcp"], "principal_id": reviewer_a.external_id},
    )
    assert response.status_code == 200
    key = ApiKey.objects.get(name="claude code")
    assert key.scopes == ["mcp"] and key.principal == reviewer_a
    assert key.key_hash == hash_key(_secret(response.content.decode()))


@pytest.mark.parametrize("page", ["/manage/keys/", "/manage/webhooks/", "/manage/settings/"])
def test_only_admins_see_the_pages(page, admin, lead_a, viewer_a):
    assert admin.get(page).status_code == 200
    assert browser(lead_a).get(page).status_code == 403
    assert browser(viewer_a).get(page).status_code == 403
    assert Client().get(page).status_code == 302  # to the sign-in page


@pytest.mark.parametrize(
    ("page", "body"),
    [
        ("/manage/keys/", {"name": "x", "scopes": ["ingest"]}),
        ("/manage/webhooks/", {"url": "https://h.example/", "events": ["approval.requested"]}),
        ("/manage/settings/", {"name": "Renamed", "currency": "EUR", "time_zone": "UTC"}),
    ],
)
def test_a_lead_cannot_post_the_forms(page, body, lead_a):
    response = browser(lead_a).post(page, body)
    assert response.status_code == 403
    assert not ApiKey.objects.exists() and not Webhook.objects.exists()
    assert Tenant.objects.get(slug="tenant-a").name == "Tenant A"


def test_creating_a_key_shows_its_secret_once(admin, admin_a, reviewer_a):
    response = admin.post(
        "/manage/keys/",
        {
            "name": "support bot",
            "scopes": ["ingest", "decide"],
            "principal_id": reviewer_a.external_id,
            "expires_on": (timezone.now() + timedelta(days=10)).date().isoformat(),
            "rate_per_minute": "120",
        },
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "you will not see it again" in html
    secret = _secret(html)
    key = ApiKey.objects.get(name="support bot")
    assert key.key_hash == hash_key(secret) and key.scopes == ["decide", "ingest"]
    assert key.principal == reviewer_a and key.rate_per_minute == 120 and key.expires_at
    assert f'id="key-{key.public_id}"' in html
    again = admin.get("/manage/keys/").content.decode()
    assert secret not in again and "support bot" in again
    event = AuditEvent.objects.get(action="apikey.created", object_id=key.public_id)
    assert event.actor_principal == admin_a and event.actor_key is None


@pytest.mark.parametrize(
    ("fields", "field_error"),
    [
        ({"name": ""}, "name"),
        ({"scopes": []}, "scopes"),
        ({"scopes": ["decide"]}, "principal"),
        ({"scopes": ["mcp"]}, "principal"),
        ({"principal_id": "ghost"}, "principal"),
        ({"expires_on": "2020-01-01"}, "future"),
        ({"expires_on": "soon"}, "YYYY-MM-DD"),
        ({"rate_per_minute": "0"}, "greater than or equal to 1"),
        ({"rate_burst": "lots"}, "integer"),
    ],
)
def test_a_bad_key_form_says_what_is_wrong_and_writes_nothing(admin, fields, field_error):
    keys, events = ApiKey.objects.count(), AuditEvent.objects.count()
    body = {"name": "bot", "scopes": ["ingest"], **fields}
    response = admin.post("/manage/keys/", body)
    assert response.status_code == 422
    html = response.content.decode()
    assert "The key was not created" in html and field_error in html
    assert 'id="new-secret"' not in html
    assert ApiKey.objects.count() == keys and AuditEvent.objects.count() == events


def test_revoking_from_the_page(admin, tenant_a, admin_a):
    make_key(tenant_a, name="old runtime")
    key = ApiKey.objects.get(name="old runtime")
    assert "Yes, revoke “old runtime”" in admin.get("/manage/keys/").content.decode()
    response = admin.post(f"/manage/keys/{key.public_id}/revoke/")
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert AuditEvent.objects.get(action="apikey.revoked").actor_principal == admin_a
    row = admin.get("/manage/keys/").content.decode()
    assert "revoked" in row and f"/manage/keys/{key.public_id}/revoke/" not in row


def test_another_tenants_key_and_webhook_are_404_pages(admin, tenant_b):
    make_key(tenant_b, name="b's key")
    theirs = ApiKey.objects.get(tenant=tenant_b)
    hook, _ = webhook_create(tenant=tenant_b, url="https://b-only.example/")
    for url in (
        f"/manage/keys/{theirs.public_id}/revoke/",
        f"/manage/webhooks/{hook.public_id}/delete/",
        f"/manage/webhooks/{hook.public_id}/test/",
    ):
        response = admin.post(url)
        assert response.status_code == 404
        assert (
            "b-only" not in response.content.decode() and "b's key" not in response.content.decode()
        )
    theirs.refresh_from_db()
    hook.refresh_from_db()
    assert theirs.revoked_at is None and hook.is_active and not WebhookDelivery.objects.exists()
    listed = (
        admin.get("/manage/keys/").content.decode()
        + admin.get("/manage/webhooks/").content.decode()
    )
    assert theirs.public_id not in listed and "b-only" not in listed


def test_registering_a_webhook_shows_its_secret_once_and_a_test_event_shows_its_delivery(
    admin, admin_a
):
    response = admin.post(
        "/manage/webhooks/",
        {"url": "https://hooks.example/g", "events": ["approval.decided"], "format": "slack"},
    )
    assert response.status_code == 200
    secret = _secret(response.content.decode())
    hook = Webhook.objects.get()
    assert hook.secret == secret and hook.format == "slack" and hook.events == ["approval.decided"]
    assert secret not in admin.get("/manage/webhooks/").content.decode()
    tested = admin.post(f"/manage/webhooks/{hook.public_id}/test/")
    delivery = WebhookDelivery.objects.get()
    assert delivery.event == "webhook.test" and delivery.status == "pending"
    html = tested.content.decode()
    assert f'id="delivery-{delivery.delivery_id}" class="delivery is-new"' in html
    assert AuditEvent.objects.get(action="webhook.tested").actor_principal == admin_a


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"url": "http://plain.example/", "events": ["approval.decided"]}, "must be https://"),
        ({"url": "https://h.example/", "events": []}, "name at least one event"),
        ({"url": "", "events": ["approval.decided"]}, "at least 1 character"),
        ({"url": "https://h.example/", "events": ["approval.decided"], "format": "teams"}, "slack"),
    ],
)
def test_a_bad_webhook_form_says_what_is_wrong_and_writes_nothing(admin, body, message):
    response = admin.post("/manage/webhooks/", body)
    assert response.status_code == 422
    html = response.content.decode()
    assert "The webhook was not registered" in html and message in html
    assert not Webhook.objects.exists() and not AuditEvent.objects.exists()


def test_deleting_a_webhook_from_the_page(admin, tenant_a):
    hook, _ = webhook_create(tenant=tenant_a, url="https://gone.example/")
    assert admin.post(f"/manage/webhooks/{hook.public_id}/delete/").status_code == 302
    hook.refresh_from_db()
    assert not hook.is_active
    assert "gone.example" not in admin.get("/manage/webhooks/").content.decode()
    assert AuditEvent.objects.filter(action="webhook.deleted").count() == 1


def _settings_form(**changes) -> dict:
    form = {
        "name": "Tenant A",
        "currency": "USD",
        "time_zone": "UTC",
        "approval_ttl_minutes": "15",
        "reminder_after_minutes": "",
        "escalate_after_minutes": "",
        "slack_decisions": "link",
        "audit_retention_days": "",
    }
    form.update(changes)
    return form


def test_the_settings_form_saves_only_what_changed_through_the_service(admin, admin_a):
    response = admin.post(
        "/manage/settings/",
        _settings_form(currency="EUR", audit_retention_days="90", reminder_after_minutes="10"),
    )
    assert response.status_code == 200
    assert "Settings saved" in response.content.decode()
    tenant = Tenant.objects.get(slug="tenant-a")
    assert tenant.currency == "EUR" and tenant.audit_retention_days == 90
    assert tenant.reminder_after_seconds == 600 and tenant.approval_ttl_seconds == 900
    event = AuditEvent.objects.get(action="tenant.updated")
    assert event.actor_principal == admin_a
    changed = {k for k in event.after if event.after[k] != event.before[k]}
    assert changed == {"currency", "auditRetentionDays", "reminderAfterSeconds"}
    assert "Now: 90 days" in admin.get("/manage/settings/").content.decode()


def test_the_slack_secret_is_write_only_on_the_page(admin, tenant_a):
    admin.post("/manage/settings/", _settings_form(slack_signing_secret="s3cr3t-slack"))
    tenant_a.refresh_from_db()
    assert tenant_a.slack_signing_secret == "s3cr3t-slack"
    page = admin.get("/manage/settings/").content.decode()
    assert "s3cr3t-slack" not in page and "type a new one to replace it" in page
    admin.post("/manage/settings/", _settings_form(remove_slack_signing_secret="on"))
    tenant_a.refresh_from_db()
    assert tenant_a.slack_signing_secret == ""


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"currency": "EURO"}, "ISO 4217"),
        ({"time_zone": "Moon/Base"}, "IANA"),
        ({"approval_ttl_minutes": "0"}, "greater than or equal to 60"),
        ({"audit_retention_days": "99999"}, "less than or equal to 3650"),
        ({"escalate_after_minutes": "soon"}, "integer"),
    ],
)
def test_a_bad_setting_is_shown_on_its_field_and_nothing_changes(admin, changes, message):
    response = admin.post("/manage/settings/", _settings_form(name="Changed", **changes))
    assert response.status_code == 422
    assert "Nothing was saved" in response.content.decode()
    assert message in response.content.decode()
    assert Tenant.objects.get(slug="tenant-a").name == "Tenant A"
    assert not AuditEvent.objects.filter(action="tenant.updated").exists()


@pytest.mark.parametrize(
    ("page", "body"),
    [
        ("/manage/keys/", {"name": "late key", "scopes": ["ingest"]}),
        ("/manage/webhooks/", {"url": "https://late.example/", "events": ["approval.decided"]}),
        ("/manage/settings/", _settings_form(name="Late rename")),
    ],
)
def test_an_old_sign_in_gives_its_password_again_and_the_action_resumes(admin, page, body):
    _stale(admin)
    assert admin.get(page).status_code == 200  # reading does not ask
    prompt = admin.post(page, body)
    assert prompt.status_code == 200 and REAUTH_FIELD in prompt.content.decode()
    assert not ApiKey.objects.filter(name="late key").exists()
    assert not Webhook.objects.exists()
    assert Tenant.objects.get(slug="tenant-a").name == "Tenant A"
    done = admin.post(page, {**body, REAUTH_FIELD: "admin-pass-123"})
    assert done.status_code == 200
    if page == "/manage/keys/":
        assert ApiKey.objects.filter(name="late key").exists()
        assert 'id="new-secret"' in done.content.decode()
    elif page == "/manage/webhooks/":
        assert Webhook.objects.filter(url="https://late.example/").exists()
    else:
        assert Tenant.objects.get(slug="tenant-a").name == "Late rename"
