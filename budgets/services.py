"""Writes of budgets: create, change, archive (each audited with before → after), and, in the
ingest transaction that records usage, the alerts of the thresholds it crosses.

Fields come in snake_case from the schema edge (budgets/schemas.py), already typed; what needs
the database (a scope naming a team, principal or agent; leads) is resolved here, and a name
that does not resolve is a 422 naming the field.
"""

from __future__ import annotations

import json

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from budgets import rules, spend
from budgets.models import Budget, BudgetAlert, ScopeType
from console.core.errors import Conflict, Invalid
from console.directory import access
from console.directory.services import _get_or_create, audit
from console.models import ApiKey, Principal, Team
from notifications.services import notify
from runs.models import Agent

FIELDS = (
    "name",
    "scope",
    "period",
    "ceiling_minor_units",
    "ceiling_tokens",
    "thresholds",
    "over_budget",
    "leads",
)


def _invalid(path: str, message: str) -> Invalid:
    return Invalid(
        f"{path}: {message}", code="validation_error", details=[{"path": path, "message": message}]
    )


def _scope_objects(*, tenant, scope: dict) -> dict:
    """The FKs a scope `{"type", "id"}` names (a 422 at `scope.id` for an unknown team or
    principal; an agent not seen yet is registered, as runtimes' agents are)."""
    kind, name = scope["type"], scope.get("id")
    objects = {"scope_type": kind, "team": None, "principal": None, "agent": None}
    if kind == ScopeType.TENANT:
        if name is not None:
            raise _invalid("scope.id", "must be null for the tenant scope")
        return objects
    if not name:
        raise _invalid("scope.id", f"a {kind} scope names its {kind}")
    if kind == ScopeType.TEAM:
        objects["team"] = Team.objects.filter(tenant=tenant, name=name).first()
    elif kind == ScopeType.PRINCIPAL:
        objects["principal"] = Principal.objects.filter(tenant=tenant, external_id=name).first()
    else:
        objects["agent"], _ = _get_or_create(Agent, tenant=tenant, external_id=name)
    if objects[kind] is None:
        raise _invalid("scope.id", f"no {kind} '{name}' in this tenant")
    return objects


def _leads(*, tenant, ids: list[str]) -> list[Principal]:
    found = {p.external_id: p for p in Principal.objects.filter(tenant=tenant, external_id__in=ids)}
    for n, principal_id in enumerate(ids):
        if principal_id not in found:
            raise _invalid(f"leads.{n}", f"no principal '{principal_id}' in this tenant")
    return [found[i] for i in dict.fromkeys(ids)]


def budget_snapshot(budget: Budget, *, leads: list[Principal] | None = None) -> dict:
    """What an audit entry records of a budget (wire names, no spend). `leads`: the ones
    about to be set (the budget's own otherwise)."""
    leads = budget.leads.all() if leads is None else leads
    return {
        "name": budget.name,
        "scope": {"type": budget.scope_type, "id": budget.scope_id},
        "period": budget.period,
        "ceilingMinorUnits": budget.ceiling_minor_units,
        "ceilingTokens": budget.ceiling_tokens,
        "thresholds": list(budget.thresholds),
        "overBudget": budget.over_budget,
        "leads": sorted(p.external_id for p in leads),
        "active": budget.is_active,
    }


def _audit(*, budget: Budget, action: str, viewer, before, after) -> None:
    audit(
        tenant=budget.tenant,
        action=action,
        object_type="budget",
        object_id=budget.public_id,
        data={"before": before, "after": after},
        principal=access.acting_principal(viewer) if viewer is not None else None,
        key=viewer if isinstance(viewer, ApiKey) else None,
    )


def _apply(budget: Budget, fields: dict) -> list[Principal] | None:
    """Set the given fields on the (unsaved) budget; returns the new leads, if given."""
    if "scope" in fields:
        for attr, value in _scope_objects(tenant=budget.tenant, scope=fields["scope"]).items():
            setattr(budget, attr, value)
    for name in ("name", "period", "ceiling_minor_units", "ceiling_tokens", "over_budget"):
        if name in fields:
            setattr(budget, name, fields[name])
    if "thresholds" in fields:
        budget.thresholds = sorted(set(fields["thresholds"]))
    if "leads" in fields:
        return _leads(tenant=budget.tenant, ids=fields["leads"])
    return None


