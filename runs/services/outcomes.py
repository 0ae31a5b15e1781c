"""IRunOutcome in: one invocation of an llm-client runtime (DONE, PAUSED for a human, ABORTED),
applied through the same write primitives as events and snapshots.

An outcome is idempotent: the digest of every body applied is kept with the run, so the same
body posted again changes nothing (its usage is added once), even after the run has finished.
A different body for a finished run is a conflict.
"""

from __future__ import annotations

import hashlib

from django.db import transaction

from approvals.models import Approval, ApprovalStatus
from console.core.errors import Conflict, Invalid
from runs.models import Run, RunStatus, Step, snapshot_envelope
from runs.schemas_state import RunOutcomeIn, run_outcome_problems
from runs.services import common
from runs.services.reconcile import messages_keep_append, usage_add
from runs.services.snapshots import run_locked
from runs.services.writes import RunWrites

FINISH = {"DONE": RunStatus.DONE, "ABORTED": RunStatus.ABORTED}


@transaction.atomic
def run_outcome_apply(*, run: Run, outcome: RunOutcomeIn) -> Run:
    """Apply an invocation's outcome to the run; returns the run (unchanged for a replay)."""
    problems = run_outcome_problems(outcome)
    if problems:
        raise Invalid("the outcome is invalid", code="validation_error", details=problems)
    text = outcome.model_dump_json(by_alias=True, exclude_unset=True)
    digest = hashlib.sha256(text.encode()).hexdigest()
    run = run_locked(tenant_id=run.tenant_id, run_id=run.external_id)
    envelope = snapshot_envelope(run)
    if digest in envelope["outcomes"]:
        return run  # the same body again: already applied
    if run.is_finished:
        raise Conflict(
            f"run '{run.external_id}' has finished; this outcome is a new one",
            code="run_finished",
            details={"status": run.status},
        )
    wire = outcome.model_dump(mode="json", by_alias=True, exclude_unset=True)
    w = RunWrites(run)
    messages_keep_append(run=run, messages=wire["messages"], writes=w)
    _invocation(w, outcome)
    if outcome.status == "PAUSED":
        _pause(w, outcome, wire)
    else:
        _finish(w, outcome, wire)
    # The outcome is newer than any snapshot: GET .../state renders the rows from now on.
    run.snapshot = {**envelope, "state": None, "outcomes": [*envelope["outcomes"], digest]}
    run.snapshot_digest = ""
    w.touch("snapshot", "snapshot_digest")
    w.flush()
    return run


def _invocation(w: RunWrites, outcome: RunOutcomeIn) -> None:
    """The invocation's steps, trace ids and summed usage (added once, under its model)."""
    run = w.run
    run.steps += outcome.steps
    for trace_id in outcome.trace_ids:
        w.trace_id_add(trace_id)
    w.touch("steps", what="steps")
    usage = outcome.usage.model_dump()
    if any(usage.values()) or outcome.steps:
        usage_add(run=run, model=_model(run, outcome), usage=usage, steps=outcome.steps, writes=w)


def _model(run: Run, outcome: RunOutcomeIn) -> str:
    """The model the usage is booked under: the result's, else the run's latest step's."""
    reported = (outcome.result.model_extra or {}).get("model") if outcome.result else None
    if isinstance(reported, str):
        return reported[:255]
    latest = Step.objects.filter(run=run).exclude(model="").order_by("-number").first()
    return latest.model if latest else ""


def _pause(w: RunWrites, outcome: RunOutcomeIn, wire: dict) -> None:
    """Each pending call becomes an approval (a call already pending stays as it is)."""
    run = w.run
    held = set(
        Approval.objects.filter(run=run, status=ApprovalStatus.PENDING).values_list(
            "tool_call_id", flat=True
        )
    )
    calls = [
        {
            "tool_call_id": call.tool_call.id,
            "tool_name": call.tool_call.name,
            "arguments": raw["toolCall"].get("arguments"),
            "reason": call.reason,
            "rejection_message": call.rejection_message,
        }
        for call, raw in zip(outcome.pending_calls, wire["pendingCalls"], strict=True)
        if call.tool_call.id not in held
    ]
    if calls:
        common.calls_hold(run=run, step=run.steps or None, calls=calls, writes=w)
    else:
        common.run_status_set(run=run, status=RunStatus.AWAITING_APPROVAL, writes=w)


def _finish(w: RunWrites, outcome: RunOutcomeIn, wire: dict) -> None:
    """DONE / ABORTED end the run (finishReason LENGTH with usageDenied: the run page warns)."""
    common.run_finish(
        run=w.run,
        status=FINISH[outcome.status],
        result=wire.get("result"),
        ended_by_tool=outcome.ended_by_tool,
        finish_reason=outcome.result.finish_reason if outcome.result else None,
        usage_denied=wire.get("usageDenied"),
        writes=w,
    )
