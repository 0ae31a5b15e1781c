"""Several budgets of one kind read together (issue 29): three agents', three principals', two
teams' and the tenant's budget, read by every reader at once, answer what each budget reads
alone. The spend query once merged its scopes by SQL text, so only the first agent's (or
principal's, or team's) key reached the WHERE and every other budget of that kind read zero.

Runs on whichever database the suite runs on (SQLite by default, PostgreSQL in CI)."""

import json
import re
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals.models import Approval
from budgets import spend
from budgets.models import Budget, BudgetAlert
from budgets.services import budget_create
from console.core.formatting import money
from console.models import Team
from runs.models import Run
from runs.services.writes import _usage_daily_add
from tests.support.api import ApiClient
from tests.support.budgets import admit, post_events
from tests.support.budgets import spend as spend_on
from tests.support.factories import PrincipalFactory, make_key

pytestmark = pytest.mark.django_db

# run id → (agent, principal, cost); bob is in both teams
RUNS = {
    "r-a": ("agent-a", "alice", 111),
    "r-b": ("agent-b", "bob", 1234),
    "r-c": ("agent-c", "carol", 2222),
}
CEILING = 5000
EXPECTED = {
    "agent agent-a": 111,
    "agent agent-b": 1234,
    "agent agent-c": 2222,
    "principal alice": 111,
    "principal bob": 1234,
    "principal carol": 2222,
    "team support": 111 + 1234,
    "team sales": 1234 + 2222,
    "tenant": 111 + 1234 + 2222,
}


def held(api, run_id, seq):
    post_events(
        api,
        run_id,
        [
            {
                "seq": seq,
                "type": "approval.requested",
                "step": 1,
                "calls": [
                    {
                        "toolCallId": f"call-{run_id}",
                        "toolName": "send_email",
                        "arguments": {"to": "someone"},
                        "reason": "mail",
                        "rejectionMessage": "no",
                    }
                ],
            }
        ],
    )


def scope_of(name: str) -> dict:
    kind, _, key = name.partition(" ")
    return {"type": kind, "id": key or None}


@pytest.fixture
def world(tenant_a, ingest_a):
    """Three runs of three agents and principals with spend, each holding one call, and
    every budget of EXPECTED (thresholds at 10 % so every one of them crosses)."""
    principals = {name: PrincipalFactory(tenant=tenant_a, external_id=name) for name in RUNS_P}
    support = Team.objects.create(tenant=tenant_a, name="support")
    sales = Team.objects.create(tenant=tenant_a, name="sales")
    principals["alice"].teams.add(support)
    principals["bob"].teams.add(support, sales)
    principals["carol"].teams.add(sales)
    for run_id, (agent, principal, _cost) in RUNS.items():
        admit(ingest_a, run_id, agent=agent, principal=principal)
    budgets = {
        name: budget_create(
            tenant=tenant_a,
            fields={
                "name": name,
                "scope": scope_of(name),
                "period": "month",
                "ceiling_minor_units": CEILING,
                "thresholds": [10],
            },
        )
        for name in EXPECTED
    }
    for run_id, (agent, _principal, cost) in RUNS.items():
        spend_on(ingest_a, run_id, usage=(1, 1, cost), agent=agent)
        held(ingest_a, run_id, 3)
    return budgets


RUNS_P = [principal for _agent, principal, _cost in RUNS.values()]


def test_the_budgets_api_lists_each_budgets_own_spend(world, tenant_a, lead_a, client):
    api = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=lead_a))
    listed = {b["name"]: b["current"] for b in api.get("/api/v1/budgets").json()["items"]}
    assert {name: c["spentMinorUnits"] for name, c in listed.items()} == EXPECTED
    for name, budget in world.items():
        alone = api.get(f"/api/v1/budgets/{budget.public_id}").json()["current"]
        assert listed[name] == alone, name


def test_approval_resources_read_every_applying_budget_as_it_reads_alone(
    world, tenant_a, reviewer_a, client
):
    api = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=reviewer_a))
    items = api.get("/api/v1/approvals", status="pending").json()["items"]
    assert len(items) == 3
    for item in items:
        remaining = {b["name"]: b["remainingMinorUnits"] for b in item["budgets"]}
        assert remaining == {name: CEILING - EXPECTED[name] for name in remaining}, item["runId"]
        assert {b["name"]: b["percent"] for b in item["budgets"]} == {
            name: round(EXPECTED[name] / CEILING * 100, 2) for name in remaining
        }
        run = Run.objects.get(tenant=tenant_a, external_id=item["runId"])
        alone = spend.run_costs(runs=[run])[run.pk]["budgets"]
        assert [(b["name"], b["remaining_minor_units"]) for b in alone] == [
            (b["name"], b["remainingMinorUnits"]) for b in item["budgets"]
        ]
        assert item["runCostMinorUnits"] == RUNS[item["runId"]][2]


def test_run_costs_of_many_runs_equal_each_run_read_alone(world, tenant_a):
    runs = list(Run.objects.filter(tenant=tenant_a))
    together = spend.run_costs(runs=runs)
    for run in runs:
        assert together[run.pk] == spend.run_costs(runs=[run])[run.pk], run.external_id
    bob = Run.objects.get(tenant=tenant_a, external_id="r-b")
    names = [b["name"] for b in together[bob.pk]["budgets"]]
    assert names == ["agent agent-b", "principal bob", "team sales", "team support", "tenant"]


