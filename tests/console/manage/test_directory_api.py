"""The management API for principals, roles and teams: every operation, its bad inputs (422
naming the field, nothing written), another tenant's objects (404 with nothing of them in the
body), a caller without `admin` (403), 409s, and the audit rows with before → after."""

import pytest

from budgets.models import Budget
from console.models import ApiKey, AuditEvent, Principal, Role, Team
from tests.support.api import ApiClient
from tests.support.factories import PrincipalFactory, make_key

pytestmark = pytest.mark.django_db

API = "/api/v1"


@pytest.fixture
def admin_api(client, tenant_a, admin_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))


@pytest.fixture
def lead_api(client, tenant_a, lead_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))


@pytest.fixture
def support(tenant_a):
    return Team.objects.create(tenant=tenant_a, name="support")


def _paths(response):
    return [d["path"] for d in response.json()["error"]["details"]]


def _last_audit(action):
    return AuditEvent.objects.filter(action=action).order_by("-pk").first()


# --- who may call ---


def test_no_key_401_a_lead_403_an_ingest_key_403(client, tenant_a, lead_api):
    assert client.get(f"{API}/principals").status_code == 401
    response = lead_api.get(f"{API}/principals")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    ingest = ApiClient(client, make_key(tenant_a, scopes=("ingest",)))
    assert ingest.get(f"{API}/roles").status_code == 403


def test_a_lead_is_refused_before_the_body_is_read(lead_api):
    # 403 comes before 422: an invalid body from a caller without admin is still a 403.
    response = lead_api.post(f"{API}/roles", {"name": ""})
    assert response.status_code == 403
    assert not Role.objects.filter(name="").exists()


def test_a_signed_in_admin_session_uses_the_api(client, admin_a, reviewer_a):
    client.force_login(admin_a.user)
    response = client.get(f"{API}/principals/{reviewer_a.external_id}")
    assert response.status_code == 200
    assert response.json()["roles"] == ["reviewer"]


def test_a_signed_in_reviewer_session_is_403(client, reviewer_a):
    client.force_login(reviewer_a.user)
    assert client.get(f"{API}/teams").status_code == 403


# --- principals ---


def test_create_a_principal_with_roles_teams_and_a_password(admin_api, support, admin_a):
    response = admin_api.post(
        f"{API}/principals",
        {
            "id": "paula",
            "name": "Paula",
            "email": "paula@a.example",
            "roles": ["reviewer"],
            "teams": ["support"],
            "password": "a-long-enough-pass-9",
        },
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["id"] == "paula"
    assert body["roles"] == ["reviewer"] and body["teams"] == ["support"]
    assert body["active"] and body["reviewed"] and body["canSignIn"]
    assert body["lastSignInAt"] is None and body["createdAt"]
    assert "password" not in body
    principal = Principal.objects.get(external_id="paula")
    assert principal.user.check_password("a-long-enough-pass-9")
    entry = _last_audit("principal.created")
    assert entry.actor_principal == admin_a and entry.actor_key is not None
    assert entry.after["roles"] == ["reviewer"]
    assert entry.before is None


def test_a_held_id_is_409_principal_exists(admin_api, reviewer_a):
    response = admin_api.post(f"{API}/principals", {"id": reviewer_a.external_id})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "principal_exists"


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"id": "x", "roles": ["nope"]}, "roles.0"),
        ({"id": "x", "teams": ["reviewer", "nope"]}, "teams.0"),
        ({"id": "x", "password": "123"}, "password"),
        ({"id": ""}, "id"),
        ({"id": "x", "colour": "red"}, "colour"),
        ({"id": "x", "roles": "reviewer"}, "roles"),
        ({"id": "x", "email": "not-an-address"}, "email"),
        ({"id": "a/b"}, "id"),
    ],
)
def test_bad_principal_bodies_are_422_naming_the_field_and_write_nothing(admin_api, body, path):
    before = (Principal.objects.count(), AuditEvent.objects.count())
    response = admin_api.post(f"{API}/principals", body)
    assert response.status_code == 422, response.content
    assert path in _paths(response)
    assert (Principal.objects.count(), AuditEvent.objects.count()) == before


