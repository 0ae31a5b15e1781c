"""What budgets have spent: reads of the usage rollups by one dimension (runs.UsageDailyBy:
a row per principal, agent or model a day, whatever the volume) for one budget or many,
which budgets apply to a run, and the arithmetic's inputs. Read only, and low in the house:
the budget service (alerts, in the ingest transaction), the budget check, the budgets'
selectors and the approvals' cards and resources all read spend through here, never from a
scan of steps.
"""

from __future__ import annotations

from datetime import date

from django.db import connection
from django.db.models import Min, Q
from django.utils import timezone

from budgets import rules
from budgets.models import Budget
from console.core.kept import Kept
from console.models import Principal
from runs.models import Run, Step, UsageAdjustment, UsageDailyBy

SCOPE_ORDER = {"run": -1, "agent": 0, "principal": 1, "team": 2, "tenant": 3}  # narrowest first
LIST_RELATED = ("team", "principal", "agent", "tenant")


def _tables() -> dict:
    quote = connection.ops.quote_name
    return {
        "usage": quote(UsageDailyBy._meta.db_table),
        "principal": quote(Principal._meta.db_table),
        "members": quote(Principal.teams.through._meta.db_table),
    }


def _scope_dimension(budget) -> str:
    """The `UsageDailyBy` dimension a budget's scope is read from (a tenant's: the models',
    which sum every step like any other)."""
    return {"principal": "principal", "team": "principal", "agent": "agent"}.get(
        budget.scope_type, "model"
    )


def _scope_sql(budget, t: dict) -> tuple[str, list]:
    """The rollup rows in a budget's scope, as a condition: the tenant's; its team's members'
    (now); its principal's; its agent's (the run's `agentId`)."""
    dimension = f"dimension = '{_scope_dimension(budget)}'"
    if budget.scope_type == "principal":
        return f"{dimension} AND key = %s", [budget.principal.external_id]
    if budget.scope_type == "agent":
        return f"{dimension} AND key = %s", [budget.agent.external_id]
    if budget.scope_type == "team":
        members = (
            f"SELECT p.external_id FROM {t['principal']} p JOIN {t['members']} m "  # noqa: S608
            "ON m.principal_id = p.id WHERE m.team_id = %s"
        )
        return f"{dimension} AND key IN ({members})", [budget.team_id]
    return dimension, []


def _window_sums(windows: list[tuple], t: dict, *, otherwise: str) -> tuple[str, list]:
    """Two sums per window (cost, tokens) of the rollup rows inside its days and scope, as a
    select list and its parameters; `otherwise` is what a row outside adds (" ELSE 0", or
    "" for NULL)."""
    sums, params = [], []
    for _key, budget, first, end in windows:
        scope, scope_params = _scope_sql(budget, t)
        case = f"CASE WHEN day >= %s AND day < %s AND {scope} THEN {{}}{otherwise} END"
        sums.append(f"SUM({case.format('cost_minor_units')})")
        sums.append(f"SUM({case.format('input_tokens + output_tokens')})")
        params += [first, end, *scope_params] * 2
    return ", ".join(sums), params


def _window_where(tenant_id: int, windows: list[tuple], t: dict) -> tuple[str, list]:
    """The WHERE clause and its parameters: the tenant, the days every window lies in, and
    the rows of the windows' scopes only (a principal's budget reads its principal's rows,
    not every principal's). Scopes are merged by their whole condition, text AND parameters:
    two agents' budgets share the text `dimension = 'agent' AND key = %s` but not the key, so
    each keeps its own term (keying by the text alone kept the first agent's key only, and
    every other agent's budget read zero)."""
    scopes: dict[tuple[str, tuple], None] = {}
    for _key, budget, *_days in windows:
        sql, params = _scope_sql(budget, t)
        scopes.setdefault((f"({sql})", tuple(params)), None)
    where = "WHERE tenant_id = %s AND day >= %s AND day < %s AND ("
    where += " OR ".join(sql for sql, _params in scopes) + ")"
    days = [min(w[2] for w in windows), max(w[3] for w in windows)]
    return where, [tenant_id, *days, *(p for _sql, params in scopes for p in params)]


def spend_in_windows(*, tenant_id: int, windows: list[tuple]) -> dict:
    """Spend per window, in ONE query over the rollups: `windows` are (key, budget, first day,
    end day) with end exclusive; the answer maps each key to (minor units, tokens). Written
    as SQL (two CASE sums per window): it runs on every budget check and ingest batch with
    cost, and the ORM's compilation of filtered aggregates cost more than the query."""
    if not windows:
        return {}
    t = _tables()
    sums, params = _window_sums(windows, t, otherwise=" ELSE 0")
    # Identifiers come from the models, conditions from the fixed forms above; values are
    # parameters.
    where, where_params = _window_where(tenant_id, windows, t)
    sql = f"SELECT {sums} FROM {t['usage']} {where}"  # noqa: S608
    params += where_params
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return {
        key: (int(row[2 * n] or 0), int(row[2 * n + 1] or 0))
        for n, (key, *_rest) in enumerate(windows)
    }


