"""The wire shapes of usage and budgets (camelCase on the wire), and the parsing of their
query strings (422 naming the parameter)."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from typing import Annotated, Literal

from ninja import Field
from pydantic import ConfigDict, StrictStr
from pydantic.alias_generators import to_camel

from budgets.rules import DEFAULT_THRESHOLDS, THRESHOLD_MAX, THRESHOLD_MIN
from console.core.errors import Invalid
from console.core.wire import INT64_MAX, CamelSchema, Int64, OptionalCursor, wire_int

MAX_USAGE_DAYS = 366
DIMENSIONS = ("day", "principal", "agent", "model", "team")  # the contract's column order
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _invalid(path: str, message: str):
    return Invalid(
        f"{path.removeprefix('query.')}: {message}",
        code="validation_error",
        details=[{"path": path, "message": message}],
    )


def _day(raw: str | None, path: str) -> date | None:
    if raw is None:
        return None
    try:
        if not _DAY.match(raw):
            raise ValueError
        return date.fromisoformat(raw)
    except ValueError:
        raise _invalid(path, "must be a calendar day, YYYY-MM-DD") from None


def usage_query(
    *,
    raw_from: str | None,
    raw_to: str | None,
    raw_group_by: str | None,
    raw_format: str | None,
    today: date,
) -> dict:
    """`from`/`to` (tenant-local days, inclusive; default the 1st of this month to today, at
    most 366 days), `groupBy` (a comma list of dimensions, default `day`), `format`
    (`json` or `csv`)."""
    first = _day(raw_from, "query.from") or today.replace(day=1)
    last = _day(raw_to, "query.to") or today
    if first > last:
        raise _invalid("query.from", f"must not be after to ({last.isoformat()})")
    if last - first >= timedelta(days=MAX_USAGE_DAYS):
        raise _invalid("query.to", f"from..to spans more than {MAX_USAGE_DAYS} days")
    group_by = []
    for name in ("day" if raw_group_by is None else raw_group_by).split(","):
        name = name.strip()
        if name not in DIMENSIONS:
            raise _invalid(
                "query.groupBy",
                f"unknown dimension '{name}' (known: {', '.join(DIMENSIONS)})",
            )
        if name not in group_by:
            group_by.append(name)
    if raw_format not in (None, "json", "csv"):
        raise _invalid("query.format", f"unknown format '{raw_format}' (known: json, csv)")
    return {"date_from": first, "date_to": last, "group_by": group_by, "csv": raw_format == "csv"}


class UsageRow(CamelSchema):
    day: str | None = None
    principal_id: str | None = None
    agent_id: str | None = None
    model: str | None = None
    team: str | None = None
    input_tokens: int
    output_tokens: int
    cost_minor_units: int
    steps: int


class UsageTotals(CamelSchema):
    input_tokens: int
    output_tokens: int
    cost_minor_units: int
    steps: int


class UsageOut(CamelSchema):
    currency: str
    time_zone: str
    from_: str = Field(alias="from")
    to: str
    group_by: list[Literal["day", "principal", "agent", "model", "team"]]
    rows: list[UsageRow]
    totals: UsageTotals


# --- budgets ---

_FORBID = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
Threshold = wire_int(ge=THRESHOLD_MIN, le=THRESHOLD_MAX)
PositiveInt = wire_int(ge=1, le=INT64_MAX)  # a bigint column
PrincipalId = Annotated[StrictStr, Field(min_length=1, max_length=255)]
Leads = Annotated[
    list[PrincipalId],
    Field(
        max_length=100,
        description="each the id of one of the tenant's principals (unknown: a 422)",
    ),
]


class ScopeIn(CamelSchema):
    """What a budget counts. `tenant`: everything, with no `id` (or null); `team`,
    `principal`, `agent`: `id` names one of the tenant's teams, principals or agents, and is
    required. A scope without its id, or naming one the tenant does not have, is a 422 at
    `scope.id`."""

    model_config = _FORBID

    type: Literal["tenant", "team", "principal", "agent"]
    id: Annotated[StrictStr, Field(min_length=1, max_length=255)] | None = None


class ScopeOut(CamelSchema):
    type: Literal["tenant", "team", "principal", "agent", "run"]
    id: str | None


class BudgetIn(CamelSchema):
    """POST /budgets. Unknown fields are a 422 (as every body here)."""

    model_config = _FORBID

    name: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    scope: ScopeIn
    period: Literal["day", "week", "month"]
    ceiling_minor_units: PositiveInt
    ceiling_tokens: PositiveInt | None = None
    thresholds: Annotated[list[Threshold], Field(max_length=20)] = list(DEFAULT_THRESHOLDS)
    over_budget: Literal["refuse", "ask"] = "refuse"
    leads: Leads = []


class BudgetPatch(CamelSchema):
    """PATCH /budgets/{budgetId}: any of the fields; `ceilingTokens: null` removes that
    ceiling, null for any other field is a 422 (its type does not take it)."""

    model_config = _FORBID

    name: Annotated[StrictStr, Field(min_length=1, max_length=200)] = None
    scope: ScopeIn = None
    period: Literal["day", "week", "month"] = None
    ceiling_minor_units: PositiveInt = None
    ceiling_tokens: PositiveInt | None = None
    thresholds: Annotated[list[Threshold], Field(max_length=20)] = None
    over_budget: Literal["refuse", "ask"] = None
    leads: Leads = None

    def changes(self) -> dict:
        return {name: self.model_dump()[name] for name in self.model_fields_set}


class CurrentOut(CamelSchema):
    period_start: datetime
    period_end: datetime
    spent_minor_units: int
    spent_tokens: int
    remaining_minor_units: int
    percent: float
    projected_minor_units: int
    crossed: list[int]


class BudgetOut(CamelSchema):
    id: str
    name: str
    scope: ScopeOut
    period: Literal["day", "week", "month"]
    ceiling_minor_units: int
    ceiling_tokens: int | None
    thresholds: list[int]
    over_budget: Literal["refuse", "ask"]
    leads: list[str]
    active: bool
    current: CurrentOut
    created_at: datetime
    updated_at: datetime


class BudgetListOut(CamelSchema):
    items: list[BudgetOut]
    next_cursor: str | None


class BudgetListQuery(CamelSchema):
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: OptionalCursor = None


# --- the budget check ---

NonNegative = Int64


class BudgetCheckIn(CamelSchema):
    model_config = _FORBID

    run_id: Annotated[StrictStr, Field(min_length=1, max_length=128)]
    estimated_cost_minor_units: NonNegative
    estimated_tokens: NonNegative = 0


class CheckEntryOut(CamelSchema):
    id: str | None
    name: str
    scope: ScopeOut
    period: Literal["day", "week", "month"] | None
    ceiling_minor_units: int
    spent_minor_units: int
    remaining_minor_units: int
    ceiling_tokens: int | None
    spent_tokens: int
    allowed: bool


class BudgetCheckOut(CamelSchema):
    allowed: bool
    budgets: list[CheckEntryOut]
    tripped_budget: CheckEntryOut | None
    approval_id: str | None
    override_approval_id: str | None
