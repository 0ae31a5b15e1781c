"""The approval resource on the wire (shared by runs' pendingCalls and the approvals API)."""

from datetime import datetime
from typing import Any, Literal

from approvals.models import Approval
from console.schemas import CamelSchema

ApprovalStatusLiteral = Literal["pending", "approved", "denied", "expired", "cancelled"]


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
    decided_at: datetime | None
    message: str | None
    requested_at: datetime
    expires_at: datetime


def approval_resource(approval: Approval, *, run_id: str | None = None) -> dict:
    """The approval resource (snake_case keys; ApprovalOut maps them to the wire).

    Pass `run_id` (the run's wire id) when the run is not loaded, and select_related
    `decided_by` for lists, so that no row costs a query.
    """
    return {
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
        "decided_at": approval.decided_at,
        "message": approval.message,
        "requested_at": approval.requested_at,
        "expires_at": approval.expires_at,
    }
