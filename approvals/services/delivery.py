"""The runtime's side of a decision: the decisions long-poll's answer, and its pickup.

Answering with decided calls marks them delivered (the runtime picked them up, which reviewers
see), and a call found past its expiry is expired first: both are writes, so the answer is a
service, called by the held long-poll (approvals/api.py) between its waits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import connection
from django.utils import timezone

from approvals.models import DECIDED, Approval, ApprovalStatus
from approvals.schemas import decision_wire
from approvals.services.decisions import approvals_mark_delivered, mark_delivered_sql
from approvals.services.expiry import approvals_expire_due
from console.core import adb
from console.core.db import released

log = logging.getLogger(__name__)

# A held long-poll is woken through the channel layer; it also re-reads the database on a timer
# (a lost wake only delays). The timer's reads are a budget of the process, shared by every
# held poll: each re-reads every held / RECHECKS_PER_SECOND seconds, within these bounds.
DECISION_RECHECK_SECONDS = 0.5  # the shortest interval (few polls held)
DECISION_RECHECK_MAX_SECONDS = 10.0  # the longest (many polls held)
RECHECKS_PER_SECOND = 20  # timer re-reads of all held polls of a process, per second
NO_EXPIRY_SECONDS = 3600.0


def recheck_seconds(held: int) -> float:
    """How long a held poll sleeps before its next timer re-read when `held` polls are held
    in this process."""
    share = held / RECHECKS_PER_SECOND
    return min(DECISION_RECHECK_MAX_SECONDS, max(DECISION_RECHECK_SECONDS, share))


@dataclass(frozen=True)
class Answer:
    """What one look at the run's calls gives the long-poll.

    `body`: the answer to send, or None to keep waiting; `recheck_in`: seconds until the run's
    next expiry (when a waiting poll should look again); `newly_delivered`: the approval ids
    this answer marked delivered, whose live hint the caller sends once it is on its way."""

    body: dict | None
    recheck_in: float = 0.0
    newly_delivered: list[str] = field(default_factory=list)


def _calls_of(run) -> list[Approval]:
    return list(
        Approval.objects.filter(run=run)
        .select_related("decided_by", "decided_by_rule")
        .order_by("position", "id")
    )


# The same read for the async path: the fields the answer uses, and who or which rule decided.
_WANTED = {
    "id",
    "public_id",
    "run_id",
    "position",
    "tool_call_id",
    "status",
    "message",
    "decided_arguments",
    "decided_by_id",
    "decided_by_rule_id",
    "decided_at",
    "decision_seq",
    "delivered_at",
    "expires_at",
}
# In the model's field order (Model.from_db takes the values in that order).
_FIELDS = tuple(f.attname for f in Approval._meta.concrete_fields if f.attname in _WANTED)
# Fields whose stored form needs the field's own conversion (JSON: read as text, then decoded
# by the field, whatever loaders the connection has).
_CONVERTED = {
    i: Approval._meta.get_field(name)
    for i, name in enumerate(_FIELDS)
    if Approval._meta.get_field(name).get_internal_type() == "JSONField"
}


def _calls_sql() -> str:
    quote = connection.ops.quote_name
    meta, rel = Approval._meta, Approval._meta.get_field
    principal, rule = rel("decided_by").related_model._meta, rel("decided_by_rule").related_model
    columns = ", ".join(
        f"a.{quote(meta.get_field(name).column)}{'::text' if i in _CONVERTED else ''}"
        for i, name in enumerate(_FIELDS)
    )
    return (
        f"SELECT {columns}, p.{quote(principal.get_field('external_id').column)}, "  # noqa: S608
        f"r.{quote(rule._meta.get_field('public_id').column)} "
        f"FROM {quote(meta.db_table)} a "
        f"LEFT JOIN {quote(principal.db_table)} p ON p.{quote(principal.pk.column)} = "
        f"a.{quote(rel('decided_by').column)} "
        f"LEFT JOIN {quote(rule._meta.db_table)} r ON r.{quote(rule._meta.pk.column)} = "
        f"a.{quote(rel('decided_by_rule').column)} "
        f"WHERE a.{quote(rel('run').column)} = %s "
        f"ORDER BY a.{quote(meta.get_field('position').column)}, a.{quote(meta.pk.column)}"
    )


def _approval_from_row(row) -> Approval:
    """An Approval holding `_FIELDS` (the rest deferred), its decider and rule attached."""
    *values, decider_id, rule_id = row
    for i, model_field in _CONVERTED.items():
        values[i] = model_field.from_db_value(values[i], None, connection)
    approval = Approval.from_db("default", _FIELDS, values)
    if approval.decided_by_id is not None:
        model = Approval._meta.get_field("decided_by").related_model
        decider = model.from_db(
            "default", ("id", "external_id"), (approval.decided_by_id, decider_id)
        )
        Approval.decided_by.field.set_cached_value(approval, decider)
    if approval.decided_by_rule_id is not None:
        model = Approval._meta.get_field("decided_by_rule").related_model
        rule = model.from_db("default", ("id", "public_id"), (approval.decided_by_rule_id, rule_id))
        Approval.decided_by_rule.field.set_cached_value(approval, rule)
    return approval


def _seconds_until(moment) -> float:
    if moment is None:
        return NO_EXPIRY_SECONDS
    return max(0.0, (moment - timezone.now()).total_seconds()) + 0.01


def _due(calls, now) -> bool:
    return any(c.status == ApprovalStatus.PENDING and c.expires_at <= now for c in calls)


def _look(calls, *, after: int | None, deliver: bool) -> tuple[dict | None, float, list]:
    """One snapshot of the run's calls → (the answer's body, or None to keep waiting; seconds
    until the next expiry; the decided calls the answer delivers for the first time)."""
    top = max((c.decision_seq or 0 for c in calls), default=0)
    decided = [c for c in calls if c.status in DECIDED and c.decision_seq]
    if after is None:
        decided = [c for c in decided if c.delivered_at is None]
    else:
        decided = [c for c in decided if c.decision_seq > after]
    decided.sort(key=lambda c: c.decision_seq)
    pending = [c for c in calls if c.status == ApprovalStatus.PENDING]
    if not decided and pending and not deliver:
        return None, _seconds_until(min(c.expires_at for c in pending)), []
    body = {
        "complete": not pending,
        "decisions": [decision_wire(c) for c in decided],
        "pending": [c.tool_call_id for c in pending],
        "cursor": str(max(top, after or 0)),
    }
    return body, 0.0, [c for c in decided if not c.delivered_at]


def decisions_answer(*, run, after: int | None, deliver: bool) -> Answer:
    """The long-poll's answer: None while it should keep waiting (nothing new and calls still
    pending) unless `deliver` (the wait is over). One read of the run's calls (a consistent
    snapshot: the cursor never runs ahead of the decisions answered). Without `after`, the
    decided calls not yet delivered; with it, every decision after that cursor."""
    calls = _calls_of(run)
    now = timezone.now()
    if _due(calls, now):
        approvals_expire_due(run=run, now=now)
        calls = _calls_of(run)
    body, recheck_in, fresh = _look(calls, after=after, deliver=deliver)
    if body is None:
        return Answer(None, recheck_in=recheck_in)
    marked = approvals_mark_delivered(run=run, approvals=fresh, announce=False)
    return Answer(body, newly_delivered=marked)


async def decisions_answer_async(*, run, after: int | None, deliver: bool) -> Answer:
    """`decisions_answer` from the event loop: on PostgreSQL one SELECT (and the pickup's
    UPDATE when it delivers) through console/adb.py, no thread hop and no ORM compile. The
    pickup mark is a hint (reviewers see "runtime resumed"), written without waiting for the
    disk: were PostgreSQL itself to crash right after, a poll without a cursor could be
    answered the same decision again (at least once; a cursor never repeats one). The
    ORM path (in a worker thread) whenever that is not usable, when a call is past its expiry
    (expiring writes through the one decision writer), and when the async read fails."""
    if adb.usable():
        try:
            rows = await adb.fetch(_calls_sql(), [run.pk])
            calls = [_approval_from_row(row) for row in rows]
            if not _due(calls, timezone.now()):
                body, recheck_in, fresh = _look(calls, after=after, deliver=deliver)
                if body is None:
                    return Answer(None, recheck_in=recheck_in)
                marked = []
                if fresh:
                    sql, params = mark_delivered_sql(
                        run_id=run.pk, approval_pks=[c.pk for c in fresh]
                    )
                    marked = [public_id for (public_id,) in await adb.fetch(sql, params)]
                return Answer(body, newly_delivered=marked)
        except Exception as exc:
            if not adb.unreachable(exc):
                raise
            log.warning("async read failed; reading through the ORM", exc_info=True)
    return await released(decisions_answer)(run=run, after=after, deliver=deliver)
