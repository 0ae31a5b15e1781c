"""GET /api/v1/notifications and POST /api/v1/notifications/{id}/read: a `manage` key sees
its own principal's notifications only, newest first, keyset-paginated."""

from datetime import timedelta

import pytest
from django.utils import timezone

from notifications.models import Notification
from tests.support.api import ApiClient
from tests.support.factories import make_key
from tests.support.mail import budget_alert

pytestmark = pytest.mark.django_db


@pytest.fixture
def manage_lead(client, tenant_a, lead_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))


@pytest.fixture
def manage_viewer(client, tenant_a, viewer_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=viewer_a))


def alerts(tenant, principal, n: int) -> list[Notification]:
    """n notifications, one second apart (the newest last)."""
    start = timezone.now() - timedelta(minutes=5)
    made = []
    for i in range(n):
        (row,) = budget_alert(tenant=tenant, recipients=[principal], title=f"alert {i}")
        Notification.objects.filter(pk=row.pk).update(at=start + timedelta(seconds=i))
        made.append(row)
    return made


def test_the_list_is_the_keys_principals_own_newest_first(manage_lead, tenant_a, lead_a, admin_a):
    alerts(tenant_a, lead_a, 2)
    budget_alert(tenant=tenant_a, recipients=[admin_a], title="the admin's")
    response = manage_lead.get("/api/v1/notifications")
    assert response.status_code == 200
    body = response.json()
    assert [i["title"] for i in body["items"]] == ["alert 1", "alert 0"]
    assert body["nextCursor"] is None
    item = body["items"][0]
    assert set(item) == {"id", "kind", "at", "title", "body", "url", "read"}
    assert item["id"].startswith("ntf_") and item["kind"] == "budget.threshold_crossed"
    assert item["url"] == "https://gavel.example.com/budgets/bud_1/" and item["read"] is False
    assert item["body"] == "8.00 USD of 10.00 USD spent this month."


def test_keyset_pages_cover_everything_once(manage_lead, tenant_a, lead_a):
    made = alerts(tenant_a, lead_a, 7)
    Notification.objects.filter(pk__in=[made[2].pk, made[3].pk]).update(at=made[2].at)  # a tie
    seen, cursor = [], None
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        body = manage_lead.get("/api/v1/notifications", **params).json()
        assert len(body["items"]) <= 3
        seen += [i["id"] for i in body["items"]]
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(n.public_id for n in made) and len(seen) == 7
    ordered = list(Notification.objects.order_by("-at", "-id").values_list("public_id", flat=True))
    assert seen == ordered


def test_the_unread_filter(manage_lead, tenant_a, lead_a):
    first, second, third = alerts(tenant_a, lead_a, 3)
    assert manage_lead.post(f"/api/v1/notifications/{second.public_id}/read").status_code == 200
    unread = manage_lead.get("/api/v1/notifications", unread="true").json()["items"]
    read = manage_lead.get("/api/v1/notifications", unread="false").json()["items"]
    everything = manage_lead.get("/api/v1/notifications").json()["items"]
    assert [i["id"] for i in unread] == [third.public_id, first.public_id]
    assert [(i["id"], i["read"]) for i in read] == [(second.public_id, True)]
    assert len(everything) == 3


def test_marking_read_answers_the_notification_and_is_idempotent(manage_lead, tenant_a, lead_a):
    (row,) = alerts(tenant_a, lead_a, 1)
    response = manage_lead.post(f"/api/v1/notifications/{row.public_id}/read")
    assert response.status_code == 200
    assert response.json()["id"] == row.public_id and response.json()["read"] is True
    read_at = Notification.objects.get(pk=row.pk).read_at
    assert read_at is not None
    again = manage_lead.post(f"/api/v1/notifications/{row.public_id}/read")
    assert again.status_code == 200 and Notification.objects.get(pk=row.pk).read_at == read_at


def test_another_principals_or_tenants_notification_is_404(
    manage_lead, tenant_a, tenant_b, admin_a, reviewer_b
):
    (admins,) = budget_alert(tenant=tenant_a, recipients=[admin_a])
    (other_tenant,) = budget_alert(tenant=tenant_b, recipients=[reviewer_b])
    for target in (admins, other_tenant):
        response = manage_lead.post(f"/api/v1/notifications/{target.public_id}/read")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "notification_not_found"
        assert Notification.objects.get(pk=target.pk).read_at is None
    assert manage_lead.post("/api/v1/notifications/ntf_nope/read").status_code == 404
    assert manage_lead.get("/api/v1/notifications").json()["items"] == []


def test_any_capability_will_do_but_the_manage_scope_is_needed(
    client, manage_viewer, tenant_a, viewer_a
):
    alerts(tenant_a, viewer_a, 1)
    assert len(manage_viewer.get("/api/v1/notifications").json()["items"]) == 1
    decide = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=viewer_a))
    response = decide.get("/api/v1/notifications")
    assert response.status_code == 403 and response.json()["error"]["code"] == "missing_scope"
    assert ApiClient(client, None).get("/api/v1/notifications").status_code == 401
    assert ApiClient(client, "gvl_wrong").get("/api/v1/notifications").status_code == 401


def test_a_key_of_a_deactivated_principal_is_401(manage_viewer, viewer_a):
    from console.models import Principal

    Principal.objects.filter(pk=viewer_a.pk).update(is_active=False)
    assert manage_viewer.get("/api/v1/notifications").status_code == 401


@pytest.mark.parametrize(
    ("params", "path"),
    [
        ({"limit": 0}, "query.limit"),
        ({"limit": 201}, "query.limit"),
        ({"unread": "maybe"}, "query.unread"),
        ({"cursor": "not-a-cursor"}, "query.cursor"),
        ({"cursor": "WyJ4IiwgMV0"}, "query.cursor"),  # ["x", 1]
    ],
)
def test_bad_queries_are_422_naming_the_field(manage_lead, params, path):
    response = manage_lead.get("/api/v1/notifications", **params)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert path in [d["path"] for d in error["details"]]


def test_the_schema_names_the_path_parameter_as_the_contract(client):
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    assert "/api/v1/notifications/{notificationId}/read" in paths
    assert "/api/v1/notifications" in paths


def test_create_api_key_needs_a_principal_for_manage(tenant_a):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="manage.*principal"):
        call_command("create_api_key", "--tenant", "tenant-a", "--name", "m", "--scope", "manage")
