"""Identity findings of security audit 3 around single sign-on and cross-tenant names: M6 (SSO
email domains were first come, first served) and L2 (login names and SSO organisations told
apart across tenants). DNS answers come from a stub: no test asks real DNS, and no provider
is reached (discovery is stubbed too).

Each test is named after its finding and failed on the code the audit tested (b77ab62)."""

import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from console import models
from console.directory import oidc
from console.directory.services import sso as sso_services
from console.models import AuditEvent, Principal, TenantOidc
from notifications.models import OutboundEmail
from tests.support.api import ApiClient
from tests.support.factories import PrincipalFactory, make_key

pytestmark = pytest.mark.django_db
OIDC = "/api/v1/tenant/oidc"
DOMAIN = "acme.example"


@pytest.fixture(autouse=True)
def _fast_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def dns(monkeypatch):
    """TXT records by name, as the stub resolver answers them (empty: no record)."""
    records: dict[str, list[str]] = {}
    monkeypatch.setattr(
        "console.core.dnscheck.txt_records",
        lambda name: list(records.get(name, [])),
        raising=False,  # (so that the tests can run, and fail, on the code before M6's fix)
    )
    return records


@pytest.fixture(autouse=True)
def _discovery(monkeypatch):
    def discover(issuer):
        return {
            "issuer": issuer,
            "authorization_endpoint": f"{issuer}/authorize",
            "token_endpoint": f"{issuer}/token",
            "jwks_uri": f"{issuer}/jwks",
        }

    monkeypatch.setattr(oidc, "discover", discover)


def _admin_api(client, tenant, name):
    admin = PrincipalFactory(tenant=tenant, external_id=name, role="admin", password="admin-pw-12")
    return ApiClient(client, make_key(tenant, scopes=("manage",), principal=admin)), admin


def _claim(api, client_id, domains=(DOMAIN,)):
    body = {
        "issuer": f"https://idp.{client_id}.example",
        "clientId": client_id,
        "clientSecret": "a-client-secret",
        "emailDomains": list(domains),
    }
    return api.patch(OIDC, body)


def _sso(org):
    """The login page's SSO form and its one step on: where the browser ends up."""
    browser = Client()
    page = browser.post("/accounts/sso/", {"org": org})
    assert page.status_code == 200
    return browser.get(page.context["sso_url"])


@pytest.fixture
def acme(client, tenant_a):
    api, admin = _admin_api(client, tenant_a, "admin@acme.example")
    return api, admin


@pytest.fixture
def squatter(tenant_b):
    api, admin = _admin_api(Client(), tenant_b, "admin@b.example")
    return api, admin


# --- M6: a domain routes only once its tenant proved it owns it ---


def test_m6_an_unverified_claim_neither_routes_nor_blocks_the_owner(acme, squatter):
    assert _claim(squatter[0], "squat").status_code == 200
    going = _sso(f"someone@{DOMAIN}")
    assert going.status_code == 403 and "idp.squat.example" not in going.get("Location", "")
    response = _claim(acme[0], "acme")  # the owner's own claim is not refused
    assert response.status_code == 200
    state = response.json()["domainVerification"]
    assert [(d["domain"], d["verified"]) for d in state] == [(DOMAIN, False)]
    assert _sso(f"someone@{DOMAIN}").status_code == 403  # no one routes it yet


def _verify_page(client, admin, **post):
    client.force_login(admin.user)
    return client.post("/manage/settings/sso/domains/verify/", post)


def test_m6_a_dns_txt_record_verifies_the_domain_and_then_it_routes(
    client, acme, squatter, dns, tenant_a
):
    api, admin = acme
    _claim(api, "acme")
    [state] = api.get(OIDC).json()["domainVerification"]
    assert state["txtName"] == f"_gavel.{DOMAIN}"
    assert state["txtValue"].startswith("gavel-domain-verification=")
    dns[f"_gavel.{DOMAIN}"] = ["v=spf1 -all", state["txtValue"]]
    page = _verify_page(client, admin, domain=DOMAIN, method="dns")
    assert page.status_code == 200 and f"{DOMAIN} is verified" in page.content.decode()
    [state] = api.get(OIDC).json()["domainVerification"]
    assert state["verified"] is True and state["method"] == "dns" and state["verifiedAt"]
    going = _sso(f"someone@{DOMAIN}")
    assert going.status_code == 302 and going["Location"].startswith("https://idp.acme.example/")
    assert AuditEvent.objects.filter(tenant=tenant_a, action="tenant.sso_domain_verified").exists()
    taken = _claim(squatter[0], "squat")  # a verified domain is one tenant's
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "domain_taken"


def test_m6_a_missing_or_wrong_txt_record_verifies_nothing(client, acme, dns):
    api, admin = acme
    _claim(api, "acme")
    dns[DOMAIN] = ["gavel-domain-verification=someone-elses-token"]
    page = _verify_page(client, admin, domain=DOMAIN, method="dns")
    assert page.status_code == 422 and "no TXT record" in page.content.decode()
    assert api.get(OIDC).json()["domainVerification"][0]["verified"] is False
    assert _verify_page(client, admin, domain="other.example", method="dns").status_code == 404


