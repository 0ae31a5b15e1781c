"""Reconciling what a run holds to a whole RunState: its steps, messages, handoffs and usage,
its held calls (new ones requested, unlisted pending ones cancelled, mirrors linked), and the
rest (todos, taint, verdicts, status). Called by runs/services/snapshots.py inside its unit of
work; `messages_keep_append` and `usage_add` serve outcomes too.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services.requests import approvals_cancel
from runs.models import Handoff, Message, Run, RunStatus, Verdict
from runs.schemas_state import (
    RunStateIn,
)
from runs.services import common
from runs.services.writes import USAGE_FIELDS, RunWrites, StepRow, run_unit, usage_zero

STATUS_FROM_STATE = {
    "running": RunStatus.RUNNING,
    "awaiting_approval": RunStatus.AWAITING_APPROVAL,
    "completed": RunStatus.DONE,
    "failed": RunStatus.FAILED,
    "aborted": RunStatus.ABORTED,
}
# --- what happened in it ---


def steps_reconcile(w: RunWrites, state: RunStateIn) -> None:
    """Steps the state lists are created or corrected; steps the console holds stay."""
    run = w.run
    w.preload_steps([s.step_number for s in state.steps])
    for s in state.steps:
        held = w.steps.get(s.step_number)
        started = _time(s.started_at)
        if held is None or (held.agent_id, held.model, held.started_at) != (
            s.agent_id,
            s.model,
            started,
        ):
            common.step_start(
                run=run,
                step=s.step_number,
                agent_id=s.agent_id,
                model=s.model,
                started_at=started,
                writes=w,
            )
        usage = s.usage.model_dump()
        finished = _time(s.finished_at) if s.finished_at else None
        if finished is None or _step_counts(w.steps[s.step_number], usage, finished):
            continue
        row = w.steps[s.step_number]
        common.step_finish_usage(
            run=run,
            step=s.step_number,
            model=s.model,
            usage=usage,
            finish_reason=row.finish_reason,
            trace_id=row.trace_id,
            finished_at=finished,
            writes=w,
        )


def _step_counts(row: StepRow, usage: dict, finished: datetime) -> bool:
    """Does the held step already count exactly this usage, finished at this time?"""
    same = all(getattr(row, f) == usage[f] for f in USAGE_FIELDS)
    return same and row.finished_at == finished


def messages_keep_append(*, run: Run, messages: list[dict], writes: RunWrites) -> list[Message]:
    """`messages` are the whole run so far (wire form): keep the ones held, append the rest.
    A tool message appended also records the call's result (its content)."""
    held = Message.objects.filter(run=run).count()
    new = messages[held:]
    if not new:
        return []
    rows = common.messages_append(
        run=run,
        messages=[
            {
                "role": m["role"],
                "content": m["content"],
                "tool_calls": m.get("toolCalls"),
                "tool_call_id": m.get("toolCallId"),
            }
            for m in new
        ],
        writes=writes,
    )
    names = {c["id"]: c["name"] for m in messages for c in m.get("toolCalls") or []}
    for m in new:
        call_id = m.get("toolCallId")
        if m["role"] == "tool" and call_id in names:
            common.tool_result_record(
                run=run,
                step=None,
                tool_call_id=call_id,
                tool_name=names[call_id],
                result=m["content"],
                is_error=False,
                writes=writes,
            )
    return rows


def handoffs_reconcile(w: RunWrites, state: RunStateIn) -> None:
    """Handoffs the console holds stay; the ones after them are recorded."""
    held = Handoff.objects.filter(run=w.run, kind=Handoff.Kind.HANDOFF).count()
    for h in state.handoffs[held:]:
        common.handoff_record(
            run=w.run,
            step=h.step_number,
            from_agent_id=h.from_agent_id,
            to_agent_id=h.to_agent_id,
            writes=w,
        )


def usage_reconcile(w: RunWrites, state: RunStateIn) -> None:
    """The run's usage and usage by model become the state's; the daily rollup gets the
    difference. Without usageByModel: one entry for the primary model (the first step's)."""
    run = w.run
    total = state.usage.model_dump()
    if state.usage_by_model is not None:
        target = {m: u.model_dump() for m, u in state.usage_by_model.items()}
    else:
        first = min(state.steps, key=lambda s: s.step_number, default=None)
        target = {first.model if first else "": total}
    held = run.usage_by_model or {}
    for model in sorted(target.keys() | held.keys()):
        want, have = target.get(model, usage_zero()), held.get(model, usage_zero())
        delta = {f: want.get(f, 0) - have.get(f, 0) for f in USAGE_FIELDS}
        if any(delta.values()):
            usage_add(run=run, model=model, usage=delta, steps=0, writes=w)
    if run.usage_by_model != target or run.usage != total:
        run.usage_by_model = target
        for field in USAGE_FIELDS:
            setattr(run, field, total[field])
        w.touch(*USAGE_FIELDS, "usage_by_model", what="usage")


