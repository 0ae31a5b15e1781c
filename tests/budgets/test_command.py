"""`manage.py create_budget`: creates, or updates the budget of that name and says so; the id
on the last line; bad input is a clear error that writes nothing."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from budgets.models import Budget
from console.models import AuditEvent, Team

pytestmark = pytest.mark.django_db


def run(*args) -> list[str]:
    out = StringIO()
    call_command("create_budget", *args, stdout=out)
    return out.getvalue().strip().splitlines()


def test_create_then_update_by_name(tenant_a, alice):
    Team.objects.create(tenant=tenant_a, name="support")
    base = [
        "--tenant",
        "tenant-a",
        "--name",
        "Support, monthly",
        "--scope",
        "team:support",
        "--period",
        "month",
        "--ceiling",
        "50000",
    ]
    lines = run(*base, "--thresholds", "50,80,100", "--over-budget", "ask", "--lead", "alice")
    budget = Budget.objects.get()
    assert lines[-1] == budget.public_id
    assert "created" in lines[0]
    assert (budget.scope_type, budget.team.name, budget.period) == ("team", "support", "month")
    assert (budget.thresholds, budget.over_budget) == ([50, 80, 100], "ask")
    assert [p.external_id for p in budget.leads.all()] == ["alice"]
    lines = run(*base[:-1], "900", "--ceiling-tokens", "7")
    assert "updated" in lines[0] and lines[-1] == budget.public_id
    budget.refresh_from_db()
    assert (budget.ceiling_minor_units, budget.ceiling_tokens) == (900, 7)
    assert budget.over_budget == "ask"  # not given again: kept
    assert Budget.objects.count() == 1
    actions = list(AuditEvent.objects.filter(object_type="budget").values_list("action", flat=True))
    assert actions == ["budget.created", "budget.updated"]
    run(*base[:-1], "900", "--ceiling-tokens", "7")  # the same values: nothing to audit
    assert AuditEvent.objects.filter(object_type="budget").count() == 2


def test_every_scope_form(tenant_a, alice):
    for scope in ("tenant", "principal:alice", "agent:support-bot"):
        run(
            "--tenant",
            "tenant-a",
            "--name",
            scope,
            "--scope",
            scope,
            "--period",
            "day",
            "--ceiling",
            "10",
        )
    assert sorted(Budget.objects.values_list("scope_type", flat=True)) == [
        "agent",
        "principal",
        "tenant",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scope", "galaxy:x"], "--scope must be"),
        (["--scope", "team:nope"], "no team 'nope'"),
        (["--scope", "team:"], "--scope must be"),
        (["--ceiling", "-5"], "--ceiling must be"),
        (["--ceiling", "ten"], "--ceiling must be"),
        (["--ceiling-tokens", "0"], "--ceiling-tokens must be"),
        (["--thresholds", "80,2000"], "--thresholds must be"),
        (["--lead", "nobody"], "no principal 'nobody'"),
        (["--tenant", "nope"], "no tenant 'nope'"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(tenant_a, args, message):
    base = {
        "--tenant": "tenant-a",
        "--name": "b",
        "--scope": "tenant",
        "--period": "day",
        "--ceiling": "10",
    }
    extra = dict(zip(args[::2], args[1::2], strict=True))
    merged = {**base, **extra}
    flat = [x for pair in merged.items() for x in pair]
    with pytest.raises(CommandError, match=message):
        run(*flat)
    assert not Budget.objects.exists()
