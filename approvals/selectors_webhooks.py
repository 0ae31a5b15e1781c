"""Reading a tenant's webhooks and their deliveries (GET /webhooks, GET
/webhooks/{id}/deliveries, /manage/webhooks/). Keyset pages, newest first."""

from __future__ import annotations

import binascii

from approvals import access as approvals_access
from approvals.models import Webhook, WebhookDelivery
from console.core import paging
from console.core.errors import Invalid

RECENT_DELIVERIES = 5  # shown under each webhook on /manage/webhooks/


def _encode(kind: str, pk: int) -> str:
    return paging.encode_pk(kind, pk)


def _decode(kind: str, cursor: str) -> int:
    try:
        return paging.decode_pk(kind, cursor)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        message = "not a cursor this server issued"
        raise Invalid(
            f"cursor: {message}",
            code="validation_error",
            details=[{"path": "query.cursor", "message": message}],
        ) from None


def _page(qs, kind: str, *, limit: int, cursor: str | None) -> tuple[list, str | None]:
    if cursor:
        qs = qs.filter(pk__lt=_decode(kind, cursor))
    rows = list(qs.order_by("-pk")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, _encode(kind, rows[-1].pk) if more else None


def webhooks_page(*, viewer, limit: int = 50, cursor: str | None = None) -> dict:
    """The tenant's webhooks (deleted ones are not listed), newest first."""
    rows, next_cursor = _page(
        approvals_access.webhooks_of(viewer=viewer), "whk", limit=limit, cursor=cursor
    )
    return {"items": rows, "next_cursor": next_cursor}


def webhook_deliveries_page(
    *, webhook: Webhook, limit: int = 50, cursor: str | None = None
) -> dict:
    """One webhook's deliveries, newest first (`webhook` from approvals_access.webhook_for)."""
    qs = WebhookDelivery.objects.filter(webhook=webhook)
    rows, next_cursor = _page(qs, "dlv", limit=limit, cursor=cursor)
    return {"items": rows, "next_cursor": next_cursor}


def webhooks_with_recent_deliveries(*, viewer) -> list[tuple[Webhook, list[WebhookDelivery]]]:
    """/manage/webhooks/: every live webhook with its last few deliveries (one query each)."""
    hooks = list(approvals_access.webhooks_of(viewer=viewer).order_by("-pk")[:200])
    return [(hook, list(hook.deliveries.order_by("-pk")[:RECENT_DELIVERIES])) for hook in hooks]