def test_m6_a_mailed_one_time_link_verifies_the_domain(client, acme, tenant_a):
    api, admin = acme
    _claim(api, "acme")
    refused = _verify_page(client, admin, domain=DOMAIN, method="mail", to="attacker")
    assert refused.status_code == 422 and not OutboundEmail.objects.exists()
    page = _verify_page(client, admin, domain=DOMAIN, method="mail", to="postmaster")
    assert page.status_code == 200 and f"postmaster@{DOMAIN}" in page.content.decode()
    mail = OutboundEmail.objects.get(to=f"postmaster@{DOMAIN}")
    path = re.search(r"/accounts/sso/domains/\S+/", mail.text_body).group(0)
    reader = Client()
    assert reader.get(path).status_code == 200  # a look (a link scanner) confirms nothing
    assert api.get(OIDC).json()["domainVerification"][0]["verified"] is False
    confirmed = reader.post(path)
    assert confirmed.status_code == 200 and "Confirmed" in confirmed.content.decode()
    [state] = api.get(OIDC).json()["domainVerification"]
    assert state["verified"] is True and state["method"] == "mail"
    assert Client().post(path).status_code == 404  # once
    again = _verify_page(client, admin, domain=DOMAIN, method="mail", to="admin")
    assert again.status_code == 200 and OutboundEmail.objects.count() == 1  # verified: no mail


def test_m6_an_operator_pins_a_domain_to_a_tenant(acme, squatter, dns, tenant_a, tenant_b):
    squat_api, squat_admin = squatter
    _claim(squat_api, "squat")
    [state] = squat_api.get(OIDC).json()["domainVerification"]
    dns[DOMAIN] = [state["txtValue"]]  # say the squatter got a record published somehow
    sso_domains_verify = "/manage/settings/sso/domains/verify/"
    browser = Client()
    browser.force_login(squat_admin.user)
    assert browser.post(sso_domains_verify, {"domain": DOMAIN, "method": "dns"}).status_code == 200
    _claim(acme[0], "acme", domains=())
    out = StringIO()
    call_command("sso_domain", "--tenant", "tenant-a", "--pin", DOMAIN, stdout=out)
    assert f"{DOMAIN} pinned to tenant-a" in out.getvalue()
    assert models.SsoDomain.objects.get(tenant=tenant_b, domain=DOMAIN).verified_at is None
    assert DOMAIN in TenantOidc.objects.get(tenant=tenant_a).email_domains
    going = _sso(f"someone@{DOMAIN}")
    assert going.status_code == 302 and going["Location"].startswith("https://idp.acme.example/")
    assert AuditEvent.objects.filter(tenant=tenant_b, action="tenant.sso_domain_unverified")


# --- L2: nothing tells another tenant's logins or organisations apart ---


def test_l2_post_principals_answers_alike_for_another_tenants_login_and_a_free_id(
    squatter, reviewer_a
):
    api, _admin = squatter
    held = api.post("/api/v1/principals", {"id": reviewer_a.external_id, "password": "guess-1234"})
    free = api.post("/api/v1/principals", {"id": "free@b.example", "password": "guess-1234"})
    assert held.status_code == free.status_code == 201
    assert held.json()["canSignIn"] is free.json()["canSignIn"] is True
    assert held.json().keys() == free.json().keys()
    reviewer_a.user.refresh_from_db()
    assert reviewer_a.user.check_password("reviewer-pass-123")
    assert Principal.objects.filter(user=reviewer_a.user).count() == 1  # not linked


def test_l2_a_tenant_that_creates_an_id_first_does_not_block_its_owner(acme, squatter, tenant_a):
    alice = f"alice@{DOMAIN}"
    squat = squatter[0].post("/api/v1/principals", {"id": alice, "password": "squatter-pass-1"})
    assert squat.status_code == 201
    mine = acme[0].post("/api/v1/principals", {"id": alice, "password": "alice-own-pass-1"})
    assert mine.status_code == 201
    assert Client().login(username=f"tenant-a/{alice}", password="alice-own-pass-1")
    # Single sign-on of tenant A's alice is not refused for the squatter's login either.
    config = TenantOidc.objects.create(
        tenant=tenant_a, issuer="https://idp.a.example", client_id="a"
    )
    signed_in, user = sso_services.sso_principal(
        config=config, claims={"email": alice, "email_verified": True}
    )
    assert signed_in.principal.tenant_id == tenant_a.pk
    assert not Principal.objects.filter(user=user).exclude(tenant=tenant_a).exists()
    squatter_login = get_user_model().objects.get(username=alice)
    assert squatter_login.check_password("squatter-pass-1")  # untouched


def test_l2_sso_start_answers_alike_for_a_known_and_an_unknown_organisation(acme):
    _claim(acme[0], "acme")
    pages = [Client().post("/accounts/sso/", {"org": org}) for org in ("tenant-a", "nobody")]
    assert [p.status_code for p in pages] == [200, 200]
    assert [p.templates[0].name for p in pages] == ["registration/sso_redirect.html"] * 2
    for page in pages:
        assert page.context["sso_url"].startswith("/accounts/sso/continue/?t=")
        assert "idp.acme.example" not in page.content.decode()
