"""The usage half of the budgets page: its time range and the breakdowns by day, principal,
agent, model and team (charts and tables), one context function per partial."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from babel.numbers import format_decimal

from budgets import charts, rules, schemas, selectors
from console.core.formatting import money

DIMENSIONS = ("day", "principal", "agent", "model", "team")  # the breakdowns, in page order
DIMENSION_TITLES = {
    "day": "Spend per day",
    "principal": "By principal",
    "agent": "By agent",
    "model": "By model",
    "team": "By team",
}
KEY_HEADERS = {"day": "Day", "principal": "Principal", "agent": "Agent", "model": "Model"}
KEY_HEADERS["team"] = "Team"
NO_KEY = {"principal": "no principal", "agent": "no agent", "model": "no model", "team": "no team"}
BARS = 10  # keys drawn as bars; the rest are one "others" bar (the table lists them all)
TABLE_ROWS = 100  # rows a breakdown table lists; the CSV holds every one
PRESETS = (("month", "This month"), ("30", "Last 30 days"), ("90", "Last 90 days"))


def count_text(n: int) -> str:
    return format_decimal(n, locale=charts.LOCALE)


def _share(part: int, whole: int) -> str:
    return f"{rules.percent(part, whole):.1f}%" if whole > 0 else "—"


# --- the time range of the breakdowns ---


@dataclass(frozen=True)
class UsageRange:
    date_from: date
    date_to: date
    today: date

    @property
    def label(self) -> str:
        first, last = self.date_from, self.date_to
        return f"{charts.day_label(first, 'MMM d, y')} – {charts.day_label(last, 'MMM d, y')}"

    @property
    def query(self) -> str:
        return f"from={self.date_from.isoformat()}&to={self.date_to.isoformat()}"

    def presets(self) -> list[dict]:
        starts = {
            "month": self.today.replace(day=1),
            "30": self.today - timedelta(days=29),
            "90": self.today - timedelta(days=89),
        }
        out = []
        for key, label in PRESETS:
            first = starts[key]
            active = (first, self.today) == (self.date_from, self.date_to)
            query = f"from={first.isoformat()}&to={self.today.isoformat()}"
            out.append({"key": key, "label": label, "query": query, "active": active})
        return out


def usage_range(*, viewer, raw_from: str | None, raw_to: str | None, now=None) -> UsageRange:
    """The page's `from`/`to` read exactly as GET /api/v1/usage reads them (tenant-local days,
    default: this month to today, at most 366 days; `Invalid` naming the parameter otherwise).
    An empty form field counts as not given."""
    today = selectors.tenant_today(tenant=viewer.tenant, now=now)
    query = schemas.usage_query(
        raw_from=raw_from or None,
        raw_to=raw_to or None,
        raw_group_by=None,
        raw_format=None,
        today=today,
    )
    return UsageRange(date_from=query["date_from"], date_to=query["date_to"], today=today)


def usage_range_context(*, viewer, usage: UsageRange) -> dict:
    """The range picker (not swapped: changing the range is a GET of the page)."""
    tz = viewer.tenant.time_zone
    return {"range": usage, "presets": usage.presets(), "range_label": usage.label, "time_zone": tz}


# --- usage breakdowns ---


def _key_label(dimension: str, key) -> str:
    if key is None or key == "":
        return NO_KEY[dimension]
    if dimension == "day":
        return charts.day_label(date.fromisoformat(key), "EEE, MMM d")
    return str(key)


def _row_view(dimension: str, row: dict, *, total_cost: int, currency: str) -> dict:
    key = row.get(selectors.ROW_KEYS[dimension])
    return {
        "key": key,
        "label": _key_label(dimension, key),
        "none": key is None or key == "",
        "cost_minor_units": row["cost_minor_units"],
        "cost": money(row["cost_minor_units"], currency),
        "share": _share(row["cost_minor_units"], total_cost),
        "input_tokens": count_text(row["input_tokens"]),
        "output_tokens": count_text(row["output_tokens"]),
        "steps": count_text(row["steps"]),
    }


def _day_series(rows: list[dict], usage: UsageRange) -> tuple[list[str], list[int]]:
    """Every day of the range and its cost, from the report's rows."""
    by_day = {row["day"]: row["cost_minor_units"] for row in rows}
    labels, values = [], []
    day = usage.date_from
    while day <= usage.date_to:
        labels.append(charts.day_label(day))
        values.append(by_day.get(day.isoformat(), 0))
        day += timedelta(days=1)
    return labels, values


