"""The runtime's side of a decision: the decisions long-poll's answer, and its pickup.

Answering with decided calls marks them delivered (the runtime picked them up, which reviewers
see), and a call found past its expiry is expired first: both are writes, so the answer is a
service, called by the held long-poll (approvals/api.py) between its waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils import timezone

from approvals.models import DECIDED, Approval, ApprovalStatus
from approvals.schemas import decision_wire
from approvals.services.decisions import approvals_mark_delivered
from approvals.services.expiry import approvals_expire_due

DECISION_RECHECK_SECONDS = 0.5  # the long-poll re-reads the database this often (lost wakes)
NO_EXPIRY_SECONDS = 3600.0


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


def _seconds_until(moment) -> float:
    if moment is None:
        return NO_EXPIRY_SECONDS
    return max(0.0, (moment - timezone.now()).total_seconds()) + 0.01


def decisions_answer(*, run, after: int | None, deliver: bool) -> Answer:
    """The long-poll's answer: None while it should keep waiting (nothing new and calls still
    pending) unless `deliver` (the wait is over). One read of the run's calls (a consistent
    snapshot: the cursor never runs ahead of the decisions answered). Without `after`, the
    decided calls not yet delivered; with it, every decision after that cursor."""
    calls = _calls_of(run)
    now = timezone.now()
    if any(c.status == ApprovalStatus.PENDING and c.expires_at <= now for c in calls):
        approvals_expire_due(run=run, now=now)
        calls = _calls_of(run)
    top = max((c.decision_seq or 0 for c in calls), default=0)
    decided = [c for c in calls if c.status in DECIDED and c.decision_seq]
    if after is None:
        decided = [c for c in decided if c.delivered_at is None]
    else:
        decided = [c for c in decided if c.decision_seq > after]
    decided.sort(key=lambda c: c.decision_seq)
    pending = [c for c in calls if c.status == ApprovalStatus.PENDING]
    if not decided and pending and not deliver:
        return Answer(None, recheck_in=_seconds_until(min(c.expires_at for c in pending)))
    fresh = [c for c in decided if not c.delivered_at]
    marked = approvals_mark_delivered(run=run, approvals=fresh, announce=False)
    body = {
        "complete": not pending,
        "decisions": [decision_wire(c) for c in decided],
        "pending": [c.tool_call_id for c in pending],
        "cursor": str(max(top, after or 0)),
    }
    return Answer(body, newly_delivered=marked)
