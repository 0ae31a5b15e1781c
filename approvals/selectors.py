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
from approvals.schemas import approval_resource, parse_cursor
from approvals.services.expiry import approvals_expire_due
from budgets.spend import run_costs
from console import access
from console.errors import Forbidden
from runs.models import runs_verdicts

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
CARD_RELATED = (
    "run",
    "run__tenant",
    "run__principal",
    "run__agent",
    "decided_by",
    "decided_by_rule",
    "tenant",
    "budget_override__budget",  # who may decide an over-budget override (access.py)
)


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


def _run_facts(run, verdicts: dict) -> dict:
    """What a card shows of its run; `verdicts`: runs.models.runs_verdicts by run pk."""
    limits = run.limits or {}
    ceiling = limits.get("costCeilingMinorUnits", limits.get("cost_ceiling_minor_units"))
    verdicts = [
        {"turn": turn, **v}
        for turn, v in sorted(verdicts.get(run.pk, {}).items())
        if v["verdict"] in ("flagged", "blocked")
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


def _costs(approvals) -> dict:
    """Each approval's run's cost and budgets, by run pk (a few queries for any number)."""
    return run_costs(runs=[a.run for a in approvals])


def _card(approval, viewer, *, refusal, notice, costs=None, verdicts=None) -> dict:
    if costs is None:
        costs = _costs([approval])
    if verdicts is None:
        verdicts = runs_verdicts([approval.run_id])
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
        "decided_by_rule": approval.decided_by_rule,
        # "Always approve calls like this": a rule editor prefilled from this call.
        "can_make_rule": viewer is not None and access.can(viewer, "manage_rules"),
        "notice": notice,
        **_run_facts(approval.run, verdicts),
        "budgets": costs[approval.run_id]["budgets"],
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


def pending_calls(approvals):
    """The pending calls among these, as reviewers count them: a parent's mirror of a parked
    child's call is the same call and is listed once (as the child's)."""
    return approvals.filter(status=ApprovalStatus.PENDING, mirror_of__isnull=True)


def inbox_shown(*, viewer, approvals: list[Approval]) -> list[Approval]:
    """Which of these pending calls the viewer's inbox lists: the ones it may decide (a viewer
    without the decide capability sees every pending call, read-only)."""
    if not access.can(viewer, "decide"):
        return approvals
    return access.decidable(viewer, approvals)


def inbox_filtered(qs, filters: dict):
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


def nav_pending_count_context(*, viewer) -> dict:
    """`base.html#nav-pending-count`: the calls pending a human in the viewer's tenant
    (counted as the inbox counts them)."""
    try:
        approvals = access.approvals_visible_to(viewer=viewer)
    except Forbidden:
        return {"nav_pending_count": 0}
    return {"nav_pending_count": pending_calls(approvals).count()}


def inbox_pending(*, viewer, filters: dict | None = None) -> list[Approval]:
    """Pending calls for this viewer, oldest first: the ones it may decide (a viewer without
    the decide capability sees every pending call, read-only). A parent's mirror of a parked
    child's call is the same call and is listed once (as the child's)."""
    approvals = access.approvals_visible_to(viewer=viewer)
    approvals_expire_due(tenant_id=viewer.tenant_id)
    qs = pending_calls(inbox_filtered(approvals, filters))
    rows = list(qs.select_related(*CARD_RELATED).order_by("requested_at", "position", "id"))
    return inbox_shown(viewer=viewer, approvals=rows)


def inbox_for(*, viewer, filters: dict | None = None) -> list[dict]:
    """The inbox: groups of cards by run and step, each group in the order of its oldest call."""
    try:
        rows = inbox_pending(viewer=viewer, filters=filters)
    except Forbidden:
        return []
    groups: dict[tuple, list] = {}
    for approval in rows:
        groups.setdefault((approval.run_id, approval.step), []).append(approval)
    costs = _costs(rows)
    verdicts = runs_verdicts({a.run_id for a in rows})
    return [
        group_context(approvals=items, viewer=viewer, costs=costs, verdicts=verdicts)["group"]
        for items in groups.values()
    ]


def group_context(
    *, approvals, viewer, costs: dict | None = None, verdicts: dict | None = None
) -> dict:
    """The context of `approvals/group.html`: one run's step, its cards and the bulk form.
    `costs`: budgets.spend.run_costs by run pk, and `verdicts`: runs.models.runs_verdicts by
    run pk, when the caller renders many groups."""
    first = approvals[0]
    costs = costs if costs is not None else _costs(approvals)
    if verdicts is None:
        verdicts = runs_verdicts({a.run_id for a in approvals})
    cards = [
        _card(a, viewer, refusal=_refusal(viewer, a), notice=None, costs=costs, verdicts=verdicts)
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
    qs = pending_calls(access.approvals_visible_to(viewer=viewer)).filter(run=run, step=step)
    rows = list(qs.select_related(*CARD_RELATED).order_by("position", "id"))
    return access.decidable(viewer, rows)


def approvals_reloaded(*, approvals) -> list[Approval]:
    """The same approvals as they now are, with what a card needs."""
    return list(
        Approval.objects.select_related(*CARD_RELATED).filter(pk__in=[a.pk for a in approvals])
    )


# ---- For runtimes and bots (the API) --------------------------------------------------------


def approvals_list(*, viewer, status=None, run_id=None, limit=50, cursor=None) -> dict:
    """Approvals of the viewer's tenant, oldest first, keyset-paginated by an opaque cursor."""
    approvals_expire_due(tenant_id=viewer.tenant_id)
    qs = access.approvals_visible_to(viewer=viewer).select_related(
        "run", "decided_by", "decided_by_rule"
    )
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
    costs = run_costs(runs=[a.run for a in rows])
    return {
        "items": [approval_resource(a, costs=costs) for a in rows],
        "next_cursor": str(rows[-1].pk) if more else None,
    }
