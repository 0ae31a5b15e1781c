"""Single sign-on per tenant against a real OpenID provider (oidc-provider-mock on 127.0.0.1):
the settings API (discovery, the encrypted write-only secret, 403/404/409/422), the
authorization-code flow through the login page, and every refusal audited `signin.failed`."""

from datetime import timedelta
from urllib.parse import urlsplit

import pytest

from console.core import crypto
from console.directory.services import sso as sso_services
from console.directory.services import sso_domains
from console.models import AuditEvent, Principal, TenantOidc
from tests.support.api import ApiClient
from tests.support.factories import PrincipalFactory, make_key
from tests.support.oidc_provider import authorize, query, running_provider, set_user

pytestmark = [
    pytest.mark.django_db(transaction=False),
    pytest.mark.usefixtures("http_issuers_allowed"),
]
SECRET = "s3cret-of-the-client"


@pytest.fixture
def manage_a(client, tenant_a, admin_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))


@pytest.fixture
def oidc_a(tenant_a, admin_a, issuer):
    return sso_services.oidc_update(
        tenant=tenant_a,
        fields={
            "issuer": issuer,
            "client_id": "gavel-a",
            "client_secret": SECRET,
            "role_map": {"gavel-reviewers": "reviewer", "gavel-admins": "admin"},
            "email_domains": ["a.example"],
        },
        viewer=admin_a,
    )


def _failures(tenant, reason=None):
    events = AuditEvent.objects.filter(tenant=tenant, action="signin.failed")
    return [e for e in events if reason is None or e.data.get("reason") == reason]


def _start(client, org="tenant-a"):
    """The login page's SSO form, then the page's step on (/accounts/sso/continue/), which
    sends the browser to the provider: the provider's URL."""
    response = client.post("/accounts/sso/", {"org": org})
    assert response.status_code == 200, response.content
    url = response.context["sso_url"]
    assert f'content="0; url={url}"'.replace("&", "&amp;") in response.content.decode()
    going = client.get(url)
    assert going.status_code == 302, going.content
    return going["Location"]


def _back(client, callback_url):
    parts = urlsplit(callback_url)
    return client.get(f"{parts.path}?{parts.query}")


def _sign_in(client, issuer, sub, org="tenant-a", **claims):
    set_user(issuer, sub, **claims)
    return _back(client, authorize(_start(client, org), sub))


# --- the settings API ---


def test_oidc_settings_are_validated_by_discovery_and_the_secret_is_write_only(
    manage_a, tenant_a, issuer
):
    off = manage_a.get("/api/v1/tenant/oidc")
    assert off.status_code == 200 and off.json()["issuer"] is None
    assert off.json()["clientSecretSet"] is False
    body = {"issuer": issuer, "clientId": "gavel-a", "clientSecret": SECRET}
    response = manage_a.patch("/api/v1/tenant/oidc", body)
    assert response.status_code == 200, response.content
    out = response.json()
    assert out["clientSecretSet"] is True and "clientSecret" not in out
    assert SECRET not in response.content.decode()
    assert out["redirectUri"].endswith("/accounts/sso/tenant-a/callback/")
    assert out["principalClaim"] == "email" and out["allowPasswordLogin"] is True
    stored = TenantOidc.objects.get(tenant=tenant_a)
    assert SECRET not in stored.client_secret_encrypted
    assert crypto.decrypt(stored.client_secret_encrypted) == SECRET
    event = AuditEvent.objects.get(tenant=tenant_a, action="tenant.oidc_updated")
    assert event.after["clientId"] == "gavel-a" and event.after["clientSecretSet"] is True
    assert SECRET not in str(event.data) + str(event.before) + str(event.after)
    assert event.actor_key is not None and event.actor_principal is not None
    assert manage_a.get("/api/v1/tenant/oidc").json()["issuer"] == issuer


