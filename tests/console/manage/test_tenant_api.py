"""GET|PATCH /api/v1/tenant: an admin reads and changes the tenant's settings. Every field is
bounded (422 naming it, nothing written); the Slack signing secret is write-only (only
slackSigningSecretSet is ever shown, in answers and in the audit row); a change is audited
`tenant.updated` with before → after and takes effect at once (new approvals' expiry, the
usage days of a new time zone)."""

from datetime import timedelta

import pytest

from console.directory import signin
from console.models import AuditEvent, Tenant
from runs.models import UsageDaily
from tests.support.api import ApiClient
from tests.support.budgets import admit, post_events, step
from tests.support.factories import make_key

pytestmark = pytest.mark.django_db
TENANT = "/api/v1/tenant"
FIELDS = {
    "slug",
    "name",
    "allowSelfApproval",
    "approvalTtlSeconds",
    "reminderAfterSeconds",
    "escalateAfterSeconds",
    "currency",
    "timeZone",
    "slackSigningSecretSet",
    "slackDecisions",
    "auditRetentionDays",
}


@pytest.fixture
def manage_admin(client, tenant_a, admin_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))


def test_get_answers_every_setting_with_the_defaults(manage_admin):
    response = manage_admin.get(TENANT)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == FIELDS
    assert body["slug"] == "tenant-a" and body["name"] == "Tenant A"
    assert body["currency"] == "USD" and body["timeZone"] == "UTC"
    assert body["approvalTtlSeconds"] == 900 and body["allowSelfApproval"] is False
    assert body["reminderAfterSeconds"] is None and body["auditRetentionDays"] is None
    assert body["slackSigningSecretSet"] is False and body["slackDecisions"] == "link"


def test_patch_changes_the_given_fields_and_audits_before_and_after(manage_admin, admin_a):
    change = {
        "name": "Acme",
        "approvalTtlSeconds": 3600,
        "reminderAfterSeconds": 600,
        "escalateAfterSeconds": 1800,
        "currency": "EUR",
        "timeZone": "Europe/Paris",
        "slackDecisions": "decide",
        "auditRetentionDays": 365,
        "allowSelfApproval": True,
    }
    response = manage_admin.patch(TENANT, change)
    assert response.status_code == 200, response.content
    assert {k: response.json()[k] for k in change} == change
    tenant = Tenant.objects.get(slug="tenant-a")
    assert (tenant.currency, tenant.time_zone, tenant.audit_retention_days) == (
        "EUR",
        "Europe/Paris",
        365,
    )
    event = AuditEvent.objects.get(action="tenant.updated")
    assert event.actor_principal == admin_a and event.actor_key is not None
    assert event.before["currency"] == "USD" and event.after["currency"] == "EUR"
    assert event.before["auditRetentionDays"] is None
    assert event.after["auditRetentionDays"] == 365
    # Null clears the nullable ones.
    cleared = manage_admin.patch(TENANT, {"reminderAfterSeconds": None, "auditRetentionDays": None})
    assert cleared.json()["reminderAfterSeconds"] is None
    assert cleared.json()["auditRetentionDays"] is None


def test_a_patch_that_changes_nothing_writes_nothing(manage_admin):
    assert manage_admin.patch(TENANT, {"currency": "USD"}).status_code == 200
    assert manage_admin.patch(TENANT, {}).status_code == 200
    assert not AuditEvent.objects.filter(action="tenant.updated").exists()


