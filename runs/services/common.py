"""The write primitives every way into a run shares (events, RunState snapshots, outcomes),
and the run's directory (agents, conversations, principals registered on first sight).

Each primitive changes the run in memory and queues rows on the caller's unit of work
(`RunWrites`, runs/services/writes.py); with `writes=None` it makes a unit of its own and
flushes it at once. The caller holds the transaction (and, for a run that exists, its row lock).
"""

from __future__ import annotations

from datetime import datetime

from approvals.models import Approval, ApprovalStatus
from approvals.services.requests import approvals_cancel_pending, approvals_request
from console.core.errors import Forbidden
from console.directory.services import _get_or_create, principal_ensure
from console.models import Principal, Tenant
from runs.models import (
    Agent,
    AgentVersion,
    Conversation,
    Handoff,
    Run,
    RunStatus,
)
from runs.services.writes import USAGE_FIELDS, RunWrites, StepRow, run_unit, usage_zero

# --- the directory of a run: agents, conversations, principals (registered on first sight) ---


def agent_ensure(*, tenant: Tenant, external_id: str, version: int | None = None) -> Agent:
    agent, _ = _get_or_create(Agent, tenant=tenant, external_id=external_id)
    if version is not None:
        _get_or_create(AgentVersion, agent=agent, version=version)
    return agent


def conversation_ensure(*, tenant: Tenant, external_id: str | None) -> Conversation | None:
    if not external_id:
        return None
    conversation, _ = _get_or_create(Conversation, tenant=tenant, external_id=external_id)
    return conversation


def principal(*, tenant: Tenant, external_id: str | None) -> Principal | None:
    """The run's principal, registered on first sight; a deactivated one is Forbidden."""
    if not external_id:
        return None
    found = principal_ensure(tenant=tenant, external_id=external_id)
    if not found.is_active:
        raise Forbidden(
            f"principal '{external_id}' has been deactivated by an admin",
            code="principal_deactivated",
        )
    return found


# --- the primitives ---


def step_start(
    *,
    run: Run,
    step: int,
    agent_id: str,
    model: str | None = None,
    started_at: datetime | None = None,
    writes: RunWrites | None = None,
) -> StepRow:
    """A new step (or the same step seen again): `currentAgentId` = agent_id."""
    with run_unit(run, writes) as w:
        row = w.step(step, agent_id=agent_id)
        row.agent_id = agent_id
        row.model = model or row.model
        if started_at:
            row.started_at = started_at
        run.current_agent_id = agent_id
        run.steps = max(run.steps, step)
        w.touch("current_agent_id", "steps", what="steps")
        return row


def step_finish_usage(
    *,
    run: Run,
    step: int,
    model: str | None,
    usage: dict,
    finish_reason: str | None = None,
    trace_id: str | None = None,
    finished_at: datetime | None = None,
    writes: RunWrites | None = None,
) -> StepRow:
    """A step's usage, added to the run, its model and the daily rollup exactly once.

    A step reported finished again (a snapshot, a corrected event) replaces its earlier
    figures: only the difference reaches the totals.
    """
    with run_unit(run, writes) as w:
        finished_at = finished_at or w.now
        row = w.step(step)
        if row.finished_at is not None:  # withdraw what this step counted before
            old = {f: -getattr(row, f) for f in USAGE_FIELDS}
            _usage_apply(w, row=row, model=row.model, usage=old, steps=-1)
        row.model = model or row.model
        for field in USAGE_FIELDS:
            setattr(row, field, int(usage.get(field, 0) or 0))
        row.finish_reason = finish_reason
        row.trace_id = trace_id
        row.finished_at = finished_at
        new = {f: getattr(row, f) for f in USAGE_FIELDS}
        _usage_apply(w, row=row, model=row.model, usage=new, steps=1)
        run.steps = max(run.steps, step)
        if trace_id:
            w.trace_id_add(trace_id)
        w.touch(*USAGE_FIELDS, "usage_by_model", "steps", what="usage")
        w.what.add("steps")
        return row


