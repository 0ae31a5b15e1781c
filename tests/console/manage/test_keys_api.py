"""GET|POST /api/v1/keys, DELETE /api/v1/keys/{keyId}: an admin (a `manage` key acting as
an admin, or an admin's browser session) lists, creates and revokes keys. The secret is
answered once and only its hash is stored; revoked and expired keys are 401; every bad
input is a 422 naming the field with nothing written; another tenant's key is a 404 that
tells nothing of it; no admin, 403. Audited apikey.created|revoked with before → after."""

from datetime import timedelta

import pytest
from django.utils import timezone

from console.directory import signin
from console.models import ApiKey, AuditEvent
from console.models import _hash_key as hash_key
from tests.support.api import ApiClient
from tests.support.factories import make_key

pytestmark = pytest.mark.django_db

RESOURCE = {
    "id",
    "name",
    "prefix",
    "scopes",
    "principalId",
    "createdAt",
    "lastUsedAt",
    "expiresAt",
    "revokedAt",
    "ratePerMinute",
    "rateBurst",
}


@pytest.fixture
def manage_admin(client, tenant_a, admin_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))


@pytest.fixture
def manage_lead(client, tenant_a, lead_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))


def _create(api, **body):
    return api.post("/api/v1/keys", {"name": "runtime", "scopes": ["ingest"], **body})


def test_creating_a_key_answers_its_secret_once_and_stores_only_the_hash(
    manage_admin, tenant_a, admin_a, reviewer_a
):
    expires = (timezone.now() + timedelta(days=30)).replace(microsecond=0)
    response = _create(
        manage_admin,
        name="bot",
        scopes=["decide", "ingest"],
        principalId=reviewer_a.external_id,
        expiresAt=expires.isoformat(),
        ratePerMinute=120,
        rateBurst=10,
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == {"key", "secret"}
    assert set(body["key"]) == RESOURCE
    secret = body["secret"]
    assert secret.startswith("gvl_")
    key = ApiKey.objects.get(public_id=body["key"]["id"])
    assert body["key"]["id"].startswith("key_")
    assert body["key"]["scopes"] == ["decide", "ingest"]
    assert body["key"]["principalId"] == reviewer_a.external_id
    assert body["key"]["prefix"] == secret[:12] == key.key_prefix
    assert body["key"]["ratePerMinute"] == 120 and body["key"]["rateBurst"] == 10
    assert key.expires_at == expires and key.tenant == tenant_a
    # Only the hash is kept: no column holds the secret.
    assert key.key_hash == hash_key(secret)
    assert secret not in {str(v) for v in ApiKey.objects.filter(pk=key.pk).values().get().values()}
    # Never shown again.
    listed = manage_admin.get("/api/v1/keys").content.decode()
    assert secret not in listed and key.key_hash not in listed
    event = AuditEvent.objects.get(action="apikey.created", object_id=key.public_id)
    assert event.actor_principal == admin_a and event.actor_key is not None
    assert event.before is None
    assert event.after["name"] == "bot"
    assert event.after["principalId"] == reviewer_a.external_id
    stored = str((event.data, event.before, event.after))
    assert secret not in stored and key.key_hash not in stored


def test_the_new_key_works_against_the_api(client, manage_admin):
    secret = _create(manage_admin).json()["secret"]
    runtime = ApiClient(client, secret)
    assert runtime.get("/api/v1/runs").status_code == 200


def test_listing_is_newest_first_and_keyset_paginated(manage_admin, tenant_a):
    for n in range(3):
        _create(manage_admin, name=f"k{n}")
    first = manage_admin.get("/api/v1/keys", limit=2).json()
    assert [k["name"] for k in first["items"]] == ["k2", "k1"]
    assert first["nextCursor"]
    rest = manage_admin.get("/api/v1/keys", limit=2, cursor=first["nextCursor"]).json()
    # The admin's own manage key (made first) comes last.
    assert [k["name"] for k in rest["items"]] == ["k0", "test key"]
    assert rest["nextCursor"] is None


@pytest.mark.parametrize(
    ("params", "path"),
    [
        ({"limit": 0}, "query.limit"),
        ({"limit": 201}, "query.limit"),
        ({"cursor": "x"}, "query.cursor"),
    ],
)
def test_bad_list_parameters_are_422_naming_them(manage_admin, params, path):
    response = manage_admin.get("/api/v1/keys", **params)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == path


def test_revoking_a_key_makes_its_next_request_401(client, manage_admin, admin_a):
    created = _create(manage_admin).json()
    runtime = ApiClient(client, created["secret"])
    assert runtime.get("/api/v1/runs").status_code == 200
    response = manage_admin.delete(f"/api/v1/keys/{created['key']['id']}")
    assert response.status_code == 204
    assert runtime.get("/api/v1/runs").status_code == 401
    key = ApiKey.objects.get(public_id=created["key"]["id"])
    assert key.revoked_at is not None
    listed = manage_admin.get("/api/v1/keys").json()["items"]
    assert next(k for k in listed if k["id"] == key.public_id)["revokedAt"] is not None
    event = AuditEvent.objects.get(action="apikey.revoked")
    assert event.before["revokedAt"] is None
    assert event.after["revokedAt"] is not None
    assert event.actor_principal == admin_a
    # Again: still 204, nothing more written.
    assert manage_admin.delete(f"/api/v1/keys/{key.public_id}").status_code == 204
    assert AuditEvent.objects.filter(action="apikey.revoked").count() == 1


def test_a_key_past_its_expiry_is_401(client, manage_admin, monkeypatch):
    expires = timezone.now() + timedelta(minutes=5)
    created = _create(manage_admin, expiresAt=expires.isoformat()).json()
    runtime = ApiClient(client, created["secret"])
    assert runtime.get("/api/v1/runs").status_code == 200
    later = expires + timedelta(seconds=1)  # the clock passes the expiry (the row is as made)
    monkeypatch.setattr(timezone, "now", lambda: later)
    response = runtime.get("/api/v1/runs")
    assert response.status_code == 401
    assert response.json()["error"]["code"]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"name": ""}, "name"),
        ({"name": None}, "name"),
        ({"scopes": []}, "scopes"),
        ({"scopes": ["ingest", "root"]}, "scopes.1"),
        ({"scopes": ["decide"]}, "principalId"),
        ({"scopes": ["manage"]}, "principalId"),
        ({"scopes": ["ingest"], "principalId": "nobody@a.example"}, "principalId"),
        ({"expiresAt": "2020-01-01T00:00:00Z"}, "expiresAt"),
        ({"expiresAt": "tomorrow"}, "expiresAt"),
        ({"expiresAt": "2099-01-01T00:00:00"}, "expiresAt"),
        ({"ratePerMinute": 0}, "ratePerMinute"),
        ({"rateBurst": -1}, "rateBurst"),
        ({"ratePerMinute": "60"}, "ratePerMinute"),
        ({"ratePerMinute": 10**9}, "ratePerMinute"),
        ({"secret": "gvl_mine"}, "secret"),
    ],
)
def test_every_bad_input_is_422_naming_the_field_and_writes_nothing(manage_admin, body, path):
    keys, events = ApiKey.objects.count(), AuditEvent.objects.count()
    response = _create(manage_admin, **body)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert path in [d["path"] for d in error["details"]]
    assert ApiKey.objects.count() == keys and AuditEvent.objects.count() == events


