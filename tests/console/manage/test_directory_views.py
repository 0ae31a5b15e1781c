"""The /manage/ directory pages: what an admin sees and changes there (through the same
services and the API's schemas), errors on their fields, sensitive actions behind a recent
sign-in, another tenant's objects 404, and no page for a non-admin."""

import time

import pytest

from console.directory import signin
from console.models import AuditEvent, Principal, Role, Team
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(client, admin_a):
    client.force_login(admin_a.user)
    return client


def _stale(client):
    """Make the session's last password proof older than the re-authentication window."""
    session = client.session
    session[signin.AUTH_AT_SESSION_KEY] = time.time() - 3600
    session.save()


def test_manage_redirects_to_principals_and_only_admins_see_the_link(admin, client, viewer_a):
    response = admin.get("/manage/")
    assert response.status_code == 302 and response["Location"] == "/manage/principals/"
    assert 'href="/manage/"' in admin.get("/runs/").content.decode()
    client.force_login(viewer_a.user)
    assert 'href="/manage/"' not in client.get("/runs/").content.decode()


@pytest.mark.parametrize(
    "path",
    [
        "/manage/",
        "/manage/principals/",
        "/manage/roles/",
        "/manage/teams/",
        "/manage/roles/new/",
        "/manage/principals/admin@a.example/",
    ],
)
def test_a_lead_gets_403_pages(client, lead_a, admin_a, path):
    client.force_login(lead_a.user)
    assert client.get(path).status_code == 403


def test_principals_page_searches_filters_and_lists_the_review_queue(admin, tenant_a, reviewer_a):
    PrincipalFactory(tenant=tenant_a, external_id="seen-by-runtime", reviewed=False)
    page = admin.get("/manage/principals/", {"q": "REVIEWER"}).content.decode()
    table = page.split("All principals")[1]
    assert "reviewer@a.example" in table and "seen-by-runtime" not in table
    queue = page.split('id="review-queue"')[1].split("</section>")[0]
    assert "seen-by-runtime" in queue and "Mark reviewed" in queue
    filtered = admin.get("/manage/principals/", {"reviewed": "no"}).content.decode()
    table = filtered.split("All principals")[1]
    assert "seen-by-runtime" in table and "admin@a.example" not in table


def test_principals_listed_once_under_any_filter_and_no_principal_ids_offered(admin, tenant_a):
    from console.directory.selectors import principals_list

    support = Team.objects.create(tenant=tenant_a, name="support")
    ops = Team.objects.create(tenant=tenant_a, name="ops")
    both = PrincipalFactory(tenant=tenant_a, external_id="in-two-teams", role="reviewer")
    both.teams.add(support, ops)
    both.roles.add(Role.objects.get(tenant=tenant_a, name="viewer"))
    viewer = admin.get("/manage/principals/").context["request"].viewer
    for filters in (
        {},
        {"team": "support"},
        {"role": "reviewer"},
        {"team": "ops", "role": "viewer"},
    ):
        ids = [p["id"] for p in principals_list(viewer=viewer, **filters)["items"]]
        assert ids.count("in-two-teams") == 1 and len(ids) == len(set(ids)), filters
    page = admin.get("/manage/principals/", {"team": "support"})
    assert "in-two-teams" in page.content.decode()
    assert "principals" not in page.context["choices"]  # this page's forms offer none


def test_mark_reviewed_in_one_click_rerenders_the_queue(admin, tenant_a):
    PrincipalFactory(tenant=tenant_a, external_id="newcomer", reviewed=False)
    response = admin.post("/manage/principals/newcomer/reviewed/", headers={"HX-Request": "true"})
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="review-queue"') and "newcomer" not in html
    assert Principal.objects.get(external_id="newcomer").reviewed
    assert AuditEvent.objects.filter(action="principal.updated", object_id="newcomer").exists()


def test_create_a_principal_from_the_page(admin, tenant_a):
    Team.objects.create(tenant=tenant_a, name="support")
    response = admin.post(
        "/manage/principals/new/",
        {
            "id": "olga",
            "name": "Olga",
            "roles": ["reviewer"],
            "teams": ["support"],
            "password": "long-enough-pass-1",
        },
    )
    assert response.status_code == 302 and response["Location"] == "/manage/principals/olga/"
    olga = Principal.objects.get(external_id="olga")
    assert [r.name for r in olga.roles.all()] == ["reviewer"]
    assert olga.user.check_password("long-enough-pass-1")


def test_page_errors_land_on_their_fields_and_write_nothing(admin, reviewer_a):
    response = admin.post("/manage/principals/new/", {"id": reviewer_a.external_id})
    assert response.status_code == 422
    assert "already exists" in response.content.decode()
    short = admin.post("/manage/principals/new/", {"id": "kim", "password": "short"})
    assert short.status_code == 422 and "too short" in short.content.decode()
    assert not Principal.objects.filter(external_id="kim").exists()


