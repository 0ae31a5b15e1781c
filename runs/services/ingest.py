"""Ingest over the wire: admitting runs and applying event batches (the contract's seq rules).

A batch is one transaction under the run's row lock: its RunEvent rows go in with one
statement; the database itself then makes the batch's Message, ToolResult and Verdict rows from
those log rows (`LOG_PROJECTIONS`: the content is sent once, not twice); the run-level effects
(steps, usage, verdicts, status, todos, handoffs, held calls) are gathered by a `RunWrites` and
written with a few statements; one `run_changed` is published on commit. A batch that fails
writes nothing.
"""

from __future__ import annotations

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from approvals.services.decisions import approvals_mark_delivered
from console.core.errors import Conflict, Invalid
from console.core.rows import rows_insert
from console.live import realtime
from console.models import Tenant
from ops import instruments
from runs import access as runs_access
from runs import schemas as s
from runs.models import Message, Run, RunEvent, RunStatus, ToolResult, Verdict
from runs.services import common
from runs.services.writes import RunWrites


def _wire(model) -> dict:
    """The normalized wire form of a body: what is stored and compared for idempotency."""
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


# --- admission ---


@transaction.atomic
def run_admit(*, tenant: Tenant, body: s.NewRunIn) -> tuple[Run, bool]:
    """Admit a run: (run, True) when new, (run, False) for an identical replay.

    The same id with a different body is a Conflict naming the fields that differ. A run the
    console first saw through a snapshot (no admission yet) adopts this admission.
    """
    wire = _wire(body)
    principal = common.principal(tenant=tenant, external_id=body.principal_id)
    run = runs_access.run_locked(tenant_id=tenant.pk, run_id=body.id, defer=())
    if run is None:
        try:
            with transaction.atomic():
                return _run_create(tenant=tenant, body=body, wire=wire, principal=principal), True
        except IntegrityError:  # a concurrent admission of the same id won the insert
            run = runs_access.run_locked(tenant_id=tenant.pk, run_id=body.id, defer=())
    if run.admission is None:
        _admission_adopt(run=run, body=body, wire=wire, principal=principal)
    elif run.admission != wire:
        differs = sorted(
            k for k in wire.keys() | run.admission.keys() if wire.get(k) != run.admission.get(k)
        )
        raise Conflict(
            f"run '{body.id}' was admitted with a different body",
            code="run_exists",
            details={"differs": differs, "held": run.admission},
        )
    return run, False


def _run_create(*, tenant, body: s.NewRunIn, wire: dict, principal) -> Run:
    run = Run.objects.create(
        tenant=tenant,
        external_id=body.id,
        agent=common.agent_ensure(
            tenant=tenant, external_id=body.agent_id, version=body.agent_version
        ),
        agent_version=body.agent_version,
        current_agent_id=body.agent_id,
        principal=principal,
        role_ids=list(body.role_ids),
        conversation=common.conversation_ensure(tenant=tenant, external_id=body.conversation_id),
        parent_run_id=body.parent_run_id,
        input=wire.get("input"),
        limits=wire.get("limits") or {},
        admission=wire,
        started_at=body.started_at or timezone.now(),
    )
    realtime.run_changed(run=run, what=["created"])
    return run


def _admission_adopt(*, run: Run, body: s.NewRunIn, wire: dict, principal) -> None:
    """A run first fed by a snapshot takes the admission's principal, version and limits."""
    tenant = run.tenant
    run.admission = wire
    run.agent_version = body.agent_version
    common.agent_ensure(tenant=tenant, external_id=body.agent_id, version=body.agent_version)
    run.principal = run.principal or principal
    run.role_ids = list(body.role_ids)
    run.conversation = run.conversation or common.conversation_ensure(
        tenant=tenant, external_id=body.conversation_id
    )
    run.parent_run_id = run.parent_run_id or body.parent_run_id
    run.input = wire.get("input", run.input)
    run.limits = wire.get("limits") or run.limits
    run.save()
    realtime.run_changed(run=run, what=["header"])


