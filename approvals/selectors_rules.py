"""Reads about lasting rules: the list, suggestions from the decisions people made, `explain`
(which rule would decide a call, and why each other one does not) and previews against the
calls of the last days. Every function reaches the tenant through console/access.py."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

from django.db.models import Count, F, Max, Q
from django.utils import timezone

from approvals import access as approvals_access
from approvals.models import Approval, ApprovalStatus
from approvals.rules import (
    HUMAN_ONLY_TOOLS,
    Call,
    CompiledRule,
    RuleSet,
    RuleSpec,
    glob_escape,
)
from approvals.rules.generalise import argument_choices, conditions_from_choices
from approvals.schemas_rules import rule_resource, rule_spec_unsaved
from approvals.selectors_desk import decidable_pending
from console.core import paging
from console.core.errors import Invalid, NotFound
from console.directory import access
from console.models import Principal
from runs import access as runs_access

SUGGEST_DAYS = 30
SUGGEST_MIN_DECISIONS = 10
PREVIEW_SCAN = 10_000  # the newest calls of the period a preview reads, at most
PREVIEW_SHOWN = 20


# ---- the list ----


def rules_page(*, viewer, limit: int = 50, cursor: str | None = None) -> tuple[list, str | None]:
    """The tenant's rules, newest first (inactive ones too), keyset-paginated."""
    return paging.newest_first(
        approvals_access.rules_of(viewer=viewer), kind="rule", limit=limit, cursor=cursor,
        message="the cursor is not one this server issued", detail="invalid cursor",
    )  # fmt: skip


def rules_list(*, viewer, limit: int = 50, cursor: str | None = None) -> dict:
    rows, next_cursor = rules_page(viewer=viewer, limit=limit, cursor=cursor)
    return {"items": [rule_resource(r) for r in rows], "next_cursor": next_cursor}


# ---- suggestions ----


def suggestion_body(*, tool_name: str, agent_id: str, effect: str) -> dict:
    """A rule body ready to POST: every call of this tool by this agent, decided one way."""
    verb = "approve" if effect == "approve" else "deny"
    return {
        "name": f"Always {verb} {tool_name} from {agent_id}"[:200],
        "effect": effect,
        "toolPattern": glob_escape(tool_name),
        "agentPattern": glob_escape(agent_id),
        "principalPattern": "*",
        "conditions": [],
    }


def rule_suggestions(*, viewer, now=None) -> list[dict]:
    """Each tool and agent that people decided at least 10 times in the last 30 days, always
    the same way, and that no active rule covers; most decided first. The history is one
    aggregate query (GROUP BY tool and agent, on the decided-at index); the rules one more."""
    rules = approvals_access.rules_of(viewer=viewer)
    now = now or timezone.now()
    approved, denied = ApprovalStatus.APPROVED, ApprovalStatus.DENIED
    groups = (
        Approval.objects.filter(
            tenant_id=viewer.tenant_id,
            decided_at__gte=now - timedelta(days=SUGGEST_DAYS),
            decided_by__isnull=False,  # people (a rule's decisions and expiries are not)
            status__in=[approved, denied],
            mirror_of__isnull=True,
        )
        .exclude(tool_name__in=HUMAN_ONLY_TOOLS)
        .values("tool_name", agent=F("run__current_agent_id"))
        .annotate(
            approved=Count("pk", filter=Q(status=approved)),
            denied=Count("pk", filter=Q(status=denied)),
            total=Count("pk"),
            last=Max("decided_at"),
        )
        .filter(Q(approved=0) | Q(denied=0), total__gte=SUGGEST_MIN_DECISIONS)
        .order_by("-total", "tool_name", "agent")
    )
    compiled = [CompiledRule(r.spec()) for r in rules.filter(active=True)]
    out = []
    for g in groups:
        if any(r.covers(g["tool_name"], g["agent"], now=now) for r in compiled):
            continue
        effect = "approve" if g["approved"] else "deny"
        out.append(
            {
                "tool_name": g["tool_name"],
                "agent_id": g["agent"],
                "approved": g["approved"],
                "denied": g["denied"],
                "last_decided_at": g["last"],
                "rule": suggestion_body(
                    tool_name=g["tool_name"], agent_id=g["agent"], effect=effect
                ),
            }
        )
    return out


