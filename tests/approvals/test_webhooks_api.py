"""POST /api/v1/webhooks: a `manage` key of an admin registers an endpoint; the signing secret
is answered once; https:// only unless GAVEL_WEBHOOK_ALLOW_HTTP; unknown events are 422 naming
them; audited with the principal and the key."""

import pytest

from approvals.models import Webhook
from console.models import AuditEvent
from tests.support.api import ApiClient
from tests.support.factories import make_key

pytestmark = pytest.mark.django_db

BODY = {"url": "https://hooks.example/gavel", "events": ["budget.threshold_crossed"]}


@pytest.fixture
def manage_admin(client, tenant_a, admin_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))


@pytest.fixture
def manage_lead(client, tenant_a, lead_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))


def test_an_admin_registers_a_webhook_and_sees_its_secret_once(manage_admin, tenant_a, admin_a):
    response = manage_admin.post("/api/v1/webhooks", BODY)
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"id", "url", "events", "format", "active", "createdAt", "secret"}
    webhook = Webhook.objects.get()
    assert body["id"] == webhook.public_id and body["id"].startswith("whk_")
    assert body["url"] == BODY["url"] and body["events"] == ["budget.threshold_crossed"]
    assert body["format"] == "gavel" and body["active"] is True
    assert body["secret"] == webhook.secret and body["secret"].startswith("whsec_")
    assert webhook.tenant == tenant_a
    event = AuditEvent.objects.get(action="webhook.created")
    assert event.actor_principal == admin_a and event.actor_key is not None
    assert event.object_id == webhook.public_id
    assert event.before is None
    assert event.after["url"] == BODY["url"]
    assert "secret" not in event.after


def test_http_urls_only_with_the_development_switch(manage_admin, settings):
    insecure = {**BODY, "url": "http://hooks.example/gavel"}
    response = manage_admin.post("/api/v1/webhooks", insecure)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "webhook_not_https"
    assert response.json()["error"]["details"][0]["path"] == "url"
    assert not Webhook.objects.exists()
    settings.GAVEL_WEBHOOK_ALLOW_HTTP = True
    assert manage_admin.post("/api/v1/webhooks", insecure).status_code == 201


@pytest.mark.parametrize(
    ("body", "path", "needle"),
    [
        ({**BODY, "events": ["approval.decided", "budget.typo"]}, "events.1", "budget.typo"),
        ({**BODY, "events": []}, "events", "at least one"),
        ({**BODY, "url": "ftp://hooks.example/"}, "url", "https://"),
        ({**BODY, "url": "https:///no-host"}, "url", "https://"),
        ({**BODY, "url": "https://h.example:99999/"}, "url", "not a URL"),
        ({**BODY, "url": "https://h.example/" + "a" * 500}, "url", "500"),
        ({**BODY, "format": "teams"}, "format", ""),
        ({**BODY, "secret": "mine"}, "secret", ""),
        ({"events": BODY["events"]}, "url", ""),
        ({**BODY, "events": "budget.threshold_crossed"}, "events", ""),
    ],
)
def test_a_bad_body_is_422_naming_the_field_and_changes_nothing(manage_admin, body, path, needle):
    response = manage_admin.post("/api/v1/webhooks", body)
    assert response.status_code == 422, response.json()
    error = response.json()["error"]
    assert path in [d["path"] for d in error["details"]]
    assert needle in " ".join(d["message"] for d in error["details"])
    assert not Webhook.objects.exists()
    assert not AuditEvent.objects.filter(action="webhook.created").exists()


def test_only_admins_and_only_manage_keys(client, manage_lead, tenant_a, admin_a):
    response = manage_lead.post("/api/v1/webhooks", BODY)
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    # The capability is checked before the body: a lead's bad body is 403 too, not 422.
    assert manage_lead.post("/api/v1/webhooks", {"url": 1}).status_code == 403
    decide = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=admin_a))
    response = decide.post("/api/v1/webhooks", BODY)
    assert response.status_code == 403 and response.json()["error"]["code"] == "missing_scope"
    assert ApiClient(client, None).post("/api/v1/webhooks", BODY).status_code == 401
    assert not Webhook.objects.exists()


def test_the_webhook_belongs_to_the_keys_tenant(manage_admin, tenant_a, tenant_b):
    manage_admin.post("/api/v1/webhooks", BODY)
    assert Webhook.objects.get().tenant == tenant_a
    assert not Webhook.objects.filter(tenant=tenant_b).exists()
