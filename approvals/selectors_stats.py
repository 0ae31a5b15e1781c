"""Decision analytics (`/approvals/stats/`, for those with `manage_rules`): per tool, per agent
and per reviewer, over the calls requested in the last N days: calls, approve rate, median and
p90 time for people to decide, and the share rules decided. The numbers that show whether rules
are working.

Each table is ONE aggregate query (GROUP BY, on the approval_tenant_requested index). On
PostgreSQL the percentiles are the database's `percentile_cont` in that same query; SQLite has
no percentile aggregate, so there they are computed in Python from one more query, bounded to
the newest STATS_SCAN decisions of the period (the embedded default is for small tenants).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from django.db import connection
from django.db.models import Aggregate, Count, F, FloatField, Func, Q
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from console.core.errors import Invalid
from console.core.formatting import short_duration
from console.directory import access

STATS_SCAN = 50_000  # decisions read for the percentiles on SQLite, at most
MAX_DAYS = 365
ROWS = 100  # rows per table, most calls first

APPROVED, DENIED, EXPIRED = ApprovalStatus.APPROVED, ApprovalStatus.DENIED, ApprovalStatus.EXPIRED
PEOPLE = Q(decided_by__isnull=False, status__in=[APPROVED, DENIED])


class Percentile(Aggregate):
    """PostgreSQL's percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, fraction: float, **extra):
        super().__init__(expression, fraction=float(fraction), **extra)


def _seconds_to_decide():
    return Func(
        F("decided_at") - F("requested_at"),
        template="EXTRACT(EPOCH FROM %(expressions)s)",
        output_field=FloatField(),
    )


def _percentile(values: list[float], fraction: float) -> float | None:
    """percentile_cont: linear interpolation between the closest ranks."""
    if not values:
        return None
    values = sorted(values)
    rank = fraction * (len(values) - 1)
    low = int(rank)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (rank - low)


def _rows(qs, keys: dict) -> list[dict]:
    aggregates = {
        "calls": Count("pk"),
        "approved": Count("pk", filter=Q(status=APPROVED)),
        "denied": Count("pk", filter=Q(status=DENIED)),
        "expired": Count("pk", filter=Q(status=EXPIRED)),
        "by_rules": Count("pk", filter=Q(decided_by_rule__isnull=False)),
    }
    on_postgres = connection.vendor == "postgresql"
    if on_postgres:
        seconds = _seconds_to_decide()
        aggregates["median"] = Percentile(seconds, 0.5, filter=PEOPLE)
        aggregates["p90"] = Percentile(seconds, 0.9, filter=PEOPLE)
    rows = list(qs.values(**keys).annotate(**aggregates).order_by("-calls", *keys)[:ROWS])
    if not on_postgres:
        _percentiles_in_python(qs, keys, rows)
    for row in rows:
        decided = row["approved"] + row["denied"]
        row["decided"] = decided
        row["approve_rate"] = row["approved"] / decided if decided else None
        row["rule_share"] = row["by_rules"] / decided if decided else None
        row["shown"] = {
            "approve_rate": _percent(row["approve_rate"]),
            "rule_share": _percent(row["rule_share"]),
            "median": _time(row["median"]),
            "p90": _time(row["p90"]),
        }
    return rows


def _percent(fraction) -> str:
    return "—" if fraction is None else f"{fraction * 100:.0f}%"


def _time(seconds) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    return short_duration(timedelta(seconds=seconds))


def _percentiles_in_python(qs, keys: dict, rows: list[dict]) -> None:
    """SQLite: the people's decision times, one bounded query, grouped here."""
    times = defaultdict(list)
    names = list(keys)
    decided = qs.filter(PEOPLE).order_by("-requested_at")
    for row in decided.values("requested_at", "decided_at", **keys)[:STATS_SCAN]:
        group = tuple(row[n] for n in names)
        times[group].append((row["decided_at"] - row["requested_at"]).total_seconds())
    for row in rows:
        values = times.get(tuple(row[n] for n in names), [])
        row["median"] = _percentile(values, 0.5)
        row["p90"] = _percentile(values, 0.9)


def _days(raw) -> int:
    try:
        days = int(raw)
    except (TypeError, ValueError):
        days = 0
    if not 1 <= days <= MAX_DAYS:
        raise Invalid(f"days must be a whole number from 1 to {MAX_DAYS}", code="validation_error")
    return days


def decision_stats(*, viewer, days=30, now=None) -> dict:
    """The three tables (by tool, by agent, by reviewer) over the last `days` days."""
    access.require_capability(viewer, "manage_rules")
    days = _days(days)
    since = (now or timezone.now()) - timedelta(days=days)
    calls = Approval.objects.filter(
        tenant_id=viewer.tenant_id, requested_at__gte=since, mirror_of__isnull=True
    ).exclude(status=ApprovalStatus.CANCELLED)
    decided = calls.filter(status__in=[APPROVED, DENIED])
    return {
        "days": days,
        "since": since,
        "percentiles_by": "PostgreSQL percentile_cont"
        if connection.vendor == "postgresql"
        else f"Python, over the newest {STATS_SCAN:,} decisions (SQLite)",
        "by_tool": _rows(calls, {"tool": F("tool_name")}),
        "by_agent": _rows(calls, {"agent": F("run__current_agent_id")}),
        "by_reviewer": _rows(
            decided,
            {
                "reviewer": F("decided_by__external_id"),
                "rule_id": F("decided_by_rule__public_id"),
                "rule_name": F("decided_by_rule__name"),
            },
        ),
    }


def decision_stats_context(*, viewer, days=30) -> dict:
    return {"stats": decision_stats(viewer=viewer, days=days)}
