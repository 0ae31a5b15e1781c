"""/rules/: lasting decision rules in the console (`manage_rules`), the rule editor with its
live preview, suggestions made into rules in one click, and the decision analytics. Views
translate the form into a rule's fields and call the same services as the API."""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from approvals import access as approvals_access
from approvals import selectors_rules as selectors
from approvals import selectors_stats
from approvals.rules import OPS
from approvals.services.bulk import MAX_BULK, approvals_decide_many
from approvals.services.rules import rule_create, rule_deactivate, rule_update
from console.audit.log import audit_refused
from console.core.errors import Forbidden, Invalid
from console.directory import access
from console.web.pages import viewer_view

LIST = "rules/list.html"
EDITOR = "rules/editor.html"
PATTERN_FIELDS = ("tool_pattern", "agent_pattern", "principal_pattern")
NO_VALUE_OPS = ("exists", "notExists")


# ---- the form <-> a rule's fields ----


def _value(raw: str):
    """A condition's value as typed: JSON when it parses ("5", "true", "[1, 2]", "\\"x\\""),
    else the text itself (so `@acme.com` needs no quotes)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to parse
        return raw


def _examples(raw: str, where: str, problems: list) -> list:
    """One JSON arguments value per line."""
    out = []
    for n, line in enumerate(text for text in raw.splitlines() if text.strip()):
        try:
            out.append(json.loads(line))
        except (ValueError, RecursionError):
            problems.append(f"{where} example {n + 1} is not JSON: {line[:60]}")
    return out


def _expiry(raw: str, tz: ZoneInfo, problems: list):
    if not raw.strip():
        return None
    try:
        moment = datetime.fromisoformat(raw.strip())
    except ValueError:
        problems.append("Expires: not a date and time")
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=tz)


def _conditions(post, problems: list) -> list[dict]:
    paths, ops, values = (post.getlist(f"cond_{n}") for n in ("path", "op", "value"))
    if not len(paths) == len(ops) == len(values):
        problems.append("Conditions: each row has a path, an op and a value")
        return []
    conditions = []
    for path, op, raw in zip(paths, ops, values, strict=True):
        if not path.strip() and not raw.strip():
            continue  # an empty row of the form
        condition = {"path": path.strip(), "op": op}
        if op not in NO_VALUE_OPS:
            condition["value"] = _value(raw)
        conditions.append(condition)
    return conditions


def form_fields(post, *, tenant) -> tuple[dict, list[str]]:
    """A rule's fields from the editor's form, and what is wrong with the form itself (the
    rule's own checks come from the services, as for the API)."""
    problems: list[str] = []
    tz = ZoneInfo(tenant.time_zone or "UTC")
    fields = {
        "name": post.get("name", "").strip(),
        "effect": post.get("effect", ""),
        "conversation_id": post.get("conversation_id", "").strip() or None,
        "run_id": post.get("run_id", "").strip() or None,
        "message": post.get("message", "").strip() or None,
        "expires_at": _expiry(post.get("expires_at", ""), tz, problems),
        # The editor of a saved rule has the checkbox (unchecked sends nothing); a new one not.
        "active": post.get("active") == "on" if "has_active" in post else True,
        "conditions": _conditions(post, problems),
        "examples": {
            "match": _examples(post.get("examples_match", ""), "Match", problems),
            "noMatch": _examples(post.get("examples_no_match", ""), "No-match", problems),
        },
    }
    for name in PATTERN_FIELDS:
        fields[name] = post.get(name, "").strip() or "*"
        if len(fields[name]) > 255:
            problems.append(f"{name.replace('_', ' ').capitalize()}: at most 255 characters")
    if not fields["name"] or len(fields["name"]) > 200:
        problems.append("Name: 1 to 200 characters")
    if fields["effect"] not in ("approve", "deny"):
        problems.append("Effect: approve or deny")
    return fields, problems


def _local(moment, tenant) -> str:
    if moment is None:
        return ""
    return timezone.localtime(moment, ZoneInfo(tenant.time_zone or "UTC")).strftime(
        "%Y-%m-%dT%H:%M"
    )


def form_of(fields: dict, *, tenant) -> dict:
    """What the editor's inputs show for these fields (condition values as JSON)."""
    rows = [
        {
            "path": c.get("path", ""),
            "op": c.get("op", "equals"),
            "value": "" if "value" not in c else json.dumps(c["value"], ensure_ascii=False),
        }
        for c in fields.get("conditions") or []
    ]
    rows += [{"path": "", "op": "equals", "value": ""} for _ in range(max(2, 4 - len(rows)))]
    examples = fields.get("examples") or {}
    return {
        **{k: fields.get(k) or "" for k in ("name", "conversation_id", "run_id", "message")},
        **{k: fields.get(k) or "*" for k in PATTERN_FIELDS},
        "effect": fields.get("effect") or "approve",
        "active": fields.get("active", True),
        "expires_at": _local(fields.get("expires_at"), tenant),
        "conditions": rows,
        "examples_match": "\n".join(json.dumps(e) for e in examples.get("match") or []),
        "examples_no_match": "\n".join(json.dumps(e) for e in examples.get("noMatch") or []),
    }


# ---- pages ----


def _card_source(request, post=None):
    """A rule made from a card (`?approval=` or the form's `from_approval`): the call and its
    per-argument choices as the form has them (`arg_<key>`), else None."""
    approval_id = (post or {}).get("from_approval") or request.GET.get("approval")
    if not approval_id:
        return None
    approval = selectors.card_rule_source(viewer=request.viewer, approval_id=approval_id)
    chosen = {k[len("arg_") :]: v for k, v in (post or {}).items() if k.startswith("arg_") and v}
    return selectors.card_rule_choices(approval=approval, chosen=chosen)


def _with_card(fields: dict, card) -> dict:
    if card is None:
        return fields
    return {**fields, "conditions": card["conditions"] + list(fields.get("conditions") or [])}


def _editor(request, *, rule=None, fields, problems=(), status=200, card=None):
    tenant = request.viewer.tenant
    context = {
        "card_rule": card,
        "rule": rule,
        "form": form_of(fields, tenant=tenant),
        "ops": OPS,
        "problems": list(problems),
        "nav_active": "rules",
        "time_zone": tenant.time_zone,
        **selectors.rule_preview_context(
            viewer=request.viewer, fields=_with_card(fields, card), rule=rule
        ),
    }
    return render(request, EDITOR, context, status=status)


def _save(request, *, rule=None):
    viewer = request.viewer
    fields, problems = form_fields(request.POST, tenant=viewer.tenant)
    card = _card_source(request, request.POST) if rule is None else None
    if not problems:
        try:
            if rule is None:
                rule = rule_create(
                    tenant=viewer.tenant, fields=_with_card(fields, card), principal=viewer
                )
            else:
                rule = rule_update(rule=rule, fields=fields, principal=viewer)
        except Invalid as exc:
            problems = [d["path"] + ": " + d["message"] for d in exc.details or []] or [exc.message]
        except Forbidden as exc:  # a tool pattern beyond what the viewer may decide
            audit_refused(actor=viewer, path=request.path, method="POST", reason=exc.message)
            return _editor(
                request, rule=rule, fields=fields, problems=[exc.message], status=403, card=card
            )
        else:
            decided = ""
            if request.POST.get("decide_waiting") == "on":
                decided = f"&decided={_decide_waiting(viewer, rule)}"
            return redirect(f"/rules/?saved={rule.public_id}{decided}")
    return _editor(request, rule=rule, fields=fields, problems=problems, status=422, card=card)


def _decide_waiting(viewer, rule) -> int:
    """Decide, as this viewer (each its own decision), the calls waiting now that the new rule
    matches and the viewer may decide; how many were decided."""
    waiting = selectors.waiting_preview(viewer=viewer, spec=rule.spec())
    decided = 0
    ids = waiting["ids"]
    for start in range(0, len(ids), MAX_BULK):
        results = approvals_decide_many(
            viewer=viewer,
            approval_ids=ids[start : start + MAX_BULK],
            decision=rule.effect,
            message=rule.message,
        )
        decided += sum(r["error"] is None for r in results)
    return decided


@require_GET
@viewer_view
def rules_index(request):
    context = selectors.rules_page_context(
        viewer=request.viewer,
        saved=request.GET.get("saved"),
        cursor=request.GET.get("cursor") or None,
    )
    decided = request.GET.get("decided", "")
    context["decided_waiting"] = int(decided) if decided.isdigit() else None
    return render(request, LIST, {**context, "nav_active": "rules"})


@require_http_methods(["GET", "POST"])
@viewer_view
def rule_new(request):
    """The editor for a new rule; `?approval=apr_...` prefills it from that call ("Always
    approve calls like this": its tool, its agent, one `equals` per top-level argument)."""
    access.require_capability(request.viewer, "manage_rules")
    if request.method == "POST":
        return _save(request)
    fields = {"effect": "approve"}
    card = _card_source(request)
    if card is not None:
        fields = selectors.rule_fields_from_approval(
            viewer=request.viewer, approval_id=card["source"].public_id
        )
    return _editor(request, fields=fields, card=card)


@require_http_methods(["GET", "POST"])
@viewer_view
def rule_edit(request, rule_id):
    rule = approvals_access.rule_for(viewer=request.viewer, rule_id=rule_id)
    if request.method == "POST":
        return _save(request, rule=rule)
    return _editor(request, rule=rule, fields=selectors.rule_fields_of(rule))


@require_POST
@viewer_view
def rule_deactivate_view(request, rule_id):
    rule = approvals_access.rule_for(viewer=request.viewer, rule_id=rule_id)
    rule_deactivate(rule=rule, principal=request.viewer)
    if request.htmx:
        context = selectors.rules_page_context(viewer=request.viewer)
        return render(request, f"{LIST}#rule-list", context)
    return redirect("/rules/")


@require_POST
@viewer_view
def rule_from_suggestion(request):
    """One click: the suggestion's rule body, as the suggestions API offers it, saved."""
    viewer = request.viewer
    body = selectors.suggestion_for(
        viewer=viewer,
        tool_name=request.POST.get("tool_name", ""),
        agent_id=request.POST.get("agent_id", ""),
    )
    rule = rule_create(tenant=viewer.tenant, fields=body, principal=viewer)
    return redirect(f"/rules/?saved={rule.public_id}")


@require_POST
@viewer_view
def rule_preview(request):
    """The editor's live preview (htmx): how many of the last 30 days' calls the rule as now
    typed would have decided."""
    access.require_capability(request.viewer, "manage_rules")
    fields, problems = form_fields(request.POST, tenant=request.viewer.tenant)
    rule_id = request.POST.get("rule_id")
    rule = approvals_access.rule_for(viewer=request.viewer, rule_id=rule_id) if rule_id else None
    card = _card_source(request, request.POST) if rule is None else None
    context = selectors.rule_preview_context(
        viewer=request.viewer, fields=_with_card(fields, card), rule=rule, problems=problems
    )
    return render(request, f"{EDITOR}#rule-preview", context)


@require_GET
@viewer_view
def decision_stats(request):
    days = request.GET.get("days", "30")
    context = selectors_stats.decision_stats_context(viewer=request.viewer, days=days)
    return render(request, "approvals/stats.html", {**context, "nav_active": "rules"})