# ---- explain ----


def _principal_key(tenant_id: int, principal_id: str | None):
    if principal_id is None:
        return None
    return (
        Principal.objects.filter(tenant_id=tenant_id, external_id=principal_id)
        .values_list("pk", flat=True)
        .first()
    )


def explain_call(*, viewer, tool_name, arguments=None, agent_id=None, principal_id=None,
                 run_id=None, conversation_id=None) -> Call:  # fmt: skip
    """The call to explain. With `run_id` (NotFound outside the tenant) its agent, principal
    and conversation come from the run, unless given."""
    tenant_id = viewer.tenant_id
    if run_id is not None:
        run = runs_access.run_in_tenant(tenant_id=tenant_id, run_id=run_id)
        if agent_id is None:
            agent_id = run.current_agent_id
        if principal_id is None and run.principal_id:
            principal_id = run.principal.external_id
        if conversation_id is None and run.conversation_id:
            conversation_id = run.conversation.external_id
    return Call(
        tool_name=tool_name,
        arguments=arguments,
        agent_id=agent_id or "",
        principal_id=principal_id,
        principal_key=_principal_key(tenant_id, principal_id),
        run_id=run_id,
        conversation_id=conversation_id,
    )


def rule_explain(*, viewer, call: Call, now=None) -> dict:
    """Which active rule would decide this call (it decides nothing), and for every active
    rule whose tool glob matches: matched, and why it does not decide."""
    rules = (
        approvals_access.rules_of(viewer=viewer).filter(active=True).order_by("created_at", "id")
    )
    tenant = viewer.tenant
    ruleset = RuleSet([r.spec() for r in rules], allow_self_approval=tenant.allow_self_approval)
    authority = approvals_access.RuleAuthority(ruleset)
    outcome = ruleset.explain(call, now=now or timezone.now(), authority=authority)
    return {
        "decision": outcome.decision,
        "rule_id": outcome.rule_id,
        "rules": [
            {
                "id": e.rule.id,
                "name": e.rule.spec.source.name,
                "effect": e.rule.effect,
                "matched": e.matched,
                "failed": e.failed,
            }
            for e in outcome.rules
        ],
    }


# ---- previews ----


def _history(*, tenant_id: int, spec: RuleSpec, since):
    """The period's calls (newest first, at most PREVIEW_SCAN), with what a rule reads of
    their runs: one query. A tool glob without wildcards narrows it to that tool."""
    qs = Approval.objects.filter(
        tenant_id=tenant_id, requested_at__gte=since, mirror_of__isnull=True
    ).exclude(tool_name__in=HUMAN_ONLY_TOOLS)
    if not any(ch in spec.tool_pattern for ch in "*?["):
        qs = qs.filter(tool_name=spec.tool_pattern)
    return qs.order_by("-requested_at", "-pk").values(
        "public_id",
        "tool_name",
        "arguments",
        "status",
        "requested_at",
        run_wire_id=F("run__external_id"),
        agent=F("run__current_agent_id"),
        principal_key=F("run__principal_id"),
        principal_wire_id=F("run__principal__external_id"),
        conversation_wire_id=F("run__conversation__external_id"),
    )[:PREVIEW_SCAN]


