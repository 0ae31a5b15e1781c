"""Alerts: a threshold reached fires once per budget per period, in the ingest transaction
that records the usage (events, snapshots, outcomes), never for a batch that fails, and once
however many runtimes cross it at the same moment (PostgreSQL)."""

import threading
import time

import pytest
from django.db import connection
from django.test import Client

from budgets import services
from budgets import spend as budget_spend
from budgets.models import BudgetAlert
from budgets.services import budget_archive, budget_create
from console.models import Team
from tests.support.api import ApiClient
from tests.support.budgets import admit, post_events, spend, step
from tests.support.factories import PrincipalFactory, make_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def delivered(monkeypatch):
    """Every alert handed to the delivery point, in order."""
    seen = []
    monkeypatch.setattr(services, "_alert_deliver", seen.append)
    return seen


def budget(tenant, **fields):
    base = {
        "name": "b",
        "scope": {"type": "tenant", "id": None},
        "period": "month",
        "ceiling_minor_units": 100,
    }
    return budget_create(tenant=tenant, fields={**base, **fields})


def alerts(b=None):
    qs = BudgetAlert.objects.all() if b is None else BudgetAlert.objects.filter(budget=b)
    return list(qs.order_by("threshold").values_list("threshold", "spent_minor_units"))


def test_80_then_100_each_fire_once(ingest_a, tenant_a, delivered):
    b = budget(tenant_a)
    admit(ingest_a, "r1")
    spend(ingest_a, "r1", usage=(1, 1, 50))
    assert alerts() == [] and delivered == []
    spend(ingest_a, "r1", usage=(1, 1, 35))
    assert alerts(b) == [(80, 85)]
    spend(ingest_a, "r1", usage=(1, 1, 5))
    assert alerts(b) == [(80, 85)]
    spend(ingest_a, "r1", usage=(1, 1, 20))
    assert alerts(b) == [(80, 85), (100, 110)]
    spend(ingest_a, "r1", usage=(1, 1, 500))
    assert alerts(b) == [(80, 85), (100, 110)]
    assert [(a.threshold, a.budget_id) for a in delivered] == [(80, b.pk), (100, b.pk)]
    alert = BudgetAlert.objects.get(threshold=80)
    assert alert.period_start.isoformat().startswith(alert.at.date().replace(day=1).isoformat())


def test_one_batch_reaching_two_thresholds_fires_both(ingest_a, tenant_a, delivered):
    budget(tenant_a, thresholds=[50, 80, 100, 200])
    admit(ingest_a, "r1")
    spend(ingest_a, "r1", steps=2, usage=(1, 1, 60))
    assert alerts() == [(50, 120), (80, 120), (100, 120)]
    assert len(delivered) == 3


def test_only_budgets_that_apply_to_the_run_fire(ingest_a, tenant_a, delivered):
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice")
    alice.teams.add(Team.objects.create(tenant=tenant_a, name="support"))
    PrincipalFactory(tenant=tenant_a, external_id="bob")
    team = budget(tenant_a, name="team", scope={"type": "team", "id": "support"})
    bob = budget(tenant_a, name="bob", scope={"type": "principal", "id": "bob"})
    agent = budget(tenant_a, name="agent", scope={"type": "agent", "id": "support-bot"})
    admit(ingest_a, "r1", principal="alice")
    spend(ingest_a, "r1", usage=(1, 1, 90))
    assert alerts(team) == [(80, 90)]
    assert alerts(agent) == [(80, 90)]
    assert alerts(bob) == []


def test_each_period_fires_again(ingest_a, tenant_a, delivered):
    b = budget(tenant_a, period="day", thresholds=[100])
    admit(ingest_a, "r1")
    post_events(ingest_a, "r1", step(1, 1, usage=(1, 1, 100), at="2026-12-02T10:00:00Z"))
    post_events(ingest_a, "r1", step(3, 2, usage=(1, 1, 100), at="2026-12-02T11:00:00Z"))
    post_events(ingest_a, "r1", step(5, 3, usage=(1, 1, 100), at="2026-12-03T10:00:00Z"))
    starts = sorted(a.period_start.date().isoformat() for a in BudgetAlert.objects.filter(budget=b))
    assert starts == ["2026-12-02", "2026-12-03"]