def test_an_issuer_without_a_discovery_document_is_a_422_naming_issuer(manage_a, tenant_a):
    body = {"issuer": "http://127.0.0.1:9/", "clientId": "x", "clientSecret": SECRET}
    response = manage_a.patch("/api/v1/tenant/oidc", body)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == "issuer"
    assert not TenantOidc.objects.filter(tenant=tenant_a).exists()


def test_an_issuer_whose_document_names_another_issuer_is_a_422(manage_a, tenant_a, issuer):
    other = issuer.replace("127.0.0.1", "localhost")
    body = {"issuer": other + "/", "clientId": "x", "clientSecret": SECRET}
    response = manage_a.patch("/api/v1/tenant/oidc", body)
    assert response.status_code == 422
    assert "names the issuer" in response.json()["error"]["details"][0]["message"]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"roleMap": {"idp": "no-such-role"}}, "roleMap.idp"),
        ({"principalClaim": "phone"}, "principalClaim"),
        ({"allowPasswordLogin": "no"}, "allowPasswordLogin"),
        ({"surprise": 1}, "surprise"),
        ({"emailDomains": ["Not A Domain"]}, "emailDomains"),
    ],
)
def test_bad_settings_are_a_422_naming_the_field_and_change_nothing(manage_a, oidc_a, body, path):
    before = sso_services.oidc_wire(TenantOidc.objects.get(pk=oidc_a.pk))
    response = manage_a.patch("/api/v1/tenant/oidc", body)
    assert response.status_code == 422, response.content
    assert path in [d["path"] for d in response.json()["error"]["details"]]
    assert sso_services.oidc_wire(TenantOidc.objects.get(pk=oidc_a.pk)) == before


def test_first_settings_need_a_client_secret(manage_a, issuer):
    response = manage_a.patch("/api/v1/tenant/oidc", {"issuer": issuer, "clientId": "x"})
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == "clientSecret"


def test_an_email_domain_another_tenant_claims_is_a_409(client, oidc_a, tenant_b, issuer):
    sso_domains.sso_domain_pin(tenant=oidc_a.tenant, domain="a.example")  # verified (M6)
    admin_b = PrincipalFactory(tenant=tenant_b, external_id="admin@b.example", role="admin")
    manage_b = ApiClient(client, make_key(tenant_b, scopes=("manage",), principal=admin_b))
    body = {
        "issuer": issuer,
        "clientId": "b",
        "clientSecret": SECRET,
        "emailDomains": ["a.example"],
    }
    response = manage_b.patch("/api/v1/tenant/oidc", body)
    assert response.status_code == 409 and response.json()["error"]["code"] == "domain_taken"
    # Another tenant's admin sees none of tenant A's settings.
    theirs = manage_b.get("/api/v1/tenant/oidc")
    assert theirs.status_code == 200 and theirs.json()["issuer"] is None
    assert "gavel-a" not in theirs.content.decode() and "a.example" not in theirs.content.decode()


def test_only_admins_read_or_change_sso_settings(client, tenant_a, lead_a, oidc_a):
    lead = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))
    assert lead.get("/api/v1/tenant/oidc").status_code == 403
    assert lead.patch("/api/v1/tenant/oidc", {"clientId": "mine"}).status_code == 403
    ingest = ApiClient(client, make_key(tenant_a, scopes=("ingest",)))
    assert ingest.get("/api/v1/tenant/oidc").status_code == 403
    assert TenantOidc.objects.get(pk=oidc_a.pk).client_id == "gavel-a"


def test_delete_turns_sso_off_and_is_audited(manage_a, tenant_a, oidc_a):
    assert manage_a.delete("/api/v1/tenant/oidc").status_code == 204
    assert not TenantOidc.objects.filter(tenant=tenant_a).exists()
    assert AuditEvent.objects.filter(tenant=tenant_a, action="tenant.oidc_updated").count() == 2


# --- the flow ---


