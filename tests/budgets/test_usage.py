"""GET /api/v1/usage: every grouping, tenant-local days, CSV, bad queries, access; the rollups
equal the sum of step usage (also after a rebuild and under concurrent ingest)."""

import csv
import io
import threading
from datetime import UTC, date, datetime

import pytest
from django.db import connection
from django.db.models import Sum
from django.test import Client

from console.models import Team, Tenant
from runs.models import Step, UsageAdjustment, UsageDaily, UsageDailyBy
from runs.services.usage import usage_rollups_rebuild
from tests.support.api import ApiClient
from tests.support.budgets import admit, post_events, spend, step
from tests.support.factories import PrincipalFactory, make_key
from tests.support.states import state, usage
from tests.support.states import step as state_step

pytestmark = pytest.mark.django_db
USAGE = "/api/v1/usage"
DEC = {"from": "2026-12-01", "to": "2026-12-31"}


@pytest.fixture
def fed(ingest_a, tenant_a):
    """alice (teams support, billing) runs support-bot; bob (no team) runs mail-bot; one run
    for no principal. December 2026, two days, two models."""
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice")
    PrincipalFactory(tenant=tenant_a, external_id="bob")
    for name in ("support", "billing"):
        alice.teams.add(Team.objects.create(tenant=tenant_a, name=name))
    admit(ingest_a, "r1", principal="alice")
    admit(ingest_a, "r2", principal="bob", agent="mail-bot")
    d1, d2 = "2026-12-02T10:00:00Z", "2026-12-03T10:00:00Z"
    post_events(
        ingest_a,
        "r1",
        [
            *step(1, 1, usage=(100, 10, 50), model="m-a", at=d1),
            *step(3, 2, usage=(200, 20, 70), model="m-b", at=d2),
        ],
    )
    post_events(ingest_a, "r2", step(1, 1, usage=(10, 1, 5), model="m-a", agent="mail-bot", at=d1))
    no_one = state(
        "r3",
        steps=[{**state_step(1, model="m-a", u=(1, 1, 1)), "finishedAt": d2}],
        usage=usage(1, 1, 1),
    )
    del no_one["userId"]
    assert ingest_a.put("/api/v1/runs/r3/state", no_one).status_code == 201


def get(api, **params):
    response = api.get(USAGE, **params)
    assert response.status_code == 200, response.content
    return response.json()


def test_usage_by_day_is_the_default_grouping(manage_a, fed):
    answer = get(manage_a, **DEC)
    assert answer["currency"] == "USD" and answer["timeZone"] == "UTC"
    assert (answer["from"], answer["to"], answer["groupBy"]) == (
        "2026-12-01",
        "2026-12-31",
        ["day"],
    )
    assert answer["rows"] == [
        {
            "day": "2026-12-03",
            "inputTokens": 201,
            "outputTokens": 21,
            "costMinorUnits": 71,
            "steps": 2,
        },
        {
            "day": "2026-12-02",
            "inputTokens": 110,
            "outputTokens": 11,
            "costMinorUnits": 55,
            "steps": 2,
        },
    ]
    assert answer["totals"] == {
        "inputTokens": 311,
        "outputTokens": 32,
        "costMinorUnits": 126,
        "steps": 4,
    }


def test_usage_by_principal_agent_and_model_add_up_to_the_totals(manage_a, fed):
    for group_by, expected in (
        ("principal", [("alice", 120), ("bob", 5), (None, 1)]),
        ("agent", [("support-bot", 121), ("mail-bot", 5)]),
        ("model", [("m-b", 70), ("m-a", 56)]),
    ):
        answer = get(manage_a, groupBy=group_by, **DEC)
        key = {"principal": "principalId", "agent": "agentId", "model": "model"}[group_by]
        assert [(r[key], r["costMinorUnits"]) for r in answer["rows"]] == expected
        assert all(
            set(r) == {key, "inputTokens", "outputTokens", "costMinorUnits", "steps"}
            for r in answer["rows"]
        )
        assert (
            sum(r["costMinorUnits"] for r in answer["rows"]) == answer["totals"]["costMinorUnits"]
        )


def test_team_rows_count_a_principal_for_each_of_its_teams_and_null_for_none(manage_a, fed):
    answer = get(manage_a, groupBy="team", **DEC)
    assert [(r["team"], r["costMinorUnits"]) for r in answer["rows"]] == [
        ("billing", 120),
        ("support", 120),
        (None, 6),  # bob (no team) and the run for no principal
    ]
    assert answer["totals"]["costMinorUnits"] == 126  # team rows add up to more


