"""Reads for reviewers: the inbox, and the context of one approval card.

`approval_card_context` is the ONE function behind `approvals/card.html`: the inbox, the run
page, the htmx re-render after a decision and the WebSocket push all render the card from it,
so every path produces the same HTML. Reading never reports a call past its expiry as pending:
both selectors expire lazily first.
"""

from __future__ import annotations

import json
import re

from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services.expiry import approvals_expire_due
from console import access
from console.errors import Forbidden, Invalid

SECRET_KEY_RE = re.compile(
    r"(pass(word|wd|phrase)?|secret|token|api[-_]?key|auth|credential|private[-_]?key|cookie"
    r"|session|signature|bearer)",
    re.IGNORECASE,
)
SECRET_VALUE_RE = re.compile(
    r"^(sk|pk|rk)[-_][A-Za-z0-9_-]{12,}$|^(ghp|gho|ghs|github_pat|xox[abprs]|glpat)[-_]"
    r"[A-Za-z0-9_-]{8,}$|^AKIA[0-9A-Z]{16}$|^Bearer\s+\S{8,}$|^eyJ[A-Za-z0-9_-]{10,}\."
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
LONG_VALUE = 160  # characters shown before a value is collapsed
FILTERS = ("tool", "agent", "principal", "run")
CARD_RELATED = ("run", "run__tenant", "run__principal", "run__agent", "decided_by", "tenant")


def _looks_secret(key, value) -> bool:
    if isinstance(key, str) and SECRET_KEY_RE.search(key) and not isinstance(value, dict | list):
        return value not in (None, "", True, False)
    return isinstance(value, str) and bool(SECRET_VALUE_RE.search(value))


def _line(depth, key, text, *, comma, secret=False):
    long = len(text) > LONG_VALUE
    return {
        "pad": "  " * depth,
        "key": json.dumps(key, ensure_ascii=False) if key is not None else None,
        "text": text,
        "short": text[:LONG_VALUE] + "…" if long else text,
        "long": long,
        "secret": secret,
        "comma": "," if comma else "",
    }


def json_lines(value, *, depth=0, key=None, comma=False) -> list[dict]:
    """Pretty JSON as lines for the template (which escapes them): secret-looking values are
    flagged (masked until revealed), long ones collapsed. No HTML is built here."""
    if isinstance(value, dict | list) and value:
        opener, closer = ("{", "}") if isinstance(value, dict) else ("[", "]")
        items = list(value.items()) if isinstance(value, dict) else [(None, v) for v in value]
        lines = [_line(depth, key, opener, comma=False)]
        for i, (child_key, child) in enumerate(items):
            lines += json_lines(child, depth=depth + 1, key=child_key, comma=i < len(items) - 1)
        return lines + [_line(depth, None, closer, comma=comma)]
    text = json.dumps(value, ensure_ascii=False, default=str)
    return [_line(depth, key, text, comma=comma, secret=_looks_secret(key, value))]


def _pickup(approval) -> str | None:
    if approval.status in (ApprovalStatus.PENDING, ApprovalStatus.CANCELLED):
        return None
    return "resumed" if approval.delivered_at else "waiting"


def _run_facts(run) -> dict:
    limits = run.limits or {}
    ceiling = limits.get("costCeilingMinorUnits", limits.get("cost_ceiling_minor_units"))
    verdicts = [
        {"turn": turn, **v}
        for turn, v in sorted((run.verdicts or {}).items())
        if isinstance(v, dict) and v.get("verdict") in ("flagged", "blocked")
    ]
    taint = run.taint_summary or {}
    return {
        "principal": run.principal,
        "roles": run.role_ids or [],
        "agent_id": run.current_agent_id or run.agent.external_id,
        "cost": run.cost_minor_units,
        "ceiling": ceiling,
        "over_ceiling": ceiling is not None and run.cost_minor_units >= ceiling,
        "currency": run.tenant.currency,
        "todos": run.todos or [],
        "verdicts": verdicts,
        "taint_flags": sorted(k for k, v in taint.items() if v) if isinstance(taint, dict) else [],
    }


def _card(approval, viewer, *, refusal, notice) -> dict:
    now = timezone.now()
    pending = approval.status == ApprovalStatus.PENDING
    arguments = approval.decided_arguments if approval.decided_arguments is not None else None
    return {
        "approval": approval,
        "id": approval.public_id,
        "dom_id": f"approval-{approval.public_id}",
        "run": approval.run,
        "pending": pending,
        "can_decide": pending and refusal is None,
        "refusal": refusal if pending else None,
        "can_extend": pending and refusal is None and approval.extended_at is None,
        "argument_lines": json_lines(approval.arguments),
        "arguments_json": json.dumps(approval.arguments, indent=2, ensure_ascii=False),
        "decided_argument_lines": json_lines(arguments) if arguments is not None else None,
        "arguments_edited": arguments is not None and arguments != approval.arguments,
        "seconds_left": max(0, int((approval.expires_at - now).total_seconds())),
        "pickup": _pickup(approval),
        "decided_by": approval.decided_by,
        "notice": notice,
        **_run_facts(approval.run),
    }


def _refusal(viewer, approval) -> str | None:
    return access.decide_refusal(viewer, approval) if viewer is not None else "sign in to decide"


def approval_card_context(*, approval, viewer, notice: str | None = None) -> dict:
    """The context of `approvals/card.html` (`{"card": ...}`) for this viewer: controls only
    for a viewer who may decide it. `notice` is shown on the card (e.g. a lost race)."""
    if approval.status == ApprovalStatus.PENDING and approval.expires_at <= timezone.now():
        approvals_expire_due(approval_ids=[approval.pk])
    approval = Approval.objects.select_related(*CARD_RELATED).get(pk=approval.pk)
    return {"card": _card(approval, viewer, refusal=_refusal(viewer, approval), notice=notice)}


def _filtered(qs, filters: dict):
    lookups = {
        "tool": "tool_name",
        "agent": "run__agent__external_id",
        "principal": "run__principal__external_id",
        "run": "run__external_id",
    }
    for name, lookup in lookups.items():
        value = (filters or {}).get(name)
        if value:
            qs = qs.filter(**{lookup: value})
    return qs


def inbox_pending(*, viewer, filters: dict | None = None) -> list[Approval]:
    """Pending calls for this viewer, oldest first: the ones it may decide (a viewer without
    the decide capability sees every pending call, read-only). A parent's mirror of a parked
    child's call is the same call and is listed once (as the child's)."""
    approvals = access.approvals_visible_to(viewer=viewer)
    approvals_expire_due(tenant_id=viewer.tenant_id)
    qs = _filtered(approvals, filters).filter(status=ApprovalStatus.PENDING, mirror_of__isnull=True)
    rows = list(qs.select_related(*CARD_RELATED).order_by("requested_at", "position", "id"))
    if not access.can(viewer, "decide"):
        return rows
    return [a for a in rows if access.decide_refusal(viewer, a) is None]


def inbox_for(*, viewer, filters: dict | None = None) -> list[dict]:
    """The inbox: groups of cards by run and step, each group in the order of its oldest call."""
    try:
        rows = inbox_pending(viewer=viewer, filters=filters)
    except Forbidden:
        return []
    groups: dict[tuple, list] = {}
    for approval in rows:
        groups.setdefault((approval.run_id, approval.step), []).append(approval)
    return [group_context(approvals=items, viewer=viewer)["group"] for items in groups.values()]


def group_context(*, approvals, viewer) -> dict:
    """The context of `approvals/group.html`: one run's step, its cards and the bulk form."""
    first = approvals[0]
    cards = [
        _card(a, viewer, refusal=_refusal(viewer, a), notice=None)
        for a in sorted(approvals, key=lambda a: (a.position, a.pk))
    ]
    return {
        "group": {
            "dom_id": f"approval-group-{first.run_id}-{first.step or 0}",
            "run": first.run,
            "step": first.step,
            "cards": cards,
            "can_bulk": sum(c["can_decide"] for c in cards) > 1,
        }
    }


def inbox_filter_choices(*, viewer, filters: dict | None = None) -> list[dict]:
    """The filter selects: distinct tools, agents, principals and runs among the viewer's
    pending calls (a selected value stays listed even when nothing matches it now)."""
    filters = filters or {}
    rows = inbox_pending(viewer=viewer)
    key = {
        "tool": lambda a: a.tool_name,
        "agent": lambda a: a.run.agent.external_id,
        "principal": lambda a: a.run.principal.external_id if a.run.principal else "",
        "run": lambda a: a.run.external_id,
    }
    return [
        {
            "name": name,
            "values": sorted(({fn(a) for a in rows} | {filters.get(name) or ""}) - {""}),
            "selected": filters.get(name) or "",
        }
        for name, fn in key.items()
    ]


def step_pending_for(*, viewer, run, step) -> list[Approval]:
    """The step's pending calls this viewer may decide (for a bulk decision)."""
    approvals = access.approvals_visible_to(viewer=viewer)
    qs = approvals.filter(run=run, step=step, status=ApprovalStatus.PENDING, mirror_of__isnull=True)
    rows = list(qs.select_related(*CARD_RELATED).order_by("position", "id"))
    return [a for a in rows if access.decide_refusal(viewer, a) is None]


def approvals_reloaded(*, approvals) -> list[Approval]:
    """The same approvals as they now are, with what a card needs."""
    return list(
        Approval.objects.select_related(*CARD_RELATED).filter(pk__in=[a.pk for a in approvals])
    )


# ---- For runtimes and bots (the API) --------------------------------------------------------

DECISION_RECHECK_SECONDS = 0.5  # the long-poll re-reads the database this often (lost wakes)
DECIDED = (ApprovalStatus.APPROVED, ApprovalStatus.DENIED, ApprovalStatus.EXPIRED)


MAX_WAIT_SECONDS = 30


def parse_wait(raw: str | None) -> float:
    """`wait=S`: how long a long-poll may hold, 0 <= S <= 30 seconds (absent: 0)."""
    if raw is None or raw == "":
        return 0.0
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_WAIT_SECONDS:  # NaN fails this too
        raise Invalid(
            f"wait must be a number of seconds from 0 to {MAX_WAIT_SECONDS}",
            code="validation_error",
            details=[{"path": "query.wait", "message": f"must be 0..{MAX_WAIT_SECONDS}"}],
        )
    return seconds


def parse_cursor(raw: str | None) -> int | None:
    """`after=`: an opaque cursor from an earlier answer (`0`: from the beginning)."""
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise Invalid(
            "after must be a cursor from an earlier answer, or 0",
            code="validation_error",
            details=[{"path": "query.after", "message": "not a cursor"}],
        )
    return int(raw)


def _decision(approval) -> dict:
    return {
        "approval_id": approval.public_id,
        "tool_call_id": approval.tool_call_id,
        "decision": approval.status,
        "message": approval.message,
        "arguments": approval.decided_arguments
        if approval.status == ApprovalStatus.APPROVED
        else None,
        "decided_by": approval.decided_by.external_id if approval.decided_by_id else None,
        "decided_at": approval.decided_at,
    }


def _calls_of(run) -> list[Approval]:
    return list(
        Approval.objects.filter(run=run).select_related("decided_by").order_by("position", "id")
    )


def _seconds_until(moment) -> float:
    if moment is None:
        return 3600.0
    return max(0.0, (moment - timezone.now()).total_seconds()) + 0.01


def decisions_answer(*, run, after: int | None, deliver: bool) -> tuple[dict | None, float, list]:
    """The long-poll's answer, or None while it should keep waiting (nothing new and calls
    still pending) unless `deliver` (the wait is over); the seconds until the run's next
    expiry (when a waiting poll should look again); and the ids newly marked delivered, whose
    live hint the caller sends once the answer is on its way. One read of the run's calls
    (a consistent snapshot: the cursor never runs ahead of the decisions answered).
    Answering marks the answered decisions delivered: the runtime's pickup, which reviewers
    see."""
    from approvals.services.decisions import approvals_mark_delivered

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
        return None, _seconds_until(min(c.expires_at for c in pending)), []
    fresh = [c for c in decided if not c.delivered_at]
    marked = approvals_mark_delivered(run=run, approvals=fresh, announce=False)
    answer = {
        "complete": not pending,
        "decisions": [_decision(c) for c in decided],
        "pending": [c.tool_call_id for c in pending],
        "cursor": str(max(top, after or 0)),
    }
    return answer, 0.0, marked


def approvals_list(*, viewer, status=None, run_id=None, limit=50, cursor=None) -> dict:
    """Approvals of the viewer's tenant, oldest first, keyset-paginated by an opaque cursor."""
    approvals_expire_due(tenant_id=viewer.tenant_id)
    qs = access.approvals_visible_to(viewer=viewer).select_related("run", "decided_by")
    if status:
        qs = qs.filter(status=status)
    if run_id:
        qs = qs.filter(run__external_id=run_id)
    after = parse_cursor(cursor)
    if after:
        qs = qs.filter(pk__gt=after)
    rows = list(qs.order_by("pk")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    from approvals.schemas import approval_resource

    return {
        "items": [approval_resource(a) for a in rows],
        "next_cursor": str(rows[-1].pk) if more else None,
    }