def test_password_validator_messages_are_in_the_422(admin_api):
    # settings.AUTH_PASSWORD_VALIDATORS: the minimum length (8).
    response = admin_api.post(f"{API}/principals", {"id": "x", "password": "short"})
    assert response.status_code == 422
    messages = " ".join(d["message"] for d in response.json()["error"]["details"])
    assert "too short" in messages


def test_list_filters_and_pages(admin_api, tenant_a, admin_a, reviewer_a, viewer_a, support):
    PrincipalFactory(tenant=tenant_a, external_id="newbie", reviewed=False)
    reviewer_a.teams.add(support)
    viewer_a.is_active = False
    viewer_a.save()
    ids = lambda r: [p["id"] for p in r.json()["items"]]  # noqa: E731
    assert ids(admin_api.get(f"{API}/principals", q="REVIEWER@")) == ["reviewer@a.example"]
    assert ids(admin_api.get(f"{API}/principals", team="support")) == ["reviewer@a.example"]
    assert ids(admin_api.get(f"{API}/principals", role="admin")) == ["admin@a.example"]
    assert ids(admin_api.get(f"{API}/principals", active="false")) == ["viewer@a.example"]
    assert ids(admin_api.get(f"{API}/principals", reviewed="false")) == ["newbie"]
    first = admin_api.get(f"{API}/principals", limit=2).json()
    assert len(first["items"]) == 2 and first["nextCursor"]
    rest = admin_api.get(f"{API}/principals", limit=2, cursor=first["nextCursor"]).json()
    seen = [p["id"] for p in first["items"] + rest["items"]]
    assert seen == ["admin@a.example", "reviewer@a.example", "viewer@a.example", "newbie"]
    assert rest["nextCursor"] is None
    assert admin_api.get(f"{API}/principals", limit=0).status_code == 422
    bad = admin_api.get(f"{API}/principals", cursor="nonsense")
    assert bad.status_code == 422 and _paths(bad) == ["query.cursor"]


def test_patch_name_email_roles_teams_reviewed(admin_api, reviewer_a, support, admin_a):
    response = admin_api.patch(
        f"{API}/principals/{reviewer_a.external_id}",
        {
            "name": "Rita",
            "email": "rita@a.example",
            "roles": ["viewer"],
            "teams": ["support"],
            "reviewed": False,
        },
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["name"], body["roles"], body["teams"], body["reviewed"]) == (
        "Rita",
        ["viewer"],
        ["support"],
        False,
    )
    entry = _last_audit("principal.updated")
    assert entry.before["roles"] == ["reviewer"]
    assert entry.after["roles"] == ["viewer"]
    assert entry.object_id == reviewer_a.external_id


def test_patch_with_an_unknown_team_is_422_and_changes_nothing(admin_api, reviewer_a):
    response = admin_api.patch(
        f"{API}/principals/{reviewer_a.external_id}", {"name": "Rita", "teams": ["ghosts"]}
    )
    assert response.status_code == 422 and _paths(response) == ["teams.0"]
    reviewer_a.refresh_from_db()
    assert reviewer_a.name != "Rita"


def test_patch_null_is_422(admin_api, reviewer_a):
    response = admin_api.patch(f"{API}/principals/{reviewer_a.external_id}", {"active": None})
    assert response.status_code == 422 and _paths(response) == ["active"]


def test_patch_password_sets_the_login_password(admin_api, tenant_a):
    PrincipalFactory(tenant=tenant_a, external_id="noah")
    response = admin_api.patch(f"{API}/principals/noah", {"password": "fresh-and-long-77"})
    assert response.status_code == 200 and response.json()["canSignIn"]
    assert Principal.objects.get(external_id="noah").user.check_password("fresh-and-long-77")
    assert _last_audit("principal.updated").data["passwordSet"] is True


def test_a_shared_logins_password_is_never_changed_by_one_tenant(
    admin_api, tenant_a, tenant_b, reviewer_a
):
    # The same login is reviewer_a's principal in tenant B too.
    Principal.objects.create(
        tenant=tenant_b, external_id=reviewer_a.external_id, user=reviewer_a.user
    )
    response = admin_api.patch(
        f"{API}/principals/{reviewer_a.external_id}", {"password": "another-long-pass-1"}
    )
    assert response.status_code == 200  # tenant A's principal gets a login of its own
    reviewer_a.user.refresh_from_db()
    assert reviewer_a.user.check_password("reviewer-pass-123")
    own = Principal.objects.get(pk=reviewer_a.pk).user
    assert own.pk != reviewer_a.user.pk and own.check_password("another-long-pass-1")


