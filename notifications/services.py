"""The one outlet for telling people something: `notify`, and marking notifications read.

`notify` is called inside the transaction of what it reports (a budget crossing in the ingest
transaction, a reminder in the sweep's), so a notification, its mail and its webhooks exist
exactly when that change does. Everything that leaves the process does so after commit: the
bell counts through console/realtime.py, webhooks through the outbox thread after commit, mail
through the sweep's mail outbox (console/outbox.py), never inside the request.
"""

from __future__ import annotations

from django.db import transaction
from django.template.loader import select_template
from django.utils import timezone

from approvals.services.webhooks import webhook_payloads_check, webhooks_enqueue
from console.core import links
from console.directory import access
from console.live import realtime
from console.models import Principal
from notifications import access as notifications_access
from notifications.models import Notification, NotificationKind, OutboundEmail

TITLE_MAX = Notification._meta.get_field("title").max_length
SUBJECT_MAX = OutboundEmail._meta.get_field("subject").max_length
EMAIL_TEMPLATES = "notifications/email"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())  # one line (a subject may not hold a newline)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _recipients(*, tenant, recipients) -> list[Principal]:
    """Active principals of this tenant, each once, in the order given."""
    chosen: dict[int, Principal] = {}
    for principal in recipients:
        if principal.tenant_id != tenant.pk:
            raise ValueError(f"principal {principal.external_id!r} is not of tenant {tenant.slug}")
        if principal.is_active:
            chosen.setdefault(principal.pk, principal)
    return list(chosen.values())


def _email_part(kind: str, part: str, context: dict) -> str:
    """`notifications/email/<kind>.<part>` if it exists, else the generic template."""
    template = select_template(
        [f"{EMAIL_TEMPLATES}/{kind}.{part}", f"{EMAIL_TEMPLATES}/notification.{part}"]
    )
    return template.render(context)


def _email(*, tenant, notification: Notification) -> OutboundEmail:
    principal = notification.principal
    context = {
        "notification": notification,
        "principal": principal,
        "tenant": tenant,
        "notifications_url": links.public_url("/notifications/"),
    }
    subject = _email_part(notification.kind, "subject.txt", context)
    return OutboundEmail(
        tenant=tenant,
        notification=notification,
        to=principal.email,
        subject=_clip(subject, SUBJECT_MAX),
        text_body=_email_part(notification.kind, "txt", context),
        html_body=_email_part(notification.kind, "html", context),
    )


def notify(
    *,
    tenant,
    kind: str,
    recipients,
    title: str,
    body: str,
    url: str,
    webhook_event: str | None = None,
    webhook_payload: dict | None = None,
) -> list[Notification]:
    """Tell `recipients` (principals of `tenant`) something, inside the caller's transaction:
    one Notification per active recipient, one mail per recipient with an email address, one
    webhook delivery per active endpoint subscribed to `webhook_event` (body `{"event",
    "deliveryId", **webhook_payload}`). Sent after commit; nothing at all if it rolls back.
    `url` may be a path: links are made absolute with GAVEL_PUBLIC_URL (console.links).
    Bad arguments (a programming error) raise ValueError before anything is written, leaving
    the caller's transaction usable."""
    if kind not in NotificationKind.values:
        raise ValueError(f"unknown notification kind {kind!r}")
    principals = _recipients(tenant=tenant, recipients=recipients)
    payloads = [] if webhook_event is None else [dict(webhook_payload or {})]
    if webhook_event is not None:
        webhook_payloads_check(event=webhook_event, payloads=payloads)
    with transaction.atomic(savepoint=False):  # the caller's, if it has one
        return _notify_write(
            tenant=tenant,
            kind=kind,
            principals=principals,
            title=title,
            body=body,
            url=url,
            webhook_event=webhook_event,
            payloads=payloads,
        )


def _notify_write(*, tenant, kind, principals, title, body, url, webhook_event, payloads):
    now = timezone.now()
    rows = [
        Notification(
            tenant=tenant,
            principal=p,
            kind=kind,
            at=now,
            title=_clip(title, TITLE_MAX),
            body=body,
            url=links.public_url(url),
        )
        for p in principals
    ]
    Notification.objects.bulk_create(rows)
    emails = [_email(tenant=tenant, notification=n) for n in rows if n.principal.email]
    OutboundEmail.objects.bulk_create(emails)
    if webhook_event is not None:
        webhooks_enqueue(tenant_id=tenant.pk, event=webhook_event, payloads=payloads)
    realtime.notifications_changed(principals=principals)
    return rows  # the mail is the sweep's to send (console/outbox.py): no kick


@transaction.atomic
def notification_mark_read(*, viewer, notification_id: str) -> Notification:
    """Mark one of the viewer's own notifications read (again: no change). 404 for others'."""
    notification = notifications_access.notification_for(
        viewer=viewer, notification_id=notification_id
    )
    if notification.read_at is None:
        now = timezone.now()
        updated = Notification.objects.filter(pk=notification.pk, read_at__isnull=True).update(
            read_at=now
        )
        notification.refresh_from_db(fields=["read_at"])
        if updated:
            realtime.notifications_changed(principals=[access.acting_principal(viewer)])
    return notification


@transaction.atomic
def notifications_mark_all_read(*, viewer) -> int:
    """Mark every unread notification of the viewer read. Returns how many changed."""
    unread = notifications_access.notifications_of(viewer=viewer).filter(read_at__isnull=True)
    changed = unread.update(read_at=timezone.now())
    if changed:
        realtime.notifications_changed(principals=[access.acting_principal(viewer)])
    return changed