def test_edit_details_and_roles(admin, reviewer_a, tenant_a):
    Team.objects.create(tenant=tenant_a, name="ops")
    response = admin.post(
        f"/manage/principals/{reviewer_a.external_id}/",
        {"name": "Rae", "email": "rae@a.example", "teams": ["ops"]},
    )
    assert response.status_code == 200 and "Saved." in response.content.decode()
    response = admin.post(
        f"/manage/principals/{reviewer_a.external_id}/roles/", {"roles": ["viewer", "reviewer"]}
    )
    assert response.status_code == 200
    reviewer_a.refresh_from_db()
    assert reviewer_a.name == "Rae"
    assert sorted(r.name for r in reviewer_a.roles.all()) == ["reviewer", "viewer"]


def test_deactivate_asks_the_password_again_when_the_sign_in_is_old(admin, reviewer_a):
    _stale(admin)
    path = f"/manage/principals/{reviewer_a.external_id}/active/"
    prompt = admin.post(path, {"active": "no"})
    assert prompt.status_code in (200, 401, 403)
    assert 'type="password"' in prompt.content.decode()
    reviewer_a.refresh_from_db()
    assert reviewer_a.is_active  # nothing happened without the password
    done = admin.post(path, {"active": "no", "gavel_reauth_password": "admin-pass-123"})
    assert done.status_code == 200, done.content.decode()[:500]
    reviewer_a.refresh_from_db()
    assert not reviewer_a.is_active


def test_deactivating_the_last_admin_from_the_page_says_why(admin, admin_a):
    response = admin.post(f"/manage/principals/{admin_a.external_id}/active/", {"active": "no"})
    assert response.status_code == 409
    assert "without an active principal holding" in response.content.decode()


def test_roles_page_and_the_live_glob_preview(admin, tenant_a):
    run = RunFactory(tenant=tenant_a)
    for tool in ("email.send", "email.read", "shell.exec"):
        ApprovalFactory(run=run, tool_name=tool)
    assert "reviewer" in admin.get("/manage/roles/").content.decode()
    preview = admin.get(
        "/manage/roles/preview/", {"decide_tools": "email.*"}, headers={"HX-Request": "true"}
    ).content.decode()
    assert preview.lstrip().startswith('<div id="tool-preview"')
    assert "email.send" in preview and "email.read" in preview and "shell.exec" not in preview
    assert "<strong>2</strong> of 3" in preview


def test_edit_a_roles_capabilities_and_globs(admin, tenant_a):
    response = admin.post(
        "/manage/roles/viewer/",
        {
            "capabilities": ["view_runs", "decide"],
            "decide_tools": "email.*\nsms.send",
            "slack_decide": "",
        },
    )
    assert response.status_code == 302
    role = Role.objects.get(tenant=tenant_a, name="viewer")
    assert role.capabilities == ["view_runs", "decide"]
    assert role.decide_tools == ["email.*", "sms.send"] and role.slack_decide is False


def test_an_unknown_capability_from_the_page_is_shown_on_the_field(admin, tenant_a):
    response = admin.post("/manage/roles/new/", {"name": "x", "capabilities": ["fly"]})
    assert response.status_code == 422
    assert "unknown capability" in response.content.decode()
    assert not Role.objects.filter(tenant=tenant_a, name="x").exists()


def test_teams_pages_create_edit_and_refuse_a_lead_who_is_no_member(admin, tenant_a, lead_a):
    refused = admin.post("/manage/teams/new/", {"name": "ops", "leads": [lead_a.external_id]})
    assert refused.status_code == 422 and "must be a member too" in refused.content.decode()
    created = admin.post(
        "/manage/teams/new/",
        {"name": "ops", "members": [lead_a.external_id], "leads": [lead_a.external_id]},
    )
    assert created.status_code == 302
    assert "ops" in admin.get("/manage/teams/").content.decode()
    team = Team.objects.get(tenant=tenant_a, name="ops")
    assert list(team.leads.all()) == [lead_a]


def test_another_tenants_objects_are_404_pages(admin, tenant_b, reviewer_b):
    Team.objects.create(tenant=tenant_b, name="b-team")
    for path in (f"/manage/principals/{reviewer_b.external_id}/", "/manage/teams/b-team/"):
        response = admin.get(path)
        assert response.status_code == 404
        assert "tenant-b" not in response.content.decode()
    assert (
        admin.post(
            f"/manage/principals/{reviewer_b.external_id}/active/", {"active": "no"}
        ).status_code
        == 404
    )
    reviewer_b.refresh_from_db()
    assert reviewer_b.is_active
