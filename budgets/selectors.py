"""Reads for leads: usage by day, principal, agent, model and team, and budgets with their
current spend (budgets.spend). Everything is computed from the usage rollups
(runs.UsageDaily), never from a scan of steps. The API and the /budgets/ pages call these
same functions."""

from __future__ import annotations

from datetime import date

from django.db import connection
from django.utils import timezone

from budgets import access as budgets_access
from budgets import rules
from budgets.schemas import DIMENSIONS
from budgets.spend import LIST_RELATED, budget_current, budgets_current
from console.core import paging
from console.core.wire import cursor_pk
from console.directory import access
from console.models import Principal, Team
from runs.models import UsageDaily, UsageDailyBy

ROW_KEYS = {
    "day": "day",
    "principal": "principal_id",
    "agent": "agent_id",
    "model": "model",
    "team": "team",
}
SUMS = ("input_tokens", "output_tokens", "cost_minor_units", "steps")
_COLUMNS = {
    "day": "u.day",
    "principal": "u.principal_id",
    "agent": "u.agent_id",
    "model": "u.model",
    "team": "t.name",
}


def tenant_today(*, tenant, now=None):
    """Today in the tenant's time zone."""
    return rules.local_today(now or timezone.now(), rules.zone(tenant.time_zone))


def _tables() -> dict:
    quote = connection.ops.quote_name
    return {
        "usage": quote(UsageDaily._meta.db_table),
        "usage_by": quote(UsageDailyBy._meta.db_table),
        "principal": quote(Principal._meta.db_table),
        "members": quote(Principal.teams.through._meta.db_table),
        "team": quote(Team._meta.db_table),
    }


# The `UsageDailyBy` dimension that answers a grouping by at most one dimension besides the
# day: its own, the principals' for teams, and (any one: each sums every step) the models'
# for the day alone or the totals.
_BY_DIMENSION = {"": "model", "principal": "principal", "agent": "agent", "model": "model",
                 "team": "principal"}  # fmt: skip


def _usage_rows(
    *, tenant_id: int, first: date, last: date, dims: list[str], top: int | None = None
) -> list[tuple]:
    """One GROUP BY over the rollups of the days [first, last]; team rows through the
    principals' memberships now (a principal in two teams counts for both). A grouping by at
    most one dimension besides the day reads the rollups by that dimension (`UsageDailyBy`:
    a row per key a day), any other the full rollups (a row per principal, agent and model a
    day). `top` (one dimension): only the `top` costliest rows, in `usage_report`'s order,
    each followed by the number of rows and the sum of every row's cost."""
    t = _tables()
    named = [d for d in dims if d != "day"]
    if len(named) <= 1:
        table, key = t["usage_by"], "u.key"
        columns_of = {d: key for d in ("principal", "agent", "model")}
        where, params = " AND u.dimension = %s", [_BY_DIMENSION[named[0] if named else ""]]
    else:
        table, key = t["usage"], "u.principal_id"
        columns_of = {d: c for d, c in _COLUMNS.items() if d not in ("day", "team")}
        where, params = "", []
    keys = [{"day": "u.day", "team": "t.name", **columns_of}[d] for d in dims]
    columns = ", ".join([*keys, *(f"SUM(u.{s})" for s in SUMS)])
    sql = f"SELECT {columns} FROM {table} u"  # noqa: S608
    if named == ["team"]:  # the principals' sums first: the memberships join one row each
        day = "day, " if "day" in dims else ""
        sums = ", ".join(f"SUM({s}) AS {s}" for s in SUMS)
        sql = (
            f"SELECT {columns} FROM (SELECT tenant_id, {day}key, {sums} FROM {table} "  # noqa: S608
            "WHERE tenant_id = %s AND dimension = %s AND day >= %s AND day <= %s "
            f"GROUP BY tenant_id, {day}key) u"
        )
    if "team" in dims:
        sql += (
            f" LEFT JOIN {t['principal']} p ON p.tenant_id = u.tenant_id"
            f" AND p.external_id = {key} AND {key} <> ''"
            f" LEFT JOIN {t['members']} pt ON pt.principal_id = p.id"
            f" LEFT JOIN {t['team']} t ON t.id = pt.team_id"
        )
    if named != ["team"]:  # (the team's subquery holds its conditions)
        sql += f" WHERE u.tenant_id = %s{where} AND u.day >= %s AND u.day <= %s"
    if keys:
        sql += f" GROUP BY {', '.join(keys)}"
    if top is not None:
        [key_sql] = keys
        binary = ' COLLATE "C"' if connection.vendor == "postgresql" else ""
        # _sort_key's order: cost descending, then the key (a principal's '' and a missing
        # team are none, last), by code point.
        none = named[0] in ("principal", "team")
        nones_last = f"({key_sql} IS NULL OR {key_sql} = ''), " if none else ""
        cost = "SUM(u.cost_minor_units)"
        sql = sql.replace(
            f"SELECT {columns} ",
            f"SELECT {columns}, COUNT(*) OVER (), SUM({cost}) OVER () ",
            1,
        )
        sql += f" ORDER BY {cost} DESC, {nones_last}{key_sql}{binary} LIMIT {int(top)}"
    # Identifiers come from the models and the fixed maps above; values are parameters.
    with connection.cursor() as cursor:
        cursor.execute(sql, [tenant_id, *params, first, last])
        return cursor.fetchall()


def _key_value(dim: str, value):
    if dim == "day":
        return value if isinstance(value, str) else value.isoformat()
    if dim == "principal":
        return value or None  # '' in the rollup: a run for no principal
    return value


