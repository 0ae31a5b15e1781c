"""Page selectors of /budgets/ and /budgets/<budgetId>/: one context function per partial.

Each `*_context` function builds the whole context of one named partial, so the page, its htmx
fragment view and the /ws/budgets/ socket render identical HTML from it (as the run pages do,
runs/selectors_pages.py). Every figure comes from the same reads the API answers with
(`budgets.selectors`: usage_report, budgets_current, spend per day from the rollups); nothing is
recomputed here but presentation: money through Babel in the tenant's currency, days in the
tenant's zone. No partial depends on who looks beyond `view_budgets` (controls for
`manage_budgets` holders sit outside the swapped units), so one render serves every socket of a
range. No HTML is built here.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from budgets import access as budgets_access
from budgets import charts, rules, spend
from budgets.models import BudgetAlert, BudgetOverride
from budgets.selectors_usage import (
    DIMENSIONS,
    UsageRange,
    count_text,
    usage_breakdown_context,
    usage_range,
    usage_range_context,
)
from console.core.formatting import money
from console.directory import access
from console.models import Principal, Team
from runs.models import Agent

ALERTS_SHOWN = 50
OVERRIDES_SHOWN = 50
SCOPE_TITLES = {"tenant": "Whole tenant", "team": "Team", "principal": "Principal"}
SCOPE_TITLES["agent"] = "Agent"
PERIOD_TITLES = {"day": "Daily", "week": "Weekly", "month": "Monthly"}

# The usage half is read through this module by the views, live pushes and consumers.
__all__ = ["DIMENSIONS", "UsageRange", "usage_breakdown_context", "usage_range"]


# --- budgets and their burn charts ---


def _scope_label(budget) -> str:
    return SCOPE_TITLES[budget.scope_type] + (f" · {budget.scope_id}" if budget.scope_id else "")


def _status(current: dict, ceiling: int) -> dict:
    if current["spent_minor_units"] >= ceiling:
        return {"label": "Over budget", "class": "is-danger"}
    if current["projected_minor_units"] > ceiling:
        return {"label": "Projected to exceed", "class": "is-warning"}
    if current["crossed"]:
        return {"label": f"Past {max(current['crossed'])}%", "class": "is-warning"}
    return {"label": "On track", "class": "is-success"}


def _period_rows(axis: charts.PeriodAxis, days: dict, currency: str) -> list[dict]:
    """The burn chart's numbers by day: spend of the day and cumulative (the days so far)."""
    today = axis.now.astimezone(axis.tz).date()
    rows, cumulative = [], 0
    day = axis.first
    while day < axis.end and (day <= today or day in days):
        cost, tokens = days.get(day, (0, 0))
        cumulative += cost
        rows.append(
            {
                "day": day.isoformat(),
                "label": charts.day_label(day, "EEE, MMM d"),
                "today": day == today,
                "cost_minor_units": cost,
                "cost": money(cost, currency),
                "cumulative_minor_units": cumulative,
                "cumulative": money(cumulative, currency),
                "tokens": count_text(tokens),
                "tokens_count": tokens,
            }
        )
        day += timedelta(days=1)
    return rows