def test_several_dimensions_sort_by_cost_then_keys(manage_a, fed):
    answer = get(manage_a, groupBy="model,day", **DEC)
    assert answer["groupBy"] == ["model", "day"]
    assert [(r["day"], r["model"], r["costMinorUnits"]) for r in answer["rows"]] == [
        ("2026-12-03", "m-b", 70),
        ("2026-12-02", "m-a", 55),
        ("2026-12-03", "m-a", 1),
    ]
    answer = get(manage_a, groupBy="day,principal,agent,model,team", **DEC)
    assert list(answer["rows"][0]) == [
        "day",
        "principalId",
        "agentId",
        "model",
        "team",
        "inputTokens",
        "outputTokens",
        "costMinorUnits",
        "steps",
    ]


def test_from_and_to_are_inclusive_local_days(manage_a, fed):
    answer = get(manage_a, **{"from": "2026-12-03", "to": "2026-12-03"})
    assert [r["day"] for r in answer["rows"]] == ["2026-12-03"]
    assert answer["totals"]["costMinorUnits"] == 71
    assert get(manage_a, **{"from": "2026-11-01", "to": "2026-11-30"})["rows"] == []


def test_the_default_range_is_the_first_of_this_month_to_today(manage_a, tenant_a):
    today = datetime.now(UTC).date()
    answer = get(manage_a)
    assert answer["from"] == today.replace(day=1).isoformat()
    assert answer["to"] == today.isoformat()


def test_a_step_at_2330_utc_counts_on_the_next_day_in_berlin(manage_a, ingest_a, tenant_a):
    Tenant.objects.filter(pk=tenant_a.pk).update(time_zone="Europe/Berlin", currency="EUR")
    admit(ingest_a, "late")
    post_events(ingest_a, "late", step(1, 1, usage=(1, 1, 9), at="2026-12-02T23:30:00Z"))
    answer = get(manage_a, **DEC)
    assert answer["timeZone"] == "Europe/Berlin" and answer["currency"] == "EUR"
    assert [(r["day"], r["costMinorUnits"]) for r in answer["rows"]] == [("2026-12-03", 9)]
    assert UsageDaily.objects.get(tenant=tenant_a).day == date(2026, 12, 3)


def test_a_step_without_at_counts_on_the_day_it_arrived(manage_a, ingest_a, tenant_a):
    admit(ingest_a, "now")
    spend(ingest_a, "now", usage=(1, 1, 4))
    answer = get(manage_a)
    assert answer["rows"] == [
        {
            "day": datetime.now(UTC).date().isoformat(),
            "inputTokens": 1,
            "outputTokens": 1,
            "costMinorUnits": 4,
            "steps": 1,
        }
    ]


def test_csv_has_the_same_rows_with_one_header_line(manage_a, fed):
    response = manage_a.get(USAGE, groupBy="team,principal", format="csv", **DEC)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    records = list(csv.reader(io.StringIO(response.content.decode())))
    assert records == [
        ["principalId", "team", "inputTokens", "outputTokens", "costMinorUnits", "steps"],
        ["alice", "billing", "300", "30", "120", "2"],
        ["alice", "support", "300", "30", "120", "2"],
        ["bob", "", "10", "1", "5", "1"],
        ["", "", "1", "1", "1", "1"],
    ]


@pytest.mark.parametrize(
    ("params", "path"),
    [
        ({"from": "2026-12-1"}, "query.from"),
        ({"from": "20261201"}, "query.from"),
        ({"to": "2026-02-30"}, "query.to"),
        ({"from": "2026-12-05", "to": "2026-12-04"}, "query.from"),
        ({"from": "2024-01-01", "to": "2025-01-01"}, "query.to"),  # 367 days
        ({"groupBy": "day,week"}, "query.groupBy"),
        ({"groupBy": ""}, "query.groupBy"),
        ({"format": "xml"}, "query.format"),
    ],
)
def test_a_bad_query_is_a_422_naming_the_parameter(manage_a, params, path):
    params = {"from": "2026-12-01", "to": "2026-12-31", **params}
    response = manage_a.get(USAGE, **params)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"][0]["path"] == path


def test_an_unknown_dimension_is_named(manage_a):
    response = manage_a.get(USAGE, groupBy="day,week")
    assert "unknown dimension 'week'" in response.json()["error"]["details"][0]["message"]


def test_366_days_is_the_most(manage_a):
    assert manage_a.get(USAGE, **{"from": "2024-01-01", "to": "2024-12-31"}).status_code == 200


def test_access_needs_a_manage_key_whose_principal_may_view_budgets(
    client, tenant_a, viewer_a, ingest_a, fed
):
    assert ApiClient(client, None).get(USAGE).status_code == 401
    response = ingest_a.get(USAGE)
    assert response.status_code == 403 and response.json()["error"]["code"] == "missing_scope"
    viewer = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=viewer_a))
    response = viewer.get(USAGE, **DEC)
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    assert "view_budgets" in response.json()["error"]["message"]


