"""POST /budgets/check: may this run spend this much? The run's own limit and every active
budget applying to it, narrowest first, each measured against its spend from the rollups;
over an `ask` budget, a lead is asked (a `budget.override` approval on the run), and an
approved override lets one step through.

The common answer (within budget) costs the run, its budgets and one spend query; only an
over-budget check of an `ask` budget takes the run's lock (as ingest does, first) to look at
and write overrides.
"""

from __future__ import annotations

import secrets

from django.db import transaction
from django.utils import timezone

from approvals.models import ApprovalStatus
from approvals.services.requests import approvals_request
from budgets import rules, spend
from budgets.models import OVERRIDE_TOOL, BudgetOverride, OverBudget
from console.core.errors import Conflict
from console.live import realtime
from runs import access as runs_access
from runs.models import RunStatus


def _run_limit(run) -> int | None:
    limits = run.limits or {}
    value = limits.get("costCeilingMinorUnits", limits.get("cost_ceiling_minor_units"))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _entries(*, run, estimate: int, tokens: int, now) -> list[dict]:
    """The run's limit (when set), then its budgets narrowest first, each with `allowed`."""
    entries = []
    ceiling = _run_limit(run)
    spent_tokens = run.input_tokens + run.output_tokens
    if ceiling is not None:
        entries.append(
            {
                "id": None,
                "name": "run limit",
                "scope": {"type": "run", "id": run.external_id},
                "period": None,
                "ceiling_minor_units": ceiling,
                "spent_minor_units": run.cost_minor_units,
                "remaining_minor_units": ceiling - run.cost_minor_units,
                "ceiling_tokens": None,
                "spent_tokens": spent_tokens,
                "allowed": rules.fits(
                    spent=run.cost_minor_units, estimate=estimate, ceiling=ceiling
                ),
                "budget": None,
            }
        )
    budgets = spend.budgets_applying(run=run)
    currents = spend.budgets_current(budgets=budgets, now=now)
    for budget in budgets:
        current = currents[budget.pk]
        spent, used = current["spent_minor_units"], current["spent_tokens"]
        allowed = rules.fits(spent=spent, estimate=estimate, ceiling=budget.ceiling_minor_units)
        allowed = allowed and rules.fits(spent=used, estimate=tokens, ceiling=budget.ceiling_tokens)
        entries.append(
            {
                "id": budget.public_id,
                "name": budget.name,
                "scope": {"type": budget.scope_type, "id": budget.scope_id},
                "period": budget.period,
                "ceiling_minor_units": budget.ceiling_minor_units,
                "spent_minor_units": spent,
                "remaining_minor_units": budget.ceiling_minor_units - spent,
                "ceiling_tokens": budget.ceiling_tokens,
                "spent_tokens": used,
                "allowed": allowed,
                "budget": budget,
            }
        )
    return entries


def _answer(entries, *, approval_id=None, override_id=None) -> dict:
    tripped = next((e for e in entries if not e["allowed"]), None)
    return {
        "allowed": tripped is None,
        "budgets": entries,
        "tripped_budget": tripped,
        "approval_id": approval_id,
        "override_approval_id": override_id,
    }


def budget_check(
    *,
    tenant_id: int,
    run_id: str,
    estimated_cost: int,
    estimated_tokens: int = 0,
    run=None,
    now=None,
) -> dict:
    """The check's answer (snake_case; schemas.BudgetCheckOut maps it to the wire). The run
    is NotFound outside the tenant and a Conflict once finished. Spends nothing."""
    now = now or timezone.now()
    run = run or runs_access.run_in_tenant(tenant_id=tenant_id, run_id=run_id)
    _not_finished(run)
    entries = _entries(run=run, estimate=estimated_cost, tokens=estimated_tokens, now=now)
    tripped = next((e for e in entries if not e["allowed"]), None)
    if tripped is None or tripped["budget"] is None:  # within budget, or over the run limit
        return _answer(entries)
    if tripped["budget"].over_budget != OverBudget.ASK:
        return _answer(entries)
    return _ask(
        run_id=run.external_id,
        tenant_id=tenant_id,
        estimated_cost=estimated_cost,
        estimated_tokens=estimated_tokens,
        now=now,
    )


def _not_finished(run) -> None:
    if run.is_finished:
        raise Conflict(
            f"run '{run.external_id}' has finished",
            code="run_finished",
            details={"status": run.status},
        )