def usage_add(
    *,
    run: Run,
    model: str,
    usage: dict,
    steps: int = 0,
    at: datetime | None = None,
    writes: RunWrites | None = None,
) -> None:
    """Usage not tied to one step (a snapshot's correction, an outcome's sum): added to the
    run, its model and the daily rollup, by the same arithmetic as a step's usage."""
    carrier = StepRow(number=0, agent_id=run.current_agent_id, finished_at=at or timezone.now())
    with run_unit(run, writes) as unit:
        common._usage_apply(unit, row=carrier, model=model, usage=usage, steps=steps)
        # Kept as a row too, so the rollups can be rebuilt (runs.services.usage).
        unit.usage_adjustments.append(
            {"run_id": run.pk, "at": carrier.finished_at, "model": model or "", "steps": steps}
            | {f: usage.get(f, 0) for f in USAGE_FIELDS}
        )
        unit.touch(*USAGE_FIELDS, "usage_by_model", what="usage")


# --- held calls: new ones requested, unlisted pending ones cancelled, mirrors linked ---


def approvals_reconcile(w: RunWrites, *, state: RunStateIn, wire: dict, children: dict) -> None:
    run = w.run
    held = {a.tool_call_id: a for a in Approval.objects.filter(run=run)}
    listed = list(zip(state.pending_approvals, wire["pendingApprovals"], strict=True))
    new = [(a, raw) for a, raw in listed if a.tool_call_id not in held]
    if new:
        step = max((s.step_number for s in state.steps), default=run.steps) or None
        rows = common.calls_hold(
            run=run, step=step, calls=[_call(a, raw) for a, raw in new], writes=w
        )
        held.update({r.tool_call_id: r for r in rows})
    _mirrors_link([(held[a.tool_call_id], a) for a, _ in listed], children)
    keep = {a.tool_call_id for a in state.pending_approvals}
    stale = [
        a
        for a in held.values()
        if a.status == ApprovalStatus.PENDING and a.tool_call_id not in keep
    ]
    if stale:
        approvals_cancel(approvals=stale, keep_runs={c.pk for c in children.values()})
        w.what.add("approvals")


def _call(approval, raw: dict) -> dict:
    return {
        "tool_call_id": approval.tool_call_id,
        "tool_name": approval.tool_name,
        "arguments": raw.get("arguments"),
        "reason": approval.reason,
        "rejection_message": approval.rejection_message,
        "sub_run_tool_call_id": approval.sub_run_tool_call_id,
    }


def _mirrors_link(pairs: list, children: dict) -> None:
    """A parent's approval for a parked sub-run's call mirrors the child's own approval."""
    linked = []
    for row, listed in pairs:
        child = children.get(listed.sub_run_tool_call_id)
        if child is None or row.mirror_of_id is not None:
            continue
        target = Approval.objects.filter(run=child, tool_call_id=row.tool_call_id).first()
        if target is not None:
            row.mirror_of = target
            linked.append(row)
    if linked:
        Approval.objects.bulk_update(linked, ["mirror_of"])


# --- the rest of the state ---


def details_reconcile(w: RunWrites, *, state: RunStateIn, wire: dict) -> None:
    """Todos, taint and promoted tools are replaced when the state carries them; verdicts
    widen only; `currentAgentId` is the state's (never a handoff's target)."""
    run = w.run
    if "todos" in wire and wire["todos"] != run.todos:
        common.todos_replace(run=run, todos=wire["todos"], writes=w)
    if "taintSummary" in wire and wire["taintSummary"] != run.taint_summary:
        common.taint_replace(run=run, taint_summary=wire["taintSummary"], writes=w)
    _set(w, "promoted_tools", wire, "promotedTools", what="header")
    _verdicts(w, wire.get("verdicts") or {})
    if run.current_agent_id != state.current_agent_id:
        run.current_agent_id = state.current_agent_id
        w.touch("current_agent_id", what="header")


def _set(w: RunWrites, field: str, wire: dict, key: str, *, what: str) -> None:
    if key in wire and getattr(w.run, field) != wire[key]:
        setattr(w.run, field, wire[key])
        w.touch(field, what=what)


def _verdicts(w: RunWrites, verdicts: dict) -> None:
    """Each verdict not recorded yet is recorded (rows only add; the run keeps the widest)."""
    if not verdicts:
        return
    recorded = set(
        Verdict.objects.filter(run=w.run).values_list("turn", "verdict", "guard", "reason")
    )
    for turn, v in verdicts.items():
        if (turn, v["verdict"], v["guard"], v["reason"]) not in recorded:
            common.verdict_record(
                run=w.run,
                turn=turn,
                verdict=v["verdict"],
                guard=v["guard"],
                reason=v["reason"],
                writes=w,
            )


def status_reconcile(w: RunWrites, *, state: RunStateIn, wire: dict) -> None:
    run = w.run
    status = STATUS_FROM_STATE[state.status]
    if status in (RunStatus.DONE, RunStatus.FAILED, RunStatus.ABORTED):
        common.run_finish(
            run=run,
            status=status,
            result=run.result,
            ended_by_tool=run.ended_by_tool,
            finish_reason=run.finish_reason,
            usage_denied=run.usage_denied,
            error=wire.get("error", run.error),
            finished_at=_time(state.finished_at) if state.finished_at else None,
            writes=w,
        )
        return
    _set(w, "error", wire, "error", what="status")
    common.run_status_set(run=run, status=status, writes=w)


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value)
