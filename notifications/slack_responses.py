"""Posting a Slack decision's updated message to the press's `response_url`: Slack applies a
Block Kit button's outcome from there (`{"replace_original": true, ...}`), not from the answer
to the press alone. An outbox (console/outbox.py): the row is written after the decision, sent
by the server's outbox thread right after commit (it is one small HTTP POST, not mail), retried
on the outbox schedule, and sent by the sweep after a crash or a restart.

Only a `response_url` under GAVEL_SLACK_RESPONSE_URL_PREFIX (Slack's host) is used: the press
is signed by Slack, but the server never POSTs to an address a request names otherwise.
"""

from __future__ import annotations

import json

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console import outbox
from notifications.models import SlackResponse, SlackResponseStatus

TIMEOUT_SECONDS = 10
URL_MAX = SlackResponse._meta.get_field("url").max_length


def slack_response_enqueue(*, tenant_id: int, url, body: dict) -> SlackResponse | None:
    """Queue `body` for `url` (None, and nothing queued: no URL, or not Slack's)."""
    prefix = settings.GAVEL_SLACK_RESPONSE_URL_PREFIX
    if not isinstance(url, str) or not url.startswith(prefix) or len(url) > URL_MAX:
        return None
    row = SlackResponse.objects.create(tenant_id=tenant_id, url=url, body=body)
    transaction.on_commit(outbox.kick)
    return row


def _claim(row: SlackResponse, now) -> bool:
    return (
        SlackResponse.objects.filter(
            pk=row.pk,
            status=SlackResponseStatus.PENDING,
            attempts=row.attempts,
            next_attempt_at__lte=now,
        ).update(next_attempt_at=now + outbox.LEASE)
        == 1
    )


def _post(row: SlackResponse, client: httpx.Client) -> tuple[int | None, str]:
    body = json.dumps(row.body, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "Gavel-Slack/1"}
    return outbox.post(client, row.url, content=body, headers=headers)


def _record(row: SlackResponse, status_code, error: str, now) -> None:
    fields = outbox.attempt_fields(
        attempts=row.attempts, status_code=status_code, error=error, now=now,
        delivered=SlackResponseStatus.DELIVERED, failed=SlackResponseStatus.FAILED,
    )  # fmt: skip
    SlackResponse.objects.filter(pk=row.pk).update(**fields)


def slack_responses_run_due(*, now=None, client: httpx.Client | None = None, limit=50) -> int:
    """Attempt every due response once. Returns how many were attempted."""
    moment = now or timezone.now()
    due = SlackResponse.objects.filter(
        status=SlackResponseStatus.PENDING, next_attempt_at__lte=moment
    ).order_by("next_attempt_at", "id")
    rows = list(due[:limit])
    if not rows:
        return 0
    attempted = 0
    owns_client = client is None
    client = client or httpx.Client(timeout=TIMEOUT_SECONDS, follow_redirects=False)
    try:
        for row in rows:
            if not _claim(row, moment):
                continue
            status_code, error = _post(row, client)
            _record(row, status_code, error, timezone.now() if now is None else now)
            attempted += 1
    finally:
        if owns_client:
            client.close()
    return attempted


def slack_response_next_due():
    """When the soonest pending response is due (None: nothing pending)."""
    return (
        SlackResponse.objects.filter(status=SlackResponseStatus.PENDING)
        .order_by("next_attempt_at")
        .values_list("next_attempt_at", flat=True)
        .first()
    )