def test_periods_start_at_local_midnight(ingest_a, tenant_a, delivered):
    tenant_a.time_zone = "Europe/Berlin"
    tenant_a.save()
    budget(tenant_a, period="day", thresholds=[100])
    admit(ingest_a, "r1")
    post_events(ingest_a, "r1", step(1, 1, usage=(1, 1, 100), at="2026-12-02T23:30:00Z"))
    alert = BudgetAlert.objects.get()
    assert alert.period_start.isoformat() == "2026-12-02T23:00:00+00:00"  # Dec 3, 00:00 CET


def test_a_deleted_budget_fires_nothing(ingest_a, tenant_a, delivered):
    budget_archive(budget=budget(tenant_a))
    admit(ingest_a, "r1")
    spend(ingest_a, "r1", usage=(1, 1, 500))
    assert alerts() == [] and delivered == []


def test_a_batch_that_fails_writes_no_alert(ingest_a, tenant_a, delivered):
    budget(tenant_a)
    admit(ingest_a, "r1")
    events = [
        *step(1, 1, usage=(1, 1, 500)),
        {"seq": 3, "type": "run.finished", "status": "done"},
        {"seq": 4, "type": "todos.updated", "todos": []},  # after run.finished: 409
    ]
    response = ingest_a.post("/api/v1/runs/r1/events", {"events": events})
    assert response.status_code == 409
    assert alerts() == []


def test_snapshots_and_outcomes_fire_alerts_too(ingest_a, tenant_a, delivered):
    from tests.support.states import state, usage
    from tests.support.states import step as state_step

    b = budget(tenant_a, thresholds=[50, 100])
    body = state("s1", steps=[state_step(1, u=(1, 1, 60))], usage=usage(1, 1, 60))
    body["steps"][0]["finishedAt"] = None
    del body["steps"][0]["finishedAt"]
    body["usage"] = usage(1, 1, 60)  # usage no step carries: the snapshot's growth
    assert ingest_a.put("/api/v1/runs/s1/state", body).status_code == 201
    assert alerts(b) == [(50, 60)]
    admit(ingest_a, "o1")
    outcome = {
        "status": "DONE",
        "messages": [],
        "steps": 1,
        "traceIds": [],
        "usage": {"inputTokens": 1, "outputTokens": 1, "costMinorUnits": 45},
    }
    assert ingest_a.post("/api/v1/runs/o1/outcome", outcome).status_code == 200
    assert alerts(b) == [(50, 60), (100, 105)]