@transaction.atomic
def _ask(*, run_id, tenant_id, estimated_cost, estimated_tokens, now) -> dict:
    """Over an `ask` budget: under the run's lock, the pending override answers again; an
    approved, unused one whose estimate covers this one lets the step through (used up);
    otherwise a new override approval is requested."""
    run = runs_access.run_in_tenant(tenant_id=tenant_id, run_id=run_id, for_update=True)
    _not_finished(run)
    entries = _entries(run=run, estimate=estimated_cost, tokens=estimated_tokens, now=now)
    overrides = list(
        BudgetOverride.objects.filter(run=run, used_at__isnull=True)
        .filter(approval__status__in=(ApprovalStatus.PENDING, ApprovalStatus.APPROVED))
        .select_related("approval")
        .order_by("pk")
    )
    pending = next((o for o in overrides if o.approval.status == ApprovalStatus.PENDING), None)
    if pending is not None:
        return _answer(entries, approval_id=pending.approval.public_id)
    grants = {}
    for entry in entries:
        if entry["allowed"] or entry["budget"] is None:
            continue
        grant = next(
            (
                o
                for o in overrides
                if o.budget_id == entry["budget"].pk and estimated_cost <= _granted(o)
            ),
            None,
        )
        if grant is None:
            break
        grants[entry["id"]] = grant
    tripped = next((e for e in entries if not e["allowed"] and e["id"] not in grants), None)
    if tripped is None:  # every budget over is covered by an approved override: use them up
        used = BudgetOverride.objects.filter(
            pk__in=[g.pk for g in grants.values()], used_at__isnull=True
        ).update(used_at=now)
        if used == len(grants):
            for entry in entries:
                entry["allowed"] = entry["allowed"] or entry["id"] in grants
            first = next(iter(grants.values()))
            return _answer(entries, override_id=first.approval.public_id)
        transaction.set_rollback(True)  # cannot happen under the run lock; fail closed
        return _answer(entries)
    if tripped["budget"] is None or tripped["budget"].over_budget != OverBudget.ASK:
        return _answer(entries)
    approval = _request(
        run=run, entry=tripped, estimated_cost=estimated_cost, estimated_tokens=estimated_tokens
    )
    return _answer(entries, approval_id=approval.public_id)


def _granted(override: BudgetOverride) -> int:
    """The estimate an approval allows: the approver's edit of it, else the one asked for."""
    edited = override.approval.decided_arguments
    value = edited.get("estimatedCostMinorUnits") if isinstance(edited, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return override.estimated_cost_minor_units


def _request(*, run, entry, estimated_cost: int, estimated_tokens: int):
    """The pending `budget.override` approval and its record; the run awaits approval."""
    budget = entry["budget"]
    spent, ceiling = entry["spent_minor_units"], entry["ceiling_minor_units"]
    [approval] = approvals_request(
        run=run,
        step=run.steps or None,
        calls=[
            {
                "tool_call_id": f"{OVERRIDE_TOOL}:{budget.public_id}:{secrets.token_hex(6)}",
                "tool_name": OVERRIDE_TOOL,
                "arguments": {
                    "budgetId": budget.public_id,
                    "budgetName": budget.name,
                    "estimatedCostMinorUnits": estimated_cost,
                    "spentMinorUnits": spent,
                    "ceilingMinorUnits": ceiling,
                },
                "reason": (
                    f"Over budget '{budget.name}': {spent} spent this {budget.period} and "
                    f"{estimated_cost} more estimated for the next step, against a ceiling "
                    f"of {ceiling} (minor units)."
                ),
                "rejection_message": (
                    f"The budget '{budget.name}' would be exceeded and its lead declined to "
                    "allow more spending. Stop, or continue without spending."
                ),
            }
        ],
    )
    BudgetOverride.objects.create(
        approval=approval,
        budget=budget,
        run=run,
        estimated_cost_minor_units=estimated_cost,
        estimated_tokens=estimated_tokens,
    )
    _await_approval(run)
    return approval


def _await_approval(run) -> None:
    """The caller owns the run: it now awaits approval (as runs.services.common.calls_hold
    sets it for ingest; budgets never import runs.services, so the one field is set here)."""
    if run.status != RunStatus.AWAITING_APPROVAL:
        run.status = RunStatus.AWAITING_APPROVAL
        run.updated_at = timezone.now()
        run.save(update_fields=["status", "updated_at"])
    realtime.run_changed(run=run, what=["approvals", "status"])
