"""The unit of work of one run inside one transaction, and the bulk SQL writer under it.

A `RunWrites` collects what the write primitives (runs/services/common.py) change: the run in
memory, plain rows (dicts, and `StepRow`s for steps, which later events of the unit amend) and
usage deltas; `flush()` writes each table with one statement, adds the usage to the tenant's
rollups with one upsert (then records the budget thresholds it reaches:
`budgets.services.budgets_usage_recorded`), saves the run once and publishes one
`run_changed` on commit.

No model instance is built for a row that is only inserted: on PostgreSQL a table's rows travel
as one JSON array that `jsonb_to_recordset` turns into rows (`console.core.rows`'s
`rows_insert`, `rows_upsert`); elsewhere they go through the ORM's bulk_create.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from approvals.services.rules import rule_hits_add
from budgets.services import budgets_usage_recorded
from console.core.rows import rows_insert, rows_upsert
from console.live import realtime
from console.models import Tenant
from runs.models import (
    VERDICT_SEVERITY,
    Handoff,
    Message,
    Run,
    RunTrace,
    Step,
    ToolResult,
    TurnVerdict,
    UsageAdjustment,
    UsageDaily,
    UsageDailyBy,
    Verdict,
)

USAGE_FIELDS = ("input_tokens", "output_tokens", "cost_minor_units")


def usage_zero() -> dict:
    return dict.fromkeys(USAGE_FIELDS, 0)


# --- the unit of work ---


@dataclass(slots=True)
class StepRow:
    """A step as a unit of work holds it (the columns of runs.Step, without the run)."""

    number: int
    agent_id: str
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_minor_units: int = 0
    finish_reason: str | None = None
    trace_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


STEP_COLUMNS = tuple(StepRow.__slots__)


class RunWrites:
    """Pending writes of one run; `flush()` applies them in a few statements."""

    def __init__(self, run: Run):
        self.run = run
        self.now = timezone.now()  # one clock reading per unit of work
        self.what: set[str] = set()
        self.dirty: set[str] = set()
        self.steps: dict[int, StepRow] = {}  # every step touched, by number
        self._looked_up: set[int] = set()  # step numbers already asked of the database
        self.messages: list[dict] = []
        self.tool_results: list[dict] = []
        self.handoffs: list[dict] = []
        self.verdicts: list[dict] = []
        self.usage: dict[tuple, list[int]] = {}  # (day, principal, agent, model) -> deltas
        self.rule_hits: Counter = Counter()  # rule id -> calls lasting rules decided
        self.held_later: list[dict] = []  # held calls to request together (calls_hold_later)
        self.usage_adjustments: list[dict] = []  # UsageAdjustment rows (usage of no step)
        self._next_message: int | None = None
        self._next_handoff: int | None = None
        self.turn_verdicts: dict[str, dict] = {}  # turn -> the widest verdict of this unit
        self.trace_ids: dict[str, None] = {}  # trace ids of this unit, in order, once each
        self._days: dict = {}  # moment -> rollup day (one zone lookup per unit)

    def trace_id_add(self, trace_id: str) -> None:
        """The run reported this trace id: added at flush unless the run holds it already."""
        self.trace_ids[trace_id] = None

    def verdict_widen(self, *, turn: str, verdict: str, guard: str, reason: str) -> None:
        """The turn holds this verdict unless it holds a wider one, or one as wide recorded
        earlier (in this unit: here; before it: the upsert at flush decides)."""
        held = self.turn_verdicts.get(turn)
        if held is None or VERDICT_SEVERITY[verdict] > held["severity"]:
            self.turn_verdicts[turn] = {
                "severity": VERDICT_SEVERITY[verdict],
                "verdict": verdict,
                "guard": guard or "",
                "reason": reason or "",
            }

    def touch(self, *fields: str, what: str | None = None) -> None:
        self.dirty.update(fields)
        if what:
            self.what.add(what)

    # Steps are loaded once per unit; `preload_steps` fetches many in one query. A run holds
    # no step above `run.steps` (every writer of a step raises it), so those are not asked.
    def preload_steps(self, numbers) -> None:
        wanted = {n for n in numbers if n not in self.steps and n not in self._looked_up}
        self._looked_up |= wanted
        wanted = {n for n in wanted if n <= self.run.steps}
        if wanted and self.run.pk:
            held = Step.objects.filter(run=self.run, number__in=wanted)
            for values in held.values(*STEP_COLUMNS):
                self.steps[values["number"]] = StepRow(**values)

    def step(self, number: int, *, agent_id: str | None = None) -> StepRow:
        row = self.steps.get(number)
        if row is None:
            if number not in self._looked_up:
                self.preload_steps([number])
            row = self.steps.get(number)
            if row is None:
                row = StepRow(
                    number=number,
                    agent_id=agent_id or self.run.current_agent_id,
                    started_at=self.now,
                )
                self.steps[number] = row
        return row

    def next_message_position(self) -> int:
        if self._next_message is None:
            held = Message.objects.filter(run=self.run).aggregate(m=Max("position"))["m"]
            self._next_message = 0 if held is None else held + 1
        position = self._next_message
        self._next_message += 1
        return position

    def next_handoff_position(self) -> int:
        if self._next_handoff is None:
            held = Handoff.objects.filter(run=self.run).aggregate(m=Max("position"))["m"]
            self._next_handoff = 0 if held is None else held + 1
        position = self._next_handoff
        self._next_handoff += 1
        return position

    def day(self, at: datetime):
        day = self._days.get(at)
        if day is None:
            day = self._days[at] = usage_day(tenant=self.run.tenant, at=at)
        return day

    def add_usage(self, *, day, model: str, usage: dict, steps: int) -> None:
        """Usage for the rollup, keyed by the run's principal and the run's agent (`agentId`,
        whichever agent ran the step: budgets scope runs by their agent)."""
        principal_id = self.run.principal.external_id if self.run.principal_id else ""
        key = (day, principal_id, self.run.agent.external_id, model or "")
        row = self.usage.setdefault(key, [0, 0, 0, 0])
        for i, field in enumerate(USAGE_FIELDS):
            row[i] += usage.get(field, 0)
        row[3] += steps

    def flush(self) -> None:
        run = self.run
        if self.steps:  # new and changed alike: one upsert
            rows_upsert(
                Step,
                [_step_values(run.pk, row) for row in self.steps.values()],
                unique=("run_id", "number"),
            )
        for model, rows in (
            (Message, self.messages),
            (ToolResult, self.tool_results),
            (Handoff, self.handoffs),
            (Verdict, self.verdicts),
            (UsageAdjustment, self.usage_adjustments),
        ):
            rows_insert(model, rows)
        turn_verdicts_widen(run_id=run.pk, verdicts=self.turn_verdicts)
        run_traces_add(run_id=run.pk, trace_ids=list(self.trace_ids))
        _usage_daily_add(tenant_id=run.tenant_id, rows=self.usage)
        if self.usage:  # thresholds this usage reaches: alerts in this transaction
            budgets_usage_recorded(run=run, days={k[0] for k, d in self.usage.items() if d[2] > 0})
            realtime.budgets_changed(run=run, days={key[0] for key in self.usage})
        if self.dirty:
            run.updated_at = timezone.now()
            run.save(update_fields=sorted(self.dirty | {"updated_at"}))
        if self.what:
            realtime.run_changed(run=run, what=sorted(self.what))
        if self.rule_hits:  # last: the rules' rows stay locked for the shortest time
            rule_hits_add(counts=self.rule_hits)
        self.__init__(run)


def _step_values(run_id: int, row: StepRow) -> dict:
    values = {column: getattr(row, column) for column in STEP_COLUMNS}
    values["run_id"] = run_id
    return values


class run_unit:
    """`with run_unit(run, writes) as w`: the caller's unit, or a unit of its own flushed in its
    own transaction when the primitive is called alone."""

    __slots__ = ("run", "writes", "atomic")

    def __init__(self, run: Run, writes: RunWrites | None):
        self.run, self.writes, self.atomic = run, writes, None

    def __enter__(self) -> RunWrites:
        if self.writes is None:
            self.atomic = transaction.atomic()
            self.atomic.__enter__()
            self.writes = RunWrites(self.run)
        return self.writes

    def __exit__(self, kind, value, traceback):
        if self.atomic is None:
            return False
        try:
            if kind is None:
                self.writes.flush()
        except BaseException as error:
            self.atomic.__exit__(type(error), error, error.__traceback__)
            raise
        return self.atomic.__exit__(kind, value, traceback)


def _usage_daily_add(*, tenant_id: int, rows: dict) -> None:
    """Add usage deltas to the daily rollup and to the rollups by one dimension
    (`UsageDailyBy`: the same deltas summed per day and principal, agent or model): one upsert
    statement each (PostgreSQL and SQLite).

    Atomic addition (`col = col + excluded.col`), never read-modify-write, so concurrent
    batches add up exactly; rows go in key order, so two batches touching the same rows lock
    them in the same order and cannot deadlock (and every batch locks `UsageDaily` rows before
    `UsageDailyBy` ones)."""
    if not rows:
        return
    rows = dict(sorted(rows.items()))
    params = []
    for (day, principal_id, agent_id, model), deltas in rows.items():
        params.append([tenant_id, day, principal_id, agent_id, model, *deltas])
    keys = ("tenant_id", "day", "principal_id", "agent_id", "model")
    _upsert_add(UsageDaily, keys, params)
    by: dict[tuple, list[int]] = {}
    for (day, principal_id, agent_id, model), deltas in rows.items():
        for dimension, key in (("agent", agent_id), ("model", model), ("principal", principal_id)):
            held = by.setdefault((dimension, day, key), [0] * len(deltas))
            for n, delta in enumerate(deltas):
                held[n] += delta
    params = [[tenant_id, *key, *deltas] for key, deltas in sorted(by.items())]
    _upsert_add(UsageDailyBy, ("tenant_id", "dimension", "day", "key"), params)


def _upsert_add(model, keys: tuple[str, ...], params: list[list]) -> None:
    """INSERT these rows (the key columns, then USAGE_FIELDS and steps), adding the sums to a
    row already held: one statement."""
    table = connection.ops.quote_name(model._meta.db_table)
    sums = (*USAGE_FIELDS, "steps")
    columns = ", ".join((*keys, *sums))
    row = "(" + ", ".join(["%s"] * (len(keys) + len(sums))) + ")"
    values = ", ".join([row] * len(params))
    adds = ", ".join(f"{f} = {table}.{f} + excluded.{f}" for f in sums)
    # Identifiers come from the model; every value is a parameter.
    sql = f"INSERT INTO {table} ({columns}) VALUES {values} "  # noqa: S608
    sql += f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {adds}"
    with connection.cursor() as cursor:
        cursor.execute(sql, [v for p in params for v in p])


def turn_verdicts_widen(*, run_id: int, verdicts: dict[str, dict]) -> None:
    """Each turn's verdict row takes the given verdict when it is wider than the one held (on
    equal severity the held one stands): one upsert (PostgreSQL and SQLite), whatever the run
    holds already. Rows go in turn order (a stable lock order)."""
    if not verdicts:
        return
    table = connection.ops.quote_name(TurnVerdict._meta.db_table)
    columns = ("severity", "verdict", "guard", "reason")
    for chunk in _chunks(sorted(verdicts.items()), 500):
        params = []
        for turn, held in chunk:
            params += [run_id, turn, *(held[c] for c in columns)]
        values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(chunk))
        sets = ", ".join(f"{c} = excluded.{c}" for c in columns)
        # Identifiers come from the model; every value is a parameter.
        sql = (
            f"INSERT INTO {table} (run_id, turn, {', '.join(columns)}) VALUES {values} "  # noqa: S608
            f"ON CONFLICT (run_id, turn) DO UPDATE SET {sets} "
            f"WHERE {table}.severity < excluded.severity"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)


def run_traces_add(*, run_id: int, trace_ids: list[str]) -> None:
    """Add the trace ids the run does not hold yet, in the given order: one insert that skips
    those held (PostgreSQL and SQLite)."""
    table = connection.ops.quote_name(RunTrace._meta.db_table)
    for chunk in _chunks(trace_ids, 1000):
        values = ", ".join(["(%s, %s)"] * len(chunk))
        params = [v for trace_id in chunk for v in (run_id, trace_id)]
        # Identifiers come from the model; every value is a parameter.
        sql = f"INSERT INTO {table} (run_id, trace_id) VALUES {values} "  # noqa: S608
        sql += "ON CONFLICT (run_id, trace_id) DO NOTHING"
        with connection.cursor() as cursor:
            cursor.execute(sql, params)


def _chunks(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def usage_day(*, tenant: Tenant, at: datetime):
    """The rollup day of a moment: the date in the tenant's time zone."""
    try:
        zone = ZoneInfo(tenant.time_zone or "UTC")
    except (KeyError, ValueError):
        zone = ZoneInfo("UTC")
    return timezone.localtime(at, zone).date()