# --- events ---


@transaction.atomic
def run_events_apply(
    *, tenant_id: int, run_id: str, events: list, locked: Run | None = None
) -> int:
    """Apply a batch of validated events (runs.schemas.Event) to the tenant's run `run_id`
    (NotFound if it has none); returns the run's lastSeq. `locked`: that run, already read
    with its row lock in the caller's transaction (the MCP gateway's: not read twice)."""
    if locked is not None and (locked.tenant_id, locked.external_id) == (tenant_id, run_id):
        run = locked
    else:
        run = runs_access.run_in_tenant(tenant_id=tenant_id, run_id=run_id, for_update=True)
    _check_contiguous(events)
    if events[0].seq > run.last_seq + 1:
        raise Conflict(
            f"the batch starts at seq {events[0].seq} but the run holds up to {run.last_seq}",
            code="seq_gap",
            details={"expectedSeq": run.last_seq + 1, "lastSeq": run.last_seq},
        )
    wires = s.EVENTS.dump_python(events, mode="json", by_alias=True, exclude_unset=True)
    held = sum(1 for e in events if e.seq <= run.last_seq)
    _check_replayed(run=run, events=events[:held], wires=wires[:held])
    if held == len(events):
        return run.last_seq  # a retried batch: harmless
    _apply_new(run=run, events=events[held:], wires=wires[held:])
    return run.last_seq


def _check_contiguous(events: list) -> None:
    for i in range(1, len(events)):
        if events[i].seq != events[i - 1].seq + 1:
            raise Invalid(
                "seqs within a batch must increase by one",
                code="validation_error",
                details=[
                    {
                        "path": f"events.{i}.seq",
                        "message": f"expected {events[i - 1].seq + 1}, got {events[i].seq}",
                    }
                ],
            )


def _check_replayed(*, run: Run, events: list, wires: list) -> None:
    """Events at seqs the server holds must be identical to what it holds."""
    if not events:
        return
    held = dict(
        RunEvent.objects.filter(
            run=run, seq__gte=events[0].seq, seq__lte=events[-1].seq
        ).values_list("seq", "data")
    )
    for event, wire in zip(events, wires, strict=True):
        if held.get(event.seq) != wire:
            raise Conflict(
                f"a different event is held at seq {event.seq}",
                code="seq_conflict",
                details={"seq": event.seq, "held": held.get(event.seq)},
            )


def _apply_new(*, run: Run, events: list, wires: list) -> None:
    if run.is_finished:
        _finished_conflict(run=run, seq=events[0].seq)
    # The runtime is reporting again: it has picked up what was decided ("runtime resumed").
    # Before the batch's effects: a call a rule decides in this batch is not picked up yet.
    approvals_mark_delivered(run=run)
    writes = RunWrites(run)
    now = writes.now
    rows_insert(
        RunEvent,
        [
            {"run_id": run.pk, "seq": e.seq, "type": e.type, "data": w, "at": e.at or now}
            for e, w in zip(events, wires, strict=True)
        ],
    )
    run.last_seq = events[-1].seq  # before the effects, so their live updates carry it
    writes.touch("last_seq", what="events")
    writes.preload_steps({e.step for e in events if getattr(e, "step", None)})
    for event, wire in zip(events, wires, strict=True):
        if run.is_finished:
            _finished_conflict(run=run, seq=event.seq)
        if event.type not in BLIND_TO_APPROVALS:
            common.calls_held_now(run=run, writes=writes)
        EFFECTS[event.type](run, event, wire, writes)
    common.calls_held_now(run=run, writes=writes)
    if _reported_after_asking(events):
        common.run_status_settle(run=run, writes=writes)
    _log_project(run=run, events=events)
    writes.flush()
    instruments.events_ingested(events)  # gavel_ingest_events_total, runtime trace ids


