"""The desk's saved views: a reviewer saves the filter set it looks at under a name, sees it in
the desk's views, renames and deletes it; each view is its principal's, in its tenant
(approvals/access.py: another's is a 404, like a missing one)."""

import pytest
from django.utils import timezone

from approvals import access, selectors_desk
from approvals.models import SavedView
from approvals.services.saved_views import MAX_VIEWS, saved_view_create
from console.core.errors import Conflict, Forbidden, Invalid, NotFound
from console.models import Principal
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def calls(tenant_a):
    now = timezone.now()
    mail = ApprovalFactory(
        run=RunFactory(tenant=tenant_a), tool_name="send_email", requested_at=now
    )
    sql = ApprovalFactory(
        run=RunFactory(tenant=tenant_a),
        tool_name="run_sql",
        requested_at=now - timezone.timedelta(minutes=14),
    )
    return {"mail": mail, "sql": sql}


def test_saving_the_filters_shown_adds_a_view_that_shows_them_again(client, reviewer_a, calls):
    client.force_login(reviewer_a.user)
    answer = client.post(
        "/approvals/views/", {"name": "  Mail,   overdue ", "tool": "send_email", "view": "all"}
    )
    assert answer.status_code == 302 and answer["Location"] == "/approvals/?tool=send_email"
    [view] = SavedView.objects.all()
    assert (view.name, view.filters, view.principal) == (
        "Mail, overdue",
        {"tool": "send_email"},
        reviewer_a,
    )
    assert view.tenant_id == reviewer_a.tenant_id
    html = client.get("/approvals/", {"tool": "send_email"}).content.decode()
    link = f'id="desk-saved-{view.public_id}" class="desk-view desk-saved is-current"'
    assert link in html and 'href="/approvals/?tool=send_email" aria-current="page"' in html
    assert calls["mail"].public_id in html and calls["sql"].public_id not in html
    assert html.count('aria-current="page"') == 2  # the saved view and the nav's Inbox
    # On another filter set the view is listed, not current.
    other = client.get("/approvals/").content.decode()
    assert f'id="desk-saved-{view.public_id}" class="desk-view desk-saved"' in other


def test_a_saved_view_keeps_a_built_in_view_and_every_filter(reviewer_a, calls):
    filters = selectors_desk.desk_filters(
        {"view": "overdue", "tool": "run_sql", "agent": "", "principal": "p@x", "bogus": "1"}
    )
    view = saved_view_create(
        viewer=reviewer_a, name="Old SQL", filters=selectors_desk.desk_query(filters)
    )
    assert view.filters == {"view": "overdue", "tool": "run_sql", "principal": "p@x"}
    [shown] = selectors_desk.saved_views(viewer=reviewer_a, query=view.filters)
    assert shown["selected"] and shown["name"] == "Old SQL"
    assert shown["href"] == "/approvals/?view=overdue&tool=run_sql&principal=p%40x"


def test_rename_and_delete_from_the_desk(client, reviewer_a):
    view = saved_view_create(viewer=reviewer_a, name="Mail", filters={"tool": "send_email"})
    saved_view_create(viewer=reviewer_a, name="SQL", filters={"tool": "run_sql"})
    client.force_login(reviewer_a.user)
    answer = client.post(f"/approvals/views/{view.public_id}/", {"name": "Outgoing mail"})
    assert answer.status_code == 302 and answer["Location"] == "/approvals/?tool=send_email"
    view.refresh_from_db()
    assert view.name == "Outgoing mail"
    # A name already taken is refused, said on the desk once, and changes nothing.
    client.post(f"/approvals/views/{view.public_id}/", {"name": "SQL"})
    view.refresh_from_db()
    assert view.name == "Outgoing mail"
    html = client.get("/approvals/", {"tool": "send_email"}).content.decode()
    assert "You already have a view named &#x27;SQL&#x27;." in html
    assert "already have" not in client.get("/approvals/").content.decode()
    answer = client.post(f"/approvals/views/{view.public_id}/delete/")
    assert answer.status_code == 302 and answer["Location"] == "/approvals/"
    assert list(SavedView.objects.values_list("name", flat=True)) == ["SQL"]


def test_names_are_checked(reviewer_a):
    for bad in ("", "   ", "x" * 81):
        with pytest.raises(Invalid):
            saved_view_create(viewer=reviewer_a, name=bad, filters={})
    saved_view_create(viewer=reviewer_a, name="Mine", filters={"view": "mine"})
    with pytest.raises(Conflict):
        saved_view_create(viewer=reviewer_a, name="Mine", filters={})
    for n in range(MAX_VIEWS - 1):
        saved_view_create(viewer=reviewer_a, name=f"v{n}", filters={})
    with pytest.raises(Invalid):
        saved_view_create(viewer=reviewer_a, name="one too many", filters={})


def test_views_are_per_principal_and_per_tenant(client, tenant_a, reviewer_a, reviewer_b):
    mine = saved_view_create(viewer=reviewer_a, name="Mail", filters={"tool": "send_email"})
    colleague = PrincipalFactory(
        tenant=tenant_a, external_id="rey@a.example", role="reviewer", password="rey-pass-123"
    )
    # The same name is free for another principal, and in another tenant.
    theirs = saved_view_create(viewer=colleague, name="Mail", filters={})
    other_tenant = saved_view_create(viewer=reviewer_b, name="Mail", filters={})
    assert [v.public_id for v in access.saved_views_of(viewer=reviewer_a)] == [mine.public_id]
    for viewer, view in ((reviewer_a, theirs), (reviewer_a, other_tenant), (colleague, mine)):
        with pytest.raises(NotFound):
            access.saved_view_for(viewer=viewer, view_id=view.public_id)
    client.force_login(reviewer_a.user)
    for view in (theirs, other_tenant):
        assert client.post(f"/approvals/views/{view.public_id}/", {"name": "x"}).status_code == 404
        assert client.post(f"/approvals/views/{view.public_id}/delete/").status_code == 404
    assert theirs.name in [v.name for v in SavedView.objects.filter(pk=theirs.pk)]
    assert SavedView.objects.count() == 3
    html = client.get("/approvals/").content.decode()
    assert theirs.public_id not in html and other_tenant.public_id not in html


def test_a_principal_who_may_not_see_approvals_saves_nothing(client, tenant_a):
    nobody = PrincipalFactory(tenant=tenant_a, external_id="n@a.example", password="n-pass-123")
    nobody.roles.clear()
    nobody = Principal.objects.get(pk=nobody.pk)
    with pytest.raises(Forbidden):
        saved_view_create(viewer=nobody, name="x", filters={})
    client.force_login(nobody.user)
    assert client.post("/approvals/views/", {"name": "x"}).status_code == 403
    assert client.post("/approvals/views/", {}).status_code == 403  # before the name's 422
    assert not SavedView.objects.exists()


def test_the_views_urls_take_posts_only_and_leave_the_card_urls_alone(client, reviewer_a, calls):
    client.force_login(reviewer_a.user)
    assert client.get("/approvals/views/").status_code == 405
    card = client.get(f"/approvals/{calls['mail'].public_id}/")
    assert card.status_code == 200
