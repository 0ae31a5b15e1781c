"""/manage/settings/sso/: admins read and save the tenant's single sign-on through the API's
schema and service (discovery read against a real provider); others get 403."""

import pytest

from console.core import crypto
from console.models import AuditEvent, TenantOidc

pytestmark = pytest.mark.usefixtures("http_issuers_allowed")

URL = "/manage/settings/sso/"


def _form(issuer, **changes):
    form = {
        "issuer": issuer,
        "client_id": "gavel-a",
        "client_secret": "the-secret",
        "principal_claim": "email",
        "groups_claim": "groups",
        "role_map": "gavel-reviewers = reviewer\n",
        "email_domains": "a.example",
        "allow_password_login": "on",
    }
    form.update(changes)
    return form


def test_an_admin_sees_the_form_and_the_redirect_uri(client, admin_a):
    client.force_login(admin_a.user)
    body = client.get(URL).content.decode()
    assert "Single sign-on (OpenID Connect)" in body
    assert "http://testserver/accounts/sso/tenant-a/callback/" in body


def test_an_admin_saves_settings_the_secret_stays_hidden(client, admin_a, tenant_a, issuer):
    client.force_login(admin_a.user)
    response = client.post(URL, _form(issuer))
    assert response.status_code == 200 and "Saved." in response.content.decode()
    config = TenantOidc.objects.get(tenant=tenant_a)
    assert config.role_map == {"gavel-reviewers": "reviewer"}
    assert config.email_domains == ["a.example"]
    assert crypto.decrypt(config.client_secret_encrypted) == "the-secret"
    assert "the-secret" not in response.content.decode()
    # Saving again without a secret keeps the stored one.
    client.post(URL, _form(issuer, client_secret="", allow_password_login=""))
    config.refresh_from_db()
    assert config.allow_password_login is False
    assert crypto.decrypt(config.client_secret_encrypted) == "the-secret"
    assert AuditEvent.objects.filter(tenant=tenant_a, action="tenant.oidc_updated").count() == 2


def test_bad_fields_are_marked_and_nothing_is_saved(client, admin_a, tenant_a, issuer):
    client.force_login(admin_a.user)
    response = client.post(URL, _form(issuer, role_map="g = nope"))
    assert response.status_code == 422
    assert "no role &#x27;nope&#x27;" in response.content.decode()
    response = client.post(URL, _form("http://127.0.0.1:9"))
    assert response.status_code == 422 and "discovery document" in response.content.decode()
    assert not TenantOidc.objects.filter(tenant=tenant_a).exists()


def test_a_lead_may_not_see_sso_settings(client, lead_a):
    client.force_login(lead_a.user)
    assert client.get(URL).status_code == 403
    assert client.post(URL, {"issuer": "x"}).status_code == 403
