"""The budgets API: create, list, get, patch, delete (archive); validation naming the field,
409 for a held name, 404 for another tenant's, capabilities through the manage key, every
change audited with before and after; `current` from the rollups."""

from datetime import UTC, date, datetime

import pytest

from budgets.models import Budget
from budgets.spend import budget_current, budgets_applying
from console.models import AuditEvent, Role, Team
from runs.models import Agent, Run
from runs.services.writes import _usage_daily_add
from tests.support.api import ApiClient
from tests.support.budgets import admit, spend
from tests.support.factories import PrincipalFactory, make_key

pytestmark = pytest.mark.django_db
BUDGETS = "/api/v1/budgets"


def new(name="Support, monthly", **extra):
    body = {
        "name": name,
        "scope": {"type": "tenant", "id": None},
        "period": "month",
        "ceilingMinorUnits": 50000,
    }
    body.update(extra)
    return body


def create(api, **extra):
    response = api.post(BUDGETS, new(**extra))
    assert response.status_code == 201, response.content
    return response.json()


def patch(api, budget_id, body):
    return api.client.patch(
        f"{BUDGETS}/{budget_id}",
        body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {api.key}"},
    )


def delete(api, budget_id):
    return api.client.delete(
        f"{BUDGETS}/{budget_id}", headers={"Authorization": f"Bearer {api.key}"}
    )


def error(response):
    return response.json()["error"]


# --- create ---


def test_create_answers_201_with_the_resource_and_its_defaults(manage_a, tenant_a, alice):
    body = create(manage_a, leads=["alice"])
    assert body["id"].startswith("bdg_")
    assert body["scope"] == {"type": "tenant", "id": None}
    assert body["thresholds"] == [80, 100]
    assert body["overBudget"] == "refuse"
    assert body["ceilingTokens"] is None
    assert body["leads"] == ["alice"]
    assert body["active"] is True
    current = body["current"]
    assert current["spentMinorUnits"] == 0 and current["spentTokens"] == 0
    assert current["remainingMinorUnits"] == 50000
    assert current["percent"] == 0.0 and current["crossed"] == []
    today = datetime.now(UTC).date()
    assert current["periodStart"] == f"{today.replace(day=1).isoformat()}T00:00:00Z"
    assert set(body) == {
        "id",
        "name",
        "scope",
        "period",
        "ceilingMinorUnits",
        "ceilingTokens",
        "thresholds",
        "overBudget",
        "leads",
        "active",
        "current",
        "createdAt",
        "updatedAt",
    }


