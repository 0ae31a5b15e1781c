"""Held tool calls come in (a runtime asks) and go away (the run ends): the request side of
approvals. Deciding and expiring live next door (approvals/services/decisions.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services.rules import approvals_rule_decisions
from approvals.services.settle import approval_mirror_targets, approvals_insert
from approvals.services.webhooks import webhooks_approval_requested
from console.core.errors import Conflict
from console.live import realtime
from notifications.models import CallBatch, EmailChoice, NotificationSettings
from runs.models import Run


@transaction.atomic
def approvals_request(
    *,
    run: Run,
    step: int | None,
    calls: list[dict],
    requested_at: datetime | None = None,
    rule_hits=None,
) -> list[Approval]:
    """Each call becomes a pending Approval, in request order. The caller owns the run (it
    sets the run's status: runs.services.common.calls_hold).

    A call is a dict of tool_call_id, tool_name, arguments, reason, rejection_message and
    optional sub_run_tool_call_id / expires_at (default: the tenant's approval time to live)
    / step / requested_at (each call's own, over `step` and `requested_at`).
    A tool call id the run already holds is a Conflict. The calls a lasting rule matches are
    decided here and now (inserted decided: approvals/services/settle.approvals_insert);
    webhooks hear `approval.requested` only of the calls left to a human. `rule_hits` (a
    Counter): the caller's unit of work counts the rules' hits and writes them once, at its
    end.
    """
    now = requested_at or timezone.now()
    ttl = timedelta(seconds=run.tenant.approval_ttl_seconds)
    ids = [call["tool_call_id"] for call in calls]
    if len(set(ids)) < len(ids):  # asked twice in one go: as if held already
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise _held([{"tool_call_id": i, "status": "pending"} for i in twice])
    rows = [
        Approval(
            tenant_id=run.tenant_id,
            run=run,
            step=call.get("step", step),
            tool_call_id=call["tool_call_id"],
            tool_name=call["tool_name"],
            arguments=call.get("arguments"),
            reason=call.get("reason") or "",
            rejection_message=call.get("rejection_message") or "",
            sub_run_tool_call_id=call.get("sub_run_tool_call_id"),
            requested_at=call.get("requested_at") or now,
            expires_at=call.get("expires_at") or (call.get("requested_at") or now) + ttl,
        )
        for call in calls
    ]
    decisions = approvals_rule_decisions(run=run, approvals=rows, hits=rule_hits)
    if not approvals_insert(run=run, rows=rows, decisions=decisions):
        held = Approval.objects.filter(run=run, tool_call_id__in=ids)
        raise _held(list(held.values("tool_call_id", "status")))
    for_people = [r for r in rows if r.status == ApprovalStatus.PENDING]
    webhooks_approval_requested(approvals=for_people)
    _mail_later(run=run, approvals=for_people)
    return rows


def _held(held: list[dict]) -> Conflict:
    """The 409 for tool calls the run holds already (`held`: their ids and statuses)."""
    return Conflict(
        "the run already holds approvals for these tool calls",
        code="approval_exists",
        details={"held": [{"toolCallId": h["tool_call_id"], "status": h["status"]} for h in held]},
    )


def _mail_later(*, run: Run, approvals: list[Approval]) -> None:
    """One durable row for the "now" mail of these calls (notifications/calls.py, run by the
    sweep process, mails each recipient once for the batch after commit: off the request and
    off this process); none when no one in the tenant chose "now"."""
    if not approvals:
        return
    wanted = NotificationSettings.objects.filter(tenant_id=run.tenant_id, email=EmailChoice.NOW)
    if wanted.exists():
        CallBatch.objects.create(tenant_id=run.tenant_id, approval_ids=[a.pk for a in approvals])


def _cancel(pending) -> list[Approval]:
    """Cancel these pending approvals; each run's live pages are told once."""
    cancelled = list(pending.with_run())
    if not cancelled:
        return []
    Approval.objects.filter(pk__in=[a.pk for a in cancelled]).update(
        status=ApprovalStatus.CANCELLED
    )
    by_run: dict[int, list[Approval]] = {}
    for approval in cancelled:
        by_run.setdefault(approval.run_id, []).append(approval)
    for rows in by_run.values():
        realtime.approvals_changed(
            run=rows[0].run, approval_ids=[a.public_id for a in rows], change="cancelled"
        )
    return cancelled


@transaction.atomic
def approvals_cancel_pending(*, run: Run) -> list[str]:
    """The run ended: what is still pending becomes `cancelled`. Returns their ids."""
    pending = Approval.objects.filter(run=run, status=ApprovalStatus.PENDING)
    return [a.public_id for a in _cancel(pending)]


@transaction.atomic
def approvals_cancel(*, approvals: list[Approval], keep_runs=()) -> list[str]:
    """These pending approvals are no longer held (a newer state dropped them): `cancelled`,
    with every approval of the same call (mirrors), each run told once. Mirrors in
    `keep_runs` (sub-runs the same state still parks, whose own lists decide) stay."""
    group = {a.pk for a in approvals}
    for approval in approvals:
        targets = approval_mirror_targets(approval)
        group.update(m.pk for m in targets if m.run_id not in keep_runs)
    pending = Approval.objects.filter(pk__in=list(group), status=ApprovalStatus.PENDING)
    return [a.public_id for a in _cancel(pending)]