def _save(budget: Budget, leads: list[Principal] | None) -> None:
    try:
        with transaction.atomic():
            budget.save()
    except IntegrityError:
        raise Conflict(
            f"a budget named '{budget.name}' exists in this tenant",
            code="budget_exists",
            details={"name": budget.name},
        ) from None
    if leads is not None:
        budget.leads.set(leads)


def _require(viewer, capability: str) -> None:
    if viewer is not None:  # None: a provisioning command
        access.require_capability(viewer, capability)


def _locked(budget: Budget) -> Budget:
    qs = Budget.objects.select_for_update(of=("self",)).select_related(
        "tenant", "team", "principal", "agent"
    )
    return qs.get(pk=budget.pk)


@transaction.atomic
def budget_create(*, tenant, fields: dict, viewer=None) -> Budget:
    """A new budget (`fields`: every required one; the name unique among the tenant's active
    budgets, else 409 `budget_exists`). `viewer`: who made it (None: a command)."""
    _require(viewer, "manage_budgets")
    budget = Budget(tenant=tenant)
    leads = _apply(budget, fields)
    _save(budget, leads)
    after = budget_snapshot(budget)
    _audit(budget=budget, action="budget.created", viewer=viewer, before=None, after=after)
    return budget


@transaction.atomic
def budget_update(*, budget: Budget, fields: dict, viewer=None) -> Budget:
    """Change the given fields (the budget locked meanwhile); a deleted budget is a 409
    `budget_archived`. When nothing changes, nothing is written or audited."""
    _require(viewer, "manage_budgets")
    budget = _locked(budget)
    if budget.archived_at is not None:
        raise Conflict(
            f"budget '{budget.public_id}' was deleted",
            code="budget_archived",
            details={"archivedAt": budget.archived_at.isoformat()},
        )
    before = budget_snapshot(budget)
    leads = _apply(budget, fields)
    after = budget_snapshot(budget, leads=leads)
    if after == before:
        return budget
    budget.updated_at = timezone.now()
    _save(budget, leads)
    _audit(budget=budget, action="budget.updated", viewer=viewer, before=before, after=after)
    return budget


@transaction.atomic
def budget_archive(*, budget: Budget, viewer=None) -> Budget:
    """DELETE: the budget is archived (no longer listed or applied, its history kept). Again
    for an archived one: nothing changes."""
    _require(viewer, "manage_budgets")
    budget = _locked(budget)
    if budget.archived_at is not None:
        return budget
    before = budget_snapshot(budget)
    budget.archived_at = budget.updated_at = timezone.now()
    budget.save(update_fields=["archived_at", "updated_at"])
    after = budget_snapshot(budget)
    _audit(budget=budget, action="budget.deleted", viewer=viewer, before=before, after=after)
    return budget


@transaction.atomic
def budget_ensure(*, tenant, fields: dict) -> tuple[Budget, bool]:
    """The provisioning command: the active budget of this name updated to the fields given,
    or created. Safe to run concurrently (the unique name decides; the loser updates)."""
    held = Budget.objects.filter(
        tenant=tenant, name=fields["name"], archived_at__isnull=True
    ).first()
    if held is None:
        try:
            with transaction.atomic():
                return budget_create(tenant=tenant, fields=fields), True
        except Conflict:
            held = Budget.objects.get(tenant=tenant, name=fields["name"], archived_at__isnull=True)
    return budget_update(budget=held, fields=fields), False


# --- alerts: written with the usage that crosses a threshold ---