def test_a_principal_of_another_tenant_is_unknown_here(manage_admin, reviewer_b):
    response = _create(manage_admin, scopes=["decide"], principalId=reviewer_b.external_id)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == "principalId"


def test_another_tenants_key_is_404_and_untouched(client, manage_admin, tenant_b, reviewer_b):
    other = make_key(tenant_b, scopes=("ingest",), name="tenant b's secret name")
    key = ApiKey.objects.get(tenant=tenant_b)
    response = manage_admin.delete(f"/api/v1/keys/{key.public_id}")
    assert response.status_code == 404
    text = response.content.decode()
    assert "tenant b" not in text.lower() and key.key_prefix not in text
    assert response.json()["error"]["code"] == "key_not_found"
    assert ApiClient(client, other).get("/api/v1/runs").status_code == 200
    listed = manage_admin.get("/api/v1/keys").content.decode()
    assert key.public_id not in listed and "tenant b" not in listed.lower()
    assert manage_admin.delete("/api/v1/keys/key_missing").status_code == 404


def test_without_admin_every_operation_is_403(client, manage_lead, tenant_a, reviewer_a):
    key = ApiKey.objects.get(tenant=tenant_a)
    assert manage_lead.get("/api/v1/keys").status_code == 403
    response = _create(manage_lead)
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    assert manage_lead.delete(f"/api/v1/keys/{key.public_id}").status_code == 403
    assert ApiKey.objects.count() == 1 and ApiKey.objects.get().revoked_at is None


def test_an_admins_key_without_the_manage_scope_is_403(client, tenant_a, admin_a):
    decide = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=admin_a))
    assert decide.get("/api/v1/keys").status_code == 403


def test_no_key_is_401(client, tenant_a):
    assert client.get("/api/v1/keys").status_code == 401


def test_an_admins_browser_session_creates_keys_after_a_recent_password(client, admin_a):
    client.force_login(admin_a.user)
    session = client.session
    session[signin.AUTH_AT_SESSION_KEY] = 0  # proved its password long ago
    session.save()
    browser = ApiClient(client, None)
    assert browser.get("/api/v1/keys").status_code == 200
    response = browser.post("/api/v1/keys", {"name": "b", "scopes": ["ingest"]})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "reauth_required"
    assert not ApiKey.objects.exists()
    session = client.session
    signin.auth_record(session)
    session.save()
    response = browser.post("/api/v1/keys", {"name": "b", "scopes": ["ingest"]})
    assert response.status_code == 201
    event = AuditEvent.objects.get(action="apikey.created")
    assert event.actor_principal == admin_a and event.actor_key is None


def test_openapi_describes_keys_webhooks_and_tenant_as_the_contract_names_them(client):
    schema = client.get("/api/v1/openapi.json").json()
    paths = schema["paths"]
    assert {
        "/api/v1/keys",
        "/api/v1/keys/{keyId}",
        "/api/v1/tenant",
        "/api/v1/webhooks",
        "/api/v1/webhooks/{webhookId}",
        "/api/v1/webhooks/{webhookId}/deliveries",
    } <= set(paths)
    assert set(paths["/api/v1/keys"]) == {"get", "post"}
    assert set(paths["/api/v1/tenant"]) == {"get", "patch"}
    created = schema["components"]["schemas"]["KeyCreatedOut"]["properties"]
    assert set(created) == {"key", "secret"}
    patch = schema["components"]["schemas"]["TenantPatch"]["properties"]
    assert "slackSigningSecret" in patch and "slug" not in patch
