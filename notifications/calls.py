"""Mail about new calls a principal may decide: "now" (one mail per batch of new calls, i.e.
per request that held them) and the digest (one mail every N minutes listing what still waits).

The requesting transaction writes one `CallBatch` row (approvals_request); this sender, run by
the sweep process only (`sweep_only`: a server process does no mail work), turns each batch
into one `OutboundEmail` per recipient who chose "now" and may decide at least one of its calls,
and stamps the batch in the same transaction (a conditional UPDATE claims it: two sweeps never
mail one batch twice). The mail itself then leaves through the mail outbox
(notifications/mail.py), in the same sweep round, with its retries. So a request never waits on
a mail server, and a crash between commit and send loses nothing.

Cost per batch (500 calls, 50 recipients): who may decide what is `approvals_access.decidable`, one
question per recipient and tool name; each call's lines (and the run's cost) are computed, and
each distinct list of calls rendered, once for the batch, not once per mail.
"""

from __future__ import annotations

import json
from datetime import timedelta

from django.db import transaction
from django.db.models import Min
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.safestring import mark_safe

from approvals import access as approvals_access
from approvals.models import Approval, ApprovalStatus
from budgets.spend import run_costs
from console.core import links
from console.core.formatting import money
from console.models import Principal
from notifications.models import CallBatch, EmailChoice, NotificationSettings, OutboundEmail

TEMPLATES = "notifications/email"
ARGUMENTS_MAX = 200  # characters of the arguments' summary
LISTED_MAX = 50  # calls listed in one mail; the rest are counted ("and N more")
SUBJECT_MAX = OutboundEmail._meta.get_field("subject").max_length


def _summary(arguments) -> str:
    text = json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= ARGUMENTS_MAX else text[: ARGUMENTS_MAX - 1] + "…"


def _pending(qs) -> list[Approval]:
    """Pending calls a person is asked about (a mirror of a parked sub-run's call is the same
    call: its own approval is listed, not the mirror)."""
    return list(
        qs.filter(status=ApprovalStatus.PENDING, mirror_of__isnull=True)
        .with_run()
        .select_related("run__principal")
        .order_by("requested_at", "id")
    )


def call_lines(approvals: list[Approval]) -> list[dict]:
    """What a mail (or a Slack message) says of each call: tool, reason, arguments, cost, who
    it is for and the link to its card."""
    costs = run_costs(runs=[a.run for a in approvals])
    return [
        {
            "id": a.public_id,
            "tool": a.tool_name,
            "reason": a.reason,
            "arguments": _summary(a.arguments),
            "cost": money(costs[a.run_id]["run_cost_minor_units"], a.run.tenant.currency),
            "run": a.run.external_id,
            "for": a.run.principal.external_id if a.run.principal_id else None,
            "url": links.public_url(f"/approvals/{a.public_id}/"),
        }
        for a in approvals
    ]


class _Shared:
    """What the mails of one batch share, made once however many mails hold it: each call's
    lines (one `run_costs` for them all) and each distinct list of calls rendered, text and
    HTML (`calls_list.*`; the mail around it, greeting and all, is rendered per recipient)."""

    def __init__(self):
        self._lines: dict[int, dict] = {}
        self._listings: dict[tuple[int, ...], tuple[str, str]] = {}

    def lines(self, approvals: list[Approval]) -> list[dict]:
        missing = [a for a in approvals if a.pk not in self._lines]
        if missing:
            self._lines.update(zip((a.pk for a in missing), call_lines(missing), strict=True))
        return [self._lines[a.pk] for a in approvals]

    def listing(self, approvals: list[Approval]) -> tuple[str, str]:
        key = tuple(a.pk for a in approvals)
        if key not in self._listings:
            context = {"calls": self.lines(approvals)}
            text = render_to_string(f"{TEMPLATES}/calls_list.txt", context)
            # Rendered by the autoescaping engine: safe to put into the outer HTML as it is.
            html = mark_safe(render_to_string(f"{TEMPLATES}/calls_list.html", context))  # noqa: S308
            self._listings[key] = (text, html)
        return self._listings[key]


