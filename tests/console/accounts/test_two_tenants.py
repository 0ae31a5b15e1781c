"""One person, a principal in two tenants: one login (username = the principal id) linked to
both principals, a tenant switcher (POST, CSRF, kept in the session, checked on every
request), and pages, the API and sockets that show the chosen tenant's data only."""

import re

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.test import Client

from console.directory import access, signin
from console.directory.services.principals import principal_create
from console.models import Principal, Role, SigninThrottle
from tests.support.factories import ApprovalFactory, RunFactory
from tests.support.sockets import close_code, hello, open_socket

PASSWORD = "alice-pass-123"


@pytest.fixture(autouse=True)
def _fast_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def alice(tenant_a, tenant_b):
    """alice@example.com: a reviewer in tenant A and in tenant B, one login."""
    in_a, _ = principal_create(
        tenant=tenant_a, external_id="alice@example.com", password=PASSWORD, roles=["reviewer"]
    )
    in_b, _ = principal_create(
        tenant=tenant_b, external_id="alice@example.com", password=PASSWORD, roles=["reviewer"]
    )
    return in_a, in_b


@pytest.fixture
def data(tenant_a, tenant_b):
    run_a = RunFactory(tenant=tenant_a, external_id="run_of_a")
    run_b = RunFactory(tenant=tenant_b, external_id="run_of_b")
    ApprovalFactory(run=run_a, tool_name="tool_of_a")
    ApprovalFactory(run=run_a, tool_name="tool_of_a")
    approval_b = ApprovalFactory(run=run_b, tool_name="tool_of_b")
    return run_a, run_b, approval_b


def sign_in(client):
    response = client.post(
        "/accounts/login/", {"username": "alice@example.com", "password": PASSWORD}
    )
    assert response.status_code == 302
    return client


def switch(client, slug):
    return client.post("/accounts/tenant/", {"tenant": slug})


@pytest.mark.django_db
def test_one_login_is_linked_to_both_principals(alice):
    in_a, in_b = alice
    assert in_a.user_id == in_b.user_id
    assert get_user_model().objects.filter(username="alice@example.com").count() == 1


@pytest.mark.django_db
def test_a_login_is_at_most_one_principal_per_tenant(alice, tenant_a):
    in_a, _ = alice
    with pytest.raises(IntegrityError), transaction.atomic():
        Principal.objects.create(tenant=tenant_a, external_id="alias", user_id=in_a.user_id)


@pytest.mark.django_db
def test_sign_in_starts_in_the_first_tenant_and_shows_the_switcher(client, alice, data):
    html = sign_in(client).get("/runs/").content.decode()
    assert "run_of_a" in html and "run_of_b" not in html
    assert '<form method="post" action="/accounts/tenant/" class="tenant-switch">' in html
    switcher = html.split('class="tenant-switch">', 1)[1].split("</form>", 1)[0]
    options = re.findall(r'<option value="([^"]+)"( selected)?>([^<]+)</option>', switcher)
    assert options == [("tenant-a", " selected", "Tenant A"), ("tenant-b", "", "Tenant B")]
    assert 'title="pending calls">2<' in html


@pytest.mark.django_db
def test_switching_shows_the_other_tenants_data_only(client, alice, data):
    run_a, run_b, approval_b = data
    sign_in(client)
    response = switch(client, "tenant-b")
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.session[access.TENANT_SESSION_KEY] == alice[1].tenant_id
    html = client.get("/runs/").content.decode()
    assert "run_of_b" in html and "run_of_a" not in html
    assert 'title="pending calls">1<' in html
    assert re.search(r'<option value="tenant-b" selected>', html)
    assert client.get("/runs/run_of_b/").status_code == 200
    assert client.get("/runs/run_of_a/").status_code == 404  # another tenant's: 404
    inbox = client.get("/approvals/").content.decode()
    assert "tool_of_b" in inbox and "tool_of_a" not in inbox
    approval_a = run_a.approvals.first()
    refused = client.post(f"/approvals/{approval_a.public_id}/decision/", {"decision": "deny"})
    assert refused.status_code == 404 and b"tool_of_a" not in refused.content
    decided = client.post(f"/approvals/{approval_b.public_id}/decision/", {"decision": "deny"})
    assert decided.status_code in (200, 302)
    approval_b.refresh_from_db()
    assert approval_b.decided_by_id == alice[1].pk  # decided as the principal of tenant B
    # And back.
    switch(client, "tenant-a")
    assert "run_of_a" in client.get("/runs/").content.decode()


@pytest.mark.django_db
def test_the_browser_session_api_follows_the_chosen_tenant(alice, data):
    run_a, _, approval_b = data
    browser = Client(enforce_csrf_checks=True)
    browser.login(username="alice@example.com", password=PASSWORD)
    browser.get("/approvals/")
    token = browser.cookies["csrftoken"].value
    approval_a = run_a.approvals.first()

    def decide(approval):
        return browser.post(
            f"/api/v1/approvals/{approval.public_id}/decision",
            '{"decision": "deny"}',
            content_type="application/json",
            headers={"X-CSRFToken": token},
        )

    assert decide(approval_b).status_code == 404  # in tenant A now
    no_csrf = browser.post("/accounts/tenant/", {"tenant": "tenant-b"})
    assert no_csrf.status_code == 403  # the switch is a CSRF-checked POST
    switched = browser.post(
        "/accounts/tenant/", {"tenant": "tenant-b", "csrfmiddlewaretoken": token}
    )
    assert switched.status_code == 302
    assert decide(approval_a).status_code == 404
    assert decide(approval_b).status_code == 200