def _bar_series(
    dimension: str, rows: list[dict], *, rows_cost: int, row_count: int
) -> tuple[list[str], list[int]]:
    """The BARS costliest keys (`rows`: the first rows of the breakdown, in order), and the
    rest (of `row_count` rows costing `rows_cost` in all) as one bar."""
    shown = rows[:BARS]
    labels = [_key_label(dimension, row.get(selectors.ROW_KEYS[dimension])) for row in shown]
    values = [row["cost_minor_units"] for row in shown]
    if row_count > len(shown):
        labels.append(f"{row_count - len(shown)} others")
        values.append(rows_cost - sum(values))
    return labels, values


def usage_breakdown_context(*, viewer, dimension: str, usage: UsageRange) -> dict:
    """`budgets/index.html#usage-breakdown` (id `usage-<dimension>`): the spend of the range by
    one dimension, from `usage_report` (the rows GET /usage?groupBy=<dimension> answers): a bar
    chart, the same numbers as a table, and the CSV of those rows. The day's also builds
    `budgets/index.html#usage-summary` (the range's totals: its report's `totals`)."""
    if dimension not in DIMENSIONS:
        raise ValueError(f"unknown dimension {dimension!r}")
    span = {"viewer": viewer, "date_from": usage.date_from, "date_to": usage.date_to}
    if dimension == "day":
        report = selectors.usage_report(**span, group_by=[dimension])
        found = sorted(report["rows"], key=lambda row: row["day"])
        labels, values = _day_series(found, usage)
        row_count = len(found)
    else:  # the rows the table lists only (a tenant may have thousands of principals)
        report = selectors.usage_top(**span, dimension=dimension, limit=max(TABLE_ROWS, BARS))
        found, row_count = report["rows"], report["row_count"]
        labels, values = _bar_series(
            dimension, found, rows_cost=report["rows_cost"], row_count=row_count
        )
    currency = report["currency"]
    total_cost = report["totals"]["cost_minor_units"]
    rows = [
        _row_view(dimension, row, total_cost=total_cost, currency=currency)
        for row in found[:TABLE_ROWS]
    ]
    totals = report["totals"]
    days = (usage.date_to - usage.date_from).days + 1
    return {
        "breakdown": {
            "dimension": dimension,
            "dom_id": f"usage-{dimension}",
            "title": DIMENSION_TITLES[dimension],
            "key_header": KEY_HEADERS[dimension],
            "rows": rows,
            "more_rows": max(0, row_count - TABLE_ROWS),
            "row_count": row_count,
            "others": max(0, row_count - BARS) if dimension != "day" else 0,
            "totals": {
                "cost": money(totals["cost_minor_units"], currency),
                "cost_minor_units": totals["cost_minor_units"],
                "input_tokens": count_text(totals["input_tokens"]),
                "output_tokens": count_text(totals["output_tokens"]),
                "steps": count_text(totals["steps"]),
                "per_day": money(totals["cost_minor_units"] // days, currency),
            },
            "days": days,
            "overlaps": dimension == "team",  # a principal in two teams counts for both
            "chart_data_id": f"usage-{dimension}-data",
            "chart": charts.bar_chart(
                labels=labels, values=values, currency=currency, horizontal=dimension != "day"
            ),
            "csv_href": f"/budgets/usage.csv?{usage.query}&groupBy={dimension}",
            "range_label": usage.label,
        }
    }
