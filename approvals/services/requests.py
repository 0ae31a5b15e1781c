"""Held tool calls come in (a runtime asks) and go away (the run ends): the request side of
approvals. Deciding and expiring live next door (approvals/services/decisions.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from console import realtime
from console.errors import Conflict
from runs.models import Run, RunStatus


@transaction.atomic
def approvals_request(
    *,
    run: Run,
    step: int | None,
    calls: list[dict],
    requested_at: datetime | None = None,
    writes=None,
) -> list[Approval]:
    """Each call becomes a pending Approval, in request order; the run awaits approval.

    A call is a dict of tool_call_id, tool_name, arguments, reason, rejection_message and
    optional sub_run_tool_call_id / expires_at (default: the tenant's approval time to live).
    A tool call id the run already holds is a Conflict.
    """
    from approvals.services.webhooks import webhooks_approval_requested
    from runs.services.common import run_status_set

    ids = [c["tool_call_id"] for c in calls]
    held = list(
        Approval.objects.filter(run=run, tool_call_id__in=ids).values("tool_call_id", "status")
    )
    if held:
        raise Conflict(
            "the run already holds approvals for these tool calls",
            code="approval_exists",
            details={
                "held": [{"toolCallId": h["tool_call_id"], "status": h["status"]} for h in held]
            },
        )
    now = requested_at or timezone.now()
    default_expiry = now + timedelta(seconds=run.tenant.approval_ttl_seconds)
    first = (Approval.objects.filter(run=run).aggregate(m=Max("position"))["m"] or 0) + 1
    rows = [
        Approval(
            tenant_id=run.tenant_id,
            run=run,
            step=step,
            position=first + i,
            tool_call_id=call["tool_call_id"],
            tool_name=call["tool_name"],
            arguments=call.get("arguments"),
            reason=call.get("reason") or "",
            rejection_message=call.get("rejection_message") or "",
            sub_run_tool_call_id=call.get("sub_run_tool_call_id"),
            requested_at=now,
            expires_at=call.get("expires_at") or default_expiry,
        )
        for i, call in enumerate(calls)
    ]
    Approval.objects.bulk_create(rows)
    webhooks_approval_requested(approvals=rows)
    run_status_set(run=run, status=RunStatus.AWAITING_APPROVAL, writes=writes)
    if writes is not None:
        writes.what.add("approvals")
    realtime.approvals_changed(
        run=run, approval_ids=[r.public_id for r in rows], change="requested"
    )
    return rows


@transaction.atomic
def approvals_cancel_pending(*, run: Run) -> list[str]:
    """The run ended: what is still pending becomes `cancelled`. Returns their ids."""
    pending = Approval.objects.filter(run=run, status=ApprovalStatus.PENDING)
    ids = list(pending.values_list("public_id", flat=True))
    if ids:
        pending.update(status=ApprovalStatus.CANCELLED)
        realtime.approvals_changed(run=run, approval_ids=ids, change="cancelled")
    return ids
