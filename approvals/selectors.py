"""Reads for reviewers: the context of one approval card, and the API's list.

`approval_card_context` is the ONE function behind `approvals/card.html`: the desk's pane, the
card page, the run page (`cards_context`), the htmx re-render after a decision and the WebSocket
push all render the card from it, so every path produces the same HTML. The desk's list is
`selectors_desk`'s. Reading never reports a call past its expiry as pending: the API's list
expires lazily first.
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
from console.directory import access
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
# What a card reads, joined: the run (its tenant is the approval's, set by `card_rows`), the
# run's principal and agent, an override's budget (who may decide it: access.py). Who decided
# is prefetched: joining those two as well made PostgreSQL plan the inbox's query for 20 ms
# (10 relations) to execute it in 0.7 ms; with these 6 it plans in about 2 ms.
CARD_RELATED = ("run", "run__principal", "run__agent", "budget_override__budget", "tenant")
CARD_PREFETCH = ("decided_by", "decided_by_rule")  # no query when none was decided
# What no card or row shows of its run, and may be large (the latest snapshot, the admission
# body, the run's input and result): never read nor parsed for a card.
CARD_DEFERRED = (
    "run__snapshot",
    "run__admission",
    "run__input",
    "run__result",
    "run__error",
    "run__usage_denied",
    "run__usage_by_model",
)


def card_rows(qs, *, tenant=None) -> list[Approval]:
    """The approvals of `qs` with what a card reads (CARD_RELATED, CARD_PREFETCH), each run's
    tenant being its approval's. `tenant`: the one tenant `qs` is filtered to, when the caller
    holds it (the viewer's): it is not joined into every row (a quarter of the desk's page
    read was building the same tenant 51 times)."""
    related = [r for r in CARD_RELATED if r != "tenant"] if tenant is not None else CARD_RELATED
    rows = list(qs.select_related(*related).prefetch_related(*CARD_PREFETCH).defer(*CARD_DEFERRED))
    for approval in rows:
        if tenant is not None:
            if approval.tenant_id != tenant.pk:  # a caller's bug, never another tenant's data
                raise ValueError("card_rows: a call of another tenant")
            approval.tenant = tenant
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


def card_context_read(*, approval, viewer, costs: dict, verdicts: dict) -> dict:
    """`approval_card_context` of a call just read by `card_rows` (the desk's first row),
    with its run's costs and verdicts as the page read them: no query of its own but the
    refusal's."""
    refusal = _refusal(viewer, approval)
    return {
        "card": _card(
            approval, viewer, refusal=refusal, notice=None, costs=costs, verdicts=verdicts
        )
    }


def pending_calls(approvals):
    """The pending calls among these, as reviewers count them: a parent's mirror of a parked
    child's call is the same call and is listed once (as the child's)."""
    return approvals.filter(status=ApprovalStatus.PENDING, mirror_of__isnull=True)


def cards_context(*, approvals, viewer) -> list[dict]:
    """The cards of these calls (`approvals/card.html` each), in request order, with the costs
    and verdicts of their runs read once for all of them (the run page's held calls)."""
    costs = _costs(approvals)
    verdicts = runs_verdicts({a.run_id for a in approvals})
    return [
        _card(a, viewer, refusal=_refusal(viewer, a), notice=None, costs=costs, verdicts=verdicts)
        for a in sorted(approvals, key=lambda a: (a.position, a.pk))
    ]


def approvals_of(*, tenant_id: int, public_ids) -> list[Approval]:
    """These calls of this tenant as they now are, with what a
    card needs."""
    return card_rows(Approval.objects.filter(tenant_id=tenant_id, public_id__in=list(public_ids)))


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
