"""Deciding held tool calls as a reviewer or a `decide` key: validation, the lost race's 409,
extending a call's time to live, and the runtime's pickup ("delivered"). Exactly one decision
wins; the single writer is approvals/services/settle.py.
"""

from django.db import connection, transaction
from django.utils import timezone

from approvals import access as approvals_access
from approvals.models import Approval, ApprovalStatus
from approvals.services.expiry import approvals_expire_due
from approvals.services.settle import approval_settle
from console.core.errors import Conflict, Invalid
from console.directory.services import audit
from console.live import realtime
from console.models import ApiKey, Principal
from ops import instruments

DECISIONS = {"approve": ApprovalStatus.APPROVED, "deny": ApprovalStatus.DENIED}
UNSET = object()


def _validate(approval, decision, message, arguments):
    if decision not in DECISIONS:
        raise Invalid(
            "decision must be 'approve' or 'deny'",
            code="validation_error",
            details=[{"path": "decision", "message": "must be approve or deny"}],
        )
    if message is not None and not isinstance(message, str):
        raise Invalid(
            "message must be a string",
            code="validation_error",
            details=[{"path": "message", "message": "not a string"}],
        )
    if arguments is not UNSET and decision != "approve":
        raise Invalid(
            "arguments may only be edited when approving",
            code="validation_error",
            details=[{"path": "arguments", "message": "only with decision=approve"}],
        )


def _outcome(approval, decision, message, arguments):
    """(status, message, arguments) the runtime will read."""
    status = DECISIONS[decision]
    if status == ApprovalStatus.DENIED:
        return status, approval.rejection_message if message is None else message, None
    return status, message, approval.arguments if arguments is UNSET else arguments


def _conflict(approval) -> Conflict:
    approval.refresh_from_db(fields=["status", "decided_by", "decided_at"])
    decided_by = approval.decided_by.external_id if approval.decided_by_id else None
    who = f" by {decided_by}" if decided_by else ""
    return Conflict(
        f"this call was {approval.status}{who} already",
        code="already_decided",
        details={"decidedBy": decided_by, "status": approval.status},
    )


def approval_decide(
    *, approval, viewer, decision, message=None, arguments=UNSET, via=None
) -> Approval:
    """A reviewer's (or a decide key's) decision. The loser of a race gets Conflict naming
    who decided. `viewer` is a Principal or a `decide` ApiKey (acting as its principal).
    `via`: "slack" for a decision from a Slack button (the audit entry says so).

    Not atomic itself on purpose: a lazy expiry commits on its own (so a lost race on an
    expired call still leaves it expired); the decision is one transaction (approval_settle).
    """
    approvals_access.may_decide(viewer, approval)
    _validate(approval, decision, message, arguments)
    if approval.expires_at <= timezone.now():  # past expiry: it is expired, not open
        approvals_expire_due(approval_ids=[approval.pk])
    status, message, arguments = _outcome(approval, decision, message, arguments)
    key = viewer if isinstance(viewer, ApiKey) else None
    principal: Principal = viewer.principal if key else viewer
    won = approval_settle(
        approval=approval,
        status=status,
        message=message,
        arguments=arguments,
        principal=principal,
        key=key,
        action="approval.decided",
        via=via,
    )
    if not won:
        # Decided meanwhile, or its expiry passed since it was read: expired, not open.
        approvals_expire_due(approval_ids=[approval.pk])
        raise _conflict(approval)
    # No read back: the winning UPDATE ... RETURNING left the row as written in `approval`.
    instruments.approval_decided(approval)  # gavel_approval_decision_seconds
    return approval


def mark_delivered_sql(*, run_id: int, approval_pks=None, now=None) -> tuple[str, list]:
    """The pickup's one UPDATE ... RETURNING public_id (shared by the ORM path below and the
    long-poll's async read, approvals/services/delivery.py)."""
    quote = connection.ops.quote_name
    table, pk = quote(Approval._meta.db_table), quote(Approval._meta.pk.column)
    # Identifiers come from the model; every value is a parameter.
    sql = (
        f"UPDATE {table} SET delivered_at = %s WHERE run_id = %s "  # noqa: S608
        "AND decided_at IS NOT NULL AND delivered_at IS NULL"
    )
    params = [now or timezone.now(), run_id]
    if approval_pks is not None:
        sql += f" AND {pk} IN ({', '.join(['%s'] * len(approval_pks))})"
        params += list(approval_pks)
    return sql + " RETURNING public_id", params


def approvals_mark_delivered(*, run, approvals=None, announce: bool = True) -> list[str]:
    """The runtime picked up the run's decided calls (it read decisions, or posted an event
    for the run): reviewers see "runtime resumed". `approvals`: only these (the long-poll
    passes what it answered with). Returns the ids newly marked.

    One UPDATE ... RETURNING (atomic by itself: no transaction block, no read first; every
    event batch runs it). With `announce=False` the caller publishes the hint later through
    `approvals_announce_delivered` (the long-poll does, once its answer is on its way)."""
    if approvals is not None and not approvals:
        return []
    pks = None if approvals is None else [a.pk for a in approvals]
    sql, params = mark_delivered_sql(run_id=run.pk, approval_pks=pks)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        ids = [public_id for (public_id,) in cursor.fetchall()]
    if not ids:
        return []
    if announce:
        approvals_announce_delivered(run=run, approval_ids=ids)
    return ids


def approvals_announce_delivered(*, run, approval_ids: list[str]) -> None:
    """Tell live pages these calls were picked up (a hint; the rows say so already)."""
    if approval_ids:
        realtime.approvals_changed(run=run, approval_ids=approval_ids, change="delivered")


@transaction.atomic
def approval_extend(*, approval, viewer) -> Approval:
    """Give a pending approval another time-to-live, once, when it is in its last minute."""
    approvals_access.may_decide(viewer, approval)
    now = timezone.now()
    if approval.status != ApprovalStatus.PENDING or approval.expires_at <= now:
        raise _conflict(approval)
    if approval.extended_at is not None:
        raise Conflict("this call was extended once already", code="already_extended")
    if (approval.expires_at - now).total_seconds() > 60:
        raise Conflict("a call can be extended only in its last minute", code="not_last_minute")
    principal = viewer.principal if isinstance(viewer, ApiKey) else viewer
    expires_at = now + timezone.timedelta(seconds=approval.run.tenant.approval_ttl_seconds)
    updated = Approval.objects.filter(
        pk=approval.pk, status=ApprovalStatus.PENDING, extended_at__isnull=True
    ).update(expires_at=expires_at, extended_at=now, extended_by=principal)
    if updated != 1:
        raise _conflict(approval)
    audit(
        tenant=approval.run.tenant,
        action="approval.extended",
        object_type="approval",
        object_id=approval.public_id,
        principal=principal,
        data={"expiresAt": expires_at.isoformat()},
    )
    realtime.approvals_changed(
        run=approval.run, approval_ids=[approval.public_id], change="extended"
    )
    approval.refresh_from_db()
    return approval