def test_each_scope_names_its_team_principal_or_agent(manage_a, tenant_a, alice):
    Team.objects.create(tenant=tenant_a, name="support")
    team = create(manage_a, name="t", scope={"type": "team", "id": "support"})
    person = create(manage_a, name="p", scope={"type": "principal", "id": "alice"})
    agent = create(manage_a, name="a", scope={"type": "agent", "id": "support-bot"})
    assert team["scope"] == {"type": "team", "id": "support"}
    assert person["scope"] == {"type": "principal", "id": "alice"}
    assert agent["scope"] == {"type": "agent", "id": "support-bot"}
    # An agent no runtime has reported yet is registered, as runtimes' agents are.
    assert Agent.objects.filter(tenant=tenant_a, external_id="support-bot").exists()


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        ({"type": "team", "id": "nope"}, "no team 'nope'"),
        ({"type": "principal", "id": "nobody"}, "no principal 'nobody'"),
        ({"type": "team"}, "a team scope names its team"),
        ({"type": "tenant", "id": "acme"}, "must be null"),
    ],
)
def test_a_scope_naming_nothing_known_is_a_422_at_scope_id(manage_a, scope, message):
    response = manage_a.post(BUDGETS, new(scope=scope))
    assert response.status_code == 422
    [detail] = error(response)["details"]
    assert detail["path"] == "scope.id" and message in detail["message"]
    assert not Budget.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="budget.").exists()


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"thresholds": [0]}, "thresholds.0"),
        ({"thresholds": [80, 1001]}, "thresholds.1"),
        ({"thresholds": ["80"]}, "thresholds.0"),
        ({"thresholds": [80.5]}, "thresholds.0"),  # 80.0 is the integer 80 (JSON Schema)
        ({"ceilingMinorUnits": -1}, "ceilingMinorUnits"),
        ({"ceilingMinorUnits": 0}, "ceilingMinorUnits"),
        ({"ceilingMinorUnits": "500"}, "ceilingMinorUnits"),
        ({"ceilingMinorUnits": True}, "ceilingMinorUnits"),
        ({"ceilingMinorUnits": 2**63}, "ceilingMinorUnits"),  # past the bigint column
        ({"name": "nul \x00"}, "name"),
        ({"ceilingTokens": 0}, "ceilingTokens"),
        ({"period": "year"}, "period"),
        ({"overBudget": "warn"}, "overBudget"),
        ({"name": ""}, "name"),
        ({"scope": {"type": "galaxy"}}, "scope.type"),
        ({"leads": ["nobody"]}, "leads.0"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_an_invalid_field_is_a_422_naming_it(manage_a, fields, path):
    response = manage_a.post(BUDGETS, new(**fields))
    assert response.status_code == 422, response.content
    assert error(response)["code"] == "validation_error"
    assert path in [d["path"] for d in error(response)["details"]]
    assert not Budget.objects.exists()


def test_a_missing_field_is_a_422_naming_it(manage_a):
    body = new()
    del body["period"]
    response = manage_a.post(BUDGETS, body)
    assert response.status_code == 422
    assert [d["path"] for d in error(response)["details"]] == ["period"]


def test_a_name_held_by_an_active_budget_is_409_budget_exists(manage_a):
    held = create(manage_a)
    response = manage_a.post(BUDGETS, new())
    assert response.status_code == 409
    assert error(response)["code"] == "budget_exists"
    assert Budget.objects.count() == 1
    assert delete(manage_a, held["id"]).status_code == 204
    assert create(manage_a)["id"] != held["id"]  # a deleted budget's name is free again


def test_thresholds_are_kept_ascending_once_each(manage_a):
    assert create(manage_a, thresholds=[100, 50, 80, 50])["thresholds"] == [50, 80, 100]


# --- read ---


def test_list_shows_active_budgets_oldest_first_in_pages(manage_a):
    ids = [create(manage_a, name=f"b{n}")["id"] for n in range(3)]
    delete(manage_a, ids[1])
    first = manage_a.get(BUDGETS, limit=1).json()
    assert [b["id"] for b in first["items"]] == [ids[0]]
    second = manage_a.get(BUDGETS, limit=1, cursor=first["nextCursor"]).json()
    assert [b["id"] for b in second["items"]] == [ids[2]]
    assert second["nextCursor"] is None
    assert [b["id"] for b in manage_a.get(BUDGETS).json()["items"]] == [ids[0], ids[2]]


def test_a_bad_cursor_or_limit_is_a_422(manage_a):
    response = manage_a.get(BUDGETS, cursor="nope")
    assert response.status_code == 422
    assert error(response)["details"][0]["path"] == "query.cursor"
    assert manage_a.get(BUDGETS, limit=0).status_code == 422
    assert manage_a.get(BUDGETS, limit=201).status_code == 422


def test_the_list_costs_the_same_few_queries_for_many_budgets(
    manage_a, tenant_a, alice, django_assert_max_num_queries
):
    Team.objects.create(tenant=tenant_a, name="support")
    for n in range(12):
        scope = [
            {"type": "tenant", "id": None},
            {"type": "team", "id": "support"},
            {"type": "principal", "id": "alice"},
            {"type": "agent", "id": "bot"},
        ][n % 4]
        create(manage_a, name=f"b{n}", scope=scope, leads=["alice"])
    with django_assert_max_num_queries(6):  # key, key's use, budgets, leads, spend (+1)
        assert len(manage_a.get(BUDGETS).json()["items"]) == 12


def test_get_of_another_tenants_budget_is_404(manage_a, manage_b):
    theirs = create(manage_b)
    for response in (
        manage_a.get(f"{BUDGETS}/{theirs['id']}"),
        patch(manage_a, theirs["id"], {"name": "mine"}),
        patch(manage_a, theirs["id"], {"name": 5}),  # 404 before 422
        delete(manage_a, theirs["id"]),
        manage_a.get(f"{BUDGETS}/bdg_nope"),
    ):
        assert response.status_code == 404, response.content
        assert error(response)["code"] == "budget_not_found"
    assert Budget.objects.get().name == "Support, monthly"
    assert manage_a.get(BUDGETS).json()["items"] == []


def test_a_deleted_budget_reads_as_inactive_and_is_no_longer_applied(manage_a, ingest_a, tenant_a):
    body = create(manage_a)
    admit(ingest_a, "r1")
    run = Run.objects.get(external_id="r1")
    assert [b.public_id for b in budgets_applying(run=run)] == [body["id"]]
    assert delete(manage_a, body["id"]).status_code == 204
    assert manage_a.get(f"{BUDGETS}/{body['id']}").json()["active"] is False
    assert budgets_applying(run=run) == []
    assert delete(manage_a, body["id"]).status_code == 204  # again: nothing changes
    assert AuditEvent.objects.filter(action="budget.deleted").count() == 1
    response = patch(manage_a, body["id"], {"name": "back"})
    assert response.status_code == 409 and error(response)["code"] == "budget_archived"


# --- patch ---


def test_patch_changes_the_given_fields_and_audits_before_and_after(
    manage_a, tenant_a, lead_a, alice
):
    body = create(manage_a)
    response = patch(
        manage_a,
        body["id"],
        {"ceilingMinorUnits": 100, "thresholds": [50], "leads": ["alice"], "ceilingTokens": 9},
    )
    assert response.status_code == 200, response.content
    changed = response.json()
    assert (changed["ceilingMinorUnits"], changed["thresholds"], changed["leads"]) == (
        100,
        [50],
        ["alice"],
    )
    assert changed["name"] == body["name"] and changed["ceilingTokens"] == 9
    assert changed["updatedAt"] > body["updatedAt"]
    entry = AuditEvent.objects.get(action="budget.updated")
    assert entry.object_type == "budget" and entry.object_id == body["id"]
    assert entry.actor_principal == lead_a and entry.actor_key is not None
    assert entry.before["ceilingMinorUnits"] == 50000
    assert entry.after["ceilingMinorUnits"] == 100
    assert entry.before["leads"] == [] and entry.after["leads"] == ["alice"]
    created = AuditEvent.objects.get(action="budget.created")
    assert created.before is None and created.after["name"] == body["name"]
    # ceilingTokens: null removes that ceiling; the same values again change nothing.
    assert patch(manage_a, body["id"], {"ceilingTokens": None}).json()["ceilingTokens"] is None
    assert patch(manage_a, body["id"], {"ceilingMinorUnits": 100}).status_code == 200
    assert AuditEvent.objects.filter(action="budget.updated").count() == 2


def test_patch_validates_like_create_and_changes_nothing_on_error(manage_a, tenant_a):
    body = create(manage_a)
    create(manage_a, name="other")
    for fields, status, where in (
        ({"name": None}, 422, "name"),
        ({"period": None}, 422, "period"),
        ({"thresholds": [2000]}, 422, "thresholds.0"),
        ({"scope": {"type": "team", "id": "nope"}}, 422, "scope.id"),
        ({"id": "bdg_x"}, 422, "id"),
        ({"name": "other"}, 409, None),
    ):
        response = patch(manage_a, body["id"], fields)
        assert response.status_code == status, (fields, response.content)
        if where:
            assert where in [d["path"] for d in error(response)["details"]]
    assert Budget.objects.get(public_id=body["id"]).name == body["name"]
    assert not AuditEvent.objects.filter(action="budget.updated").exists()


def test_patch_moves_the_scope(manage_a, tenant_a):
    Team.objects.create(tenant=tenant_a, name="support")
    body = create(manage_a)
    moved = patch(manage_a, body["id"], {"scope": {"type": "team", "id": "support"}}).json()
    assert moved["scope"] == {"type": "team", "id": "support"}
    budget = Budget.objects.get()
    assert (budget.scope_type, budget.team.name) == ("team", "support")


# --- access ---


def test_access_through_keys_and_capabilities(client, tenant_a, viewer_a, reviewer_a, ingest_a):
    assert ApiClient(client, None).get(BUDGETS).status_code == 401
    response = ingest_a.get(BUDGETS)
    assert response.status_code == 403 and error(response)["code"] == "missing_scope"
    for principal in (viewer_a, reviewer_a):
        key = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=principal))
        response = key.get(BUDGETS)
        assert response.status_code == 403 and error(response)["code"] == "forbidden"
    role = Role.objects.create(tenant=tenant_a, name="watcher", capabilities=["view_budgets"])
    watcher = PrincipalFactory(tenant=tenant_a, external_id="watcher")
    watcher.roles.add(role)
    key = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=watcher))
    assert key.get(BUDGETS).status_code == 200
    response = key.post(BUDGETS, new())
    assert response.status_code == 403 and "manage_budgets" in error(response)["message"]
    response = key.post(BUDGETS, {"name": 5})  # the capability is checked before the body
    assert response.status_code == 403
    assert not Budget.objects.exists()


