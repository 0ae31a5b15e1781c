"""/notifications/ and the bell, in the browser's terms (Django's test client): everyone signed
in sees their own, marks one or all read (CSRF required), another's id is a 404."""

import pytest
from django.template.loader import render_to_string
from django.test import Client

from notifications.models import Notification
from notifications.selectors import nav_unread_count_context
from tests.support.factories import PrincipalFactory
from tests.support.mail import budget_alert

pytestmark = pytest.mark.django_db


def signed_in(principal) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(principal.user)
    return client


def csrf_post(client, path, data=None, htmx=False):
    client.get("/notifications/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    headers = {"X-CSRFToken": token, **({"HX-Request": "true"} if htmx else {})}
    return client.post(path, data or {}, headers=headers)


def test_the_page_lists_my_notifications_and_the_bell_counts_them(viewer_a, admin_a, tenant_a):
    mine, _ = budget_alert(tenant=tenant_a, recipients=[viewer_a, admin_a])
    response = signed_in(viewer_a).get("/notifications/")
    assert response.status_code == 200
    html = response.content.decode()
    assert f'id="notification-{mine.public_id}"' in html
    assert "Budget &#x27;support&#x27; reached 80%" in html
    assert 'href="https://gavel.example.com/budgets/bud_1/"' in html
    assert html.count('id="notification-ntf_') == 1  # not the admin's
    bell = html[html.index('id="nav-notification-count"') - 10 :]
    assert ">1<" in bell[:200] and "is-hidden" not in bell[:200]


def test_the_bell_is_on_every_page_and_hidden_at_zero(reviewer_a):
    html = signed_in(reviewer_a).get("/approvals/").content.decode()
    assert 'href="/notifications/"' in html
    count = html[html.index('<span id="nav-notification-count"') :][:200]
    assert "is-hidden" in count and ">0<" in count


def test_the_bell_partial_renders_alone(viewer_a, tenant_a):
    budget_alert(tenant=tenant_a, recipients=[viewer_a])
    html = render_to_string(
        "base.html#nav-notification-count", nav_unread_count_context(viewer=viewer_a)
    )
    assert html.startswith('<span id="nav-notification-count"') and ">1<" in html


def test_mark_read_with_htmx_rerenders_the_item(viewer_a, tenant_a):
    (row,) = budget_alert(tenant=tenant_a, recipients=[viewer_a])
    client = signed_in(viewer_a)
    response = csrf_post(client, f"/notifications/{row.public_id}/read/", htmx=True)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.strip().startswith(f'<li id="notification-{row.public_id}"')
    assert "is-unread" not in html and "Mark read" not in html
    bell = html[html.index('<span id="nav-notification-count"') :]
    assert 'hx-swap-oob="true"' in bell and ">0<" in bell  # the count, out of band
    assert Notification.objects.get(pk=row.pk).read_at is not None


def test_mark_read_without_javascript_redirects_back(viewer_a, tenant_a):
    (row,) = budget_alert(tenant=tenant_a, recipients=[viewer_a])
    response = csrf_post(
        signed_in(viewer_a), f"/notifications/{row.public_id}/read/", {"show": "unread"}
    )
    assert response.status_code == 302 and response["Location"] == "/notifications/?show=unread"
    assert Notification.objects.get(pk=row.pk).read_at is not None


def test_mark_all_read(viewer_a, admin_a, tenant_a):
    budget_alert(tenant=tenant_a, recipients=[viewer_a, admin_a])
    budget_alert(tenant=tenant_a, recipients=[viewer_a])
    response = csrf_post(
        signed_in(viewer_a), "/notifications/read-all/", {"show": "unread"}, htmx=True
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.strip().startswith('<div id="notification-list"')
    assert "No unread notifications." in html
    assert not Notification.objects.filter(principal=viewer_a, read_at__isnull=True).exists()
    assert Notification.objects.filter(principal=admin_a, read_at__isnull=True).count() == 1


def test_posts_need_the_csrf_token(viewer_a, tenant_a):
    (row,) = budget_alert(tenant=tenant_a, recipients=[viewer_a])
    client = signed_in(viewer_a)
    assert client.post(f"/notifications/{row.public_id}/read/").status_code == 403
    assert client.post("/notifications/read-all/").status_code == 403
    assert Notification.objects.get(pk=row.pk).read_at is None


def test_another_principals_or_tenants_notification_is_404(
    viewer_a, admin_a, reviewer_b, tenant_a, tenant_b
):
    (admins,) = budget_alert(tenant=tenant_a, recipients=[admin_a])
    (other,) = budget_alert(tenant=tenant_b, recipients=[reviewer_b])
    client = signed_in(viewer_a)
    for row in (admins, other):
        assert csrf_post(client, f"/notifications/{row.public_id}/read/").status_code == 404
        assert Notification.objects.get(pk=row.pk).read_at is None
    assert other.public_id not in signed_in(viewer_a).get("/notifications/").content.decode()


def test_every_role_may_see_its_notifications_and_anonymous_is_sent_to_sign_in(client, tenant_a):
    nobody = PrincipalFactory(tenant=tenant_a, external_id="no-role", password="no-role-pass-1")
    budget_alert(tenant=tenant_a, recipients=[nobody])
    assert signed_in(nobody).get("/notifications/").status_code == 200  # no capability at all
    response = client.get("/notifications/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_pages_and_bad_filters(viewer_a, tenant_a):
    from notifications import selectors

    for i in range(selectors.PAGE_SIZE + 2):
        budget_alert(tenant=tenant_a, recipients=[viewer_a], title=f"alert {i}")
    client = signed_in(viewer_a)
    first = client.get("/notifications/").content.decode()
    assert first.count('id="notification-ntf_') == selectors.PAGE_SIZE and ">Older<" in first
    cursor = first.split("cursor=")[1].split('"')[0]
    second = client.get(f"/notifications/?show=all&cursor={cursor}").content.decode()
    assert second.count('id="notification-ntf_') == 2 and ">Newest<" in second
    assert client.get("/notifications/?show=bogus").status_code == 400
    assert client.get("/notifications/?cursor=zzz").status_code == 400