def _card(
    budget, *, current: dict, days: dict, alerts: list, tz, now, detail: bool, first_today=None
) -> dict:
    currency = budget.tenant.currency
    ceiling = budget.ceiling_minor_units
    first, end = rules.period_days(budget.period, rules.local_today(now, tz))
    axis = charts.PeriodAxis(
        period=budget.period,
        first=first,
        end=end,
        tz=tz,
        start=current["period_start"],
        stop=current["period_end"],
        now=now,
    )
    last_day = end - timedelta(days=1)
    window = charts.day_label(first, "MMM d")
    if last_day != first:
        window += f" – {charts.day_label(last_day, 'MMM d')}"
    spent = current["spent_minor_units"]
    thresholds = [
        {
            "percent": t,
            "amount": money(ceiling * t // 100, currency),
            "crossed": t in current["crossed"],
        }
        for t in budget.thresholds
    ]
    return {
        "budget": budget,
        "id": budget.public_id,
        "dom_id": f"budget-{budget.public_id}",
        "href": f"/budgets/{budget.public_id}/",
        "scope": _scope_label(budget),
        "period": PERIOD_TITLES[budget.period],
        "window": f"{window}, {first.year}",
        "over_budget": "Asks a lead" if budget.over_budget == "ask" else "Refuses",
        "status": _status(current, ceiling),
        "spent": money(spent, currency),
        "spent_minor_units": spent,
        "ceiling": money(ceiling, currency),
        "ceiling_minor_units": ceiling,
        "remaining": money(abs(current["remaining_minor_units"]), currency),  # "over by" if over
        "over": current["remaining_minor_units"] < 0,
        "projected": money(current["projected_minor_units"], currency),
        "projected_over": current["projected_minor_units"] > ceiling,
        "percent": f"{current['percent']:.1f}%",
        "progress": min(spent, ceiling),
        "tokens": count_text(current["spent_tokens"]),
        "ceiling_tokens": count_text(budget.ceiling_tokens) if budget.ceiling_tokens else None,
        "thresholds": thresholds,
        "leads": sorted(p.external_id for p in budget.leads.all()),
        "archived": budget.archived_at is not None,
        "chart_data_id": f"burn-{budget.public_id}-data",
        "chart": charts.burn_chart(
            axis=axis,
            days=days,
            spent=spent,
            projected=current["projected_minor_units"],
            ceiling=ceiling,
            thresholds=budget.thresholds,
            crossed=current["crossed"],
            alerts=alerts,
            currency=currency,
            first_today=first_today,
        ),
        "rows": _period_rows(axis, days, currency),
        "csv_href": f"/budgets/{budget.public_id}/burn.csv",
        "detail": detail,  # on its own page: the table open, the chart taller
    }


def _cards(budgets: list, *, now=None, detail: bool = False) -> list[dict]:
    """Cards for budgets of one tenant: current blocks (one query, as the API's), spend per
    day of each current period (one query), the alerts of those periods (one query), the
    first spend of today (two or three queries)."""
    if not budgets:
        return []
    now = now or timezone.now()
    tenant = budgets[0].tenant
    tz = rules.zone(tenant.time_zone)
    today = rules.local_today(now, tz)
    currents = spend.budgets_current(budgets=budgets, now=now)
    windows = [(b.pk, b, *rules.period_days(b.period, today)) for b in budgets]
    per_day = spend.spend_per_day_in_windows(tenant_id=tenant.pk, windows=windows)
    starts = {b.pk: currents[b.pk]["period_start"] for b in budgets}
    alerts: dict = {b.pk: [] for b in budgets}
    held = BudgetAlert.objects.filter(
        budget_id__in=list(starts), period_start__in=set(starts.values())
    )
    for alert in held.order_by("at", "id"):
        if alert.period_start == starts[alert.budget_id]:
            alerts[alert.budget_id].append(alert)
    midnight = rules.period_bounds("day", now, tz)[0]  # today's start, in the tenant's zone
    firsts = spend.first_spend_since(budgets=budgets, since=midnight, until=now)
    return [
        _card(
            b,
            current=currents[b.pk],
            days=per_day[b.pk],
            alerts=alerts[b.pk],
            tz=tz,
            now=now,
            detail=detail,
            first_today=firsts[b.pk],
        )
        for b in budgets
    ]


def budget_list_context(*, viewer, now=None) -> dict:
    """`budgets/index.html#budget-list` (id `budget-list`): every active budget of the tenant
    with its burn chart for the current period, oldest first."""
    qs = budgets_access.budgets_visible_to(viewer=viewer)
    budgets = list(qs.select_related(*spend.LIST_RELATED).prefetch_related("leads").order_by("pk"))
    return {"cards": _cards(budgets, now=now)}


def budget_page_budget(*, viewer, budget_id: str):
    """The budget a detail page shows (archived ones too): 404 outside the viewer's tenant,
    403 without view_budgets (`budgets_access.budget_for`)."""
    return budgets_access.budget_for(viewer=viewer, budget_id=budget_id)


def budget_card_context(*, viewer, budget, now=None) -> dict:
    """`budgets/index.html#budget-card` (id `budget-<budgetId>`): one budget's card."""
    return {"card": _cards([budget], now=now, detail=True)[0]}


def budget_alerts_context(*, viewer, budget) -> dict:
    """`budgets/detail.html#budget-alerts`: the thresholds it reached, newest first."""
    tz = rules.zone(budget.tenant.time_zone)
    currency = budget.tenant.currency
    alerts = budget.alerts.order_by("-at", "-id")[:ALERTS_SHOWN]
    return {
        "alerts": [
            {
                "threshold": alert.threshold,
                "period": charts.day_label(alert.period_start.astimezone(tz).date(), "MMM d, y"),
                "spent": money(alert.spent_minor_units, currency),
                "at": alert.at,
                "at_label": charts.moment_label(alert.at, tz, "MMM d, y, HH:mm"),
            }
            for alert in alerts
        ],
        "time_zone": budget.tenant.time_zone,
    }


def budget_overrides_context(*, viewer, budget) -> dict:
    """`budgets/detail.html#budget-overrides`: the over-budget approvals (`budget.override`)
    its checks asked for, newest first, each linked to its card on the run's page."""
    tz = rules.zone(budget.tenant.time_zone)
    currency = budget.tenant.currency
    rows = (
        BudgetOverride.objects.filter(budget=budget)
        .select_related("approval", "approval__decided_by", "run", "run__principal")
        .order_by("-created_at", "-id")[:OVERRIDES_SHOWN]
    )
    overrides = []
    for override in rows:
        approval, run = override.approval, override.run
        decider = approval.decided_by
        overrides.append(
            {
                "approval_id": approval.public_id,
                "status": approval.status,
                "run_id": run.external_id,
                "href": f"/runs/{run.external_id}/#approval-{approval.public_id}",
                "principal": run.principal.external_id if run.principal_id else None,
                "estimate": money(override.estimated_cost_minor_units, currency),
                "requested": charts.moment_label(approval.requested_at, tz, "MMM d, HH:mm"),
                "decided_by": (decider.name or decider.external_id) if decider else None,
                "decided": charts.moment_label(approval.decided_at, tz, "MMM d, HH:mm")
                if approval.decided_at
                else None,
                "used": charts.moment_label(override.used_at, tz, "MMM d, HH:mm")
                if override.used_at
                else None,
            }
        )
    return {"overrides": overrides}


# --- whole pages and the fragments' names ---


def budgets_page_context(*, viewer, usage: UsageRange | None, now=None) -> dict:
    """/budgets/: the budgets and, for a valid range, its summary and breakdowns."""
    context = budget_list_context(viewer=viewer, now=now)
    if usage is not None:
        context.update(usage_range_context(viewer=viewer, usage=usage))
        context["breakdowns"] = [
            usage_breakdown_context(viewer=viewer, dimension=d, usage=usage)["breakdown"]
            for d in DIMENSIONS
        ]
    context["currency"] = viewer.tenant.currency
    context["time_zone"] = viewer.tenant.time_zone
    return context


DETAIL_PARTIALS = {
    "budget-alerts": budget_alerts_context,
    "budget-overrides": budget_overrides_context,
}


def budget_page_context(*, viewer, budget_id: str, now=None) -> dict:
    """/budgets/<budgetId>/: its card, settings (times in the tenant's zone), alerts and
    overrides."""
    budget = budget_page_budget(viewer=viewer, budget_id=budget_id)
    tz = rules.zone(budget.tenant.time_zone)
    moments = {"created": budget.created_at, "updated": budget.updated_at}
    moments["archived"] = budget.archived_at
    context = {
        "budget": budget,
        **{
            f"{name}_label": charts.moment_label(at, tz, "MMM d, y, HH:mm ZZZZ") if at else None
            for name, at in moments.items()
        },
        **budget_card_context(viewer=viewer, budget=budget, now=now),
    }
    for build in DETAIL_PARTIALS.values():
        context.update(build(viewer=viewer, budget=budget))
    return context


def burn_csv_lines(*, viewer, budget) -> list[list]:
    """The burn table as CSV records (header first): the numbers under the budget's chart
    (kept numbers: console.csvsafe neutralises text only)."""
    card = budget_card_context(viewer=viewer, budget=budget)["card"]
    lines = [["day", "costMinorUnits", "cumulativeMinorUnits", "tokens"]]
    for row in card["rows"]:
        numbers = (row["cost_minor_units"], row["cumulative_minor_units"], row["tokens_count"])
        lines.append([row["day"], *numbers])
    return lines


SUGGESTIONS = 500  # ids offered per kind in the form's lists (any id may still be typed)


def budget_form_choices(*, viewer) -> dict:
    """What the budget form suggests as scope ids and leads: the tenant's teams, principals
    and agents (a datalist: the field still takes any id, and the service judges it)."""
    access.require_capability(viewer, "manage_budgets")
    tenant_id = viewer.tenant_id
    return {
        "teams": list(
            Team.objects.filter(tenant_id=tenant_id)
            .order_by("name")
            .values_list("name", flat=True)[:SUGGESTIONS]
        ),
        "principals": list(
            Principal.objects.filter(tenant_id=tenant_id, is_active=True)
            .order_by("external_id")
            .values_list("external_id", flat=True)[:SUGGESTIONS]
        ),
        "agents": list(
            Agent.objects.filter(tenant_id=tenant_id)
            .order_by("external_id")
            .values_list("external_id", flat=True)[:SUGGESTIONS]
        ),
    }