def rule_preview(*, viewer, spec: RuleSpec, days: int = 30, now=None) -> dict:
    """How many of the last `days` days' calls this rule would have decided (as if active and
    unexpired; calls of its creator's own runs not, unless self-approval is allowed), with
    the newest PREVIEW_SHOWN of them. Matching runs in Python over one bounded query."""
    access.require_capability(viewer, "manage_rules")
    now = now or timezone.now()
    since = now - timedelta(days=days)
    rule = CompiledRule(replace(spec, active=True, expires_at=None))
    allow = viewer.tenant.allow_self_approval
    rows = list(_history(tenant_id=viewer.tenant_id, spec=spec, since=since))
    matched = []
    for row in rows:
        call = Call(
            tool_name=row["tool_name"],
            arguments=row["arguments"],
            agent_id=row["agent"],
            principal_id=row["principal_wire_id"],
            principal_key=row["principal_key"],
            run_id=row["run_wire_id"],
            conversation_id=row["conversation_wire_id"],
        )
        if rule.failure(call, now=now, allow_self_approval=allow) is None:
            matched.append(row)
    return {
        "days": days,
        "since": since,
        "decision": spec.effect,
        "count": len(matched),
        "scanned": len(rows),
        "truncated": len(rows) >= PREVIEW_SCAN,
        "calls": [
            {
                "approval_id": r["public_id"],
                "run_id": r["run_wire_id"],
                "tool_name": r["tool_name"],
                "agent_id": r["agent"],
                "principal_id": r["principal_wire_id"],
                "arguments": r["arguments"],
                "status": r["status"],
                "requested_at": r["requested_at"],
            }
            for r in matched[:PREVIEW_SHOWN]
        ],
    }


# ---- the console's pages ----


def rules_page_context(*, viewer, saved: str | None = None, cursor: str | None = None) -> dict:
    """`/rules/`: the rules (200 a page, newest first) with hits, last hit, creator and expiry;
    the suggestions with their counts."""
    rows, next_cursor = rules_page(viewer=viewer, limit=200, cursor=cursor)
    now = timezone.now()
    return {
        "rules": [
            {
                "rule": r,
                "expired": r.expires_at is not None and r.expires_at <= now,
                "conditions": len(r.conditions or []),
            }
            for r in rows
        ],
        "next_cursor": next_cursor,
        "suggestions": rule_suggestions(viewer=viewer, now=now),
        "saved": next((r for r in rows if r.public_id == saved), None) if saved else None,
    }


def _snake(body: dict) -> dict:
    names = {"toolPattern": "tool_pattern", "agentPattern": "agent_pattern"}
    names["principalPattern"] = "principal_pattern"
    return {names.get(k, k): v for k, v in body.items()}


def suggestion_for(*, viewer, tool_name: str, agent_id: str) -> dict:
    """The rule fields of the suggestion for this tool and agent (NotFound once no longer
    suggested: decided otherwise since, or covered by a rule)."""
    for item in rule_suggestions(viewer=viewer):
        if item["tool_name"] == tool_name and item["agent_id"] == agent_id:
            return _snake(item["rule"])
    raise NotFound(f"no suggestion for {tool_name} from {agent_id} now", code="not_found")


def card_rule_source(*, viewer, approval_id: str):
    """The call a rule is made from ("Always approve calls like this"): NotFound outside the
    tenant; Invalid for a call no rule can ever decide (an over-budget request)."""
    access.require_capability(viewer, "manage_rules")
    approval = approvals_access.approval_for(viewer=viewer, approval_id=approval_id)
    if approval.tool_name in HUMAN_ONLY_TOOLS:
        raise Invalid(
            f"rules never decide '{approval.tool_name}' calls: a person always does",
            code="validation_error",
            details=[{"path": "approval", "message": "no rule can decide this call"}],
        )
    return approval


def rule_fields_from_approval(*, viewer, approval_id: str) -> dict:
    """ "Always approve calls like this": a rule for this call's tool and agent, with each
    top-level argument's default choice (a suggested condition, the exact value, or any:
    approvals.rules.generalise), all editable before saving."""
    approval = card_rule_source(viewer=viewer, approval_id=approval_id)
    agent = approval.run.current_agent_id
    return {
        "name": f"Always approve {approval.tool_name} from {agent}"[:200],
        "effect": "approve",
        "tool_pattern": glob_escape(approval.tool_name),
        "agent_pattern": glob_escape(agent),
        "principal_pattern": "*",
        "conditions": [],
    }


