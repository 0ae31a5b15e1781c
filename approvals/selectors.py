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

from approvals import access as approvals_access
from approvals.models import Approval, ApprovalStatus
from approvals.rules import HUMAN_ONLY_TOOLS
from approvals.schemas import approval_resource, parse_cursor
from approvals.services.expiry import approvals_expire_due
from budgets.spend import run_costs
from console.core.errors import Forbidden
from console.directory import access
from runs.models import Agent, runs_verdicts

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
# Filters whose values grow with the pending calls (one per run, one per principal): typed,
# with the page's values as suggestions, rather than a select of every value.
TYPED_FILTERS = ("principal", "run")
CHOICES = 100  # values a select offers at most
INBOX_PAGE = 25  # the oldest pending calls the inbox shows at once (and the rest of their steps)
# What a card reads, joined: the run (its tenant is the approval's, set by `card_rows`), the
# run's principal and agent, an override's budget (who may decide it: access.py). Who decided
# is prefetched: joining those two as well made PostgreSQL plan the inbox's query for 20 ms
# (10 relations) to execute it in 0.7 ms; with these 6 it plans in about 2 ms.
CARD_RELATED = ("run", "run__principal", "run__agent", "budget_override__budget", "tenant")
CARD_PREFETCH = ("decided_by", "decided_by_rule")  # no query when none was decided


def card_rows(qs) -> list[Approval]:
    """The approvals of `qs` with what a card reads (CARD_RELATED, CARD_PREFETCH), each run's
    tenant being its approval's."""
    rows = list(qs.select_related(*CARD_RELATED).prefetch_related(*CARD_PREFETCH))
    for approval in rows:
        approval.run.tenant = approval.tenant
    return rows


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
        # "Always approve calls like this": a rule editor prefilled from this call, for those
        # who may make rules and decide this tool (a rule decides only what its author may).
        # Never on a call no rule can decide (an over-budget request): the rule could not fire.
        "can_make_rule": viewer is not None
        and approval.tool_name not in HUMAN_ONLY_TOOLS
        and access.can(viewer, "manage_rules")
        and access.can(viewer, "decide", approval.tool_name),
        "notice": notice,
        **_run_facts(approval.run, verdicts),
        "budgets": costs[approval.run_id]["budgets"],
    }


def _refusal(viewer, approval) -> str | None:
    return (
        approvals_access.decide_refusal(viewer, approval)
        if viewer is not None
        else "sign in to decide"
    )


def approval_card_context(*, approval, viewer, notice: str | None = None) -> dict:
    """The context of `approvals/card.html` (`{"card": ...}`) for this viewer: controls only
    for a viewer who may decide it. `notice` is shown on the card (e.g. a lost race)."""
    if approval.status == ApprovalStatus.PENDING and approval.expires_at <= timezone.now():
        approvals_expire_due(approval_ids=[approval.pk])
    [approval] = card_rows(Approval.objects.filter(pk=approval.pk))
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
    return approvals_access.decidable(viewer, approvals)


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


def inbox_pending(
    *, viewer, filters: dict | None = None, limit: int | None = None
) -> list[Approval]:
    """Pending calls for this viewer, oldest first: the ones it may decide (a viewer without
    the decide capability sees every pending call, read-only). A parent's mirror of a parked
    child's call is the same call and is listed once (as the child's). `limit`: the oldest
    that many only, read in growing batches (a decider's calls are chosen in Python), so a
    page never reads every pending call of a tenant."""
    approvals = approvals_access.approvals_visible_to(viewer=viewer)
    approvals_expire_due(tenant_id=viewer.tenant_id)
    qs = pending_calls(inbox_filtered(approvals, filters))
    qs = qs.order_by("requested_at", "position", "id")
    if limit is None:
        return inbox_shown(viewer=viewer, approvals=card_rows(qs))
    shown: list[Approval] = []
    start, batch = 0, max(limit, 1)
    while len(shown) < limit:
        rows = card_rows(qs[start : start + batch])
        shown += inbox_shown(viewer=viewer, approvals=rows)
        if len(rows) < batch:
            break
        start, batch = start + batch, batch * 4
    return shown[:limit]


def _grouped(*, viewer, rows: list[Approval]) -> list[dict]:
    """Cards grouped by run and step, each group in the order of its oldest call."""
    groups: dict[tuple, list] = {}
    for approval in rows:
        groups.setdefault((approval.run_id, approval.step), []).append(approval)
    costs = _costs(rows)
    verdicts = runs_verdicts({a.run_id for a in rows})
    return [
        group_context(approvals=items, viewer=viewer, costs=costs, verdicts=verdicts)["group"]
        for items in groups.values()
    ]


