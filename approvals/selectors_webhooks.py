"""Reading a tenant's webhooks and their deliveries (GET /webhooks, GET
/webhooks/{id}/deliveries, /manage/webhooks/). Keyset pages, newest first."""

from __future__ import annotations

from approvals import access as approvals_access
from approvals.models import Webhook, WebhookDelivery
from console.core import paging

RECENT_DELIVERIES = 5  # shown under each webhook on /manage/webhooks/


def webhooks_page(*, viewer, limit: int = 50, cursor: str | None = None) -> dict:
    """The tenant's webhooks (deleted ones are not listed), newest first."""
    rows, next_cursor = paging.newest_first(
        approvals_access.webhooks_of(viewer=viewer), kind="whk", limit=limit, cursor=cursor
    )
    return {"items": rows, "next_cursor": next_cursor}


def webhook_deliveries_page(
    *, webhook: Webhook, limit: int = 50, cursor: str | None = None
) -> dict:
    """One webhook's deliveries, newest first (`webhook` from approvals_access.webhook_for)."""
    qs = WebhookDelivery.objects.filter(webhook=webhook)
    rows, next_cursor = paging.newest_first(qs, kind="dlv", limit=limit, cursor=cursor)
    return {"items": rows, "next_cursor": next_cursor}


def webhooks_with_recent_deliveries(*, viewer) -> list[tuple[Webhook, list[WebhookDelivery]]]:
    """/manage/webhooks/: every live webhook with its last few deliveries (one query each)."""
    hooks = list(approvals_access.webhooks_of(viewer=viewer).order_by("-pk")[:200])
    return [(hook, list(hook.deliveries.order_by("-pk")[:RECENT_DELIVERIES])) for hook in hooks]