def test_a_signed_in_lead_reads_usage_through_the_session(client, lead_a, fed):
    client.login(username="lead@a.example", password="lead-pass-123")
    response = client.get(USAGE, DEC)
    assert response.status_code == 200
    assert response.json()["totals"]["costMinorUnits"] == 126


def test_another_tenants_usage_is_never_counted(client, fed, tenant_b):
    lead_b = PrincipalFactory(tenant=tenant_b, external_id="lead@b.example", role="lead")
    manage_b = ApiClient(client, make_key(tenant_b, scopes=("manage",), principal=lead_b))
    ingest_b = ApiClient(client, make_key(tenant_b, scopes=("ingest",)))
    admit(ingest_b, "r1", principal="alice")
    post_events(ingest_b, "r1", step(1, 1, usage=(5, 5, 1000), at="2026-12-02T10:00:00Z"))
    assert get(manage_b, **DEC)["totals"]["costMinorUnits"] == 1000


# --- the rollups are rebuildable and always equal the steps (+ adjustments) ---


def _rollup(tenant):
    return sorted(
        UsageDaily.objects.filter(tenant=tenant).values_list(
            "day",
            "principal_id",
            "agent_id",
            "model",
            "input_tokens",
            "output_tokens",
            "cost_minor_units",
            "steps",
        )
    )


def _by_rollup(tenant):
    return sorted(
        UsageDailyBy.objects.filter(tenant=tenant).values_list(
            "dimension", "day", "key", "input_tokens", "output_tokens", "cost_minor_units", "steps"
        )
    )


def _by_from_daily(tenant):
    """What UsageDailyBy must hold: UsageDaily summed per day and one dimension's key."""
    sums = {}
    for day, principal, agent, model, *figures in _rollup(tenant):
        for key in (("principal", day, principal), ("agent", day, agent), ("model", day, model)):
            held = sums.setdefault(key, [0, 0, 0, 0])
            for n, value in enumerate(figures):
                held[n] += value
    return sorted((*key, *figures) for key, figures in sums.items())


def test_the_rollups_by_one_dimension_sum_to_the_daily_rollups_after_ingest_and_rebuild(
    ingest_a, tenant_a, fed
):
    by = _by_rollup(tenant_a)
    assert {row[0] for row in by} == {"principal", "agent", "model"}
    assert by == _by_from_daily(tenant_a)  # as ingest added them
    UsageDailyBy.objects.filter(tenant=tenant_a).update(cost_minor_units=0)
    usage_rollups_rebuild(tenant=tenant_a)
    assert _by_rollup(tenant_a) == by  # rebuilt from the daily rollups


def test_a_grouping_by_one_dimension_equals_the_full_grouping_summed(manage_a, fed):
    full = get(manage_a, groupBy="day,principal,agent,model", **DEC)
    for group_by, key in (("principal", "principalId"), ("agent", "agentId"),
                          ("model", "model"), ("day", "day")):  # fmt: skip
        expected = {}
        for row in full["rows"]:
            held = expected.setdefault(row[key], [0, 0, 0, 0])
            for n, field in enumerate(("inputTokens", "outputTokens", "costMinorUnits", "steps")):
                held[n] += row[field]
        answer = get(manage_a, groupBy=group_by, **DEC)
        got = {
            r[key]: [r["inputTokens"], r["outputTokens"], r["costMinorUnits"], r["steps"]]
            for r in answer["rows"]
        }
        assert got == expected, group_by
        assert answer["totals"] == full["totals"], group_by


def test_a_rebuild_gives_the_rollups_ingest_wrote(ingest_a, tenant_a, fed):
    admit(ingest_a, "o1")
    outcome = {
        "status": "DONE",
        "messages": [],
        "steps": 3,
        "usage": {"inputTokens": 7, "outputTokens": 7, "costMinorUnits": 7},
        "traceIds": [],
    }
    assert ingest_a.post("/api/v1/runs/o1/outcome", outcome).status_code == 200
    assert UsageAdjustment.objects.filter(run__external_id="o1").count() == 1
    before, before_by = _rollup(tenant_a), _by_rollup(tenant_a)
    assert len(before) > 3
    usage_rollups_rebuild(tenant=tenant_a)
    assert _rollup(tenant_a) == before
    assert _by_rollup(tenant_a) == before_by == _by_from_daily(tenant_a)


