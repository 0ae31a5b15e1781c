"""SCIM's writes on the directory's services: create, replace, PATCH (add/replace/remove) and
delete Users and Groups; `active: false` deactivates with every effect (keys 401 at once,
sockets closed within 5 s); each change audited with the `scim` key as actor; bad bodies in
SCIM's error shape, changing nothing; another tenant's key changes none of this tenant's."""

import pytest
from asgiref.sync import sync_to_async

from console.models import AuditEvent, Principal, Team
from tests.conftest import ApiClient
from tests.console.live import close_code, hello, open_socket
from tests.console.test_scim import ERROR, Scim
from tests.factories import make_key

USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


@pytest.fixture
def scim_a(client, tenant_a, admin_a):
    return Scim(client, make_key(tenant_a, scopes=("scim",)))


def _user(name, **extra):
    return {"schemas": [USER], "userName": name, **extra}


def _patch(*operations):
    return {"schemas": [PATCH], "Operations": list(operations)}


def test_post_user_creates_a_viewer_not_yet_reviewed_audited_with_the_key(scim_a, tenant_a):
    body = _user(
        "new@a.example",
        displayName="New Person",
        emails=[{"value": "new@a.example", "primary": True}],
    )
    response = scim_a.send("post", "/Users", body)
    assert response.status_code == 201, response.content
    assert response.json()["id"] == "new@a.example"
    assert response["Location"].endswith("/scim/v2/Users/new@a.example")
    p = Principal.objects.get(tenant=tenant_a, external_id="new@a.example")
    assert p.name == "New Person" and p.email == "new@a.example" and not p.reviewed
    assert [r.name for r in p.roles.all()] == ["viewer"]
    event = AuditEvent.objects.get(
        tenant=tenant_a, action="principal.created", object_id=p.external_id
    )
    assert event.actor_key is not None and event.actor_principal is None


def test_post_a_held_user_name_is_409_uniqueness(scim_a, reviewer_a):
    response = scim_a.send("post", "/Users", _user(reviewer_a.external_id))
    assert response.status_code == 409 and response.json()["scimType"] == "uniqueness"


def test_a_bad_body_is_400_in_scims_shape_and_changes_nothing(scim_a, tenant_a):
    before = Principal.objects.filter(tenant=tenant_a).count()
    for body in ({"schemas": [USER]}, {"schemas": [USER], "userName": 5, "active": "maybe"}):
        response = scim_a.send("post", "/Users", body)
        assert response.status_code == 400 and response.json()["schemas"] == [ERROR]
    assert Principal.objects.filter(tenant=tenant_a).count() == before


def test_put_replaces_name_email_and_active(scim_a, reviewer_a):
    body = _user(reviewer_a.external_id, displayName="Renamed", active=True)
    response = scim_a.send("put", f"/Users/{reviewer_a.external_id}", body)
    assert response.status_code == 200, response.content
    reviewer_a.refresh_from_db()
    assert reviewer_a.name == "Renamed" and reviewer_a.email == ""


def test_patch_add_replace_remove(scim_a, reviewer_a):
    path = f"/Users/{reviewer_a.external_id}"
    ops = _patch(
        {"op": "replace", "path": "displayName", "value": "Pat"},
        {"op": "add", "path": "emails", "value": [{"value": "pat@a.example", "primary": True}]},
    )
    assert scim_a.send("patch", path, ops).status_code == 200
    reviewer_a.refresh_from_db()
    assert reviewer_a.name == "Pat" and reviewer_a.email == "pat@a.example"
    assert scim_a.send("patch", path, _patch({"op": "remove", "path": "emails"})).status_code == 200
    reviewer_a.refresh_from_db()
    assert reviewer_a.email == ""


def test_a_bad_patch_is_400_and_changes_nothing(scim_a, reviewer_a):
    path = f"/Users/{reviewer_a.external_id}"
    response = scim_a.send("patch", path, _patch({"op": "explode", "path": "displayName"}))
    assert response.status_code == 400 and response.json()["schemas"] == [ERROR]


@pytest.mark.django_db(transaction=True)
async def test_deactivated_through_scim_loses_its_socket_within_5_s_and_its_keys_at_once(
    client, tenant_a, admin_a, reviewer_a
):
    key = await sync_to_async(make_key)(tenant_a, scopes=("scim",))
    decide_key = await sync_to_async(make_key)(tenant_a, scopes=("decide",), principal=reviewer_a)
    socket, _ = await open_socket("/ws/inbox/", reviewer_a)
    await hello(socket)
    scim = Scim(client, key)
    response = await sync_to_async(scim.send)(
        "patch",
        f"/Users/{reviewer_a.external_id}",
        _patch({"op": "replace", "path": "active", "value": False}),
    )
    assert response.status_code == 200 and response.json()["active"] is False
    decide = ApiClient(client, decide_key)
    assert (
        await sync_to_async(decide.get)("/api/v1/approvals", status="pending")
    ).status_code == 401
    assert await close_code(socket, timeout=5) == 4403


def test_another_tenants_scim_key_changes_nothing_here(client, tenant_b, reviewer_a):
    scim_b = Scim(client, make_key(tenant_b, scopes=("scim",)))
    path = f"/Users/{reviewer_a.external_id}"
    for method, body in (
        ("put", _user(reviewer_a.external_id, active=False)),
        ("patch", _patch({"op": "replace", "path": "active", "value": False})),
    ):
        assert scim_b.send(method, path, body).status_code == 404
    assert (
        scim_b.client.delete(
            f"/scim/v2{path}", headers={"Authorization": f"Bearer {scim_b.key}"}
        ).status_code
        == 404
    )
    reviewer_a.refresh_from_db()
    assert reviewer_a.is_active


def test_delete_user_deactivates(scim_a, reviewer_a):
    response = scim_a.client.delete(
        f"/scim/v2/Users/{reviewer_a.external_id}",
        headers={"Authorization": f"Bearer {scim_a.key}"},
    )
    assert response.status_code == 204
    reviewer_a.refresh_from_db()
    assert not reviewer_a.is_active


def test_groups_create_patch_members_and_delete(scim_a, tenant_a, reviewer_a, viewer_a):
    body = {
        "schemas": [GROUP],
        "displayName": "support",
        "members": [{"value": reviewer_a.external_id}],
    }
    response = scim_a.send("post", "/Groups", body)
    assert response.status_code == 201, response.content
    team = Team.objects.get(tenant=tenant_a, name="support")
    assert list(team.principals.values_list("external_id", flat=True)) == [reviewer_a.external_id]
    ops = _patch(
        {"op": "add", "path": "members", "value": [{"value": viewer_a.external_id}]},
        {"op": "remove", "path": f'members[value eq "{reviewer_a.external_id}"]'},
    )
    assert scim_a.send("patch", "/Groups/support", ops).status_code == 200
    assert list(team.principals.values_list("external_id", flat=True)) == [viewer_a.external_id]
    response = scim_a.client.delete(
        "/scim/v2/Groups/support", headers={"Authorization": f"Bearer {scim_a.key}"}
    )
    assert response.status_code == 204
    assert not Team.objects.filter(tenant=tenant_a, name="support").exists()
    assert AuditEvent.objects.filter(tenant=tenant_a, action="team.deleted").exists()
