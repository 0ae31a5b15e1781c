"""Approvals on the wire: the approval resource (shared by runs' pendingCalls and the approvals
API), a decision as the runtime reads it (the long-poll and GET .../state), and the long-poll's
query parameters."""

from datetime import datetime
from typing import Any, Literal

from approvals.models import Approval, ApprovalStatus
from console.core.errors import Invalid
from console.core.wire import CamelSchema

ApprovalStatusLiteral = Literal["pending", "approved", "denied", "expired", "cancelled"]


class ApprovalBudgetOut(CamelSchema):
    id: str
    name: str
    remaining_minor_units: int
    ceiling_minor_units: int
    percent: float


class ApprovalOut(CamelSchema):
    id: str
    run_id: str
    step: int | None
    tool_call_id: str
    tool_name: str
    arguments: Any
    reason: str
    rejection_message: str
    sub_run_tool_call_id: str | None
    status: ApprovalStatusLiteral
    decided_by: str | None
    decided_by_rule: str | None
    decided_at: datetime | None
    message: str | None
    requested_at: datetime
    expires_at: datetime
    run_cost_minor_units: int
    budgets: list[ApprovalBudgetOut]


def approval_resource(approval: Approval, *, costs: dict, run_id: str | None = None) -> dict:
    """The approval resource (snake_case keys; ApprovalOut maps them to the wire). `costs`:
    the cost beside it, `budgets.spend.run_costs(runs=...)` of the approvals' runs (by run pk),
    computed once for a list.

    Pass `run_id` (the run's wire id) when the run is not loaded, and select_related
    `decided_by` and `decided_by_rule` for lists, so that no row costs a query.
    """
    return {
        **costs[approval.run_id],
        "id": approval.public_id,
        "run_id": run_id if run_id is not None else approval.run.external_id,
        "step": approval.step,
        "tool_call_id": approval.tool_call_id,
        "tool_name": approval.tool_name,
        "arguments": approval.arguments,
        "reason": approval.reason,
        "rejection_message": approval.rejection_message,
        "sub_run_tool_call_id": approval.sub_run_tool_call_id,
        "status": approval.status,
        "decided_by": approval.decided_by.external_id if approval.decided_by_id else None,
        "decided_by_rule": _rule_id(approval),
        "decided_at": approval.decided_at,
        "message": approval.message,
        "requested_at": approval.requested_at,
        "expires_at": approval.expires_at,
    }


def _rule_id(approval: Approval) -> str | None:
    """The public id of the rule that decided it (null: a person, an expiry, or pending)."""
    return approval.decided_by_rule.public_id if approval.decided_by_rule_id else None


class DecisionOut(CamelSchema):
    approval_id: str
    tool_call_id: str
    decision: Literal["approved", "denied", "expired"]
    message: str | None
    arguments: Any
    decided_by: str | None
    decided_by_rule: str | None
    decided_at: datetime


def decision_wire(approval: Approval) -> dict:
    """A decided approval as the runtime reads it (snake_case keys; DecisionOut maps them):
    for a denial or expiry `message` is what the model reads, for an approval `arguments` are
    the ones to run."""
    return {
        "approval_id": approval.public_id,
        "tool_call_id": approval.tool_call_id,
        "decision": approval.status,
        "message": approval.message,
        "arguments": approval.decided_arguments
        if approval.status == ApprovalStatus.APPROVED
        else None,
        "decided_by": approval.decided_by.external_id if approval.decided_by_id else None,
        "decided_by_rule": _rule_id(approval),
        "decided_at": approval.decided_at,
    }


MAX_WAIT_SECONDS = 30


def parse_wait(raw: str | None) -> float:
    """`wait=S`: how long a long-poll may hold, 0 <= S <= 30 seconds (absent: 0)."""
    if raw is None or raw == "":
        return 0.0
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_WAIT_SECONDS:  # NaN fails this too
        raise Invalid(
            f"wait must be a number of seconds from 0 to {MAX_WAIT_SECONDS}",
            code="validation_error",
            details=[{"path": "query.wait", "message": f"must be 0..{MAX_WAIT_SECONDS}"}],
        )
    return seconds


def parse_cursor(raw: str | None) -> int | None:
    """`after=` / `cursor=`: an opaque cursor from an earlier answer (`0`: from the start)."""
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise Invalid(
            "after must be a cursor from an earlier answer, or 0",
            code="validation_error",
            details=[{"path": "query.after", "message": "not a cursor"}],
        )
    return int(raw)
