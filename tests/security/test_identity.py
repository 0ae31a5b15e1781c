"""Identity findings of security audit 3 (shared/SECURITY_AUDIT.md): C1 (a tenant admin took
over staff and bare logins), H3 (the lockout and its audit keyed by the raw username).

Each test is named after its finding and failed on the code the audit tested (b77ab62)."""

import json
import time
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from console.directory import signin
from console.directory.services import sso as sso_services
from console.models import AuditEvent, Principal, TenantOidc
from tests.support.api import ApiClient
from tests.support.factories import PrincipalFactory, make_key

pytestmark = pytest.mark.django_db
API = "/api/v1"
ROOT_PASSWORD = "operator-own-pass-1"


@pytest.fixture(autouse=True)
def _fast_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def root(db):
    """The operator's superuser (`createsuperuser`), no tenant's principal."""
    return get_user_model().objects.create_superuser("root", "ops@operator.example", ROOT_PASSWORD)


@pytest.fixture
def admin_b(client, tenant_b):
    principal = PrincipalFactory(
        tenant=tenant_b, external_id="admin@b.example", role="admin", password="admin-b-pass-1"
    )
    return ApiClient(client, make_key(tenant_b, scopes=("manage",), principal=principal))


def _unchanged(user, password: str, email: str) -> bool:
    user.refresh_from_db()
    return user.check_password(password) and user.email == email


# --- C1: a tenant never touches a login it does not own ---


