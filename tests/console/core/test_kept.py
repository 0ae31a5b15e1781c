"""Reads compiled once (console/core/kept.py): a kept read answers exactly what the ORM would,
with the ORM's own SQL, without compiling after its first call; a shape it cannot prove the
same for every value is never kept (each call goes through the ORM, so its answers stay
right)."""

from unittest import mock

import pytest
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.db.models.sql.compiler import SQLCompiler
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from approvals.models import Approval
from console.core.kept import Kept
from console.models import Principal
from runs.models import Run
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory

pytestmark = pytest.mark.django_db


def _approvals(tenant_id, public_id):
    return (
        Approval.objects.with_run()
        .annotate(mirrored=Exists(Approval.objects.filter(mirror_of=OuterRef("pk"))))
        .filter(tenant_id=tenant_id, public_id=public_id)
        .order_by()[:2]
    )


def _as_dict(obj) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


@pytest.fixture
def approvals(tenant_a):
    run = RunFactory(tenant=tenant_a, external_id="run_k1", cost_minor_units=7)
    first = ApprovalFactory(run=run, tool_call_id="call_1", arguments={"to": "a@x"})
    second = ApprovalFactory(run=run, tool_call_id="call_2", arguments={"n": [1, 2]})
    ApprovalFactory(run=run, tool_call_id="call_3", mirror_of=second)
    return first, second


def _compiles():
    return mock.patch.object(SQLCompiler, "as_sql", autospec=True, side_effect=SQLCompiler.as_sql)


def test_instances_with_their_relations_and_annotations_as_the_orm_reads_them(
    approvals, tenant_a, tenant_b
):
    kept = Kept(_approvals)
    for approval in approvals:
        (orm,) = list(_approvals(tenant_a.pk, approval.public_id))
        with CaptureQueriesContext(connection) as queries:
            (got,) = kept(tenant_a.pk, approval.public_id)
        assert len(queries.captured_queries) == 1  # the run and its tenant came with it
        assert _as_dict(got) == _as_dict(orm)
        assert _as_dict(got.run) == _as_dict(orm.run)
        assert got.run.tenant == tenant_a and got.run.tenant.slug == tenant_a.slug
        assert got.mirrored is orm.mirrored
        assert got.arguments == approval.arguments  # the JSON column, converted
        assert got._state.adding is False and got._state.db == "default"
    assert [a.mirrored for a in (kept(tenant_a.pk, p.public_id)[0] for p in approvals)] == [
        False,
        True,
    ]
    assert kept(tenant_b.pk, approvals[0].public_id) == []  # another tenant's: nothing
    assert kept(tenant_a.pk, "apr_missing") == []


def test_after_its_first_call_it_runs_the_orms_sql_without_compiling(approvals, tenant_a):
    kept = Kept(_approvals)
    kept(tenant_a.pk, approvals[0].public_id)  # compiled here
    with CaptureQueriesContext(connection) as orm:
        list(_approvals(tenant_a.pk, approvals[1].public_id))
    with _compiles() as compiled, CaptureQueriesContext(connection) as queries:
        kept(tenant_a.pk, approvals[1].public_id)
    assert compiled.call_count == 0
    assert [q["sql"] for q in queries.captured_queries] == [q["sql"] for q in orm.captured_queries]


def test_values_lists_flat_or_not(approvals, tenant_a):
    pairs = Kept(
        lambda tenant_id: (
            Approval.objects.filter(tenant_id=tenant_id)
            .order_by("pk")
            .values_list("tool_call_id", "arguments")
        )
    )
    flat = Kept(
        lambda run_id: Run.objects.filter(pk=run_id).values_list("cost_minor_units", flat=True)
    )
    for _ in range(2):
        assert pairs(tenant_a.pk) == list(
            Approval.objects.filter(tenant_id=tenant_a.pk)
            .order_by("pk")
            .values_list("tool_call_id", "arguments")
        )
        assert flat(approvals[0].run_id) == [7]


def test_a_value_the_build_changes_is_never_kept(approvals, tenant_a):
    """`value + 1` or a LIKE pattern would be a constant of the SQL if kept: such a shape is
    compiled afresh at each call, and each call's answer is its own."""
    first, second = approvals
    after = Kept(lambda pk: Approval.objects.filter(pk__gt=pk - 1).order_by("pk"))
    like = Kept(lambda text: Approval.objects.filter(tool_call_id__contains=text).order_by("pk"))
    window = Kept(lambda pk: Approval.objects.filter(pk__gte=pk, pk__lt=pk + 1))  # both in it
    for _ in range(2):
        assert [a.pk for a in window(second.pk)] == [second.pk]
        assert [a.pk for a in window(first.pk)] == [first.pk]
        assert [a.pk for a in after(second.pk)][0] == second.pk
        assert [a.pk for a in after(first.pk)][0] == first.pk
        assert [a.tool_call_id for a in like("_2")] == ["call_2"]
        assert [a.tool_call_id for a in like("_1")] == ["call_1"]
    with _compiles() as compiled:
        after(first.pk)
    assert compiled.call_count >= 1  # through the ORM


def test_other_kinds_of_values_go_through_the_orm(approvals, tenant_a):
    """None compiles to IS NULL (another statement); a bool is no int here."""
    by_mirror = Kept(lambda of: Approval.objects.filter(mirror_of=of).order_by("pk"))
    assert [a.tool_call_id for a in by_mirror(approvals[1].pk)] == ["call_3"]
    assert [a.tool_call_id for a in by_mirror(None)] == ["call_1", "call_2"]
    assert [a.tool_call_id for a in by_mirror(approvals[1].pk)] == ["call_3"]
    active = Kept(lambda flag: Principal.objects.filter(tenant_id=tenant_a.pk, is_active=flag))
    PrincipalFactory(tenant=tenant_a, external_id="gone@a", is_active=False)
    assert {p.external_id for p in active(False)} == {"gone@a"}
    assert "gone@a" not in {p.external_id for p in active(True)}


def test_prefetches_are_never_kept(tenant_a, reviewer_a):
    kept = Kept(lambda pk: Principal.objects.filter(pk=pk).prefetch_related("roles"))
    for _ in range(2):
        (principal,) = kept(reviewer_a.pk)
        with CaptureQueriesContext(connection) as queries:
            names = [role.name for role in principal.roles.all()]
        assert queries.captured_queries == [] and names == ["reviewer"]


@pytest.mark.django_db(transaction=True)  # outside any transaction at the end
def test_a_kept_lock_is_refused_outside_a_transaction_as_the_orm_refuses_it(approvals):
    lock = Kept(
        lambda pk: Run.objects.select_for_update().filter(pk=pk).values_list("pk", flat=True)
    )
    run_id = approvals[0].run_id
    with transaction.atomic():
        assert lock(run_id) == [run_id]
        assert lock(run_id) == [run_id]  # kept now
    if connection.features.has_select_for_update:
        with pytest.raises(TransactionManagementError):
            lock(run_id)


def test_disabled_every_call_is_the_orms(approvals, tenant_a, monkeypatch):
    kept = Kept(_approvals)
    kept(tenant_a.pk, approvals[0].public_id)
    monkeypatch.setattr(Kept, "enabled", False)
    with _compiles() as compiled:
        (got,) = kept(tenant_a.pk, approvals[0].public_id)
    assert compiled.call_count >= 1 and got.pk == approvals[0].pk