def spend_per_day_in_windows(*, tenant_id: int, windows: list[tuple]) -> dict:
    """Spend per tenant-local day per window, in ONE query over the rollups (grouped by day):
    `windows` as for `spend_in_windows`; the answer maps each key to `{day: (minor units,
    tokens)}` for the days of the window with usage, so a window's days add up to exactly
    what `spend_in_windows` answers for it (the burn charts of /budgets/)."""
    if not windows:
        return {}
    t = _tables()
    sums, params = _window_sums(windows, t, otherwise="")
    # As in spend_in_windows: identifiers from the models, values as parameters. A window
    # without usage on a day sums no row (NULL), so only its days with usage are answered.
    where, where_params = _window_where(tenant_id, windows, t)
    sql = f"SELECT day, {sums} FROM {t['usage']} {where} GROUP BY day ORDER BY day"  # noqa: S608
    params += where_params
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    answer: dict = {key: {} for key, *_rest in windows}
    for day, *values in rows:
        day = day if isinstance(day, date) else date.fromisoformat(day)
        for n, (key, *_rest) in enumerate(windows):
            cost, tokens = values[2 * n], values[2 * n + 1]
            if cost is not None or tokens is not None:
                answer[key][day] = (int(cost or 0), int(tokens or 0))
    return answer


def _current(budget, *, spent: int, tokens: int, start, end, now) -> dict:
    ceiling = budget.ceiling_minor_units
    return {
        "period_start": start,
        "period_end": end,
        "spent_minor_units": spent,
        "spent_tokens": tokens,
        "remaining_minor_units": ceiling - spent,
        "percent": rules.percent(spent, ceiling),
        "projected_minor_units": rules.projected(spent, start, end, now),
        "crossed": rules.crossed(budget.thresholds, spent, ceiling),
    }


def budgets_current(*, budgets, now=None) -> dict:
    """The `current` block of each budget (of one tenant) by pk: its period now, in the
    tenant's time zone, and its spend there. One query whatever the number of budgets."""
    budgets = list(budgets)
    if not budgets:
        return {}
    now = now or timezone.now()
    tz = rules.zone(budgets[0].tenant.time_zone)
    today = rules.local_today(now, tz)
    windows, bounds = [], {}
    for budget in budgets:
        first, end = rules.period_days(budget.period, today)
        bounds[budget.pk] = rules.period_bounds(budget.period, now, tz)
        windows.append((budget.pk, budget, first, end))
    spent = spend_in_windows(tenant_id=budgets[0].tenant_id, windows=windows)
    return {
        b.pk: _current(
            b,
            spent=spent[b.pk][0],
            tokens=spent[b.pk][1],
            start=bounds[b.pk][0],
            end=bounds[b.pk][1],
            now=now,
        )
        for b in budgets
    }


def budget_current(*, budget, now=None) -> dict:
    """The budget's `current` block (its period now and its spend there)."""
    return budgets_current(budgets=[budget], now=now)[budget.pk]


def narrowest_first(budgets) -> list:
    """Agent, principal, team(s) (by name), tenant; ties by age."""
    return sorted(
        budgets,
        key=lambda b: (SCOPE_ORDER[b.scope_type], b.team.name if b.team_id else "", b.pk),
    )


def budgets_applying_q(*, run) -> Q:
    """The budgets whose scope holds this run: the tenant's, its agent's, its principal's and
    those of the teams its principal is a member of now."""
    q = Q(scope_type="tenant") | Q(scope_type="agent", agent_id=run.agent_id)
    if run.principal_id:
        teams = Principal.teams.through.objects.filter(principal_id=run.principal_id)
        q |= Q(scope_type="principal", principal_id=run.principal_id)
        q |= Q(scope_type="team", team_id__in=teams.values("team_id"))
    return q


def budgets_applying(*, run) -> list:
    """The active budgets that apply to the run, narrowest first (the read compiled once: a
    runtime's budget check before each step)."""
    if run.principal_id:
        found = _APPLYING_TO_PRINCIPAL(run.tenant_id, run.agent_id, run.principal_id)
    else:
        found = _APPLYING(run.tenant_id, run.agent_id)
    return narrowest_first(found)


def _applying(tenant_id, agent_id, principal_id=None):
    run = Run(tenant_id=tenant_id, agent_id=agent_id, principal_id=principal_id)
    qs = Budget.objects.filter(tenant_id=tenant_id, archived_at__isnull=True)
    return qs.filter(budgets_applying_q(run=run)).select_related(*LIST_RELATED)


# console/core/kept.py: a run with a principal and one without are two shapes.
_APPLYING = Kept(lambda tenant_id, agent_id: _applying(tenant_id, agent_id))
_APPLYING_TO_PRINCIPAL = Kept(_applying)