def test_changing_the_time_zone_and_rebuilding_moves_the_days(manage_a, ingest_a, tenant_a):
    admit(ingest_a, "late")
    post_events(ingest_a, "late", step(1, 1, usage=(1, 1, 9), at="2026-12-02T23:30:00Z"))
    assert [r["day"] for r in get(manage_a, **DEC)["rows"]] == ["2026-12-02"]
    Tenant.objects.filter(pk=tenant_a.pk).update(time_zone="Asia/Kolkata")  # +05:30
    tenant_a.refresh_from_db()
    usage_rollups_rebuild(tenant=tenant_a)
    assert [r["day"] for r in get(manage_a, **DEC)["rows"]] == ["2026-12-03"]


def test_the_upgrade_rebuilds_rollups_keeping_the_usage_no_step_carries(ingest_a, tenant_a, fed):
    import importlib

    from django.apps import apps

    admit(ingest_a, "o1")
    outcome = {
        "status": "DONE",
        "messages": [],
        "steps": 2,
        "usage": {"inputTokens": 7, "outputTokens": 7, "costMinorUnits": 7},
        "traceIds": [],
    }
    ingest_a.post("/api/v1/runs/o1/outcome", outcome)
    totals = UsageDaily.objects.filter(tenant=tenant_a).aggregate(
        c=Sum("cost_minor_units"), s=Sum("steps")
    )
    # As before the upgrade: no adjustment rows, and rollups keyed some other way.
    UsageAdjustment.objects.all().delete()
    UsageDaily.objects.filter(tenant=tenant_a).update(agent_id="old-key")
    migration = importlib.import_module("runs.migrations.0003_usage_rollups_rebuild")
    migration.forwards(apps, None)
    after = UsageDaily.objects.filter(tenant=tenant_a)
    assert after.aggregate(c=Sum("cost_minor_units"), s=Sum("steps")) == totals
    assert not after.filter(agent_id="old-key").exists()
    adjustment = UsageAdjustment.objects.get()
    assert (adjustment.run.external_id, adjustment.cost_minor_units, adjustment.steps) == (
        "o1",
        7,
        2,
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_ingest_from_four_runtimes_sums_exactly_in_every_grouping(
    tenant_a, lead_a, request
):
    """4 runtimes (threads, each its own connection) ingest into runs that share rollup rows
    (same principal, agent, model and day) at once; every grouping's totals then equal a SUM
    over the steps."""
    if connection.settings_dict["OPTIONS"].get("pool"):
        pool = connection.pool
        request.addfinalizer(lambda sizes=(pool.min_size, pool.max_size): pool.resize(*sizes))
        pool.resize(min_size=pool.min_size, max_size=pool.max_size + 8)
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice")
    alice.teams.add(Team.objects.create(tenant=tenant_a, name="support"))
    ingest_key = make_key(tenant_a, scopes=("ingest",))
    runtimes, batches = 4, 15
    barrier = threading.Barrier(runtimes, timeout=60)
    errors = []

    def runtime(i):
        api = ApiClient(Client(), ingest_key)
        try:
            admit(api, f"c{i}", principal="alice" if i % 2 else "bob")
            barrier.wait()
            for b in range(batches):
                events = []
                for n in range(3):
                    number = 3 * b + n + 1
                    events += step(
                        2 * number - 1,
                        number,
                        usage=(i + n, 2, 10 + i),
                        model=f"m{n % 2}",
                        at=f"2026-12-0{1 + b % 3}T12:00:00Z",
                    )
                post_events(api, f"c{i}", events)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=runtime, args=(i,)) for i in range(runtimes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    steps = Step.objects.filter(run__tenant=tenant_a).aggregate(
        i=Sum("input_tokens"), o=Sum("output_tokens"), c=Sum("cost_minor_units")
    )
    expected = {
        "inputTokens": steps["i"],
        "outputTokens": steps["o"],
        "costMinorUnits": steps["c"],
        "steps": runtimes * batches * 3,
    }
    manage = ApiClient(Client(), make_key(tenant_a, scopes=("manage",), principal=lead_a))
    for group_by in ("day", "principal", "agent", "model", "team", "day,principal,agent,model"):
        answer = get(manage, groupBy=group_by, **DEC)
        assert answer["totals"] == expected, group_by
        if group_by != "team":
            for field, total in expected.items():
                assert sum(r[field] for r in answer["rows"]) == total, (group_by, field)
    by_principal = {
        r["principalId"]: r["costMinorUnits"]
        for r in get(manage, groupBy="principal", **DEC)["rows"]
    }
    assert by_principal == {"bob": batches * 3 * (10 + 12), "alice": batches * 3 * (11 + 13)}
    team = {r["team"]: r["costMinorUnits"] for r in get(manage, groupBy="team", **DEC)["rows"]}
    assert team == {"support": by_principal["alice"], None: by_principal["bob"]}