def test_a_batch_without_cost_does_not_look_at_budgets(ingest_a, tenant_a, on_postgres):
    from django.test.utils import CaptureQueriesContext

    budget(tenant_a)
    admit(ingest_a, "r1")

    def budget_queries(cost):
        with CaptureQueriesContext(connection) as queries:
            spend(ingest_a, "r1", usage=(1, 1, cost))
        return [q["sql"] for q in queries if "budgets_" in q["sql"]]

    assert budget_queries(0) == []
    locked = budget_queries(1)
    assert len(locked) == 1  # the applying budgets, locked; the spend is read from rollups
    assert "FOR UPDATE" in locked[0] or not on_postgres


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_crossings_from_four_runtimes_fire_once(tenant_a, request, monkeypatch):
    """4 runtimes post, at the same moment, a step each that together cross 50 % and 100 %
    of a shared budget; each threshold fires exactly once. Five rounds (a budget of their
    own agent each)."""
    if connection.settings_dict["OPTIONS"].get("pool"):
        pool = connection.pool
        request.addfinalizer(lambda sizes=(pool.min_size, pool.max_size): pool.resize(*sizes))
        pool.resize(min_size=pool.min_size, max_size=pool.max_size + 8)
    seen, lock = [], threading.Lock()

    def deliver(alert):
        with lock:
            seen.append((alert.budget_id, alert.threshold))

    monkeypatch.setattr(services, "_alert_deliver", deliver)
    # Widen the race: each batch pauses between adding its usage and reading the spend, so
    # without the budget lock the batches would each read only their own share and miss.
    read = budget_spend.spend_in_windows

    def slow_read(**kwargs):
        time.sleep(0.4)
        return read(**kwargs)

    monkeypatch.setattr(budget_spend, "spend_in_windows", slow_read)
    key = make_key(tenant_a, scopes=("ingest",))
    runtimes, rounds = 4, 5
    for round_ in range(rounds):
        agent = f"agent-{round_}"
        for i in range(runtimes):
            admit(ApiClient(Client(), key), f"c{round_}-{i}", principal=f"p{i}", agent=agent)
        b = budget(
            tenant_a,
            name=agent,
            scope={"type": "agent", "id": agent},
            period="day",
            thresholds=[50, 100],
            ceiling_minor_units=100,
        )
        barrier = threading.Barrier(runtimes, timeout=60)
        errors = []

        def runtime(i, run_id, barrier=barrier, errors=errors, agent=agent):
            api = ApiClient(Client(), key)
            try:
                barrier.wait()
                # Each adds 30: 30, 60 (50 % reached), 90, 120 (100 % reached).
                post_events(api, run_id, step(1, 1, usage=(1, 1, 30), agent=agent))
            except Exception as error:  # noqa: BLE001 - reported below
                errors.append(error)
            finally:
                connection.close()

        threads = [
            threading.Thread(target=runtime, args=(i, f"c{round_}-{i}")) for i in range(runtimes)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        assert [t for t, _ in alerts(b)] == [50, 100], round_
        # Each alert records the spend that reached it, as the crossing batch read it.
        assert [spent for _, spent in alerts(b)] == [60, 120], round_
    assert len(seen) == len(set(seen)) == 2 * rounds  # none delivered twice


def test_a_crossing_notifies_the_leads_mails_them_and_queues_a_signed_webhook(
    ingest_a, tenant_a, settings
):
    from approvals.models import Webhook, WebhookDelivery
    from notifications.models import Notification, OutboundEmail

    settings.GAVEL_WEBHOOK_ALLOW_HTTP = True
    lena = PrincipalFactory(tenant=tenant_a, external_id="lena", email="lena@a.example")
    Webhook.objects.create(
        tenant=tenant_a,
        url="http://127.0.0.1:9/hook",
        secret="s",
        events=["budget.threshold_crossed"],
    )
    b = budget(tenant_a, leads=["lena"])
    admit(ingest_a, "r1")
    spend(ingest_a, "r1", usage=(1, 1, 85))
    note = Notification.objects.get(principal=lena)
    assert note.kind == "budget.threshold_crossed" and "80%" in note.title
    assert note.url.endswith(f"/budgets/{b.public_id}/")
    assert OutboundEmail.objects.filter(to="lena@a.example").count() == 1
    delivery = WebhookDelivery.objects.get(event="budget.threshold_crossed")
    assert delivery.payload["threshold"] == 80
    assert delivery.payload["spentMinorUnits"] == 85
    assert delivery.payload["budget"]["id"] == b.public_id
    spend(ingest_a, "r1", usage=(1, 1, 1))
    assert Notification.objects.filter(principal=lena).count() == 1


def test_a_budget_made_already_past_thresholds_gets_those_alerts_at_once(
    ingest_a, tenant_a, delivered
):
    """UX audit: a budget created 155% over lit every pill yet said "No threshold reached yet"."""
    admit(ingest_a, "r1")
    spend(ingest_a, "r1", usage=(1, 1, 155))
    b = budget(tenant_a, thresholds=[50, 80, 100])
    assert alerts(b) == [(50, 155), (80, 155), (100, 155)]
    assert [a.threshold for a in delivered] == [50, 80, 100]
    services.budget_update(budget=b, fields={"ceiling_minor_units": 1000})  # none newly reached
    assert len(alerts(b)) == 3 and len(delivered) == 3


def test_alert_notifications_read_as_money_in_the_tenants_currency(ingest_a, tenant_a, admin_a):
    from notifications.models import Notification

    tenant_a.currency = "EUR"
    tenant_a.save(update_fields=["currency"])
    budget(tenant_a, thresholds=[100], ceiling_minor_units=15)
    admit(ingest_a, "r1")
    spend(ingest_a, "r1", usage=(1, 1, 15))
    body = Notification.objects.get(kind="budget.threshold_crossed").body
    assert "€0.15 of €0.15" in body and "minor units" not in body