def test_the_slack_signing_secret_is_write_only(manage_admin, tenant_a):
    secret = "8f742231b10e8888abcd99yyyzzz85a5"
    response = manage_admin.patch(TENANT, {"slackSigningSecret": secret})
    assert response.status_code == 200
    assert response.json()["slackSigningSecretSet"] is True
    assert secret not in response.content.decode()
    assert secret not in manage_admin.get(TENANT).content.decode()
    tenant_a.refresh_from_db()
    assert tenant_a.slack_signing_secret == secret
    event = AuditEvent.objects.get(action="tenant.updated")
    assert secret not in str((event.data, event.before, event.after))
    assert event.before["slackSigningSecretSet"] is False
    assert event.after["slackSigningSecretSet"] is True
    # A new secret is audited as a change too (without either secret); null removes it.
    manage_admin.patch(TENANT, {"slackSigningSecret": "another-secret"})
    assert AuditEvent.objects.filter(action="tenant.updated").count() == 2
    assert "another-secret" not in str(AuditEvent.objects.order_by("-pk").first().data)
    assert (
        manage_admin.patch(TENANT, {"slackSigningSecret": None}).json()["slackSigningSecretSet"]
        is False
    )


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"currency": "usd"}, "currency"),
        ({"currency": "ABC"}, "currency"),
        ({"currency": 840}, "currency"),
        ({"timeZone": "Mars/Olympus"}, "timeZone"),
        ({"timeZone": "utc+1"}, "timeZone"),
        ({"approvalTtlSeconds": 0}, "approvalTtlSeconds"),
        ({"approvalTtlSeconds": 10**9}, "approvalTtlSeconds"),
        ({"approvalTtlSeconds": None}, "approvalTtlSeconds"),
        ({"approvalTtlSeconds": "900"}, "approvalTtlSeconds"),
        ({"reminderAfterSeconds": -5}, "reminderAfterSeconds"),
        ({"escalateAfterSeconds": 10**9}, "escalateAfterSeconds"),
        ({"auditRetentionDays": 0}, "auditRetentionDays"),
        ({"auditRetentionDays": 100_000}, "auditRetentionDays"),
        ({"slackDecisions": "always"}, "slackDecisions"),
        ({"allowSelfApproval": "yes"}, "allowSelfApproval"),
        ({"name": ""}, "name"),
        ({"slug": "other"}, "slug"),
        ({"slackSigningSecretSet": True}, "slackSigningSecretSet"),
        ({"slackSigningSecret": "x" * 201}, "slackSigningSecret"),
    ],
)
def test_every_bad_value_is_422_naming_the_field_and_changes_nothing(manage_admin, body, path):
    response = manage_admin.patch(TENANT, {"name": "Changed", **body})
    assert response.status_code == 422, response.content
    assert path in [d["path"] for d in response.json()["error"]["details"]]
    tenant = Tenant.objects.get(slug="tenant-a")
    assert tenant.name == "Tenant A" and tenant.currency == "USD" and tenant.time_zone == "UTC"
    assert not AuditEvent.objects.filter(action="tenant.updated").exists()


def test_a_new_approval_ttl_applies_to_the_next_approval(manage_admin, ingest_a, tenant_a):
    from approvals.models import Approval
    from tests.support.ingest import admit_and_hold

    manage_admin.patch(TENANT, {"approvalTtlSeconds": 7200})
    admit_and_hold(ingest_a)
    approval = Approval.objects.get()
    assert approval.expires_at - approval.requested_at == timedelta(seconds=7200)


def test_a_new_time_zone_moves_the_usage_days_at_once(manage_admin, ingest_a, tenant_a):
    admit(ingest_a, "late")
    post_events(ingest_a, "late", step(1, 1, usage=(1, 1, 9), at="2026-12-02T23:30:00Z"))
    days = lambda: list(UsageDaily.objects.filter(tenant=tenant_a).values_list("day", flat=True))  # noqa: E731
    assert [d.isoformat() for d in days()] == ["2026-12-02"]
    assert manage_admin.patch(TENANT, {"timeZone": "Asia/Kolkata"}).status_code == 200
    assert [d.isoformat() for d in days()] == ["2026-12-03"]


def test_each_tenant_sees_and_changes_only_its_own(client, manage_admin, tenant_b, reviewer_b):
    body = manage_admin.get(TENANT).content.decode()
    assert "tenant-b" not in body and "Tenant B" not in body
    manage_admin.patch(TENANT, {"name": "Only A"})
    assert Tenant.objects.get(slug="tenant-b").name == "Tenant B"


def test_without_admin_it_is_403(client, tenant_a, lead_a, admin_a):
    lead = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))
    assert lead.get(TENANT).status_code == 403
    assert lead.patch(TENANT, {"name": "x"}).status_code == 403
    ingest = ApiClient(client, make_key(tenant_a, scopes=("ingest",)))
    assert ingest.get(TENANT).status_code == 403
    assert client.get(TENANT).status_code == 401
    assert Tenant.objects.get(slug="tenant-a").name == "Tenant A"


def test_a_browser_session_patches_only_after_a_recent_password(client, admin_a):
    client.force_login(admin_a.user)
    session = client.session
    session[signin.AUTH_AT_SESSION_KEY] = 0
    session.save()
    browser = ApiClient(client, None)
    assert browser.get(TENANT).status_code == 200
    response = browser.patch(TENANT, {"name": "Stale"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "reauth_required"
    assert Tenant.objects.get(slug="tenant-a").name == "Tenant A"
    session = client.session
    signin.auth_record(session)
    session.save()
    assert browser.patch(TENANT, {"name": "Fresh"}).status_code == 200
    assert AuditEvent.objects.get(action="tenant.updated").actor_key is None


def test_allowing_self_approval_applies_to_the_next_decision(
    manage_admin, client, tenant_a, reviewer_a
):
    from tests.support.factories import ApprovalFactory, RunFactory

    own = ApprovalFactory(run=RunFactory(tenant=tenant_a, principal=reviewer_a))
    mine = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=reviewer_a))
    path = f"/api/v1/approvals/{own.public_id}/decision"
    assert mine.post(path, {"decision": "approve"}).status_code == 403  # four eyes
    assert manage_admin.patch(TENANT, {"allowSelfApproval": True}).status_code == 200
    assert mine.post(path, {"decision": "approve"}).status_code == 200