def _usage_apply(w: RunWrites, *, row: StepRow, model: str, usage: dict, steps: int) -> None:
    run = w.run
    for field in USAGE_FIELDS:
        setattr(run, field, getattr(run, field) + usage[field])
    by_model = dict(run.usage_by_model or {})
    held = dict(by_model.get(model or "", usage_zero()))
    for field in USAGE_FIELDS:
        held[field] = held.get(field, 0) + usage[field]
    by_model[model or ""] = held
    run.usage_by_model = by_model
    w.add_usage(day=w.day(row.finished_at), model=model, usage=usage, steps=steps)


def messages_append(
    *, run: Run, messages: list[dict], step: int | None = None, writes: RunWrites | None = None
) -> list[dict]:
    """Append messages (`role`, `content`, `tool_calls`, `tool_call_id`) in order."""
    with run_unit(run, writes) as w:
        rows = [
            {
                "run_id": run.pk,
                "position": w.next_message_position(),
                "step": m.get("step", step),
                "role": m["role"],
                "content": m["content"],
                "tool_calls": m.get("tool_calls"),
                "tool_call_id": m.get("tool_call_id"),
                "created_at": m.get("at") or w.now,
            }
            for m in messages
        ]
        w.messages.extend(rows)
        w.what.add("messages")
        return rows


def tool_result_record(
    *,
    run: Run,
    step: int | None,
    tool_call_id: str,
    tool_name: str,
    result,
    is_error: bool,
    at: datetime | None = None,
    writes: RunWrites | None = None,
) -> dict:
    with run_unit(run, writes) as w:
        row = {
            "run_id": run.pk,
            "step": step,
            "tool_call_id": tool_call_id,
            "tool_name": tool_name,
            "result": result,
            "is_error": is_error,
            "created_at": at or w.now,
        }
        w.tool_results.append(row)
        w.what.add("tool_results")
        return row


def handoff_record(
    *,
    run: Run,
    step: int | None,
    to_agent_id: str,
    from_agent_id: str = "",
    child_run_id: str | None = None,
    returned: bool = False,
    at: datetime | None = None,
    writes: RunWrites | None = None,
) -> dict:
    """A handoff (or its return): recorded, and `currentAgentId` = to_agent_id."""
    with run_unit(run, writes) as w:
        row = {
            "run_id": run.pk,
            "kind": Handoff.Kind.RETURNED if returned else Handoff.Kind.HANDOFF,
            "step": step,
            "from_agent_id": from_agent_id or (run.current_agent_id if returned else ""),
            "to_agent_id": to_agent_id,
            "child_run_id": child_run_id,
            "position": w.next_handoff_position(),
            "created_at": at or w.now,
        }
        w.handoffs.append(row)
        run.current_agent_id = to_agent_id
        w.touch("current_agent_id", what="handoffs")
        return row


def todos_replace(*, run: Run, todos: list[dict], writes: RunWrites | None = None) -> None:
    with run_unit(run, writes) as w:
        run.todos = list(todos)
        w.touch("todos", what="todos")


def verdict_record(
    *,
    run: Run,
    turn: str,
    verdict: str,
    guard: str = "",
    reason: str = "",
    at: datetime | None = None,
    writes: RunWrites | None = None,
) -> None:
    """Widen-only: the row is always added; the run keeps the most severe verdict per turn
    (on equal severity, the earlier one stands: `run_verdicts`)."""
    with run_unit(run, writes) as w:
        w.verdicts.append(
            {
                "run_id": run.pk,
                "turn": turn,
                "verdict": verdict,
                "guard": guard or "",
                "reason": reason or "",
                "created_at": at or w.now,
            }
        )
        verdict_widen(w, turn=turn, verdict=verdict, guard=guard, reason=reason)


