"""GET .../state: any run, however it was fed (events, outcomes or snapshots), as a RunState
with decisions applied: decided calls leave `pendingApprovals` and are listed in `decisions`
(the decisions long-poll's shape), so a separate process can resume the run from it.

A run whose latest snapshot is still current (no event or outcome came after it) answers with
that snapshot as it was put; any other run is rendered from the rows the console holds.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic.alias_generators import to_camel

from approvals.models import DECIDED, Approval, ApprovalStatus
from approvals.schemas import decision_wire
from approvals.services.expiry import approvals_expire_due
from runs.models import Handoff, Run, RunStatus, run_verdicts, snapshot_current_state

STATUS_TO_STATE = {RunStatus.DONE: "completed"}


def run_state_render(*, run: Run) -> dict:
    """The run as a wire RunState (camelCase keys), with `decisions`. Like every reader of
    approvals, it first expires what is past its time (those are decisions too)."""
    approvals_expire_due(run=run)
    state = snapshot_current_state(run)
    if state is None:
        return _from_rows(run)
    return _from_snapshot(run, state)


def decision_item(approval: Approval) -> dict:
    """A decided approval in the long-poll's shape (approvals.schemas.decision_wire)."""
    return {to_camel(key): value for key, value in decision_wire(approval).items()}


def _decision_order(approval: Approval):
    return (approval.decision_seq or 0, approval.decided_at or datetime.max.replace(tzinfo=UTC))


# --- a run with a current snapshot ---


def _from_snapshot(run: Run, state: dict) -> dict:
    pending = state["pendingApprovals"]
    decided = {
        a.tool_call_id: a
        for a in Approval.objects.filter(
            run=run, tool_call_id__in=[p["toolCallId"] for p in pending], status__in=DECIDED
        ).select_related("decided_by", "decided_by_rule")
    }
    out = dict(state)
    out["pendingApprovals"] = [p for p in pending if p["toolCallId"] not in decided]
    out["decisions"] = [decision_item(a) for a in sorted(decided.values(), key=_decision_order)]
    verdicts = run_verdicts(run)
    if verdicts:  # widen-only: what the console holds, never less than the snapshot said
        out["verdicts"] = verdicts
    if state.get("pendingSubRuns"):
        out["pendingSubRuns"] = [_sub_run(run, e) for e in state["pendingSubRuns"]]
    return out


def _sub_run(parent: Run, entry: dict) -> dict:
    child = Run.objects.filter(tenant_id=parent.tenant_id, external_id=entry["state"]["id"]).first()
    if child is None:
        return {**entry, "state": {**entry["state"], "decisions": []}}
    return {"toolCallId": entry["toolCallId"], "state": run_state_render(run=child)}


# --- a run fed by events or outcomes ---


def _from_rows(run: Run) -> dict:
    run = Run.objects.select_related("agent", "principal", "conversation").get(pk=run.pk)
    approvals = list(
        Approval.objects.filter(run=run).select_related(
            "decided_by", "decided_by_rule", "mirror_of__run"
        )
    )
    pending = [a for a in approvals if a.status == ApprovalStatus.PENDING]
    decided = sorted((a for a in approvals if a.status in DECIDED), key=_decision_order)
    state = {
        "id": run.external_id,
        "agentId": run.agent.external_id,
        "currentAgentId": run.current_agent_id,
        "sessionId": run.conversation.external_id if run.conversation_id else None,
        "status": STATUS_TO_STATE.get(run.status, run.status),
        "steps": [_step(s) for s in run.step_rows.order_by("number")],
        "messages": [_message(m) for m in run.messages.order_by("position")],
        "pendingApprovals": [_pending(a) for a in pending],
        "handoffs": [
            {"fromAgentId": h.from_agent_id, "toAgentId": h.to_agent_id, "stepNumber": h.step or 0}
            for h in run.handoffs.filter(kind=Handoff.Kind.HANDOFF).order_by("position", "id")
        ],
        "usage": _usage(run.usage),
        "usageByModel": {m: _usage(u) for m, u in (run.usage_by_model or {}).items()},
        "startedAt": _iso(run.started_at),
        "decisions": [decision_item(a) for a in decided],
    }
    state.update(_optional(run, pending))
    return state


def _optional(run: Run, pending: list[Approval]) -> dict:
    """The fields a RunState carries only once they exist."""
    extra = {}
    if run.principal_id:
        extra["userId"] = run.principal.external_id
    if run.todos:
        extra["todos"] = run.todos
    verdicts = run_verdicts(run)
    if verdicts:
        extra["verdicts"] = verdicts
    if run.taint_summary is not None:
        extra["taintSummary"] = run.taint_summary
    if run.promoted_tools is not None:
        extra["promotedTools"] = run.promoted_tools
    if run.finished_at:
        extra["finishedAt"] = _iso(run.finished_at)
    if run.error:
        extra["error"] = run.error
    subs = {}
    for a in pending:
        if a.sub_run_tool_call_id and a.mirror_of_id and a.sub_run_tool_call_id not in subs:
            subs[a.sub_run_tool_call_id] = a.mirror_of.run
    if subs:
        extra["pendingSubRuns"] = [
            {"toolCallId": call, "state": run_state_render(run=child)}
            for call, child in subs.items()
        ]
    return extra


def _step(step) -> dict:
    out = {
        "stepNumber": step.number,
        "agentId": step.agent_id,
        "model": step.model,
        "usage": _usage(
            {f: getattr(step, f) for f in ("input_tokens", "output_tokens", "cost_minor_units")}
        ),
        "startedAt": _iso(step.started_at),
    }
    if step.finished_at:
        out["finishedAt"] = _iso(step.finished_at)
    return out


def _message(message) -> dict:
    out = {"role": message.role, "content": message.content}
    if message.tool_calls is not None:
        out["toolCalls"] = message.tool_calls
    if message.tool_call_id is not None:
        out["toolCallId"] = message.tool_call_id
    return out


def _pending(approval: Approval) -> dict:
    out = {
        "toolCallId": approval.tool_call_id,
        "toolName": approval.tool_name,
        "arguments": approval.arguments,
        "reason": approval.reason,
        "rejectionMessage": approval.rejection_message,
    }
    if approval.sub_run_tool_call_id:
        out["subRunToolCallId"] = approval.sub_run_tool_call_id
    return out


def _usage(usage: dict) -> dict:
    return {
        "inputTokens": usage.get("input_tokens", 0),
        "outputTokens": usage.get("output_tokens", 0),
        "costMinorUnits": usage.get("cost_minor_units", 0),
    }


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