@pytest.mark.django_db
def test_only_tenants_of_the_login_can_be_chosen(client, alice, data, tenant_a):
    from tests.support.factories import TenantFactory

    TenantFactory(slug="tenant-c", name="Tenant C")
    sign_in(client)
    for slug in ("tenant-c", "no-such-tenant", ""):
        response = switch(client, slug)
        assert response.status_code == 404
        assert "Tenant C" not in response.content.decode()
    assert access.TENANT_SESSION_KEY not in client.session
    assert client.get("/accounts/tenant/").status_code == 405


@pytest.mark.django_db
def test_a_deactivated_principal_cannot_be_chosen_or_kept(client, alice, data):
    _, in_b = alice
    sign_in(client)
    switch(client, "tenant-b")
    in_b.is_active = False
    in_b.save()
    # Checked on every request: the session's choice is no longer valid, so tenant A.
    html = client.get("/runs/").content.decode()
    assert "run_of_a" in html and "run_of_b" not in html
    assert 'class="tenant-switch"' not in html  # one tenant left: no switcher
    assert switch(client, "tenant-b").status_code == 404


@pytest.mark.django_db
def test_a_single_tenant_login_sees_no_switcher(client, reviewer_b):
    client.force_login(reviewer_b.user)
    html = client.get("/runs/").content.decode()
    assert 'class="tenant-switch"' not in html and "Tenant B" in html