def card_rule_choices(*, approval, chosen: dict) -> dict:
    """The editor's per-argument choices for a rule made from this call, and the conditions
    they make (`chosen`: argument → exact | any | suggested; else each one's default)."""
    items = argument_choices(approval.arguments)
    for item in items:
        item["chosen"] = chosen.get(item["key"]) or item["default"]
        item["exact"] = json.dumps(item["value"], ensure_ascii=False)[:120]
    return {
        "source": approval,
        "choices": items,
        "conditions": conditions_from_choices(approval.arguments, chosen),
    }


def waiting_preview(*, viewer, spec: RuleSpec, now=None) -> dict:
    """The calls waiting now that this rule would decide and that this viewer may decide (the
    desk's `decidable_pending`): the ones "decide the waiting ones with it" decides. Reads the
    oldest PREVIEW_SCAN of them at most and matches in Python."""
    now = now or timezone.now()
    rule = CompiledRule(replace(spec, active=True, expires_at=None))
    allow = viewer.tenant.allow_self_approval
    qs = decidable_pending(viewer=viewer).exclude(tool_name__in=HUMAN_ONLY_TOOLS)
    if not any(ch in spec.tool_pattern for ch in "*?["):
        qs = qs.filter(tool_name=spec.tool_pattern)
    rows = list(
        qs.order_by("requested_at", "id").values(
            "public_id",
            "tool_name",
            "arguments",
            "requested_at",
            run_wire_id=F("run__external_id"),
            agent=F("run__current_agent_id"),
            principal_key=F("run__principal_id"),
            principal_wire_id=F("run__principal__external_id"),
            conversation_wire_id=F("run__conversation__external_id"),
        )[:PREVIEW_SCAN]
    )
    matched = [
        r
        for r in rows
        if rule.failure(
            Call(
                tool_name=r["tool_name"],
                arguments=r["arguments"],
                agent_id=r["agent"],
                principal_id=r["principal_wire_id"],
                principal_key=r["principal_key"],
                run_id=r["run_wire_id"],
                conversation_id=r["conversation_wire_id"],
            ),
            now=now,
            allow_self_approval=allow,
        )
        is None
    ]
    return {
        "count": len(matched),
        "ids": [r["public_id"] for r in matched],
        "calls": [
            {
                "approval_id": r["public_id"],
                "run_id": r["run_wire_id"],
                "tool_name": r["tool_name"],
                "agent_id": r["agent"],
                "requested_at": r["requested_at"],
            }
            for r in matched[:PREVIEW_SHOWN]
        ],
        "truncated": len(rows) >= PREVIEW_SCAN,
    }


def rule_fields_of(rule) -> dict:
    """A saved rule's fields, as the editor starts from them."""
    return {
        "name": rule.name,
        "effect": rule.effect,
        "tool_pattern": rule.tool_pattern,
        "agent_pattern": rule.agent_pattern,
        "principal_pattern": rule.principal_pattern,
        "conversation_id": rule.conversation_external_id,
        "run_id": rule.run_external_id,
        "conditions": rule.conditions,
        "message": rule.message,
        "expires_at": rule.expires_at,
        "active": rule.active,
        "examples": rule.examples,
    }


def rule_preview_context(*, viewer, fields: dict, rule=None, problems=(), days: int = 30) -> dict:
    """`rules/editor.html#rule-preview`: how many of the last `days` days' calls the rule as
    typed would have decided, with the newest of them; or why it cannot be saved as typed."""
    base = {
        "preview": None,
        "waiting": None,
        "preview_problems": list(problems),
        "preview_days": days,
    }
    if problems:
        return base
    creator = rule.created_by if rule is not None else viewer
    try:
        spec = rule_spec_unsaved(fields=fields, creator=creator)
    except Invalid as exc:
        details = exc.details or []
        return {**base, "preview_problems": [f"{d['path']}: {d['message']}" for d in details]}
    return {
        **base,
        "preview": rule_preview(viewer=viewer, spec=spec, days=days),
        "waiting": waiting_preview(viewer=viewer, spec=spec),
    }
