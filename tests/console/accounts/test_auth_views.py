"""Sign-in, sign-out, sessions, the home redirect, the placeholder pages and the navigation."""

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from tests.support.factories import RunFactory

pytestmark = pytest.mark.django_db


def _sign_in(client, username, password, next_url=""):
    data = {"username": username, "password": password}
    if next_url:
        data["next"] = next_url
    return client.post("/accounts/login/", data)


def test_login_page_has_labelled_fields(client):
    html = client.get("/accounts/login/").content.decode()
    assert '<label class="label" for="id_username">Email</label>' in html
    assert '<label class="label" for="id_password">Password</label>' in html
    assert "<main" in html and "<header" in html


def test_principal_signs_in_with_its_id(client, reviewer_a):
    response = _sign_in(client, "reviewer@a.example", "reviewer-pass-123")
    assert response.status_code == 302
    assert response["Location"] == settings.LOGIN_REDIRECT_URL


def test_sign_in_follows_next(client, viewer_a):
    response = _sign_in(client, "viewer@a.example", "viewer-pass-123", next_url="/runs/")
    assert response["Location"] == "/runs/"


def test_wrong_password_is_refused_with_a_message(client, reviewer_a):
    response = _sign_in(client, "reviewer@a.example", "wrong")
    assert response.status_code == 200
    assert "did not match" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_session_expires(client, viewer_a):
    _sign_in(client, "viewer@a.example", "viewer-pass-123")
    assert client.session.get_expiry_age() == settings.SESSION_COOKIE_AGE
    assert not client.session.get_expire_at_browser_close()


def test_sign_out_is_a_post_and_ends_the_session(client, viewer_a):
    client.force_login(viewer_a.user)
    html = client.get("/runs/").content.decode()
    assert 'method="post" action="/accounts/logout/"' in html
    response = client.post("/accounts/logout/")
    assert response.status_code == 302
    assert client.get("/runs/").status_code == 302  # back to sign-in


def test_home_sends_deciders_to_the_inbox_and_viewers_to_runs(client, reviewer_a, viewer_a):
    client.force_login(reviewer_a.user)
    assert client.get("/")["Location"] == "/approvals/"
    client.force_login(viewer_a.user)
    assert client.get("/")["Location"] == "/runs/"


def test_signed_out_home_redirects_to_sign_in(client):
    assert client.get("/")["Location"].startswith("/accounts/login/")


def test_bare_superuser_gets_a_clear_403(client, db):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456")
    client.force_login(user)
    for path in ("/", "/runs/", "/budgets/", "/manage/"):
        response = client.get(path)
        assert response.status_code == 403, path
        assert "belongs to no organisation" in response.content.decode()


def test_deactivated_principal_is_refused(client, viewer_a):
    viewer_a.is_active = False
    viewer_a.save()
    client.force_login(viewer_a.user)
    assert client.get("/runs/").status_code == 403


@pytest.mark.parametrize(
    "persona, runs, budgets, manage",
    [
        ("viewer_a", True, False, False),
        ("reviewer_a", True, False, False),
        ("lead_a", True, True, False),
        ("admin_a", True, True, True),
    ],
)
def test_navigation_and_placeholders_follow_capabilities(
    client, request, persona, runs, budgets, manage
):
    principal = request.getfixturevalue(persona)
    client.force_login(principal.user)
    html = client.get("/runs/").content.decode()
    assert ('href="/runs/"' in html) is runs
    assert ('href="/budgets/"' in html) is budgets
    assert ('href="/manage/"' in html) is manage
    assert 'id="nav-pending-count"' in html and 'id="live-status"' in html
    assert client.get("/budgets/").status_code == (200 if budgets else 403)
    assert client.get("/manage/", follow=True).status_code == (200 if manage else 403)


def test_header_shows_the_user_and_only_their_tenant(client, reviewer_b, tenant_a):
    RunFactory(tenant=tenant_a, external_id="run_of_a")
    client.force_login(reviewer_b.user)
    html = client.get("/runs/").content.decode()
    assert "Tenant B" in html and "Tenant A" not in html
    assert "run_of_a" not in html


def test_pending_count_counts_only_the_viewers_tenant(client, reviewer_a, reviewer_b):
    from tests.support.factories import ApprovalFactory

    ApprovalFactory(run=RunFactory(tenant=reviewer_a.tenant))
    ApprovalFactory(run=RunFactory(tenant=reviewer_a.tenant))
    ApprovalFactory(run=RunFactory(tenant=reviewer_b.tenant))
    client.force_login(reviewer_a.user)
    html = client.get("/runs/").content.decode()
    assert (
        'id="nav-pending-count" class="tag is-rounded is-warning" title="pending calls">2<' in html
    )
    client.force_login(reviewer_b.user)
    html = client.get("/runs/").content.decode()
    assert 'title="pending calls">1<' in html


def test_pages_carry_csrf_header_and_no_inline_script(client, viewer_a):
    client.force_login(viewer_a.user)
    response = client.get("/runs/")
    html = response.content.decode()
    assert 'hx-headers=\'{"X-CSRFToken": "' in html
    assert "<script>" not in html and " style=" not in html
    assert '<meta name="htmx-config"' in html
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_static_files_are_served_with_debug_off_without_collectstatic(client, settings):
    assert settings.DEBUG is False
    for path in (
        "/static/css/bulma.css",
        "/static/css/gavel.css",
        "/static/js/gavel.js",
        "/static/django_htmx/htmx-2.min.js",
        "/static/django_htmx/ext/hx-ws-2.min.js",
    ):
        response = client.get(path)
        assert response.status_code == 200, path
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert len(body) > 1000 or path.endswith("gavel.js"), path


def test_nav_pending_count_partial_renders_alone(reviewer_a):
    from django.template.loader import render_to_string

    from approvals.selectors_desk import nav_pending_count_context
    from tests.support.factories import ApprovalFactory

    ApprovalFactory(run=RunFactory(tenant=reviewer_a.tenant))
    html = render_to_string(
        "base.html#nav-pending-count", nav_pending_count_context(viewer=reviewer_a)
    )
    assert html.startswith('<span id="nav-pending-count"') and ">1<" in html


def test_every_page_links_an_icon_that_is_served(client, reviewer_a):
    client.force_login(reviewer_a.user)
    page = client.get("/runs/").content.decode()
    assert 'rel="icon"' in page and "/static/favicon.svg" in page
    icon = client.get("/static/favicon.svg")
    assert icon.status_code == 200
    body = b"".join(icon.streaming_content) if icon.streaming else icon.content
    assert body.startswith(b"<svg")
