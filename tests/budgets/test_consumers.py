"""The budgets pages' socket (/ws/budgets/ and /ws/budgets/<budgetId>/) on the full ASGI app:
authorized before it subscribes, and an ingest batch with usage pushes the pages' own partials
(the new spend, the charts' data, the alerts) once per event per audience."""

import json
import re
from unittest import mock

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import Client
from django.utils import timezone

from budgets import rules
from budgets.services import budget_create
from console.models import Role, Team
from console.web.sockets import RENDERS
from tests.support.api import ApiClient
from tests.support.budgets import step as step_events
from tests.support.factories import PrincipalFactory, make_key
from tests.support.sockets import close_code, frames_until, hello, open_socket

pytestmark = pytest.mark.django_db(transaction=True)
RUN = "run_spend_1"


@pytest.fixture(autouse=True)
def _a_fresh_pool():
    """Each test starts and ends with a fresh connection pool: pooled connections that the
    worker threads of earlier tests' event loops never gave back (tests/conftest.py says why)
    count against the pool's maximum, and after a few files of socket tests the pool is empty
    and a socket's first read waits out its timeout."""
    if connection.vendor == "postgresql":
        connection.close_pool()
    yield
    if connection.vendor == "postgresql":
        connection.close_pool()


def _setup(tenant, lead):
    support = Team.objects.create(tenant=tenant, name="support")
    lead.teams.add(support)
    budget = budget_create(
        tenant=tenant,
        fields={
            "name": "Support, weekly",
            "scope": {"type": "team", "id": "support"},
            "period": "week",
            "ceiling_minor_units": 1000,
            "thresholds": [50, 100],
        },
    )
    api = ApiClient(Client(), make_key(tenant, scopes=("ingest",)))
    body = {"id": RUN, "agentId": "support-bot", "agentVersion": 1}
    body["principalId"] = lead.external_id
    assert api.post("/api/v1/runs", body).status_code == 201
    return budget, api


async def setup(tenant, lead):
    return await sync_to_async(_setup)(tenant, lead)


def _step(api, seq: int, number: int, cost: int):
    events = [
        {
            "seq": seq,
            "type": "step.started",
            "step": number,
            "agentId": "support-bot",
            "model": "m",
        },
        {
            "seq": seq + 1,
            "type": "step.finished",
            "step": number,
            "model": "model-a",
            "usage": {"inputTokens": 100, "outputTokens": 20, "costMinorUnits": cost},
        },
    ]
    response = api.post(f"/api/v1/runs/{RUN}/events", {"events": events})
    assert response.status_code == 200, response.content


async def step(api, seq: int, number: int, cost: int):
    await sync_to_async(_step)(api, seq, number, cost)


def has(text):
    return lambda frame: text in frame


def burn_data(frame: str, budget) -> dict:
    data_id = f"burn-{budget.public_id}-data"
    match = re.search(rf'<script id="{data_id}" type="application/json">(.*?)</script>', frame)
    return json.loads(match.group(1))


async def test_anonymous_and_a_viewer_without_view_budgets_are_refused_4403(tenant_a, viewer_a):
    anonymous, _ = await open_socket("/ws/budgets/")
    assert await close_code(anonymous) == 4403
    socket, _ = await open_socket("/ws/budgets/", viewer_a)
    assert await close_code(socket) == 4403


async def test_a_role_without_view_budgets_is_refused_on_a_budget_of_its_tenant(
    tenant_a, lead_a, viewer_a
):
    budget, _api = await setup(tenant_a, lead_a)
    socket, _ = await open_socket(f"/ws/budgets/{budget.public_id}/", viewer_a)
    assert await close_code(socket) == 4403


async def test_another_tenants_budget_is_4404_like_a_missing_one(tenant_a, lead_a, tenant_b):
    budget, _api = await setup(tenant_a, lead_a)
    lead_b = await sync_to_async(PrincipalFactory)(tenant=tenant_b, role="lead", password="p-2")
    other, _ = await open_socket(f"/ws/budgets/{budget.public_id}/", lead_b)
    assert await close_code(other) == 4404
    missing, _ = await open_socket("/ws/budgets/bdg_nope/", lead_a)
    assert await close_code(missing) == 4404


async def test_a_foreign_origin_is_refused(tenant_a, lead_a):
    _socket, connected = await open_socket("/ws/budgets/", lead_a, origin=b"https://evil.example")
    assert not connected