def inbox_for(*, viewer, filters: dict | None = None) -> list[dict]:
    """The inbox: groups of cards by run and step, each group in the order of its oldest call."""
    try:
        rows = inbox_pending(viewer=viewer, filters=filters)
    except Forbidden:
        return []
    return _grouped(viewer=viewer, rows=rows)


def inbox_page(*, viewer, filters: dict | None = None, size: int | None = None) -> dict:
    """The inbox page: the `size` oldest pending calls this viewer's inbox lists and the other
    pending calls of their runs' steps (a step is never split: its bulk form decides it
    whole), grouped as `inbox_for` groups them; `more`: whether more calls wait beyond them.
    Reads `size` (INBOX_PAGE) + 1 calls, not every pending call of the tenant."""
    size = size or INBOX_PAGE
    try:
        rows = inbox_pending(viewer=viewer, filters=filters, limit=size + 1)
    except Forbidden:
        return {"groups": [], "more": False, "size": size, "calls": []}
    more = len(rows) > size
    rows = rows[:size]
    if more:  # the rest of the shown steps' calls
        steps = {(a.run_id, a.step) for a in rows}
        qs = pending_calls(
            inbox_filtered(approvals_access.approvals_visible_to(viewer=viewer), filters)
        )
        qs = qs.filter(run_id__in={run for run, _step in steps}).exclude(
            pk__in=[a.pk for a in rows]
        )
        rest = [
            a
            for a in card_rows(qs.order_by("requested_at", "position", "id"))
            if (a.run_id, a.step) in steps
        ]
        rows += inbox_shown(viewer=viewer, approvals=rest)
    return {"groups": _grouped(viewer=viewer, rows=rows), "more": more, "size": size, "calls": rows}


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


def inbox_filter_choices(
    *, viewer, filters: dict | None = None, calls: list[Approval] | None = None
) -> list[dict]:
    """The filters (a selected value stays listed even when nothing matches it now), each
    read without going through every pending call: the distinct tools of the pending calls
    (for a viewer who decides, those it may decide), the tenant's agents, and, typed
    (`typed`: there may be thousands), the principals and runs of `calls` as suggestions
    (the calls the page shows; by default the inbox's first page)."""
    filters = filters or {}
    try:
        pending = pending_calls(approvals_access.approvals_visible_to(viewer=viewer)).order_by()
        if calls is None:
            calls = inbox_pending(viewer=viewer, limit=INBOX_PAGE)
    except Forbidden:
        pending, calls = Approval.objects.none(), []
    tools = sorted(set(pending.values_list("tool_name", flat=True).distinct()))
    if access.can(viewer, "decide"):
        principal = access.acting_principal(viewer)
        tools = [t for t in tools if approvals_access.tool_decidable(principal, t)]
    agents = Agent.objects.filter(tenant_id=viewer.tenant_id).order_by("external_id")
    found = {
        "tool": tools[:CHOICES],
        "agent": list(agents.values_list("external_id", flat=True)[:CHOICES]),
        "principal": [a.run.principal.external_id for a in calls if a.run.principal_id],
        "run": [a.run.external_id for a in calls],
    }
    return [
        {
            "name": name,
            "values": sorted((set(values) | {filters.get(name) or ""}) - {""}),
            "selected": filters.get(name) or "",
            "typed": name in TYPED_FILTERS,
        }
        for name, values in found.items()
    ]


def step_pending_for(*, viewer, run, step) -> list[Approval]:
    """The step's pending calls this viewer may decide (for a bulk decision)."""
    qs = pending_calls(approvals_access.approvals_visible_to(viewer=viewer)).filter(
        run=run, step=step
    )
    rows = card_rows(qs.order_by("position", "id"))
    return approvals_access.decidable(viewer, rows)


def approvals_reloaded(*, approvals) -> list[Approval]:
    """The same approvals as they now are, with what a card needs."""
    return card_rows(Approval.objects.filter(pk__in=[a.pk for a in approvals]))


# ---- For runtimes and bots (the API) --------------------------------------------------------


def approvals_list(*, viewer, status=None, run_id=None, limit=50, cursor=None) -> dict:
    """Approvals of the viewer's tenant, oldest first, keyset-paginated by an opaque cursor."""
    approvals_expire_due(tenant_id=viewer.tenant_id)
    qs = approvals_access.approvals_visible_to(viewer=viewer).select_related(
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


def known_tools(*, viewer) -> list[str]:
    """The distinct tool names of the tenant's approvals, sorted (the role form's preview of
    its globs: registered as the directory's source of tool names in approvals/apps.py)."""
    access.require_capability(viewer, "admin")
    names = (
        Approval.objects.filter(tenant_id=viewer.tenant_id)
        .order_by("tool_name")
        .values_list("tool_name", flat=True)
        .distinct()
    )
    return list(names)


# --- teams ---
