"""POST /api/v1/keys/{keyId}/rotate and the Rotate form of /manage/keys/: a new secret now
(a new key with the old one's name, scopes, principal and limits), the old secret still valid
for the grace period the admin picked and refused (401) by the bearer check once it ends;
bad input changes nothing; another tenant's key is a 404; audited apikey.rotated."""

from datetime import timedelta
from unittest import mock

import pytest
from django.test import Client
from django.utils import timezone

from console.models import ApiKey, AuditEvent
from tests.support.api import ApiClient
from tests.support.factories import make_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def manage_admin(client, tenant_a, admin_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))


def _made(api, **body):
    return api.post("/api/v1/keys", {"name": "runtime", "scopes": ["ingest"], **body}).json()


def _later(seconds):
    """timezone.now() `seconds` from now, everywhere the bearer check reads it."""
    moment = timezone.now() + timedelta(seconds=seconds)
    return mock.patch("django.utils.timezone.now", return_value=moment)


def test_rotation_gives_a_new_secret_and_the_old_one_works_until_the_grace_period_ends(
    client, manage_admin
):
    made = _made(manage_admin, ratePerMinute=120)
    old_runtime = ApiClient(client, made["secret"])
    response = manage_admin.post(f"/api/v1/keys/{made['key']['id']}/rotate", {"graceSeconds": 3600})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["secret"].startswith("gvl_") and body["secret"] != made["secret"]
    new, previous = body["key"], body["previous"]
    assert new["id"] != made["key"]["id"] and previous["id"] == made["key"]["id"]
    assert (new["name"], new["scopes"], new["ratePerMinute"]) == ("runtime", ["ingest"], 120)
    new_runtime = ApiClient(client, body["secret"])
    # Both secrets work inside the grace period...
    assert old_runtime.get("/api/v1/runs").status_code == 200
    assert new_runtime.get("/api/v1/runs").status_code == 200
    with _later(3000):
        assert old_runtime.get("/api/v1/runs").status_code == 200
    # ...and past it only the new one does: the bearer check enforces the old key's expiry.
    with _later(3700):
        assert old_runtime.get("/api/v1/runs").status_code == 401
        assert new_runtime.get("/api/v1/runs").status_code == 200
    event = AuditEvent.objects.get(action="apikey.rotated")
    assert event.object_id == made["key"]["id"]
    assert event.after["replacedBy"] == new["id"] and event.after["graceSeconds"] == 3600
    assert body["secret"] not in str((event.before, event.after, event.data))


def test_a_grace_period_of_zero_stops_the_old_secret_now(client, manage_admin):
    made = _made(manage_admin)
    old_runtime = ApiClient(client, made["secret"])
    response = manage_admin.post(f"/api/v1/keys/{made['key']['id']}/rotate", {"graceSeconds": 0})
    assert response.status_code == 201
    assert old_runtime.get("/api/v1/runs").status_code == 401


def test_without_a_body_the_grace_period_is_24_hours(manage_admin):
    made = _made(manage_admin)
    response = manage_admin.post(f"/api/v1/keys/{made['key']['id']}/rotate")
    assert response.status_code == 201, response.content
    old = ApiKey.objects.get(public_id=made["key"]["id"])
    left = old.expires_at - timezone.now()
    assert timedelta(hours=23, minutes=59) < left <= timedelta(hours=24)


def test_the_grace_period_never_extends_an_earlier_expiry(manage_admin):
    soon = (timezone.now() + timedelta(hours=2)).replace(microsecond=0)
    made = _made(manage_admin, expiresAt=soon.isoformat())
    body = manage_admin.post(
        f"/api/v1/keys/{made['key']['id']}/rotate", {"graceSeconds": 7 * 24 * 3600}
    ).json()
    assert ApiKey.objects.get(public_id=made["key"]["id"]).expires_at == soon
    assert ApiKey.objects.get(public_id=body["key"]["id"]).expires_at == soon  # the same end


@pytest.mark.parametrize("grace", [-1, 30 * 24 * 3600 + 1, "3600", 1.5, True])
def test_a_bad_grace_period_is_422_and_changes_nothing(manage_admin, grace):
    made = _made(manage_admin)
    count = ApiKey.objects.count()
    response = manage_admin.post(
        f"/api/v1/keys/{made['key']['id']}/rotate", {"graceSeconds": grace}
    )
    assert response.status_code == 422
    assert "graceSeconds" in response.json()["error"]["details"][0]["path"]
    assert ApiKey.objects.count() == count
    assert ApiKey.objects.get(public_id=made["key"]["id"]).expires_at is None


def test_a_revoked_key_cannot_be_rotated(manage_admin):
    made = _made(manage_admin)
    manage_admin.delete(f"/api/v1/keys/{made['key']['id']}")
    count = ApiKey.objects.count()
    response = manage_admin.post(f"/api/v1/keys/{made['key']['id']}/rotate", {"graceSeconds": 60})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "key_not_active"
    assert ApiKey.objects.count() == count


def test_another_tenants_key_is_404_and_a_non_admin_403(client, tenant_b, manage_admin, lead_a):
    other = make_key(tenant_b, name="theirs")
    other_id = ApiKey.objects.get(tenant=tenant_b, name="theirs").public_id
    assert manage_admin.post(f"/api/v1/keys/{other_id}/rotate").status_code == 404
    lead = ApiClient(client, make_key(lead_a.tenant, scopes=("manage",), principal=lead_a))
    [mine] = [k for k in ApiKey.objects.all() if k.principal_id == lead_a.pk]
    assert lead.post(f"/api/v1/keys/{mine.public_id}/rotate").status_code == 403
    assert ApiClient(client, other).get("/api/v1/runs").status_code == 200  # untouched


def test_the_page_rotates_with_the_grace_period_picked_and_shows_the_secret_once(admin_a):
    browser = Client()
    browser.force_login(admin_a.user)
    raw = make_key(admin_a.tenant, name="nightly")
    key = ApiKey.objects.get(name="nightly")
    page = browser.get("/manage/keys/").content.decode()
    assert f'action="/manage/keys/{key.public_id}/rotate/"' in page and "Rotate…" in page
    response = browser.post(f"/manage/keys/{key.public_id}/rotate/", {"grace_seconds": "3600"})
    assert response.status_code == 200
    html = response.content.decode()
    new = ApiKey.objects.filter(name="nightly").exclude(pk=key.pk).get()
    assert 'id="rotated-note"' in html and "keeps working until" in html
    assert new.key_prefix in html
    key.refresh_from_db()
    assert timedelta(minutes=59) < key.expires_at - timezone.now() <= timedelta(hours=1)
    assert raw not in html
    refused = browser.post(f"/manage/keys/{key.public_id}/rotate/", {"grace_seconds": "soon"})
    assert refused.status_code == 422 and 'id="key-refused"' in refused.content.decode()
    assert ApiKey.objects.filter(name="nightly").count() == 2


def test_settings_show_the_scim_base_url_and_make_a_scim_key(client, admin_a):
    browser = Client()
    browser.force_login(admin_a.user)
    page = browser.get("/manage/settings/").content.decode()
    assert "http://testserver/scim/v2/" in page and 'id="make-scim-key"' in page
    response = browser.post("/manage/keys/", {"name": "SCIM provisioning", "scopes": "scim"})
    assert response.status_code == 200, response.content.decode()[:2000]
    key = ApiKey.objects.get(name="SCIM provisioning")
    assert key.scopes == ["scim"] and key.principal is None
    assert 'id="scim-base-url"' in response.content.decode()
    assert "SCIM provisioning" in browser.get("/manage/settings/").content.decode()