def test_inbox_cards_show_each_budgets_remaining_money(world, reviewer_a):
    browser = Client()
    browser.force_login(reviewer_a.user)
    pending = list(Approval.objects.filter(status="pending").values_list("public_id", flat=True))
    assert len(pending) == 3
    desk = browser.get("/approvals/").content.decode()
    assert all(f'id="desk-row-{p}"' in desk for p in pending)
    # Each call's whole card (the desk's pane) shows the money left in each of its budgets.
    html = "".join(
        browser.get(f"/approvals/{p}/", headers={"HX-Request": "true"}).content.decode()
        for p in pending
    )
    for name, spent in EXPECTED.items():
        assert money(CEILING - spent, "USD") in html, name


def test_the_budget_check_reads_both_team_budgets_of_a_run(world, ingest_a):
    answer = ingest_a.post(
        "/api/v1/budgets/check", {"runId": "r-b", "estimatedCostMinorUnits": 0}
    ).json()
    spent = {b["name"]: b["spentMinorUnits"] for b in answer["budgets"]}
    assert spent == {
        name: EXPECTED[name]
        for name in ("agent agent-b", "principal bob", "team sales", "team support", "tenant")
    }


def test_the_budgets_page_charts_each_budgets_own_spend(world, lead_a):
    browser = Client()
    browser.force_login(lead_a.user)
    html = browser.get("/budgets/").content.decode()
    for name, budget in world.items():
        match = re.search(
            rf'<script id="burn-{budget.public_id}-data" type="application/json">(.*?)</script>',
            html,
        )
        assert match, name
        assert json.loads(match.group(1))["spent"][-1]["y"] == EXPECTED[name], name


def test_alerts_computed_in_one_batch_fire_for_each_budget_of_a_kind(world):
    """bob's run crossed 10 % of both team budgets in one ingest batch: both alerts carry the
    spend of their own team when they fired (the second team's read zero before)."""
    fired = {a.budget.name: a.spent_minor_units for a in BudgetAlert.objects.all()}
    assert set(fired) == {name for name, spent in EXPECTED.items() if spent >= CEILING // 10}
    assert fired["team support"] == 111 + 1234  # crossed with bob's step
    assert fired["team sales"] == 1234  # crossed with bob's step, before carol's


# --- the property: batched == one by one, always ---

AGENTS = ["ag-1", "ag-2", "ag-3"]
PEOPLE = ["p-1", "p-2", "p-3"]
TEAMS = ["t-1", "t-2"]
SCOPES = (
    [("agent", a) for a in AGENTS]
    + [("principal", p) for p in PEOPLE]
    + [("team", t) for t in TEAMS]
    + [("tenant", None)]
)
usage_rows = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=40),  # days ago
        st.sampled_from(PEOPLE + [""]),
        st.sampled_from(AGENTS),
        st.sampled_from(["m-1", "m-2"]),
        st.integers(min_value=0, max_value=10_000),
    ),
    max_size=25,
)
budget_specs = st.lists(
    st.tuples(st.sampled_from(SCOPES), st.sampled_from(["day", "week", "month"])),
    min_size=1,
    max_size=12,
)
memberships = st.sets(st.tuples(st.sampled_from(PEOPLE), st.sampled_from(TEAMS)))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=usage_rows, specs=budget_specs, members=memberships)
def test_batched_spend_equals_one_by_one_spend_for_any_mix(
    tenant_a, ingest_a, rows, specs, members
):
    with transaction.atomic():
        principals = {p: PrincipalFactory(tenant=tenant_a, external_id=p) for p in PEOPLE}
        teams = {t: Team.objects.create(tenant=tenant_a, name=t) for t in TEAMS}
        for person, team in members:
            principals[person].teams.add(teams[team])
        for n, agent in enumerate(AGENTS):  # the agents exist once a run names them
            admit(ingest_a, f"prop-{n}", agent=agent, principal=PEOPLE[0])
        today = timezone.now().date()
        for days_ago, person, agent, model, cost in rows:
            key = (today - timedelta(days=days_ago), person, agent, model)
            _usage_daily_add(tenant_id=tenant_a.pk, rows={key: (cost, cost, cost, 1)})
        budgets = [
            budget_create(
                tenant=tenant_a,
                fields={
                    "name": f"b{n}",
                    "scope": {"type": kind, "id": key},
                    "period": period,
                    "ceiling_minor_units": 1000,
                    "thresholds": [],
                },
            )
            for n, ((kind, key), period) in enumerate(specs)
        ]
        budgets = list(
            Budget.objects.filter(pk__in=[b.pk for b in budgets]).select_related(
                *spend.LIST_RELATED
            )
        )
        now = timezone.now()  # one instant for both reads: the projection moves with time
        together = spend.budgets_current(budgets=budgets, now=now)
        for budget in budgets:
            alone = spend.budgets_current(budgets=[budget], now=now)
            assert together[budget.pk] == alone[budget.pk]
        windows = [
            (b.pk, b, today - timedelta(days=30), today + timedelta(days=1)) for b in budgets
        ]
        per_day = spend.spend_per_day_in_windows(tenant_id=tenant_a.pk, windows=windows)
        for window in windows:
            alone = spend.spend_per_day_in_windows(tenant_id=tenant_a.pk, windows=[window])
            assert per_day[window[0]] == alone[window[0]]
        transaction.set_rollback(True)