def verdict_widen(w: RunWrites, *, turn: str, verdict: str, guard: str, reason: str) -> None:
    """The run's verdict for `turn` widens to this one (the row of every verdict is the
    caller's: events have it from their log, see runs.services.ingest)."""
    w.verdict_widen(turn=turn, verdict=verdict, guard=guard, reason=reason)
    w.what.add("verdicts")


def taint_replace(*, run: Run, taint_summary: dict | None, writes: RunWrites | None = None):
    with run_unit(run, writes) as w:
        run.taint_summary = taint_summary
        w.touch("taint_summary", what="taint")


def run_status_set(*, run: Run, status: str, writes: RunWrites | None = None) -> None:
    with run_unit(run, writes) as w:
        if run.status != status:
            run.status = status
            w.touch("status", what="status")


def run_finish(
    *,
    run: Run,
    status: str,
    result=None,
    ended_by_tool: str | None = None,
    finish_reason: str | None = None,
    usage_denied=None,
    error: dict | None = None,
    finished_at: datetime | None = None,
    writes: RunWrites | None = None,
) -> None:
    """The run ends: its fields are set and its pending approvals become `cancelled`."""
    if status not in (RunStatus.DONE, RunStatus.ABORTED, RunStatus.FAILED):
        raise ValueError(f"not a finished status: {status}")
    with run_unit(run, writes) as w:
        run.status = status
        run.result = result
        run.ended_by_tool = ended_by_tool
        run.finish_reason = finish_reason
        run.usage_denied = usage_denied
        run.error = error
        run.finished_at = finished_at or w.now
        w.touch(
            "status",
            "result",
            "ended_by_tool",
            "finish_reason",
            "usage_denied",
            "error",
            "finished_at",
            what="status",
        )
        if approvals_cancel_pending(run=run):
            w.what.add("approvals")


def calls_hold(
    *,
    run: Run,
    step: int | None,
    calls: list[dict],
    requested_at: datetime | None = None,
    writes: RunWrites | None = None,
):
    """The runtime holds these tool calls back: each becomes a pending approval (the approvals
    app's), and the run awaits approval. Returns the new approvals."""
    with run_unit(run, writes) as w:
        rows = approvals_request(
            run=run, step=step, calls=calls, requested_at=requested_at, rule_hits=w.rule_hits
        )
        run_status_set(run=run, status=RunStatus.AWAITING_APPROVAL, writes=w)
        w.what.add("approvals")
    return rows


def calls_hold_later(*, run: Run, calls: list[dict], writes: RunWrites) -> None:
    """`calls_hold` within an ingest batch: the run awaits approval now, its approvals are
    requested together (`calls_held_now`), before the next event that could look at them and
    at the batch's end (a batch of many steps, each holding a call, asks once, not once a
    step). Each call carries its `step` and `requested_at`."""
    run_status_set(run=run, status=RunStatus.AWAITING_APPROVAL, writes=writes)
    writes.what.add("approvals")
    writes.held_later.extend(calls)


def run_status_settle(*, run: Run, writes: RunWrites) -> None:
    """A batch reported a result or a step's end after its last asked calls (ingest): a run
    awaiting approval none of whose calls waits for a person any more is running again (the
    MCP gateway reports a held call's result with no new step after it: without this its
    session's run read "awaiting approval" until its next call)."""
    if run.status != RunStatus.AWAITING_APPROVAL:
        return
    if not Approval.objects.filter(run=run, status=ApprovalStatus.PENDING).exists():
        run_status_set(run=run, status=RunStatus.RUNNING, writes=writes)


def calls_held_now(*, run: Run, writes: RunWrites) -> None:
    """The approvals `calls_hold_later` gathered, requested in one go."""
    if writes.held_later:
        calls, writes.held_later = writes.held_later, []
        approvals_request(run=run, step=None, calls=calls, rule_hits=writes.rule_hits)
