"""Expiry: a pending approval past its `expiresAt` is decided `expired`, failing closed.

The runtime reads it like a denial, with the rejection message. Expiry goes through the same
conditional UPDATE as a decision (so a reviewer and the clock cannot both win), is audited as
`approval.expired`, and wakes long-polls through the same on-commit publish.

It runs lazily wherever approvals are read (the long-poll, the inbox, a card), the long-poll
sets its timer to the run's next expiry, and `manage.py expire_approvals --loop` sweeps the
rest (e.g. the inbox's nav count for runs whose runtime is not polling).
"""

from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services.settle import approval_settle


def _due(*, now, run=None, tenant_id=None, approval_ids=None):
    qs = Approval.objects.with_run().filter(status=ApprovalStatus.PENDING, expires_at__lte=now)
    if run is not None:
        qs = qs.filter(run=run)
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    if approval_ids is not None:
        qs = qs.filter(pk__in=list(approval_ids))
    return qs.order_by("expires_at", "id")


def approvals_expire_due(
    *, run=None, tenant_id=None, approval_ids=None, now=None, limit: int = 500
) -> int:
    """Expire the pending approvals past their expiry (optionally of one run / tenant / ids).
    Each is its own transaction. Returns how many this call expired."""
    now = now or timezone.now()
    expired = 0
    for approval in _due(now=now, run=run, tenant_id=tenant_id, approval_ids=approval_ids)[:limit]:
        expired += approval_settle(
            approval=approval,
            status=ApprovalStatus.EXPIRED,
            message=approval.rejection_message,
            arguments=None,
            action="approval.expired",
        )
    return expired