def budgets_usage_recorded(*, run, days) -> list[BudgetAlert]:
    """Called by ingest (runs.services.common.RunWrites.flush) right after the batch's usage
    went into the rollups, in the same transaction and under the run's lock: for each active
    budget applying to the run, every threshold its spend now reaches in a period the batch
    added to (`days`: the local days of the batch's positive cost) and not yet alerted becomes
    a BudgetAlert, handed to `_alert_deliver`. Returns the new alerts.

    Exactly once per (budget, period, threshold) across processes: the row is unique and
    inserted with ON CONFLICT DO NOTHING. And never missed: under READ COMMITTED two batches
    adding to different rollup rows would each read the spend without the other's share, so
    the applying budgets' rows are locked first (FOR UPDATE, in primary-key order: after the
    run lock, which every ingest takes first, so no deadlock); the second batch then reads
    the first one's committed usage."""
    if not days:
        return []
    budgets = list(
        Budget.objects.filter(tenant_id=run.tenant_id, archived_at__isnull=True)
        .filter(spend.budgets_applying_q(run=run))
        .select_related("team", "principal", "agent")
        .select_for_update(of=("self",))
        .order_by("pk")
    )
    budgets = [b for b in budgets if b.thresholds]
    if not budgets:
        return []
    tz = rules.zone(run.tenant.time_zone)
    windows = {}
    for budget in budgets:
        for day in days:
            first, end = rules.period_days(budget.period, day)
            windows[(budget.pk, first)] = (budget, first, end)
    spent = spend.spend_in_windows(
        tenant_id=run.tenant_id, windows=[(key, *w) for key, w in windows.items()]
    )
    rows = [
        (budget.pk, rules.period_start_of(first, tz), threshold, spent[key][0])
        for key, (budget, first, _end) in windows.items()
        for threshold in rules.crossed(budget.thresholds, spent[key][0], budget.ceiling_minor_units)
    ]
    alerts = _alerts_insert(rows)
    for alert in alerts:
        _alert_deliver(alert)
    return alerts


def _alerts_insert(rows: list[tuple]) -> list[BudgetAlert]:
    """INSERT ... ON CONFLICT DO NOTHING RETURNING: only the alerts no one wrote before."""
    if not rows:
        return []
    table = connection.ops.quote_name(BudgetAlert._meta.db_table)
    moment = BudgetAlert._meta.get_field("at")
    now = moment.get_db_prep_value(timezone.now(), connection)
    values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(rows))
    params = []
    for budget_id, start, threshold, spent in rows:
        start = moment.get_db_prep_value(start, connection)
        params += [budget_id, start, threshold, spent, now]
    # The table comes from the model; every value is a parameter.
    sql = (
        f"INSERT INTO {table} (budget_id, period_start, threshold, spent_minor_units, at) "  # noqa: S608
        f"VALUES {values} ON CONFLICT (budget_id, period_start, threshold) DO NOTHING "
        "RETURNING id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        ids = [row[0] for row in cursor.fetchall()]
    if not ids:
        return []
    return list(
        BudgetAlert.objects.filter(pk__in=ids)
        .select_related("budget", "budget__tenant")
        .order_by("budget_id", "threshold")
    )


def _alert_recipients(budget: Budget) -> list[Principal]:
    """The budget's leads; with none, every active principal holding manage_budgets."""
    leads = list(budget.leads.filter(is_active=True))
    if leads:
        return leads
    holders = Principal.objects.filter(tenant_id=budget.tenant_id, is_active=True)
    return [p for p in holders.prefetch_related("roles") if access.can(p, "manage_budgets")]


def _alert_deliver(alert: BudgetAlert) -> None:
    """THE single place where a new alert leaves for the people it concerns: called once per
    alert, inside the ingest transaction that wrote it, so the notification, the mail to each
    lead with an address and the `budget.threshold_crossed` webhook deliveries commit (or roll
    back) with the usage, and are sent after commit (notifications.services.notify)."""
    budget = alert.budget
    current = spend.budget_current(budget=budget)
    resource = {
        "id": budget.public_id,
        **budget_snapshot(budget),
        "current": json.loads(json.dumps(current, cls=DjangoJSONEncoder)),  # times as ISO
    }
    notify(
        tenant=budget.tenant,
        kind="budget.threshold_crossed",
        recipients=_alert_recipients(budget),
        title=f"{budget.name}: {alert.threshold}% of the ceiling reached",
        body=(
            f"Spend this period is {alert.spent_minor_units} minor units of "
            f"{budget.ceiling_minor_units} ({alert.threshold}% threshold)."
        ),
        url=f"/budgets/{budget.public_id}/",
        webhook_event="budget.threshold_crossed",
        webhook_payload={
            "budget": resource,
            "threshold": alert.threshold,
            "spentMinorUnits": alert.spent_minor_units,
        },
    )