# The tenant's active budgets, compiled once (console/core/kept.py): beside every decision.
_ACTIVE_BUDGETS = Kept(
    lambda tenant_id: (
        Budget.objects.filter(tenant_id=tenant_id, archived_at__isnull=True)
        .select_related(*LIST_RELATED)
        .order_by("pk")
    )
)


def runs_budgets(*, runs, now=None) -> dict:
    """For each run (of one tenant) the active budgets that apply to it, narrowest first, as
    `{"budget", "current"}`. Three queries whatever the number of runs: the tenant's
    budgets, the teams of the runs' principals, one spend query."""
    runs = list(runs)
    if not runs:
        return {}
    budgets = _ACTIVE_BUDGETS(runs[0].tenant_id)
    if not budgets:
        return {run.pk: [] for run in runs}
    teams: dict[int, set[int]] = {}
    if any(b.scope_type == "team" for b in budgets):
        members = Principal.teams.through.objects.filter(
            principal_id__in={r.principal_id for r in runs if r.principal_id}
        )
        for principal_id, team_id in members.values_list("principal_id", "team_id"):
            teams.setdefault(principal_id, set()).add(team_id)

    def applies(budget, run) -> bool:
        kind = budget.scope_type
        return (
            kind == "tenant"
            or (kind == "agent" and budget.agent_id == run.agent_id)
            or (
                kind == "principal" and run.principal_id and budget.principal_id == run.principal_id
            )
            or (kind == "team" and budget.team_id in teams.get(run.principal_id, ()))
        )

    applying = {run.pk: narrowest_first(b for b in budgets if applies(b, run)) for run in runs}
    used = {b.pk: b for listed in applying.values() for b in listed}
    currents = budgets_current(budgets=list(used.values()), now=now)
    return {
        pk: [{"budget": b, "current": currents[b.pk]} for b in listed]
        for pk, listed in applying.items()
    }


def budget_summary(budget, current: dict) -> dict:
    """A budget beside a decision: what is left of it (approval resources, cards)."""
    return {
        "id": budget.public_id,
        "name": budget.name,
        "remaining_minor_units": current["remaining_minor_units"],
        "ceiling_minor_units": budget.ceiling_minor_units,
        "percent": current["percent"],
    }


def run_costs(*, runs, now=None) -> dict:
    """Cost beside each decision, by run pk: the run's cost so far and the budgets that apply
    to it (narrowest first) with what is left of them. Three queries for any number of runs."""
    runs = list({run.pk: run for run in runs}.values())
    applying = runs_budgets(runs=runs, now=now)
    return {
        run.pk: {
            "run_cost_minor_units": run.cost_minor_units,
            "budgets": [budget_summary(a["budget"], a["current"]) for a in applying[run.pk]],
        }
        for run in runs
    }


def first_spend_since(*, budgets, since, until) -> dict:
    """For each budget (of one tenant), the moment its scope first spent in [since, until):
    the first finished step with a cost, or usage adjustment, of a run it holds (None: no
    spend). Two queries grouped by the runs' agent and principal, and one of the teams'
    members when a team's budget is among them. What a burn chart draws today's spend from,
    rather than from midnight (the rollups know days, not moments)."""
    budgets = list(budgets)
    if not budgets:
        return {}
    tenant_id = budgets[0].tenant_id
    firsts: dict[tuple, object] = {}
    reads = (
        Step.objects.filter(finished_at__gte=since, finished_at__lt=until, cost_minor_units__gt=0)
        .values("run__agent_id", "run__principal_id")
        .annotate(first=Min("finished_at")),
        UsageAdjustment.objects.filter(at__gte=since, at__lt=until)
        .exclude(cost_minor_units=0)
        .values("run__agent_id", "run__principal_id")
        .annotate(first=Min("at")),
    )
    for rows in reads:
        for row in rows.filter(run__tenant_id=tenant_id).order_by():
            key = (row["run__agent_id"], row["run__principal_id"])
            firsts[key] = min(row["first"], firsts.get(key, row["first"]))
    members: dict[int, set[int]] = {}
    teams = [b.team_id for b in budgets if b.scope_type == "team"]
    if teams:
        through = Principal.teams.through.objects.filter(team_id__in=teams)
        for team_id, principal_id in through.values_list("team_id", "principal_id"):
            members.setdefault(team_id, set()).add(principal_id)

    def held(budget, agent_id, principal_id) -> bool:
        kind = budget.scope_type
        return (
            kind == "tenant"
            or (kind == "agent" and budget.agent_id == agent_id)
            or (kind == "principal" and principal_id and budget.principal_id == principal_id)
            or (kind == "team" and principal_id in members.get(budget.team_id, ()))
        )

    return {
        b.pk: min(
            (
                at
                for (agent_id, principal_id), at in firsts.items()
                if held(b, agent_id, principal_id)
            ),
            default=None,
        )
        for b in budgets
    }