def test_another_tenants_principal_is_404_with_nothing_of_it(admin_api, reviewer_b):
    for response in (
        admin_api.get(f"{API}/principals/{reviewer_b.external_id}"),
        admin_api.patch(f"{API}/principals/{reviewer_b.external_id}", {"active": False}),
        admin_api.patch(f"{API}/principals/{reviewer_b.external_id}", {"active": "bad"}),
    ):
        assert response.status_code == 404
        assert "tenant-b" not in response.content.decode()
    reviewer_b.refresh_from_db()
    assert reviewer_b.is_active


# --- deactivation through the API ---


def test_deactivation_and_reactivation_are_audited_with_before_and_after(admin_api, reviewer_a):
    path = f"{API}/principals/{reviewer_a.external_id}"
    assert admin_api.patch(path, {"active": False}).json()["active"] is False
    entry = _last_audit("principal.deactivated")
    assert entry.before["active"] is True and entry.after["active"] is False
    assert admin_api.patch(path, {"active": True}).json()["active"] is True
    assert _last_audit("principal.reactivated").after["active"] is True


def test_keys_bound_to_a_deactivated_principal_are_401_until_reactivated(
    client, admin_api, tenant_a, reviewer_a
):
    keys = [
        ApiClient(client, make_key(tenant_a, scopes=scopes, principal=reviewer_a))
        for scopes in (("decide",), ("ingest",), ("manage",))
    ]
    probes = [("approvals", {"status": "pending"}), ("runs", {}), ("notifications", {})]
    for key, (path, params) in zip(keys, probes, strict=True):
        assert key.get(f"{API}/{path}", **params).status_code == 200
    path = f"{API}/principals/{reviewer_a.external_id}"
    admin_api.patch(path, {"active": False})
    for key, (path_, params) in zip(keys, probes, strict=True):
        assert key.get(f"{API}/{path_}", **params).status_code == 401
    admin_api.patch(path, {"active": True})
    for key, (path_, params) in zip(keys, probes, strict=True):
        assert key.get(f"{API}/{path_}", **params).status_code == 200


def test_new_runs_for_a_deactivated_principal_are_403(admin_api, ingest_a, reviewer_a):
    admin_api.patch(f"{API}/principals/{reviewer_a.external_id}", {"active": False})
    response = ingest_a.post(
        f"{API}/runs",
        {"id": "run_x", "agentId": "bot", "agentVersion": 1, "principalId": reviewer_a.external_id},
    )
    assert response.status_code == 403


# --- last_admin ---


def test_deactivating_the_last_admin_is_409(admin_api, admin_a):
    response = admin_api.patch(f"{API}/principals/{admin_a.external_id}", {"active": False})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "last_admin"
    admin_a.refresh_from_db()
    assert admin_a.is_active


def test_taking_the_last_admins_role_is_409(admin_api, admin_a):
    response = admin_api.patch(f"{API}/principals/{admin_a.external_id}", {"roles": ["lead"]})
    assert response.status_code == 409
    assert list(admin_a.roles.values_list("name", flat=True)) == ["admin"]


def test_removing_admin_from_the_admin_role_is_409(admin_api, admin_a):
    response = admin_api.patch(f"{API}/roles/admin", {"capabilities": ["view_runs"]})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "last_admin"
    assert "admin" in Role.objects.get(tenant=admin_a.tenant, name="admin").capabilities


def test_with_a_second_admin_one_may_step_down(admin_api, tenant_a, admin_a):
    PrincipalFactory(tenant=tenant_a, external_id="second", role="admin")
    response = admin_api.patch(f"{API}/principals/second", {"roles": ["viewer"]})
    assert response.status_code == 200


# --- roles ---


