"""A runtime's hot reads compiled once (console/core/kept.py): the run resource, a run read
by its wire id (plain and locked) and the budgets that apply to a run answer exactly what the
ORM answers, never another tenant's rows, in fewer statements where a read was doubled."""

from unittest import mock

import pytest
from django.db import connection, transaction
from django.db.models.sql.compiler import SQLCompiler
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from budgets.models import Budget
from budgets.spend import budgets_applying
from console.core.errors import NotFound
from console.core.kept import Kept
from console.models import Team
from runs import access, selectors
from runs.models import TurnVerdict
from tests.support.factories import (
    AgentFactory,
    ApprovalFactory,
    ConversationFactory,
    PrincipalFactory,
    RunFactory,
)

pytestmark = pytest.mark.django_db


def _orm():
    return mock.patch.object(Kept, "enabled", False)


def _fields(obj) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


@pytest.fixture
def run_a(tenant_a):
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice@example.com")
    run = RunFactory(
        tenant=tenant_a,
        external_id="run_k",
        agent=AgentFactory(tenant=tenant_a, external_id="support-bot"),
        principal=alice,
        conversation=ConversationFactory(tenant=tenant_a, external_id="conv_k"),
        status="awaiting_approval",
        limits={"maxSteps": 20},
    )
    ApprovalFactory(run=run, tool_call_id="call_2", position=1, arguments={"n": [1, 2]})
    ApprovalFactory(run=run, tool_call_id="call_1", position=0, arguments={"to": "a@x"})
    ApprovalFactory(run=run, tool_call_id="call_3", position=2, status="approved")
    for turn, verdict, severity in (("2:0", "flagged", 1), ("1:0", "blocked", 2)):
        TurnVerdict.objects.create(
            run=run, turn=turn, severity=severity, verdict=verdict, guard="pii", reason="r"
        )
    return run


def test_the_run_resource_is_the_orms_in_fewer_statements(reviewer_a, run_a):
    selectors.run_get(viewer=reviewer_a, run_id="run_k")  # compiled on first use
    with _orm(), CaptureQueriesContext(connection) as orm_queries:
        orm = selectors.run_get(viewer=reviewer_a, run_id="run_k")
    with CaptureQueriesContext(connection) as kept_queries, _no_compile() as compiles:
        kept = selectors.run_get(viewer=reviewer_a, run_id="run_k")
    assert kept == orm
    assert [c["tool_call_id"] for c in kept["pending_calls"]] == ["call_1", "call_2"]
    assert list(kept["verdicts"]) == ["2:0", "1:0"]  # the order first recorded
    assert compiles.call_count == 0
    # The run was read twice (the viewer's read, then with its relations): now once.
    statements = [q["sql"] for q in kept_queries.captured_queries]
    assert len(statements) == len(orm_queries.captured_queries)
    assert sum(' FROM "runs_run" ' in sql for sql in statements) == 1


def _no_compile():
    return mock.patch.object(SQLCompiler, "as_sql", autospec=True, side_effect=SQLCompiler.as_sql)


def test_another_tenants_run_is_404_through_every_kept_read(reviewer_b, run_a, tenant_b):
    with pytest.raises(NotFound):
        selectors.run_get(viewer=reviewer_b, run_id="run_k")
    with pytest.raises(NotFound):
        access.run_in_tenant(tenant_id=tenant_b.pk, run_id="run_k")
    with transaction.atomic():
        assert access.run_locked(tenant_id=tenant_b.pk, run_id="run_k") is None


def test_a_run_read_by_its_wire_id_is_the_orms(run_a, tenant_a):
    got = access.run_in_tenant(tenant_id=tenant_a.pk, run_id="run_k")
    with _orm():
        orm = access.run_in_tenant(tenant_id=tenant_a.pk, run_id="run_k")
    assert got.get_deferred_fields() == orm.get_deferred_fields() == {"snapshot"}
    assert _fields(got) == _fields(orm) == _fields(run_a.__class__.objects.get(pk=run_a.pk))


def test_the_locked_run_is_the_orms(run_a, tenant_a):
    with transaction.atomic():
        got = access.run_locked(tenant_id=tenant_a.pk, run_id="run_k")
        with _orm():
            orm = access.run_locked(tenant_id=tenant_a.pk, run_id="run_k")
    assert _fields(got) == _fields(orm)
    assert got.rules_version == orm.rules_version
    assert _fields(got.principal) == _fields(orm.principal)
    assert _fields(got.tenant) == _fields(orm.tenant)
    if connection.features.has_select_for_update:
        assert "FOR UPDATE" in _locked_sql(tenant_a)


def _locked_sql(tenant) -> str:
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        access.run_locked(tenant_id=tenant.pk, run_id="run_k")
    return queries.captured_queries[-1]["sql"]


@pytest.fixture
def budgets(tenant_a, tenant_b, run_a):
    agent, other_agent = run_a.agent, AgentFactory(tenant=tenant_a, external_id="other-bot")
    team, other_team = (Team.objects.create(tenant=tenant_a, name=n) for n in ("zeta", "alpha"))
    run_a.principal.teams.add(team)
    bob = PrincipalFactory(tenant=tenant_a, external_id="bob@example.com")

    def budget(tenant, name, scope_type, **scope):
        return Budget.objects.create(
            tenant=tenant,
            name=name,
            scope_type=scope_type,
            period="month",
            ceiling_minor_units=1000,
            **scope,
        )

    applying = [
        budget(tenant_a, "tenant", "tenant"),
        budget(tenant_a, "agent", "agent", agent=agent),
        budget(tenant_a, "principal", "principal", principal=run_a.principal),
        budget(tenant_a, "team", "team", team=team),
    ]
    budget(tenant_a, "other agent", "agent", agent=other_agent)
    budget(tenant_a, "other principal", "principal", principal=bob)
    budget(tenant_a, "other team", "team", team=other_team)
    archived = budget(tenant_a, "archived", "tenant")
    archived.archived_at = timezone.now()
    archived.save()
    budget(tenant_b, "b's tenant", "tenant")
    return applying


def test_the_budgets_applying_to_a_run_are_the_orms(budgets, run_a, tenant_a):
    bare = RunFactory(tenant=tenant_a, external_id="run_bare", agent=run_a.agent, principal=None)
    for run in (run_a, bare):
        got = budgets_applying(run=run)
        with _orm():
            orm = budgets_applying(run=run)
        assert [b.pk for b in got] == [b.pk for b in orm]
        assert [_fields(b.tenant) for b in got] == [_fields(b.tenant) for b in orm]
    assert [b.name for b in budgets_applying(run=run_a)] == ["agent", "principal", "team", "tenant"]
    assert [b.name for b in budgets_applying(run=bare)] == ["agent", "tenant"]