async def test_a_batch_with_usage_pushes_the_new_spend_and_chart_to_the_budgets_page(
    tenant_a, lead_a
):
    budget, api = await setup(tenant_a, lead_a)
    socket, connected = await open_socket("/ws/budgets/", lead_a)
    assert connected
    state = await hello(socket)
    assert any('id="budget-list"' in frame for frame in state)
    await step(api, 1, 1, 640)
    frames = await frames_until(socket, has("$6.40"))
    push = frames[-1]
    assert '<section id="budget-list"' in push and 'id="usage-principal"' in push
    assert 'id="usage-summary"' in push
    data = burn_data(push, budget)
    assert data["spent"][-1]["y"] == 640 and data["spent"][-1]["v"] == "$6.40"
    assert "64.0%" in push  # of the 1000 ceiling; the 50% threshold reached
    await socket.disconnect()


async def test_a_batch_without_usage_pushes_nothing(tenant_a, lead_a):
    _budget, api = await setup(tenant_a, lead_a)
    socket, _ = await open_socket("/ws/budgets/", lead_a)
    await hello(socket)
    todos = {"seq": 1, "type": "todos.updated", "todos": []}
    response = await sync_to_async(api.post)(f"/api/v1/runs/{RUN}/events", {"events": [todos]})
    assert response.status_code == 200
    assert await socket.receive_nothing(timeout=0.5)
    await socket.disconnect()


async def test_a_range_without_the_day_gets_the_budgets_but_not_the_breakdowns(tenant_a, lead_a):
    _budget, api = await setup(tenant_a, lead_a)
    socket, _ = await open_socket("/ws/budgets/?from=2020-01-01&to=2020-01-31", lead_a)
    state = await hello(socket)
    assert any('id="usage-team"' in frame for frame in state)  # the state has every part
    await step(api, 1, 1, 5)
    frames = await frames_until(socket, has('id="budget-list"'))
    assert 'id="usage-team"' not in frames[-1]  # the range does not hold today
    await socket.disconnect()


async def test_the_budget_page_gets_its_card_and_new_alerts(tenant_a, lead_a):
    budget, api = await setup(tenant_a, lead_a)
    socket, _ = await open_socket(f"/ws/budgets/{budget.public_id}/", lead_a)
    state = await hello(socket)
    assert any("No threshold reached yet." in frame for frame in state)
    await step(api, 1, 1, 1200)  # past 50% and 100% of the 1000 ceiling
    frames = await frames_until(socket, has('id="budget-alerts"'))
    push = frames[-1]
    assert f'<article id="budget-{budget.public_id}"' in push and "Over budget" in push
    alerts = push.split('id="budget-alerts"')[1]
    assert "50%" in alerts and "100%" in alerts and "$12.00" in alerts
    await socket.disconnect()


async def test_one_event_renders_once_per_audience_not_per_socket(tenant_a, lead_a, admin_a):
    _budget, api = await setup(tenant_a, lead_a)
    role = await sync_to_async(Role.objects.create)(
        tenant=tenant_a, name="budget-watcher", capabilities=["view_budgets"]
    )
    watcher = await sync_to_async(PrincipalFactory)(tenant=tenant_a, role=None, password="w-1")
    await sync_to_async(watcher.roles.add)(role)
    sockets = []
    for principal in [lead_a, admin_a, watcher] * 2:
        sockets.append((await open_socket("/ws/budgets/", principal))[0])
    other_range = (await open_socket("/ws/budgets/?from=2020-01-01&to=2020-01-02", lead_a))[0]
    for socket in [*sockets, other_range]:
        await hello(socket)
    before = RENDERS.computed
    await step(api, 1, 1, 77)
    for socket in [*sockets, other_range]:
        await frames_until(socket, has("$0.77"))
    assert RENDERS.computed - before == 2  # two ranges; leads, admins and watchers alike
    for socket in [*sockets, other_range]:
        await socket.disconnect()


def test_one_budgets_changed_per_batch_with_usage_ids_and_facts_only(
    tenant_a, lead_a, django_capture_on_commit_callbacks
):
    _budget, api = _setup(tenant_a, lead_a)
    with (
        mock.patch("console.live.realtime._send") as send,
        django_capture_on_commit_callbacks(execute=True),
    ):
        events = []
        for n in range(3):  # three steps in one batch: one event
            events += step_events(1 + 2 * n, n + 1, usage=(1, 1, 3))
        assert api.post(f"/api/v1/runs/{RUN}/events", {"events": events}).status_code == 200
        todos = {"seq": 7, "type": "todos.updated", "todos": []}
        assert api.post(f"/api/v1/runs/{RUN}/events", {"events": [todos]}).status_code == 200
    sent = [(g, message) for (groups, message), _ in send.call_args_list for g in groups]
    changed = [(g, m) for g, m in sent if m["type"] == "budgets.changed"]
    today = rules.local_today(timezone.now(), rules.zone(tenant_a.time_zone)).isoformat()
    assert len(changed) == 1
    group, message = changed[0]
    assert group == f"budgets.{tenant_a.pk}"
    assert set(message) == {"type", "id", "tenant", "days"}
    assert message["tenant"] == tenant_a.pk and message["days"] == [today]
    json.dumps(message)