def test_role_create_get_patch_delete_audited(admin_api, tenant_a):
    created = admin_api.post(
        f"{API}/roles",
        {
            "name": "mailer",
            "capabilities": ["decide", "view_runs"],
            "decideTools": ["email.*"],
            "slackDecide": False,
        },
    )
    assert created.status_code == 201, created.content
    assert created.json() == {
        "name": "mailer",
        "capabilities": ["view_runs", "decide"],
        "decideTools": ["email.*"],
        "slackDecide": False,
        "principals": 0,
    }
    assert admin_api.post(f"{API}/roles", {"name": "mailer"}).status_code == 409
    patched = admin_api.patch(f"{API}/roles/mailer", {"decideTools": ["email.*", "sms.send"]})
    assert patched.json()["decideTools"] == ["email.*", "sms.send"]
    entry = _last_audit("role.updated")
    assert entry.before["decideTools"] == ["email.*"]
    assert entry.after["decideTools"] == ["email.*", "sms.send"]
    assert admin_api.delete(f"{API}/roles/mailer").status_code == 204
    assert not Role.objects.filter(tenant=tenant_a, name="mailer").exists()
    assert _last_audit("role.deleted").before["name"] == "mailer"
    assert admin_api.get(f"{API}/roles/mailer").status_code == 404


def test_roles_list_counts_holders(admin_api, admin_a, reviewer_a):
    items = {r["name"]: r for r in admin_api.get(f"{API}/roles").json()["items"]}
    assert items["reviewer"]["principals"] == 1 and items["viewer"]["principals"] == 0


def test_unknown_capability_is_422_naming_it(admin_api):
    assert _paths(admin_api.post(f"{API}/roles", {"name": "a/b"})) == ["name"]
    response = admin_api.post(f"{API}/roles", {"name": "x", "capabilities": ["decide", "fly"]})
    assert response.status_code == 422 and _paths(response) == ["capabilities.1"]
    assert not Role.objects.filter(name="x").exists()
    patch = admin_api.patch(f"{API}/roles/viewer", {"capabilities": ["fly"]})
    assert patch.status_code == 422 and _paths(patch) == ["capabilities.0"]


def test_a_held_role_cannot_be_deleted(admin_api, reviewer_a):
    response = admin_api.delete(f"{API}/roles/reviewer")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "role_in_use"
    assert error["details"]["principals"] == [reviewer_a.external_id]


def test_another_tenants_role_and_team_are_404(admin_api, tenant_b):
    Role.objects.create(tenant=tenant_b, name="b-only")
    Team.objects.create(tenant=tenant_b, name="b-team")
    for response in (
        admin_api.get(f"{API}/roles/b-only"),
        admin_api.patch(f"{API}/roles/b-only", {"capabilities": ["nope"]}),
        admin_api.delete(f"{API}/roles/b-only"),
        admin_api.get(f"{API}/teams/b-team"),
        admin_api.patch(f"{API}/teams/b-team", {"members": 3}),
        admin_api.delete(f"{API}/teams/b-team"),
    ):
        assert response.status_code == 404
        assert "tenant-b" not in response.content.decode()
    assert Role.objects.filter(tenant=tenant_b, name="b-only").exists()
    assert Team.objects.filter(tenant=tenant_b, name="b-team").exists()


# --- teams ---


def test_team_create_patch_delete_audited(admin_api, reviewer_a, lead_a):
    created = admin_api.post(
        f"{API}/teams",
        {
            "name": "ops",
            "members": [reviewer_a.external_id, lead_a.external_id],
            "leads": [lead_a.external_id],
        },
    )
    assert created.status_code == 201, created.content
    assert created.json() == {
        "name": "ops",
        "members": sorted([reviewer_a.external_id, lead_a.external_id]),
        "leads": [lead_a.external_id],
    }
    assert admin_api.post(f"{API}/teams", {"name": "ops"}).status_code == 409
    patched = admin_api.patch(f"{API}/teams/ops", {"leads": []})
    assert patched.json()["leads"] == []
    entry = _last_audit("team.updated")
    assert entry.before["leads"] == [lead_a.external_id]
    assert entry.after["leads"] == []
    assert admin_api.delete(f"{API}/teams/ops").status_code == 204
    assert _last_audit("team.deleted").before["name"] == "ops"


def test_a_lead_must_be_a_member(admin_api, lead_a):
    response = admin_api.post(f"{API}/teams", {"name": "ops", "leads": [lead_a.external_id]})
    assert response.status_code == 422 and _paths(response) == ["leads.0"]
    assert not Team.objects.filter(name="ops").exists()