def _reported_after_asking(events: list) -> bool:
    """Did the batch report a result or a step's end after the last calls it asked a person
    about (a call's `approval.requested` leaves the run awaiting approval, as the contract
    says, until something shows the runtime went on)?"""
    went_on = False
    for event in events:
        if event.type == "approval.requested":
            went_on = False
        elif event.type in ("tool.result", "step.finished"):
            went_on = True
    return went_on


def _finished_conflict(*, run: Run, seq: int):
    raise Conflict(
        f"run '{run.external_id}' has finished; seq {seq} is a new event",
        code="run_finished",
        details={"status": run.status, "lastSeq": run.last_seq},
    )


# --- the effects table of the contract: one function per event type ---


def _step_started(run, e: s.StepStarted, wire, w: RunWrites):
    common.step_start(
        run=run, step=e.step, agent_id=e.agent_id, model=e.model, started_at=e.at, writes=w
    )
    if run.status == RunStatus.AWAITING_APPROVAL:  # a new step: the run has resumed
        common.run_status_set(run=run, status=RunStatus.RUNNING, writes=w)


def _message(run, e: s.MessageEvent, wire, w: RunWrites):
    w.what.add("messages")  # the row: LOG_PROJECTIONS


def _tool_result(run, e: s.ToolResultEvent, wire, w: RunWrites):
    w.what.add("tool_results")  # the row: LOG_PROJECTIONS


def _step_finished(run, e: s.StepFinished, wire, w: RunWrites):
    common.step_finish_usage(
        run=run,
        step=e.step,
        model=e.model,
        usage=e.usage.model_dump(),
        finish_reason=e.finish_reason,
        trace_id=e.trace_id,
        finished_at=e.at,
        writes=w,
    )


def _approval_requested(run, e: s.ApprovalRequested, wire, w: RunWrites):
    calls = [c.model_dump() for c in e.calls]
    for call, raw in zip(calls, wire["calls"], strict=True):
        call["arguments"] = raw.get("arguments")
        call["step"], call["requested_at"] = e.step, e.at
    common.calls_hold_later(run=run, calls=calls, writes=w)


def _handoff(run, e: s.HandoffEvent, wire, w: RunWrites):
    common.handoff_record(
        run=run,
        step=e.step,
        from_agent_id=e.from_agent_id,
        to_agent_id=e.to_agent_id,
        child_run_id=e.child_run_id,
        at=e.at,
        writes=w,
    )


def _handoff_returned(run, e: s.HandoffReturned, wire, w: RunWrites):
    common.handoff_record(
        run=run, step=e.step, to_agent_id=e.to_agent_id, returned=True, at=e.at, writes=w
    )


def _todos_updated(run, e: s.TodosUpdated, wire, w: RunWrites):
    common.todos_replace(run=run, todos=wire["todos"], writes=w)


def _verdict(run, e: s.VerdictEvent, wire, w: RunWrites):
    # The row: LOG_PROJECTIONS; the run keeps the widest verdict per turn.
    common.verdict_widen(w, turn=e.turn, verdict=e.verdict, guard=e.guard, reason=e.reason)


def _taint_updated(run, e: s.TaintUpdated, wire, w: RunWrites):
    common.taint_replace(run=run, taint_summary=wire["taintSummary"], writes=w)


def _run_finished(run, e: s.RunFinished, wire, w: RunWrites):
    common.run_finish(
        run=run,
        status=e.status,
        result=wire.get("result"),
        ended_by_tool=e.ended_by_tool,
        finish_reason=e.finish_reason,
        usage_denied=wire.get("usageDenied"),
        error=wire.get("error"),
        finished_at=e.at,
        writes=w,
    )


# Events whose effects never read the run's approvals: the held calls of a batch wait past
# them to be requested together (common.calls_hold_later); any other event, and the batch's
# end, requests them first.
BLIND_TO_APPROVALS = frozenset(
    {"step.started", "message", "tool.result", "step.finished", "approval.requested"}
)