def _mail(*, principal, approvals, digest: bool, shared: _Shared | None = None) -> OutboundEmail:
    shared = shared or _Shared()
    listed = approvals[:LISTED_MAX]
    text_listing, html_listing = shared.listing(listed)
    context = {
        "principal": principal,
        "tenant": principal.tenant,
        "calls": shared.lines(listed),
        "count": len(approvals),
        "more": max(0, len(approvals) - LISTED_MAX),
        "digest": digest,
        "inbox_url": links.public_url("/approvals/"),
        "settings_url": links.public_url("/settings/"),
    }
    subject = " ".join(render_to_string(f"{TEMPLATES}/calls.subject.txt", context).split())
    return OutboundEmail(
        tenant_id=principal.tenant_id,
        to=principal.email,
        subject=subject[:SUBJECT_MAX],
        text_body=render_to_string(f"{TEMPLATES}/calls.txt", {**context, "listing": text_listing}),
        html_body=render_to_string(f"{TEMPLATES}/calls.html", {**context, "listing": html_listing}),
    )


def _deciders(*, tenant_id: int, email: str):
    """Active principals of the tenant with an address who chose `email`, roles loaded."""
    return (
        Principal.objects.filter(
            tenant_id=tenant_id,
            is_active=True,
            notification_settings__email=email,
        )
        .exclude(email="")
        .select_related("tenant", "notification_settings")
        .prefetch_related("roles")
    )


def _batch_mail(batch: CallBatch) -> list[OutboundEmail]:
    approvals = _pending(Approval.objects.filter(pk__in=batch.approval_ids))
    if not approvals:
        return []
    mails, shared = [], _Shared()
    for principal in _deciders(tenant_id=batch.tenant_id, email=EmailChoice.NOW):
        calls = approvals_access.decidable(principal, approvals)
        if calls:
            mails.append(_mail(principal=principal, approvals=calls, digest=False, shared=shared))
    return mails


def call_batches_run_due(*, now=None, limit: int = 4) -> int:
    """Mail each unmailed batch (one mail per "now" recipient), at most `limit` a round: the
    mail sender runs after this one in each sweep round, so a backlog of batches does not
    starve the sending of what they wrote (4 batches of 50 recipients: about the mail sender's
    200 a round). Returns how many batches this call claimed."""
    now = now or timezone.now()
    due = CallBatch.objects.filter(mailed_at__isnull=True, created_at__lte=now)
    claimed = 0
    for batch in list(due.order_by("created_at", "id")[:limit]):
        with transaction.atomic():
            if not CallBatch.objects.filter(pk=batch.pk, mailed_at__isnull=True).update(
                mailed_at=now
            ):
                continue  # another process has it
            OutboundEmail.objects.bulk_create(_batch_mail(batch))
        claimed += 1
    return claimed


def _digest_mail(row: NotificationSettings, since, now) -> OutboundEmail | None:
    principal = row.principal
    if not principal.is_active or not principal.email:
        return None
    approvals = _pending(
        Approval.objects.filter(
            tenant_id=principal.tenant_id, requested_at__gt=since, requested_at__lte=now
        )
    )
    calls = approvals_access.decidable(principal, approvals)
    return _mail(principal=principal, approvals=calls, digest=True) if calls else None


def digests_run_due(*, now=None, limit: int = 50) -> int:
    """Mail each due digest (the calls requested since the last one that still wait; none: no
    mail) and set its next time. Returns how many digests this call claimed."""
    now = now or timezone.now()
    due = NotificationSettings.objects.filter(email=EmailChoice.DIGEST, next_digest_at__lte=now)
    claimed = 0
    for row in list(due.select_related("principal__tenant").order_by("next_digest_at")[:limit]):
        since = row.digest_through or now - timedelta(minutes=row.digest_minutes)
        with transaction.atomic():
            taken = NotificationSettings.objects.filter(
                pk=row.pk, email=EmailChoice.DIGEST, next_digest_at=row.next_digest_at
            ).update(next_digest_at=now + timedelta(minutes=row.digest_minutes), digest_through=now)
            if not taken:
                continue  # another process has it, or the principal changed its choice
            mail = _digest_mail(row, since, now)
            if mail is not None:
                mail.save()
        claimed += 1
    return claimed


def calls_run_due(*, now=None) -> int:
    return call_batches_run_due(now=now) + digests_run_due(now=now)


def calls_next_due():
    """When the soonest batch or digest is due (None: nothing waits)."""
    batch = CallBatch.objects.filter(mailed_at__isnull=True).aggregate(m=Min("created_at"))["m"]
    digest = NotificationSettings.objects.filter(email=EmailChoice.DIGEST).aggregate(
        m=Min("next_digest_at")
    )["m"]
    soonest = [t for t in (batch, digest) if t is not None]
    return min(soonest) if soonest else None