def test_c1_a_tenant_admin_cannot_give_a_superuser_login_a_password(admin_b, root):
    response = admin_b.post(
        f"{API}/principals", {"id": "root", "password": "Tenant-Beta-Owns-You-1"}
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "login_reserved"
    assert "superuser" not in error["message"] and "staff" not in error["message"]
    assert _unchanged(root, ROOT_PASSWORD, "ops@operator.example")
    assert not Principal.objects.filter(external_id="root").exists()
    assert not Client().login(username="root", password="Tenant-Beta-Owns-You-1")


def test_c1_patching_a_principal_named_like_a_staff_login_is_refused(admin_b, tenant_b):
    ops2 = get_user_model().objects.create_user(
        "ops2", "ops2@operator.example", "ops2-own-pass-1", is_staff=True
    )
    PrincipalFactory(tenant=tenant_b, external_id="ops2")  # e.g. first seen from a runtime
    response = admin_b.patch(
        f"{API}/principals/ops2",
        {"password": "Tenant-Beta-Owns-You-1", "email": "attacker@evil.example"},
    )
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "login_reserved"
    assert _unchanged(ops2, "ops2-own-pass-1", "ops2@operator.example")
    assert Principal.objects.get(external_id="ops2").user_id is None
    assert Principal.objects.get(external_id="ops2").email == ""  # nothing written


def test_c1_creating_a_principal_named_like_a_staff_login_is_refused(admin_b, root):
    for variant in ("root", "root ", "\uff52oot"):  # as Django's sign-in would resolve it
        response = admin_b.post(f"{API}/principals", {"id": variant})
        assert response.status_code == 409, variant
        assert response.json()["error"]["code"] == "login_reserved"


def test_c1_a_login_that_is_no_principal_of_the_tenant_is_never_written(admin_b, tenant_b):
    """A bare login (no principal anywhere) keeps its password and email; the tenant's
    principal gets a login of its own."""
    carol = get_user_model().objects.create_user("carol", "carol@home.example", "carol-pass-1")
    response = admin_b.post(
        f"{API}/principals",
        {"id": "carol", "email": "attacker@evil.example", "password": "Tenant-Beta-Pass-1"},
    )
    assert response.status_code == 201 and response.json()["canSignIn"]
    assert _unchanged(carol, "carol-pass-1", "carol@home.example")
    principal = Principal.objects.get(tenant=tenant_b, external_id="carol")
    assert principal.user_id != carol.pk
    assert Client().login(username="tenant-b/carol", password="Tenant-Beta-Pass-1")
    assert not Client().login(username="carol", password="Tenant-Beta-Pass-1")


def test_c1_the_manage_page_refuses_a_staff_login(client, tenant_b, root):
    admin = PrincipalFactory(
        tenant=tenant_b, external_id="admin@b.example", role="admin", password="admin-b-pass-1"
    )
    client.force_login(admin.user)
    session = client.session
    session[signin.AUTH_AT_SESSION_KEY] = time.time()
    session.save()
    response = client.post(
        "/manage/principals/new/", {"id": "root", "password": "Tenant-Beta-Owns-You-1"}
    )
    assert response.status_code in (409, 422)
    assert "cannot be used" in response.content.decode()
    assert _unchanged(root, ROOT_PASSWORD, "ops@operator.example")
    PrincipalFactory(tenant=tenant_b, external_id="root")  # first seen from a runtime
    edit = client.post("/manage/principals/root/password/", {"password": "Tenant-Beta-Owns-1"})
    assert edit.status_code in (409, 422) and "cannot be used" in edit.content.decode()
    assert _unchanged(root, ROOT_PASSWORD, "ops@operator.example")


def test_c1_scim_cannot_create_a_principal_of_a_staff_login(client, tenant_b, root):
    key = make_key(tenant_b, scopes=("scim",))
    response = client.post(
        "/scim/v2/Users",
        json.dumps({"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "root"}),
        content_type="application/scim+json",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 409
    assert not Principal.objects.filter(external_id="root").exists()


def test_c1_the_create_principal_command_refuses_a_staff_login(tenant_b, root):
    with pytest.raises(CommandError, match="cannot be used"):
        call_command(
            "create_principal",
            "--tenant",
            "tenant-b",
            "root",
            "--password",
            "Tenant-Beta-Owns-You-1",
            stdout=StringIO(),
        )
    assert _unchanged(root, ROOT_PASSWORD, "ops@operator.example")


def test_c1_sso_never_signs_in_a_login_found_by_name(tenant_b):
    """A tenant's provider asserting a bare login's name gets a login of the tenant's own;
    one asserting a staff login's name is refused."""
    carol = get_user_model().objects.create_user("carol", "carol@home.example", "carol-pass-1")
    get_user_model().objects.create_superuser("ops@b.example", "ops@b.example", "ops-pass-1")
    config = TenantOidc.objects.create(
        tenant=tenant_b, issuer="https://idp.b.example", client_id="b"
    )
    signed_in, user = sso_services.sso_principal(
        config=config, claims={"email": "carol", "email_verified": True}
    )
    assert user.pk != carol.pk and not user.is_staff
    assert signed_in.principal.user_id == user.pk
    with pytest.raises(sso_services.Refused) as refused:
        sso_services.sso_principal(
            config=config, claims={"email": "ops@b.example", "email_verified": True}
        )
    assert refused.value.reason == "staff_login"
    assert not Principal.objects.filter(external_id="ops@b.example").exists()


def test_c1_django_admin_is_not_routed_by_default(client, root, monkeypatch, settings):
    from django.core.exceptions import ImproperlyConfigured

    from console.settings import env_bool

    assert settings.GAVEL_DJANGO_ADMIN is False
    assert client.get("/django-admin/").status_code == 404
    assert client.get("/django-admin/login/").status_code == 404
    monkeypatch.setenv("GAVEL_DJANGO_ADMIN", "maybe")  # a bad value stops start-up
    with pytest.raises(ImproperlyConfigured):
        env_bool("GAVEL_DJANGO_ADMIN")


@pytest.mark.urls("tests.security.identity_urls")  # GAVEL_DJANGO_ADMIN=1
def test_c1_django_admin_is_routed_when_the_operator_turns_it_on(client, root):
    assert client.get("/django-admin/").status_code == 302
    client.force_login(root)
    assert client.get("/django-admin/").status_code == 200


# --- H3: every variant Django resolves to one account counts for it ---

VIEWER = "acme-viewer"
VIEWER_PASSWORD = "viewer-own-pass-1"
# The audit's eight: seven that Django's sign-in form strips and NFKC-normalises to the name,
# and U+2010 (a hyphen NFKC keeps: another, unknown name).
VARIANTS = [
    "acme-viewer ",
    " acme-viewer",
    "acme-viewer\t",
    "\u00a0acme-viewer",
    "acme-viewer\u3000",
    "\uff41cme-viewer",
    "acme-viewer\n",
    "acme\u2010viewer",
]


@pytest.fixture
def viewer(tenant_a):
    return PrincipalFactory(
        tenant=tenant_a, external_id=VIEWER, role="viewer", password=VIEWER_PASSWORD
    )


def _sign_in(client, username, password, address="10.0.0.1"):
    return client.post(
        "/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address
    )


def _failed(tenant):
    return list(AuditEvent.objects.filter(tenant=tenant, action="signin.failed").order_by("pk"))


def test_h3_no_variant_of_a_locked_account_signs_in(client, viewer, tenant_a):
    for _ in range(5):
        assert _sign_in(client, VIEWER, "wrong").status_code == 200
    assert _sign_in(client, VIEWER, VIEWER_PASSWORD).status_code == 429
    for n, variant in enumerate(VARIANTS):
        response = _sign_in(Client(), variant, VIEWER_PASSWORD, address=f"10.0.1.{n}")
        if variant == "acme\u2010viewer":  # no such login: refused as a wrong password
            assert response.status_code == 200, variant
        else:
            assert response.status_code == 429, repr(variant)
        assert "_auth_user_id" not in response.wsgi_request.session


def test_h3_failures_through_variants_lock_the_account_and_are_each_audited(
    client, viewer, tenant_a
):
    for n, variant in enumerate(VARIANTS[:7]):
        response = _sign_in(Client(), variant, f"wrong-{n}", address=f"10.0.2.{n}")
        if n < 5:
            assert response.status_code == 200, repr(variant)
        else:
            assert response.status_code == 429, repr(variant)
    failed = _failed(tenant_a)
    reasons = [event.data["reason"] for event in failed]
    assert reasons[:5] == ["wrong_password"] * 5
    assert "locked_out" in reasons[5:]
    assert [event.data["username"] for event in failed[:5]] == VARIANTS[:5]
    assert all(event.object_id == VIEWER for event in failed)
    assert _sign_in(Client(), VIEWER, VIEWER_PASSWORD, address="10.0.3.1").status_code == 429


def test_h3_a_right_password_in_a_variant_signs_in_as_django_would(client, viewer, tenant_a):
    """Outside a lock, a variant Django resolves to the account signs in (and forgives it)."""
    assert _sign_in(client, VIEWER, "wrong").status_code == 200
    response = _sign_in(Client(), "\uff41cme-viewer ", VIEWER_PASSWORD)
    assert response.status_code == 302
    succeeded = AuditEvent.objects.get(tenant=tenant_a, action="signin.succeeded")
    assert succeeded.object_id == VIEWER


# --- M7: password change and reset are the console's own ---

ALICE_EMAIL = "alice@a.example"


@pytest.fixture
def alice(tenant_a):
    principal = PrincipalFactory(
        tenant=tenant_a, external_id="alice", role="viewer", password="alice-own-pass-1"
    )
    principal.email = ALICE_EMAIL
    principal.save(update_fields=["email"])
    principal.user.email = ALICE_EMAIL
    principal.user.save(update_fields=["email"])
    return principal


def _change(client, current, new="brand-new-pass-42"):
    return client.post(
        "/accounts/password_change/",
        {"old_password": current, "new_password1": new, "new_password2": new},
        REMOTE_ADDR="10.0.4.1",
    )


def test_m7_a_wrong_current_password_is_under_the_sign_in_lockout_and_audited(
    client, alice, tenant_a
):
    client.force_login(alice.user)
    for n in range(5):
        response = _change(client, f"guess-{n}")
        assert response.status_code == 422 and "did not match" in response.content.decode()
    assert _change(client, "alice-own-pass-1").status_code == 429
    alice.user.refresh_from_db()
    assert alice.user.check_password("alice-own-pass-1")
    failed = _failed(tenant_a)
    assert [e.data.get("via") for e in failed[:5]] == ["password_change"] * 5
    # The same count as the login page's.
    assert _sign_in(Client(), "alice", "alice-own-pass-1").status_code == 429


def test_m7_a_password_change_goes_through_the_console_writer_and_is_audited(
    client, alice, tenant_a
):
    client.force_login(alice.user)
    response = _change(client, "alice-own-pass-1")
    assert response.status_code == 302 and response["Location"] == "/accounts/password_change/done/"
    assert client.get("/accounts/password_change/done/").status_code == 200  # still signed in
    alice.user.refresh_from_db()
    assert alice.user.check_password("brand-new-pass-42")
    event = AuditEvent.objects.get(tenant=tenant_a, action="principal.password_changed")
    assert event.data["via"] == "password_change" and event.object_id == "alice"
    short = _change(client, "brand-new-pass-42", new="short")
    assert short.status_code == 422 and "too short" in short.content.decode()


def _reset(client, email, address="10.0.5.1"):
    return client.post("/accounts/password_reset/", {"email": email}, REMOTE_ADDR=address)


def test_m7_reset_mail_is_queued_in_the_outbox_throttled_and_audited(
    client, alice, tenant_a, mailoutbox
):
    from notifications.models import OutboundEmail

    answers = [_reset(client, ALICE_EMAIL) for _ in range(5)]
    unknown = _reset(client, "nobody@a.example")
    for response in [*answers, unknown]:  # no account-existence oracle
        assert response.status_code == 302
        assert response["Location"] == "/accounts/password_reset/done/"
    assert mailoutbox == []  # nothing sent in the request
    queued = OutboundEmail.objects.filter(to=ALICE_EMAIL)
    assert queued.count() == 3 and all(m.tenant_id == tenant_a.pk for m in queued)
    events = AuditEvent.objects.filter(tenant=tenant_a, action="principal.password_reset_requested")
    assert [e.data["mailed"] for e in events.order_by("pk")] == [True] * 3 + [False] * 2
    assert client.get("/accounts/password_reset/done/").status_code == 200


def test_m7_reset_requests_are_throttled_per_address(client, alice):
    for n in range(10):
        assert _reset(client, f"someone{n}@x.example").status_code == 302
    assert _reset(client, ALICE_EMAIL).status_code == 429
    assert _reset(client, ALICE_EMAIL, address="10.0.5.2").status_code == 302


def test_m7_the_reset_link_sets_the_password_once_through_the_console_writer(
    client, alice, tenant_a
):
    import re

    from notifications.models import OutboundEmail

    _reset(client, ALICE_EMAIL)
    mail = OutboundEmail.objects.get(to=ALICE_EMAIL)
    assert "alice" in mail.text_body
    link = re.search(r"http://\S+/accounts/reset/\S+/", mail.text_body).group(0)
    path = link.split("testserver", 1)[1]
    form_page = client.get(path)
    assert form_page.status_code == 302  # Django keeps the token out of the Referer
    set_url = form_page["Location"]
    assert client.get(set_url).status_code == 200
    new = {"new_password1": "reset-new-pass-9", "new_password2": "reset-new-pass-9"}
    done = client.post(set_url, new)
    assert done.status_code == 302 and done["Location"] == "/accounts/reset/done/"
    alice.user.refresh_from_db()
    assert alice.user.check_password("reset-new-pass-9")
    event = AuditEvent.objects.get(tenant=tenant_a, action="principal.password_changed")
    assert event.data["via"] == "password_reset"
    again = Client().get(path, follow=True)
    assert "no longer valid" in again.content.decode()


def test_an_operators_login_gets_no_console_reset_mail(client, tenant_a, mailoutbox):
    from notifications.models import OutboundEmail

    get_user_model().objects.create_superuser("root", "ops@operator.example", ROOT_PASSWORD)
    assert _reset(client, "ops@operator.example").status_code == 302
    assert mailoutbox == [] and not OutboundEmail.objects.exists()
