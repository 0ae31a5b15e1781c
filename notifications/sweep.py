"""The sweep: what happens to a held call with time, run by `manage.py expire_approvals
[--loop]` (and by `make run`, which starts it beside the server).

In order: calls past their `expiresAt` are expired (fail closed, as in v1); a call still
pending `reminderAfterSeconds` after its request notifies again everyone who may decide it
(`approval.reminder`); one still pending `escalateAfterSeconds` after it notifies the run's
principal's team leads, else the tenant's admins (`approval.escalated`). Each notification,
its mail and its webhook deliveries are written by `notify` in one transaction with an
`ApprovalNotice` row whose unique (approval, kind) is the claim: each fires once per call,
however many sweeps run at once (a second process's INSERT waits for the first's commit and
then fails). Then every outbox sends what is due; mail only ever here (console/outbox.py).
Outbound HTTP (webhooks, Slack responses) is not part of a `--loop` pass: the process's
outbox thread sends it (console/outbox.py), so expiry, reminders and escalations never wait
on anyone's endpoint.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals import access as approvals_access
from approvals.models import Approval, ApprovalStatus
from approvals.schemas import ApprovalOut, approval_resource
from approvals.services.expiry import approvals_expire_due
from budgets.spend import run_costs
from console.core import outbox
from console.directory import access
from console.models import Principal, Team, Tenant
from notifications.models import ApprovalNotice, NotificationKind
from notifications.services import notify

log = logging.getLogger(__name__)

REMINDER = NotificationKind.APPROVAL_REMINDER.value
ESCALATED = NotificationKind.APPROVAL_ESCALATED.value
DELAY_FIELD = {REMINDER: "reminder_after_seconds", ESCALATED: "escalate_after_seconds"}


def _due(*, tenant: Tenant, kind: str, now, limit: int) -> list[Approval]:
    delay = getattr(tenant, DELAY_FIELD[kind])
    fired = ApprovalNotice.objects.filter(tenant=tenant, kind=kind).values("approval_id")
    return list(
        Approval.objects.filter(
            tenant=tenant,
            status=ApprovalStatus.PENDING,
            mirror_of__isnull=True,
            requested_at__lte=now - timedelta(seconds=delay),
            expires_at__gt=now,
        )
        .exclude(pk__in=fired)
        .with_run()
        .select_related("run__principal")
        .order_by("requested_at", "id")[:limit]
    )


def _deciders(approval: Approval) -> list[Principal]:
    people = Principal.objects.filter(tenant_id=approval.tenant_id, is_active=True)
    people = people.prefetch_related("roles").order_by("external_id")
    return [p for p in people if approvals_access.decide_refusal(p, approval) is None]


def _escalation_targets(approval: Approval) -> list[Principal]:
    """The leads of the teams of the run's principal; none (or no principal): the admins."""
    run_principal = approval.run.principal_id
    teams = Team.objects.filter(tenant_id=approval.tenant_id, principals__pk=run_principal)
    leads = Principal.objects.filter(led_teams__in=teams, is_active=True).distinct()
    leads = list(leads.order_by("external_id")) if run_principal else []
    if leads:
        return leads
    people = Principal.objects.filter(tenant_id=approval.tenant_id, is_active=True)
    people = people.prefetch_related("roles").order_by("external_id")
    return [p for p in people if "admin" in access.capabilities_of(p)]


def _waited(approval: Approval, now) -> str:
    minutes = int((now - approval.requested_at).total_seconds() // 60)
    return f"{minutes} min" if minutes else "under a minute"


def _tell(approval: Approval, kind: str, now) -> None:
    run = approval.run
    who = f" for {run.principal.external_id}" if run.principal_id else ""
    if kind == REMINDER:
        recipients = _deciders(approval)
        title = f"A call still waits for a decision: {approval.tool_name}"
    else:
        recipients = _escalation_targets(approval)
        title = f"Escalated: {approval.tool_name} has waited {_waited(approval, now)}"
    body = (
        f"Run {run.external_id}{who} asked {_waited(approval, now)} ago to call "
        f"{approval.tool_name}. Reason: {approval.reason or '(none given)'}. "
        f"It expires at {approval.expires_at:%Y-%m-%d %H:%M} UTC."
    )
    resource = approval_resource(approval, costs=run_costs(runs=[run]))
    payload = ApprovalOut.model_validate(resource).model_dump(by_alias=True, mode="json")
    notify(
        tenant=run.tenant,
        kind=kind,
        recipients=recipients,
        title=title,
        body=body,
        url=f"/approvals/{approval.public_id}/",
        webhook_event=kind,
        webhook_payload={"approval": payload},
    )


def _fire(approval: Approval, kind: str, now) -> bool:
    """Claim and tell, in one transaction. False: another sweep has it (or had it)."""
    with transaction.atomic():
        try:
            with transaction.atomic():
                ApprovalNotice.objects.create(
                    tenant_id=approval.tenant_id, approval=approval, kind=kind, at=now
                )
        except IntegrityError:
            return False
        _tell(approval, kind, now)
    return True


def approvals_notice_due(*, kind: str, now=None, limit: int = 200) -> int:
    """Fire `kind` (reminder or escalation) for every call due for it. Returns how many."""
    now = now or timezone.now()
    field = DELAY_FIELD[kind]
    fired = 0
    for tenant in Tenant.objects.filter(**{f"{field}__isnull": False}):
        for approval in _due(tenant=tenant, kind=kind, now=now, limit=limit):
            fired += _fire(approval, kind, now)
    return fired


def sweep(*, now=None, http: bool = True) -> dict[str, int]:
    """One pass: expire, remind, escalate, then send every outbox's due rows (`http=False`:
    not outbound HTTP, which the outbox thread sends; `expire_approvals --loop`)."""
    expired = approvals_expire_due(now=now)
    counts = {
        "expired": expired,
        "reminded": approvals_notice_due(kind=REMINDER, now=now),
        "escalated": approvals_notice_due(kind=ESCALATED, now=now),
    }
    counts.update(outbox.run_due(now=now, http=http))
    return counts