@pytest.mark.django_db
def test_signed_out_switch_goes_to_sign_in(client, alice):
    assert switch(client, "tenant-b")["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
def test_sign_in_is_audited_in_both_tenants(client, alice):
    from console.models import AuditEvent

    sign_in(client)
    events = AuditEvent.objects.filter(action="signin.succeeded")
    assert {(e.tenant_id, e.actor_principal_id) for e in events} == {
        (alice[0].tenant_id, alice[0].pk),
        (alice[1].tenant_id, alice[1].pk),
    }


# --- sockets ---


def _cookie_for(tenant_slug=None) -> bytes:
    client = Client()
    client.login(username="alice@example.com", password=PASSWORD)
    if tenant_slug:
        client.post("/accounts/tenant/", {"tenant": tenant_slug})
    return f"sessionid={client.cookies['sessionid'].value}".encode(), client


@pytest.mark.django_db(transaction=True)
async def test_sockets_show_the_chosen_tenant_and_close_on_a_switch(alice, data):
    run_a, run_b, _ = data
    cookie, client = await sync_to_async(_cookie_for)("tenant-b")
    inbox, _ = await open_socket("/ws/inbox/?only=count", cookie=cookie)
    frames = await hello(inbox)
    assert any('title="pending calls">1<' in f for f in frames)  # B's one call, not A's two
    other_run, _ = await open_socket("/ws/runs/run_of_a/", cookie=cookie)
    assert await close_code(other_run) == 4404  # another tenant's run
    own_run, _ = await open_socket("/ws/runs/run_of_b/", cookie=cookie)
    await hello(own_run)
    # Switching closes this session's sockets: they watch the old tenant.
    response = await sync_to_async(client.post)("/accounts/tenant/", {"tenant": "tenant-a"})
    assert response.status_code == 302
    assert await close_code(inbox) == 4403
    assert await close_code(own_run) == 4403
    again, _ = await open_socket("/ws/inbox/?only=count", cookie=cookie)
    frames = await hello(again)
    assert any('title="pending calls">2<' in f for f in frames)
    await again.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_deactivation_in_one_tenant_leaves_the_others_sockets_open(alice, data):
    in_a, _ = alice
    cookie, _ = await sync_to_async(_cookie_for)("tenant-b")
    socket_b, _ = await open_socket("/ws/inbox/?only=count", cookie=cookie)
    await hello(socket_b)
    in_a.is_active = False
    await sync_to_async(in_a.save)()
    assert await socket_b.receive_nothing(timeout=0.5)
    await socket_b.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_switch_elsewhere_closes_the_socket_at_its_recheck(alice, data, monkeypatch):
    """Even if the close message is lost, the re-check sees the session's new tenant."""
    from console.live import realtime
    from console.web import sockets as consumers

    monkeypatch.setattr(consumers, "RECHECK_SECONDS", 0.2)
    monkeypatch.setattr(consumers.CHECKS, "ttl", 0.05)
    monkeypatch.setattr(realtime, "user_sockets_close", lambda **kwargs: None)  # lost
    cookie, client = await sync_to_async(_cookie_for)(None)
    socket, _ = await open_socket("/ws/inbox/?only=count", cookie=cookie)
    await hello(socket)
    await sync_to_async(client.post)("/accounts/tenant/", {"tenant": "tenant-b"})
    assert await close_code(socket, timeout=5) == 4403


# --- provisioning ---


def run(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_create_principal_links_an_existing_login_with_its_password(client, tenant_a, tenant_b):
    run("create_principal", "--tenant", "tenant-a", "alice", "--password", PASSWORD)
    out = run(
        "create_principal",
        "--tenant",
        "tenant-b",
        "alice",
        "--password",
        PASSWORD,
        "--role",
        "viewer",
    )
    assert "principal alice created" in out
    in_a = Principal.objects.get(tenant=tenant_a, external_id="alice")
    in_b = Principal.objects.get(tenant=tenant_b, external_id="alice")
    assert in_a.user_id == in_b.user_id is not None
    assert client.login(username="alice", password=PASSWORD)
    # Run again (idempotent): still linked, nothing changed.
    run("create_principal", "--tenant", "tenant-b", "alice", "--password", PASSWORD)
    assert get_user_model().objects.filter(username="alice").count() == 1


@pytest.mark.django_db
def test_a_different_password_gives_a_login_of_its_own_and_changes_nothing_else(
    client, tenant_a, tenant_b
):
    """Not an answer that tells tenant B about tenant A's logins (docs/architecture.md
    "Identity"): B's principal signs in as tenant-b/alice, A's login is untouched."""
    run("create_principal", "--tenant", "tenant-a", "alice", "--password", PASSWORD)
    out = run("create_principal", "--tenant", "tenant-b", "alice", "--password", "other-pass-456")
    assert "principal alice created" in out
    in_a = Principal.objects.get(tenant=tenant_a, external_id="alice")
    in_b = Principal.objects.get(tenant=tenant_b, external_id="alice")
    assert in_b.user_id not in (None, in_a.user_id)
    assert client.login(username="alice", password=PASSWORD)  # the password is unchanged
    assert not client.login(username="alice", password="other-pass-456")
    assert client.login(username="tenant-b/alice", password="other-pass-456")


@pytest.mark.django_db
def test_a_shared_logins_password_is_not_changed_by_one_tenant(client, alice, tenant_a):
    run(
        "create_principal",
        "--tenant",
        "tenant-a",
        "alice@example.com",
        "--password",
        "new-pass-789",
    )
    assert client.login(username="alice@example.com", password=PASSWORD)
    # Tenant A's principal has a login of its own now; tenant B's keeps the shared one.
    assert client.login(username="tenant-a/alice@example.com", password="new-pass-789")
    assert not client.login(username="alice@example.com", password="new-pass-789")


@pytest.mark.django_db
def test_without_a_password_the_principal_does_not_sign_in(tenant_a, tenant_b):
    run("create_principal", "--tenant", "tenant-a", "alice", "--password", PASSWORD)
    run("create_principal", "--tenant", "tenant-b", "alice")
    assert Principal.objects.get(tenant=tenant_b, external_id="alice").user_id is None


@pytest.mark.django_db
def test_guessing_a_password_through_linking_is_under_the_lockout(tenant_a, tenant_b):
    run("create_principal", "--tenant", "tenant-a", "alice", "--password", PASSWORD)
    for i in range(5):  # each a principal of tenant B's own: no answer tells a guess apart
        run("create_principal", "--tenant", "tenant-b", "alice", "--password", f"guess-{i}xx")
    assert SigninThrottle.objects.get(scope="account").locked_until is not None
    run("create_principal", "--tenant", "tenant-b", "alice", "--password", PASSWORD)
    in_a = Principal.objects.get(tenant=tenant_a, external_id="alice")
    assert Principal.objects.get(tenant=tenant_b, external_id="alice").user_id != in_a.user_id
    # The same count as the login page's: alice's sign-in is locked too.
    response = Client().post("/accounts/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 429


@pytest.mark.django_db
def test_the_lockout_clock_is_the_same_for_linking(tenant_a, tenant_b, monkeypatch):
    """A lock from linking ends like a sign-in lock (the clock seam moves both)."""
    from datetime import timedelta

    from django.utils import timezone

    start = timezone.now()
    monkeypatch.setattr(signin, "now", lambda: start)
    run("create_principal", "--tenant", "tenant-a", "alice", "--password", PASSWORD)
    for i in range(5):
        run("create_principal", "--tenant", "tenant-b", "alice", "--password", f"guess-{i}xx")
    monkeypatch.setattr(signin, "now", lambda: start + timedelta(minutes=15))
    run("create_principal", "--tenant", "tenant-b", "alice", "--password", PASSWORD)
    in_a = Principal.objects.get(tenant=tenant_a, external_id="alice")
    assert Principal.objects.get(tenant=tenant_b, external_id="alice").user_id == in_a.user_id


@pytest.mark.django_db
def test_roles_of_each_tenant_apply_in_that_tenant(client, alice, tenant_b):
    Role.objects.filter(tenant=tenant_b, name="reviewer").update(capabilities=["view_runs"])
    sign_in(client)
    assert client.get("/")["Location"] == "/approvals/"  # a decider in A
    switch(client, "tenant-b")
    assert client.get("/")["Location"] == "/runs/"  # a viewer in B