def test_an_admin_may_do_everything(client, tenant_a, admin_a):
    admin = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))
    body = create(admin)
    assert delete(admin, body["id"]).status_code == 204


def test_a_signed_in_lead_reads_budgets_through_the_session(client, manage_a, lead_a):
    create(manage_a)
    client.login(username="lead@a.example", password="lead-pass-123")
    response = client.get(BUDGETS)
    assert response.status_code == 200 and len(response.json()["items"]) == 1


# --- current: spend from the rollups ---


def test_current_sums_the_scopes_usage_this_period(manage_a, ingest_a, tenant_a, alice):
    team = Team.objects.create(tenant=tenant_a, name="support")
    alice.teams.add(team)
    PrincipalFactory(tenant=tenant_a, external_id="bob")
    ids = {
        "tenant": create(manage_a, name="all", ceilingMinorUnits=1000)["id"],
        "team": create(
            manage_a, name="team", scope={"type": "team", "id": "support"}, ceilingMinorUnits=100
        )["id"],
        "alice": create(
            manage_a,
            name="alice",
            scope={"type": "principal", "id": "alice"},
            ceilingMinorUnits=100,
        )["id"],
        "agent": create(
            manage_a,
            name="mail",
            scope={"type": "agent", "id": "mail-bot"},
            ceilingMinorUnits=100,
            period="day",
        )["id"],
    }
    admit(ingest_a, "r1", principal="alice")
    admit(ingest_a, "r2", principal="bob", agent="mail-bot")
    spend(ingest_a, "r1", steps=2, usage=(100, 20, 45))  # 90, 240 tokens
    spend(ingest_a, "r2", usage=(5, 5, 7), agent="mail-bot")
    spent = {
        name: manage_a.get(f"{BUDGETS}/{budget_id}").json()["current"]
        for name, budget_id in ids.items()
    }
    assert spent["tenant"]["spentMinorUnits"] == 97
    assert spent["tenant"]["spentTokens"] == 250
    assert spent["team"]["spentMinorUnits"] == 90  # alice is in the team, bob is not
    assert spent["team"]["remainingMinorUnits"] == 10
    assert spent["team"]["percent"] == 90.0
    assert spent["team"]["crossed"] == [80]
    assert spent["alice"]["spentMinorUnits"] == 90
    assert spent["agent"]["spentMinorUnits"] == 7
    # Membership counts as it is now: bob joins, his usage counts for the team.
    bob = team.principals.model.objects.get(external_id="bob")
    bob.teams.add(team)
    current = manage_a.get(f"{BUDGETS}/{ids['team']}").json()["current"]
    assert current["spentMinorUnits"] == 97
    assert current["remainingMinorUnits"] == 3
    assert current["crossed"] == [80]