def test_unknown_members_are_422(admin_api):
    response = admin_api.post(f"{API}/teams", {"name": "ops", "members": ["ghost"]})
    assert response.status_code == 422 and _paths(response) == ["members.0"]


def test_a_team_a_budget_scopes_cannot_be_deleted(admin_api, tenant_a, support):
    budget = Budget.objects.create(
        tenant=tenant_a,
        name="Support",
        scope_type="team",
        team=support,
        period="month",
        ceiling_minor_units=100,
    )
    response = admin_api.delete(f"{API}/teams/support")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "team_in_use"
    assert response.json()["error"]["details"]["budgets"] == [budget.public_id]
    assert Team.objects.filter(pk=support.pk).exists()


def test_a_key_bound_to_an_admin_is_audited_as_both(admin_api, admin_a):
    admin_api.post(f"{API}/teams", {"name": "audited"})
    entry = _last_audit("team.created")
    assert entry.actor_principal == admin_a
    assert entry.actor_key == ApiKey.objects.get(principal=admin_a)


# --- browser sessions: sensitive writes need a recent sign-in ---


def _stale_session(client, principal):
    import time

    from console.directory import signin

    client.force_login(principal.user)
    session = client.session
    session[signin.AUTH_AT_SESSION_KEY] = time.time() - 3600
    session.save()


def test_a_stale_browser_session_needs_reauth_for_roles_and_deactivation(
    client, admin_a, reviewer_a
):
    _stale_session(client, admin_a)
    path = f"{API}/principals/{reviewer_a.external_id}"
    for body in ({"roles": ["viewer"]}, {"active": False}, {"password": "long-enough-pass"}):
        response = client.patch(path, body, content_type="application/json")
        assert response.status_code == 403, body
        assert response.json()["error"]["code"] == "reauth_required"
        assert response.json()["error"]["details"]["reauthUrl"]
    response = client.patch(
        f"{API}/roles/viewer", {"slackDecide": False}, content_type="application/json"
    )
    assert response.json()["error"]["code"] == "reauth_required"
    reviewer_a.refresh_from_db()
    assert reviewer_a.is_active and [r.name for r in reviewer_a.roles.all()] == ["reviewer"]
    # Not sensitive: a name.
    response = client.patch(path, {"name": "Rita"}, content_type="application/json")
    assert response.status_code == 200 and response.json()["name"] == "Rita"


def test_a_key_is_exempt_from_reauth(admin_api, reviewer_a):
    response = admin_api.patch(f"{API}/principals/{reviewer_a.external_id}", {"roles": []})
    assert response.status_code == 200 and response.json()["roles"] == []


def test_post_principals_links_a_shared_login_only_with_its_password(
    admin_api, tenant_b, reviewer_b
):
    # reviewer@b.example's login exists in tenant B; tenant A's admin links it here.
    # Another password: a login of tenant A's own, answered exactly like a linked one.
    wrong = admin_api.post(
        f"{API}/principals", {"id": reviewer_b.external_id, "password": "not-its-password"}
    )
    assert wrong.status_code == 201 and wrong.json()["canSignIn"]
    own = Principal.objects.get(tenant__slug="tenant-a", external_id=reviewer_b.external_id)
    assert own.user_id not in (None, reviewer_b.user_id)
    own.delete()
    right = admin_api.post(
        f"{API}/principals", {"id": reviewer_b.external_id, "password": "reviewer-pass-123"}
    )
    assert right.status_code == 201 and right.json()["canSignIn"]
    assert right.json().keys() == wrong.json().keys()
    linked = Principal.objects.get(tenant__slug="tenant-a", external_id=reviewer_b.external_id)
    assert linked.user_id == reviewer_b.user_id


def test_a_password_for_a_principal_whose_id_cannot_be_a_username_is_422(admin_api, tenant_a):
    """Found by the fuzz run (issue 18): ids may be 255 characters, Django usernames 150; a
    password for such a principal once answered 500 (varchar(150) overflow)."""
    long_id = "p" * 200
    PrincipalFactory(tenant=tenant_a, external_id=long_id)
    response = admin_api.patch(f"/api/v1/principals/{long_id}", {"password": "Str0ng-enough-pass!"})
    assert response.status_code == 422, response.content
    assert response.json()["error"]["details"][0]["path"] == "password"