def _sort_key(row: dict):
    keys = [row.get(ROW_KEYS[d]) for d in DIMENSIONS if ROW_KEYS[d] in row]
    return (-row["cost_minor_units"], *((v is None, v or "") for v in keys))


def usage_top(*, viewer, date_from: date, date_to: date, dimension: str, limit: int) -> dict:
    """The `limit` first rows of `usage_report(group_by=[dimension])` (not the day), in its
    order, with `row_count` (every row's), `rows_cost` (every row's cost: team rows may add up
    to more than the totals) and the totals: what a page shows of a breakdown of thousands of
    keys (principals) without reading them all."""
    access.require_capability(viewer, "view_budgets")
    tenant = viewer.tenant
    found = _usage_rows(
        tenant_id=tenant.pk, first=date_from, last=date_to, dims=[dimension], top=limit
    )
    rows = []
    for key, *sums, _count, _cost in found:
        row = {ROW_KEYS[dimension]: _key_value(dimension, key)}
        row.update(zip(SUMS, (int(v or 0) for v in sums), strict=True))
        rows.append(row)
    totals_row = _usage_rows(tenant_id=tenant.pk, first=date_from, last=date_to, dims=[])[0]
    return {
        "currency": tenant.currency,
        "rows": rows,
        "row_count": int(found[0][-2]) if found else 0,
        "rows_cost": int(found[0][-1] or 0) if found else 0,
        "totals": {s: int(v or 0) for s, v in zip(SUMS, totals_row, strict=True)},
    }


def usage_report(*, viewer, date_from: date, date_to: date, group_by: list[str]) -> dict:
    """Usage of the viewer's tenant over the local days [date_from, date_to], grouped by
    `group_by` (dimensions of DIMENSIONS): rows sorted by cost descending, then by their keys
    (null last); totals over every step (team rows may add up to more)."""
    access.require_capability(viewer, "view_budgets")
    tenant = viewer.tenant
    dims = [d for d in DIMENSIONS if d in group_by]
    rows = []
    for record in _usage_rows(tenant_id=tenant.pk, first=date_from, last=date_to, dims=dims):
        row = {ROW_KEYS[d]: _key_value(d, v) for d, v in zip(dims, record, strict=False)}
        row.update(zip(SUMS, (int(v or 0) for v in record[len(dims) :]), strict=True))
        rows.append(row)
    rows.sort(key=_sort_key)
    if "team" in dims:
        totals_row = _usage_rows(tenant_id=tenant.pk, first=date_from, last=date_to, dims=[])[0]
        totals = {s: int(v or 0) for s, v in zip(SUMS, totals_row, strict=True)}
    else:
        totals = {s: sum(r[s] for r in rows) for s in SUMS}
    return {
        "currency": tenant.currency,
        "time_zone": tenant.time_zone,
        "from": date_from.isoformat(),
        "to": date_to.isoformat(),
        "group_by": list(group_by),
        "rows": rows,
        "totals": totals,
    }


USAGE_CSV_HEADER = {
    "day": "day",
    "principal_id": "principalId",
    "agent_id": "agentId",
    "model": "model",
    "team": "team",
    "input_tokens": "inputTokens",
    "output_tokens": "outputTokens",
    "cost_minor_units": "costMinorUnits",
    "steps": "steps",
}


def usage_csv_lines(report: dict) -> list[list]:
    """The report's rows as CSV records, header first, columns in the contract's order
    (null is an empty field). Numbers stay numbers: console.csvsafe neutralises text only."""
    dims = [ROW_KEYS[d] for d in DIMENSIONS if d in report["group_by"]]
    columns = [*dims, *SUMS]
    lines = [[USAGE_CSV_HEADER[c] for c in columns]]
    for row in report["rows"]:
        lines.append(["" if row[c] is None else row[c] for c in columns])
    return lines


# --- budgets and their current spend ---


def budget_resource(budget, *, current: dict) -> dict:
    """The budget resource (snake_case; schemas.BudgetOut maps it to the wire). Prefetch
    `leads` for lists."""
    return {
        "id": budget.public_id,
        "name": budget.name,
        "scope": {"type": budget.scope_type, "id": budget.scope_id},
        "period": budget.period,
        "ceiling_minor_units": budget.ceiling_minor_units,
        "ceiling_tokens": budget.ceiling_tokens,
        "thresholds": list(budget.thresholds),
        "over_budget": budget.over_budget,
        "leads": sorted(p.external_id for p in budget.leads.all()),
        "active": budget.is_active,
        "current": current,
        "created_at": budget.created_at,
        "updated_at": budget.updated_at,
    }


def budget_read(*, viewer, budget_id: str, now=None) -> dict:
    """One budget's resource (archived ones too)."""
    budget = budgets_access.budget_for(viewer=viewer, budget_id=budget_id)
    return budget_resource(budget, current=budget_current(budget=budget, now=now))


def _cursor(raw: str | None) -> int:
    if raw is None:
        return 0
    return paging.read(lambda c: cursor_pk(paging.decode_tagged("b", c)), raw)


def budgets_list(*, viewer, limit: int = 50, cursor: str | None = None, now=None) -> dict:
    """The tenant's active budgets, oldest first, keyset-paginated by an opaque cursor."""
    qs = budgets_access.budgets_visible_to(viewer=viewer).filter(pk__gt=_cursor(cursor))
    rows = list(
        qs.select_related(*LIST_RELATED).prefetch_related("leads").order_by("pk")[: limit + 1]
    )
    more, rows = len(rows) > limit, rows[:limit]
    currents = budgets_current(budgets=rows, now=now)
    return {
        "items": [budget_resource(b, current=currents[b.pk]) for b in rows],
        "next_cursor": paging.encode(f"b{rows[-1].pk}") if more else None,
    }