def test_current_counts_only_the_period_and_projects_to_its_end(manage_a, tenant_a):
    from django.utils import timezone

    from budgets.models import Budget

    body = create(manage_a, ceilingMinorUnits=1000)
    budget = Budget.objects.select_related("tenant").get(public_id=body["id"])
    for day, cost in (
        (date(2026, 11, 30), 500),
        (date(2026, 12, 1), 100),
        (date(2026, 12, 10), 200),
    ):
        key = (day, "x", "a", "m")  # as ingest adds it (both rollup tables)
        _usage_daily_add(tenant_id=tenant_a.pk, rows={key: (1, 0, cost, 1)})
    now = datetime(2026, 12, 11, 0, 0, tzinfo=UTC)  # 10 of December's 31 days elapsed
    current = budget_current(budget=budget, now=now)
    assert current["spent_minor_units"] == 300
    assert current["spent_tokens"] == 2
    assert current["projected_minor_units"] == 930
    assert current["period_start"].isoformat() == "2026-12-01T00:00:00+00:00"
    assert current["period_end"].isoformat() == "2027-01-01T00:00:00+00:00"
    assert timezone.is_aware(current["period_start"])


def test_periods_follow_the_tenants_time_zone(manage_a, tenant_a):
    tenant_a.time_zone = "Europe/Berlin"
    tenant_a.save()
    body = create(manage_a, period="week")
    start = datetime.fromisoformat(body["current"]["periodStart"])
    assert start.utcoffset().total_seconds() in (3600, 7200)
    assert start.weekday() == 0 and (start.hour, start.minute) == (0, 0)


def test_budgets_applying_are_narrowest_first(manage_a, ingest_a, tenant_a, alice):
    for name in ("zeta", "alpha"):
        alice.teams.add(Team.objects.create(tenant=tenant_a, name=name))
    order = [
        create(manage_a, name="tenant")["id"],
        create(manage_a, name="team z", scope={"type": "team", "id": "zeta"})["id"],
        create(manage_a, name="person", scope={"type": "principal", "id": "alice"})["id"],
        create(manage_a, name="team a", scope={"type": "team", "id": "alpha"})["id"],
        create(manage_a, name="agent", scope={"type": "agent", "id": "support-bot"})["id"],
        create(manage_a, name="other agent", scope={"type": "agent", "id": "x"})["id"],
    ]
    admit(ingest_a, "r1", principal="alice")
    applying = budgets_applying(run=Run.objects.get(external_id="r1"))
    assert [b.name for b in applying] == ["agent", "person", "team a", "team z", "tenant"]
    assert order[5] not in [b.public_id for b in applying]