def test_first_sso_sign_in_creates_the_principal_with_the_mapped_role_then_reuses_it(
    client, tenant_a, oidc_a, issuer
):
    start = _start(client)
    params = query(start)
    assert params["code_challenge_method"] == "S256" and params["code_challenge"]
    assert params["state"] and params["nonce"] and params["scope"] == "openid email profile"
    set_user(issuer, "u-1", email="rita@a.example", name="Rita", groups=["gavel-reviewers"])
    response = _back(client, authorize(start, "u-1"))
    assert response.status_code == 302 and response["Location"] == "/"
    rita = Principal.objects.get(tenant=tenant_a, external_id="rita@a.example")
    assert [r.name for r in rita.roles.all()] == ["reviewer"] and rita.reviewed
    assert rita.name == "Rita" and rita.user is not None and not rita.user.has_usable_password()
    assert client.get("/approvals/").status_code == 200
    ok = AuditEvent.objects.get(tenant=tenant_a, action="signin.succeeded")
    assert ok.data["method"] == "sso" and ok.data["created"] is True
    assert ok.actor_principal == rita

    client.logout()
    response = _sign_in(client, issuer, "u-1", email="rita@a.example", groups=[])
    assert response.status_code == 302
    assert Principal.objects.filter(tenant=tenant_a, external_id="rita@a.example").count() == 1
    assert AuditEvent.objects.filter(tenant=tenant_a, action="signin.succeeded").count() == 2
    assert [r.name for r in rita.roles.all()] == ["reviewer"]  # roles are set once


def test_a_person_of_no_mapped_group_becomes_a_viewer_not_yet_reviewed(
    client, tenant_a, oidc_a, issuer
):
    response = _sign_in(client, issuer, "u-2", email="vic@a.example", groups=["other"])
    assert response.status_code == 302
    vic = Principal.objects.get(tenant=tenant_a, external_id="vic@a.example")
    assert [r.name for r in vic.roles.all()] == ["viewer"] and vic.reviewed is False


def test_sso_by_work_email_domain_finds_the_tenant(client, tenant_a, oidc_a, issuer):
    sso_domains.sso_domain_pin(tenant=tenant_a, domain="a.example")  # verified (M6)
    start = _start(client, org="Someone@A.example")
    assert query(start)["client_id"] == "gavel-a"
    assert query(start)["login_hint"] == "someone@a.example"


def test_an_unknown_organisation_is_said_after_the_same_first_step(client, oidc_a):
    response = client.post("/accounts/sso/", {"org": "nobody.example"})
    assert response.status_code == 200  # the same page as a known one's (L2)
    response = client.get(response.context["sso_url"])
    assert response.status_code == 403
    assert "can&#x27;t sign you in with single sign-on" in response.content.decode()


def test_a_wrong_state_signs_no_one_in_and_is_audited(client, tenant_a, oidc_a, issuer):
    set_user(issuer, "u-3", email="eve@a.example")
    callback = authorize(_start(client), "u-3")
    forged = callback.replace(f"state={query(callback)['state']}", "state=forged")
    response = _back(client, forged)
    assert response.status_code == 403
    assert "not for the sign-in you started" in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert len(_failures(tenant_a, "state_mismatch")) == 1
    assert not Principal.objects.filter(external_id="eve@a.example").exists()


def test_a_replayed_code_signs_no_one_in(client, tenant_a, oidc_a, issuer):
    set_user(issuer, "u-4", email="ann@a.example")
    callback = authorize(_start(client), "u-4")
    assert _back(client, callback).status_code == 302
    client.logout()
    # The same answer again: its attempt was used up.
    assert _back(client, callback).status_code == 403
    assert len(_failures(tenant_a, "no_attempt")) == 1
    # The old code under a fresh attempt's state: the provider refuses the used code.
    fresh = query(_start(client))["state"]
    replay = callback.replace(f"state={query(callback)['state']}", f"state={fresh}")
    response = _back(client, replay)
    assert response.status_code == 403 and "_auth_user_id" not in client.session
    assert len(_failures(tenant_a, "token_refused")) == 1


