"""Reads of runs: the contract's run resource and the keyset-paginated run list."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.schemas import approval_resource
from approvals.services.expiry import approvals_expire_due
from budgets.spend import run_costs
from console.core import paging
from console.core.kept import Kept
from runs import access as runs_access
from runs.models import Run, run_verdicts, runs_verdicts

RUN_RELATED = runs_access.RUN_RELATED


def run_resource(
    *, run: Run, pending: list[Approval] | None = None, costs=None, verdicts=None
) -> dict:
    """The run resource (snake_case; runs.schemas.RunOut maps it to the wire). `costs`: the
    pending calls' cost beside them (budgets.spend.run_costs, by run pk), and `verdicts`: the
    runs' verdicts (runs.models.runs_verdicts, by run pk), for lists."""
    if pending is None:
        pending = list(_pending_of([run.pk]).get(run.pk, []))
    if pending and costs is None:
        costs = run_costs(runs=[run])
    return {
        "id": run.external_id,
        "agent_id": run.agent.external_id,
        "agent_version": run.agent_version,
        "current_agent_id": run.current_agent_id,
        "principal_id": run.principal.external_id if run.principal_id else None,
        "role_ids": run.role_ids,
        "conversation_id": run.conversation.external_id if run.conversation_id else None,
        "parent_run_id": run.parent_run_id,
        "status": run.status,
        "input": run.input,
        # A null limit was stored before issue 18 (now a 422): it is a limit not set.
        "limits": {k: v for k, v in (run.limits or {}).items() if v is not None},
        "usage": run.usage,
        "usage_by_model": run.usage_by_model or {},
        "steps": run.steps,
        "last_seq": run.last_seq,
        "todos": run.todos or [],
        "verdicts": run_verdicts(run) if verdicts is None else verdicts.get(run.pk, {}),
        "taint_summary": run.taint_summary,
        "pending_calls": [
            approval_resource(a, run_id=run.external_id, costs=costs) for a in pending
        ],
        "result": run.result,
        "ended_by_tool": run.ended_by_tool,
        "finish_reason": run.finish_reason,
        "usage_denied": run.usage_denied,
        "error": run.error,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }


def _pending_of(run_pks: list[int]) -> dict[int, list[Approval]]:
    """The runs' pending calls; one past its expiry is expired, never reported pending."""
    now = timezone.now()
    by_run: dict[int, list[Approval]] = defaultdict(list)
    due: list[int] = []
    # A run's own resource: the read compiled once.
    one = len(run_pks) == 1
    found = _PENDING_OF_RUN(run_pks[0]) if one else _pending(run_id__in=run_pks)
    for approval in found:
        if approval.expires_at <= now:
            due.append(approval.pk)
        else:
            by_run[approval.run_id].append(approval)
    if due:
        approvals_expire_due(approval_ids=due, now=now)
    return by_run


def _pending(**runs):
    qs = Approval.objects.filter(**runs, status=ApprovalStatus.PENDING)
    return qs.select_related("decided_by").order_by("position", "id")


_PENDING_OF_RUN = Kept(lambda run_pk: _pending(run_id=run_pk))


def run_get(*, viewer, run_id: str) -> dict:
    return run_resource(run=runs_access.run_shown(viewer=viewer, run_id=run_id))


# --- the list: newest first, keyset pagination on (started_at, id) ---


def cursor_encode(run: Run) -> str:
    return paging.encode_time_pk(run.started_at, run.pk)


def cursor_decode(cursor: str) -> tuple[datetime, int]:
    return paging.read(
        paging.decode_time_pk, cursor,
        message="the cursor is not one this server issued", detail="invalid cursor",
    )  # fmt: skip


def runs_list(
    *,
    viewer,
    principal_id: str | None = None,
    conversation_id: str | None = None,
    agent_id: str | None = None,
    status: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> dict:
    qs = runs_access.runs_visible_to(viewer=viewer).select_related(*RUN_RELATED)
    if principal_id is not None:
        qs = qs.filter(principal__external_id=principal_id)
    if conversation_id is not None:
        qs = qs.filter(conversation__external_id=conversation_id)
    if agent_id is not None:
        qs = qs.filter(agent__external_id=agent_id)
    if status is not None:
        qs = qs.filter(status=status)
    if cursor:
        started_at, pk = cursor_decode(cursor)
        qs = qs.filter(Q(started_at__lt=started_at) | Q(started_at=started_at, id__lt=pk))
    runs = list(qs.order_by("-started_at", "-id")[: limit + 1])
    more = len(runs) > limit
    runs = runs[:limit]
    pending = _pending_of([r.pk for r in runs])
    costs = run_costs(runs=[r for r in runs if pending.get(r.pk)])
    verdicts = runs_verdicts(r.pk for r in runs)
    return {
        "items": [
            run_resource(run=r, pending=pending.get(r.pk, []), costs=costs, verdicts=verdicts)
            for r in runs
        ],
        "next_cursor": cursor_encode(runs[-1]) if more else None,
    }
