"""Reads of notifications: the API list, the page, the bell's count. Each through
console/access.py (a principal's own notifications only)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from approvals import access as approvals_access
from approvals.models import Approval, ApprovalStatus
from console.core import paging
from console.core.errors import Forbidden, Invalid
from console.directory import access
from notifications import access as notifications_access
from notifications.models import NotificationSettings
from notifications.schemas import notification_settings_resource

PAGE_SIZE = 50


def cursor_encode(notification) -> str:
    return paging.encode_time_pk(notification.at, notification.pk)


def cursor_decode(cursor: str, *, path: str = "query.cursor") -> tuple[datetime, int]:
    return paging.read(
        paging.decode_time_pk, cursor, path=path,
        message="the cursor is not one this server issued", detail="invalid cursor",
    )  # fmt: skip


def notification_resource(notification) -> dict:
    return {
        "id": notification.public_id,
        "kind": notification.kind,
        "at": notification.at,
        "title": notification.title,
        "body": notification.body,
        "url": notification.url,
        "read": notification.read_at is not None,
    }


def _page(*, viewer, unread: bool | None, limit: int, cursor: str | None, path: str):
    """One page, newest first, keyset on (at, id): (rows, next cursor or None)."""
    qs = notifications_access.notifications_of(viewer=viewer)
    if unread is not None:
        qs = qs.filter(read_at__isnull=unread)
    if cursor:
        at, pk = cursor_decode(cursor, path=path)
        qs = qs.filter(Q(at__lt=at) | Q(at=at, id__lt=pk))
    rows = list(qs.order_by("-at", "-id")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (cursor_encode(rows[-1]) if more else None)


def notifications_list(
    *, viewer, unread: bool | None = None, limit: int = PAGE_SIZE, cursor: str | None = None
) -> dict:
    """`GET /api/v1/notifications`: the viewer's own, newest first (`unread` True: unread
    only; False: read only; None: all)."""
    rows, next_cursor = _page(
        viewer=viewer, unread=unread, limit=limit, cursor=cursor, path="query.cursor"
    )
    return {"items": [notification_resource(n) for n in rows], "next_cursor": next_cursor}


def nav_unread_count_context(*, viewer) -> dict:
    """`base.html#nav-notification-count`: the viewer's unread notifications."""
    try:
        unread = notifications_access.notifications_of(viewer=viewer).filter(read_at__isnull=True)
    except Forbidden:
        return {"nav_unread_count": 0}
    return {"nav_unread_count": unread.count()}


def notification_item_context(*, notification) -> dict:
    """`notifications/list.html#notification`: one item (its id: notification-<publicId>)."""
    return {"item": notification}


def notifications_page_context(*, viewer, show: str = "all", cursor: str = "") -> dict:
    """`notifications/list.html#notification-list`: a page of the viewer's notifications
    (`show`: all | unread) with the cursor of the next (older) page."""
    if show not in ("all", "unread"):
        raise Invalid(f"show must be 'all' or 'unread', not '{show}'", code="invalid_filter")
    rows, older = _page(
        viewer=viewer,
        unread=True if show == "unread" else None,
        limit=PAGE_SIZE,
        cursor=cursor or None,
        path="cursor",
    )
    unread = (
        notifications_access.notifications_of(viewer=viewer).filter(read_at__isnull=True).count()
    )
    return {
        "items": rows,
        "show": show,
        "older_cursor": older,
        "first_page": not cursor,
        "unread_count": unread,
    }


def notification_settings_read(*, viewer) -> dict:
    """`GET /api/v1/me/notification-settings`: the viewer's own (a runtime's key: 403)."""
    principal = access.own_principal(viewer=viewer)
    return notification_settings_resource(NotificationSettings.of(principal))


def slack_link_status(*, viewer) -> dict:
    """What `/settings/` says of the viewer's Slack id: held, and whether Slack vouched for it
    (a typed-in id is a claim that never decides; see notifications/preferences.py)."""
    row = NotificationSettings.of(access.own_principal(viewer=viewer))
    return {"slack_user_id": row.slack_user_id, "slack_verified": row.slack_user_verified}


def browser_calls(*, viewer, approval_ids) -> list[dict]:
    """What a console page shows as system notifications (static/js/notify.js) for new calls:
    those still pending that this viewer may decide, unless it turned browser notifications
    off. `url` is the card's path (the page's own origin)."""
    if not NotificationSettings.of(viewer).browser:
        return []
    approvals = (
        Approval.objects.filter(
            tenant_id=viewer.tenant_id,
            public_id__in=list(approval_ids),
            status=ApprovalStatus.PENDING,
            mirror_of__isnull=True,
        )
        .with_run()
        .select_related("run__principal")
        .order_by("position", "id")
    )
    calls = []
    for approval in approvals:
        if approvals_access.decide_refusal(viewer, approval) is not None:
            continue
        run = approval.run
        who = f" for {run.principal.external_id}" if run.principal_id else ""
        calls.append(
            {
                "id": approval.public_id,
                "title": f"Decide: {approval.tool_name}",
                "body": f"{approval.reason or 'No reason given.'} (run {run.external_id}{who})",
                "url": f"/approvals/{approval.public_id}/",
            }
        )
    return calls