def test_an_expired_id_token_is_refused(client, tenant_a, admin_a):
    with running_provider(token_max_age=timedelta(seconds=-600)) as expired_issuer:
        sso_services.oidc_update(
            tenant=tenant_a,
            fields={"issuer": expired_issuer, "client_id": "gavel-a", "client_secret": SECRET},
            viewer=admin_a,
        )
        response = _sign_in(client, expired_issuer, "u-5", email="old@a.example")
    assert response.status_code == 403
    [failure] = _failures(tenant_a, "invalid_token")
    assert "expired" in failure.data["detail"]
    assert not Principal.objects.filter(external_id="old@a.example").exists()


def test_an_answer_naming_an_unknown_issuer_is_refused(client, tenant_a, oidc_a, issuer):
    set_user(issuer, "u-6", email="iss@a.example")
    callback = authorize(_start(client), "u-6") + "&iss=https%3A%2F%2Fevil.example"
    assert _back(client, callback).status_code == 403
    assert len(_failures(tenant_a, "issuer_mismatch")) == 1


def test_the_provider_saying_no_is_refused_and_audited(client, tenant_a, oidc_a):
    state = query(_start(client))["state"]
    response = client.get(f"/accounts/sso/tenant-a/callback/?error=access_denied&state={state}")
    assert response.status_code == 403
    assert len(_failures(tenant_a, "idp_error")) == 1


def test_a_deactivated_principal_is_refused(client, tenant_a, oidc_a, issuer):
    PrincipalFactory(tenant=tenant_a, external_id="gone@a.example", is_active=False)
    response = _sign_in(client, issuer, "u-7", email="gone@a.example")
    assert response.status_code == 403 and "deactivated" in response.content.decode()
    [failure] = _failures(tenant_a, "deactivated")
    assert failure.object_id == "gone@a.example"


def test_a_login_of_another_tenant_is_not_taken_over_by_sso(
    client, tenant_a, oidc_a, issuer, reviewer_b
):
    """Tenant A's principal of that id gets a login of its own: tenant B's is neither taken
    over nor a reason to refuse (nothing tells tenant A that B holds the id)."""
    response = _sign_in(client, issuer, "u-8", email=reviewer_b.external_id)
    assert response.status_code == 302
    in_a = Principal.objects.get(tenant=tenant_a, external_id=reviewer_b.external_id)
    assert in_a.user_id not in (None, reviewer_b.user_id)
    reviewer_b.user.refresh_from_db()
    assert reviewer_b.user.check_password("reviewer-pass-123")


def test_a_callback_for_a_tenant_without_sso_is_refused_and_audited(client, tenant_b):
    response = client.get("/accounts/sso/tenant-b/callback/?code=x&state=y")
    assert response.status_code == 403
    assert len(_failures(tenant_b, "not_configured")) == 1


def test_without_password_login_only_admins_use_a_password(
    client, tenant_a, oidc_a, admin_a, reviewer_a
):
    TenantOidc.objects.filter(pk=oidc_a.pk).update(allow_password_login=False)
    response = client.post(
        "/accounts/login/", {"username": reviewer_a.external_id, "password": "reviewer-pass-123"}
    )
    assert response.status_code == 200 and "_auth_user_id" not in client.session
    assert "signs in with single sign-on" in response.content.decode()
    assert len(_failures(tenant_a, "password_login_disabled")) == 1
    response = client.post(
        "/accounts/login/", {"username": admin_a.external_id, "password": "admin-pass-123"}
    )
    assert response.status_code == 302 and "_auth_user_id" in client.session


def test_the_login_page_offers_sso_once_a_tenant_has_it(client, oidc_a):
    body = client.get("/accounts/login/").content.decode()
    assert "Sign in with SSO" in body and 'name="org"' in body


def test_a_staff_login_is_never_signed_in_by_a_tenants_provider(client, tenant_a, oidc_a, issuer):
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("root@a.example", password="root-pass-123")
    response = _sign_in(client, issuer, "u-9", email="root@a.example")
    assert response.status_code == 403 and "_auth_user_id" not in client.session
    assert len(_failures(tenant_a, "staff_login")) == 1
