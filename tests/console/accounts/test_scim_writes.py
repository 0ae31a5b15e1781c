"""SCIM's writes on the directory's services: create, replace, PATCH (add/replace/remove) and
delete Users and Groups; `active: false` deactivates with every effect (keys 401 at once,
sockets closed within 5 s); DELETE hides a user from SCIM but keeps the principal, and a POST
of its userName brings it back; immutable and required attributes refused as scim2-models
says; attributes not served ignored; `externalId` kept; each change audited with the `scim`
key as actor; bad bodies in SCIM's error shape, changing nothing; another tenant's key
changes none of this tenant's."""

import pytest
from asgiref.sync import sync_to_async

from console.models import AuditEvent, Principal, Team
from tests.support.api import ApiClient
from tests.support.factories import make_key
from tests.support.scim import ERROR, Scim
from tests.support.sockets import close_code, hello, open_socket

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


def _delete(scim, path):
    return scim.client.delete(f"/scim/v2{path}", headers={"Authorization": f"Bearer {scim.key}"})


def test_delete_user_deactivates_and_hides_it_from_scim_but_keeps_the_principal(
    scim_a, tenant_a, reviewer_a
):
    support = Team.objects.create(tenant=tenant_a, name="support")
    reviewer_a.teams.add(support)
    path = f"/Users/{reviewer_a.external_id}"
    assert _delete(scim_a, path).status_code == 204
    reviewer_a.refresh_from_db()
    assert not reviewer_a.is_active and reviewer_a.scim_deleted_at is not None
    assert list(reviewer_a.teams.all()) == []
    assert AuditEvent.objects.filter(
        tenant=tenant_a, action="principal.deactivated", object_id=reviewer_a.external_id
    ).exists()
    # RFC 7644 3.6: 404 for every operation on it, and no query lists it.
    assert scim_a.get(path).status_code == 404
    assert scim_a.send("put", path, _user(reviewer_a.external_id)).status_code == 404
    assert _delete(scim_a, path).status_code == 404
    listed = scim_a.get("/Users").json()["Resources"]
    assert reviewer_a.external_id not in {u["id"] for u in listed}
    taken = {"schemas": [GROUP], "displayName": "x", "members": [{"value": "reviewer@a.example"}]}
    assert scim_a.send("post", "/Groups", taken).status_code == 400


def test_a_post_of_a_deleted_users_name_brings_the_principal_back_as_new(
    scim_a, tenant_a, reviewer_a
):
    path = f"/Users/{reviewer_a.external_id}"
    assert _delete(scim_a, path).status_code == 204
    response = scim_a.send("post", "/Users", _user(reviewer_a.external_id, displayName="Back"))
    assert response.status_code == 201, response.content
    assert response.json()["active"] is True and response.json()["displayName"] == "Back"
    reviewer_a.refresh_from_db()
    assert reviewer_a.is_active and reviewer_a.scim_deleted_at is None and not reviewer_a.reviewed
    assert [r.name for r in reviewer_a.roles.all()] == ["viewer"]  # as SCIM creates one
    assert scim_a.get(path).status_code == 200
    assert (
        Principal.objects.filter(tenant=tenant_a, external_id=reviewer_a.external_id).count() == 1
    )


def test_user_name_is_immutable_and_active_cannot_be_removed(scim_a, reviewer_a):
    path = f"/Users/{reviewer_a.external_id}"
    response = scim_a.send("put", path, _user("someone-else@a.example", active=True))
    assert response.status_code == 400 and response.json()["scimType"] == "mutability"
    response = scim_a.send(
        "patch", path, _patch({"op": "replace", "path": "userName", "value": "x"})
    )
    assert response.status_code == 400 and response.json()["scimType"] == "mutability"
    response = scim_a.send("patch", path, _patch({"op": "remove", "path": "active"}))
    assert response.status_code == 400 and response.json()["scimType"] == "mutability"
    reviewer_a.refresh_from_db()
    assert reviewer_a.is_active and reviewer_a.external_id == "reviewer@a.example"


def test_a_put_without_active_keeps_it_and_a_post_without_it_is_active(scim_a, tenant_a, viewer_a):
    viewer_a.is_active = False
    viewer_a.save()
    response = scim_a.send("put", f"/Users/{viewer_a.external_id}", _user(viewer_a.external_id))
    assert response.status_code == 200 and response.json()["active"] is False
    assert scim_a.send("post", "/Users", _user("fresh@a.example")).json()["active"] is True


