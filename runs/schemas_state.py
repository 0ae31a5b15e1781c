"""The two other ways runtimes report, at the schema edge: a whole RunState (Graphorin, wire
form) and an invocation's outcome (IRunOutcome).

Both reuse the event API's pieces (runs/schemas.py): messages and their `$bytes` / `$url`
parts, usage, todos, errors. Inputs forbid unknown fields. Every timestamp is kept as the
string the runtime sent (checked to be ISO 8601 with an offset), so a state reads back
exactly as it was written.

Checks that span fields (distinct ids, mirrored approvals that name a parked sub-run,
pending calls only in a PAUSED outcome) are `run_state_problems` / `run_outcome_problems`:
the services call them and answer 422 with each field path.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, StringConstraints

from approvals.schemas import DecisionOut
from console.core.wire import Int32, in_utc_range
from runs.schemas import (
    In,
    MessageIn,
    RunErrorIn,
    RunId,
    StepNumber,
    TodoIn,
    ToolCallIn,
    UsageIn,
    WireId,
)

STATE_STATUSES = ("running", "awaiting_approval", "completed", "failed", "aborted")
FINISHED_STATE_STATUSES = ("completed", "failed", "aborted")
VERDICT_KEY_PATTERN = r"^(0|[1-9][0-9]*):(0|[1-9][0-9]*)$"


def _iso_time(value: str) -> str:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("must be an ISO 8601 date-time, e.g. 2026-12-02T10:00:00Z") from None
    if parsed.tzinfo is None:
        raise ValueError("must carry a UTC offset (e.g. Z or +02:00)")
    in_utc_range(parsed)
    return value


IsoTime = Annotated[
    str, AfterValidator(_iso_time), Field(json_schema_extra={"format": "date-time"})
]
VerdictKey = Annotated[str, StringConstraints(pattern=VERDICT_KEY_PATTERN, max_length=32)]
Label = Annotated[str, Field(max_length=255)]


# --- RunState (PUT/GET /runs/{runId}/state) ---


class RunStepIn(In):
    step_number: StepNumber
    agent_id: WireId
    model: Label
    usage: UsageIn
    started_at: IsoTime
    finished_at: IsoTime | None = None


class ToolApprovalIn(In):
    tool_call_id: WireId
    tool_name: WireId
    arguments: Any = None
    reason: str
    rejection_message: str
    sub_run_tool_call_id: WireId | None = None


class HandoffRecordIn(In):
    from_agent_id: WireId
    to_agent_id: WireId
    step_number: Int32  # 0: a handoff before the first step (as v1 accepted); an integer column


class VerdictEntryIn(In):
    verdict: Literal["allowed", "flagged", "blocked"]
    guard: Label
    reason: str


class PendingSubRunIn(In):
    tool_call_id: WireId
    state: RunStateIn


class RunStateIn(In):
    """A Graphorin RunState in its wire form (`toJsonSafeRunState`)."""

    id: RunId
    agent_id: WireId
    current_agent_id: WireId
    session_id: WireId | None = Field(description="the conversation; null for none")
    user_id: WireId | None = Field(
        default=None, description="the principal; absent: a run for no principal"
    )
    status: Literal["running", "awaiting_approval", "completed", "failed", "aborted"]
    steps: list[RunStepIn]
    messages: list[MessageIn]
    pending_approvals: list[ToolApprovalIn]
    handoffs: list[HandoffRecordIn]
    usage: UsageIn
    usage_by_model: dict[Label, UsageIn] | None = None
    todos: list[TodoIn] | None = None
    verdicts: dict[VerdictKey, VerdictEntryIn] | None = None
    taint_summary: dict[str, Any] | None = None
    promoted_tools: list[WireId] | None = None
    pending_sub_runs: list[PendingSubRunIn] | None = None
    started_at: IsoTime
    finished_at: IsoTime | None = None
    error: RunErrorIn | None = None
    decisions: list[Any] | None = Field(
        default=None,
        exclude=True,
        description="output only (GET): ignored on PUT, so a state read back can be written back",
    )


class PendingSubRunOut(In):
    tool_call_id: WireId
    state: RunStateOut


class RunStateOut(RunStateIn):
    """GET .../state: the latest state with decisions applied (decided calls are out of
    `pendingApprovals` and listed in `decisions`)."""

    pending_sub_runs: list[PendingSubRunOut] | None = None
    decisions: list[DecisionOut] = Field(default_factory=list)


PendingSubRunIn.model_rebuild()
PendingSubRunOut.model_rebuild()


def run_state_problems(state: RunStateIn, *, run_id: str, path: str = "") -> list[dict]:
    """What is wrong across the fields of a state (and of its parked sub-runs)."""
    problems: list[dict] = []

    def problem(where: str, message: str) -> None:
        problems.append({"path": f"{path}{where}", "message": message})

    if state.id != run_id:
        problem("id", f"must equal the run id of the path ('{run_id}')")
    _distinct(problem, "steps", [s.step_number for s in state.steps], "stepNumber")
    _distinct(problem, "pendingApprovals", [a.tool_call_id for a in state.pending_approvals])
    if state.status in FINISHED_STATE_STATUSES and state.pending_approvals:
        problem("pendingApprovals", f"must be empty when status is '{state.status}'")
    subs = state.pending_sub_runs or []
    _distinct(problem, "pendingSubRuns", [e.tool_call_id for e in subs])
    children = {e.tool_call_id: e.state for e in subs}
    for i, approval in enumerate(state.pending_approvals):
        sub = approval.sub_run_tool_call_id
        if sub is None:
            continue
        child = children.get(sub)
        if child is None:
            problem(f"pendingApprovals.{i}.subRunToolCallId", f"no pendingSubRuns entry '{sub}'")
        elif approval.tool_call_id not in {a.tool_call_id for a in child.pending_approvals}:
            problem(
                f"pendingApprovals.{i}.toolCallId",
                f"the sub-run parked at '{sub}' holds no pending call '{approval.tool_call_id}'",
            )
    seen_ids = {state.id}
    for i, entry in enumerate(subs):
        where = f"pendingSubRuns.{i}.state"
        if entry.state.id in seen_ids:
            problem(f"{where}.id", f"run id '{entry.state.id}' is used twice in this state")
        seen_ids.add(entry.state.id)
        problems += run_state_problems(entry.state, run_id=entry.state.id, path=f"{path}{where}.")
    return problems


def _distinct(problem, where: str, values: list, field: str = "toolCallId") -> None:
    seen = set()
    for i, value in enumerate(values):
        if value in seen:
            problem(f"{where}.{i}.{field}", f"'{value}' appears twice")
        seen.add(value)


_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def wire_text_problem(text: str) -> str | None:
    """A reason the serialized wire text cannot be stored (PostgreSQL's jsonb holds no NUL)."""
    if "\\u0000" in text and _NUL.search(text):
        return "strings may not contain the NUL character (U+0000)"
    return None


def bad_string_path(value, path: str = "") -> str | None:
    """The path of the first string holding a NUL or a lone surrogate (for the 422 details)."""
    if isinstance(value, str):
        if "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            return path or "body"
        return None
    if not isinstance(value, dict | list):
        return None
    for key, item in value.items() if isinstance(value, dict) else enumerate(value):
        if isinstance(key, str) and bad_string_path(key) is not None:
            return f"{path}{key}"
        found = bad_string_path(item, f"{path}{key}.")
        if found is not None:
            return found.rstrip(".")
    return None


# --- IRunOutcome (POST /runs/{runId}/outcome) ---


class PendingCallIn(In):
    tool_call: ToolCallIn
    rejection_message: str
    reason: str


class ModelResultIn(In):
    """IModelResult: `text` and `finishReason`, and whatever else the client reports."""

    model_config = ConfigDict(extra="allow")

    text: str | None = None
    finish_reason: Annotated[str, Field(max_length=64)] | None = None


class RunOutcomeIn(In):
    status: Literal["DONE", "PAUSED", "ABORTED"]
    messages: list[MessageIn]
    pending_calls: list[PendingCallIn] | None = None
    result: ModelResultIn | None = None
    steps: Int32
    usage: UsageIn
    trace_ids: list[Label]
    usage_denied: dict[str, Any] | None = None
    ended_by_tool: WireId | None = None


def run_outcome_problems(outcome: RunOutcomeIn) -> list[dict]:
    """PAUSED needs pending calls (distinct ones); DONE and ABORTED have none."""
    calls = outcome.pending_calls or []
    ids = [c.tool_call.id for c in calls]
    if outcome.status == "PAUSED" and not calls:
        message = "a PAUSED outcome needs at least one pending call"
    elif outcome.status != "PAUSED" and calls:
        message = f"a {outcome.status} outcome has no pending calls"
    elif len(set(ids)) != len(ids):
        message = "pending calls must have distinct toolCall ids"
    else:
        return []
    return [{"path": "pendingCalls", "message": message}]