EFFECTS = {
    "step.started": _step_started,
    "message": _message,
    "tool.result": _tool_result,
    "step.finished": _step_finished,
    "approval.requested": _approval_requested,
    "handoff": _handoff,
    "handoff.returned": _handoff_returned,
    "todos.updated": _todos_updated,
    "verdict": _verdict,
    "taint.updated": _taint_updated,
    "run.finished": _run_finished,
}


# --- rows the database makes from the log rows of a batch ---
#
# A message, a tool result and a verdict are each a row of their own table as well as a log
# row. The batch's log rows are in the database already, so one INSERT ... SELECT per table
# makes them there, reading the fields out of the stored event: the content crosses the wire
# and is parsed once. The SQL is the same on PostgreSQL and SQLite (3.38+: `->`, `->>`; a JSON
# null where a column allows NULL becomes NULL, as the ORM stores None). Messages are numbered
# after the run's last one, in seq order.


def _projection(model, values: dict[str, str], event_type: str) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(model._meta.get_field(name).column) for name in values)
    log = RunEvent._meta.db_table
    # Identifiers come from the models and this module; every value is a parameter.
    return (
        f"INSERT INTO {quote(model._meta.db_table)} (run_id, {columns}) "  # noqa: S608
        f"SELECT run_id, {', '.join(values.values())} FROM {quote(log)} "
        "WHERE run_id = %(run)s AND seq BETWEEN %(first)s AND %(last)s "
        f"AND type = '{event_type}'"
    )


def _log_projections() -> dict[str, str]:
    """Event type -> the INSERT ... SELECT making its rows."""
    table = connection.ops.quote_name(Message._meta.db_table)
    position = (
        f"(SELECT COALESCE(MAX(position) + 1, 0) FROM {table} WHERE run_id = %(run)s)"  # noqa: S608
        " + ROW_NUMBER() OVER (ORDER BY seq) - 1"
    )
    return {
        "message": _projection(
            Message,
            {
                "position": position,
                "step": "CAST(data ->> 'step' AS integer)",
                "role": "data -> 'message' ->> 'role'",
                "content": "data -> 'message' -> 'content'",
                "tool_calls": "NULLIF(data -> 'message' -> 'toolCalls', 'null')",
                "tool_call_id": "data -> 'message' ->> 'toolCallId'",
                "created_at": "at",
            },
            "message",
        ),
        "tool.result": _projection(
            ToolResult,
            {
                "step": "CAST(data ->> 'step' AS integer)",
                "tool_call_id": "data ->> 'toolCallId'",
                "tool_name": "data ->> 'toolName'",
                "result": "NULLIF(data -> 'result', 'null')",
                "is_error": "CAST(data ->> 'isError' AS boolean)",
                "created_at": "at",
            },
            "tool.result",
        ),
        "verdict": _projection(
            Verdict,
            {
                "turn": "data ->> 'turn'",
                "verdict": "data ->> 'verdict'",
                "guard": "data ->> 'guard'",
                "reason": "data ->> 'reason'",
                "created_at": "at",
            },
            "verdict",
        ),
    }


LOG_PROJECTIONS: dict[str, dict[str, str]] = {}  # vendor -> event type -> SQL, built once


def _log_project(*, run: Run, events: list) -> None:
    """The Message, ToolResult and Verdict rows of a batch, from its log rows."""
    projections = LOG_PROJECTIONS.get(connection.vendor)
    if projections is None:
        projections = LOG_PROJECTIONS[connection.vendor] = _log_projections()
    params = {"run": run.pk, "first": events[0].seq, "last": events[-1].seq}
    present = {e.type for e in events}
    with connection.cursor() as cursor:
        for event_type, sql in projections.items():
            if event_type in present:
                cursor.execute(sql, params)
