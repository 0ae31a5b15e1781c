"""Posting a Slack decision's updated message to the press's `response_url`: Slack applies a
Block Kit button's outcome from there (`{"replace_original": true, ...}`), not from the answer
to the press alone. An outbox (console/outbox.py): the row is written after the decision, sent
by the server's outbox thread right after commit (it is one small HTTP POST, not mail), retried
on the outbox schedule, and sent by the sweep after a crash or a restart.

Only a `response_url` under GAVEL_SLACK_RESPONSE_URL_PREFIX (Slack's host) is used: the press
is signed by Slack, but the server never POSTs to an address a request names otherwise. Each
POST goes through console/outbound.py (deadline, size cap, no internal address) and the
outbox's Dispatcher (round-robin by tenant).
"""

from __future__ import annotations

import json
from functools import partial

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.core import outbound, outbox
from notifications.models import SlackResponse, SlackResponseStatus

SENDER = "slack responses"
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
    return outbox.claim(row, now, pending=SlackResponseStatus.PENDING)


def _send(url: str, body: bytes, client) -> tuple[int | None, str]:
    """In a pool thread: the HTTP request alone."""
    answer = outbound.request(
        "POST", url, content=body, client=client,
        headers={"Content-Type": "application/json", "User-Agent": "Gavel-Slack/1"},
        allow_loopback=outbound.loopback_allowed(settings.GAVEL_WEBHOOK_ALLOW_HTTP),
    )  # fmt: skip
    return answer.outcome


def _record(row: SlackResponse, status_code, error: str, now) -> None:
    fields = outbox.attempt_fields(
        attempts=row.attempts, status_code=status_code, error=error,
        now=timezone.now() if now is None else now,
        delivered=SlackResponseStatus.DELIVERED, failed=SlackResponseStatus.FAILED,
    )  # fmt: skip
    SlackResponse.objects.filter(pk=row.pk).update(**fields)


def slack_responses_claim(*, now=None, room: outbox.Room, client=None) -> list[outbox.Job]:
    """Claim due responses as the room allows (round-robin by tenant)."""
    moment = now or timezone.now()
    due = (
        SlackResponse.objects.filter(
            status=SlackResponseStatus.PENDING, next_attempt_at__lte=moment
        )
        .exclude(tenant_id__in=room.busy_tenants())
        .order_by("next_attempt_at", "id")
    )
    jobs = []
    for row in room.pick(list(due[: room.window]), tenant_of=lambda r: r.tenant_id):
        if not _claim(row, moment):
            continue
        body = json.dumps(row.body, separators=(",", ":")).encode()
        jobs.append(
            outbox.Job(
                tenant_id=row.tenant_id,
                endpoint=None,
                send=partial(_send, row.url, body, client),
                record=partial(_record, row, now=now),
            )
        )
    return jobs


def slack_responses_run_due(*, now=None, client: httpx.Client | None = None, limit=50) -> int:
    """Attempt every due response once, here and now. Returns how many were attempted."""
    return outbox.dispatch_due(SENDER, now=now, client=client, limit=limit)


def slack_response_next_due():
    """When the soonest pending response is due (None: nothing pending)."""
    return outbox.soonest_due(SlackResponse.objects.filter(status=SlackResponseStatus.PENDING))