def test_attributes_not_served_are_ignored_and_given_and_family_names_compose_the_name(
    scim_a, tenant_a
):
    enterprise = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"
    body = {
        "schemas": [USER, enterprise],
        "userName": "okta@a.example",
        "name": {"givenName": "Ada", "familyName": "Lovelace"},
        "emails": [
            {"value": "home@a.example", "type": "home"},
            {"value": "ada@a.example", "type": "work", "primary": True},
        ],
        "title": "Countess",
        enterprise: {"department": "Engines"},
    }
    response = scim_a.send("post", "/Users?attributes=userName,displayName,emails", body)
    assert response.status_code == 201, response.content
    assert response.json() == {
        "schemas": [USER],
        "id": "okta@a.example",
        "userName": "okta@a.example",
        "displayName": "Ada Lovelace",
        "emails": [{"value": "ada@a.example", "type": "work"}],
    }
    p = Principal.objects.get(tenant=tenant_a, external_id="okta@a.example")
    assert p.name == "Ada Lovelace" and p.email == "ada@a.example"


def test_display_name_and_name_formatted_are_the_one_name(scim_a, reviewer_a):
    path = f"/Users/{reviewer_a.external_id}"
    ops = _patch({"op": "replace", "path": "name.formatted", "value": "Grace Hopper"})
    response = scim_a.send("patch", f"{path}?attributes=displayName", ops)
    assert response.status_code == 200, response.content
    assert response.json() == {
        "schemas": [USER],
        "id": reviewer_a.external_id,
        "displayName": "Grace Hopper",
    }
    put = _user(reviewer_a.external_id, displayName="Grace Hopper", active=True)
    response = scim_a.send("put", f"{path}?excludedAttributes=name,meta,groups", put)
    assert set(response.json()) == {"schemas", "id", "userName", "displayName", "active"}
    response = scim_a.send("patch", path, _patch({"op": "remove", "path": "displayName"}))
    assert "name" not in response.json() and "displayName" not in response.json()
    reviewer_a.refresh_from_db()
    assert reviewer_a.name == ""


def test_entra_style_patches(scim_a, reviewer_a, viewer_a):
    path = f"/Users/{reviewer_a.external_id}"
    ops = _patch({"op": "replace", "path": 'emails[type eq "work"].value', "value": "r@a.example"})
    assert scim_a.send("patch", path, ops).status_code == 200
    reviewer_a.refresh_from_db()
    assert reviewer_a.email == "r@a.example"
    members = [{"value": reviewer_a.external_id}, {"value": viewer_a.external_id}]
    group = {"schemas": [GROUP], "displayName": "ops", "members": members}
    assert scim_a.send("post", "/Groups", group).status_code == 201
    ops = _patch({"op": "remove", "path": "members", "value": [{"value": viewer_a.external_id}]})
    response = scim_a.send("patch", "/Groups/ops", ops)
    assert response.status_code == 200, response.content
    assert [m["value"] for m in response.json()["members"]] == [reviewer_a.external_id]


def test_external_id_is_kept_and_audited(scim_a, tenant_a):
    response = scim_a.send("post", "/Users", _user("ext@a.example", externalId="00u1"))
    assert response.status_code == 201 and response.json()["externalId"] == "00u1"
    ops = _patch({"op": "replace", "path": "externalId", "value": "00u2"})
    assert scim_a.send("patch", "/Users/ext@a.example", ops).json()["externalId"] == "00u2"
    event = AuditEvent.objects.filter(
        tenant=tenant_a, object_id="ext@a.example", after__externalId="00u2"
    ).get()
    assert event.before == {"externalId": "00u1"} and event.actor_key is not None
    group = {"schemas": [GROUP], "displayName": "eng", "externalId": "grp-1"}
    assert scim_a.send("post", "/Groups", group).json()["externalId"] == "grp-1"
    assert Team.objects.get(tenant=tenant_a, name="eng").scim_external_id == "grp-1"


def test_a_groups_display_name_is_its_id_and_cannot_change(scim_a, tenant_a):
    Team.objects.create(tenant=tenant_a, name="support")
    body = {"schemas": [GROUP], "displayName": "helpdesk"}
    response = scim_a.send("put", "/Groups/support", body)
    assert response.status_code == 400 and response.json()["scimType"] == "mutability"
    assert Team.objects.filter(tenant=tenant_a, name="support").exists()


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
