"""One run's page (/runs/<runId>/): header, usage, steps with their messages and tool results,
todos, verdicts and held calls, each a partial with one context function."""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import timedelta

from django.utils import timezone

from approvals import access as approvals_access
from approvals.models import ApprovalStatus
from approvals.selectors import card_rows, cards_context
from approvals.services.expiry import approvals_expire_due
from console.core.errors import NotFound
from runs import access as runs_access
from runs.models import (
    Handoff,
    Message,
    Step,
    ToolResult,
    Verdict,
    run_trace_ids,
    run_verdicts,
)

LONG_TEXT = 1200  # characters before a text is collapsed into <details>
LONG_JSON_LINES = 30
INLINE_IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif"}
BASE64_RE = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")


# --- the run page ---


def run_page_run(*, viewer, run_id: str):
    """The run a page shows, with its agent, principal and conversation (one query)."""
    qs = runs_access.runs_visible_to(viewer=viewer).select_related(
        "tenant", "agent", "principal", "conversation"
    )
    run = qs.filter(external_id=run_id).first()
    if run is None:
        raise NotFound(f"no run '{run_id}'", code="run_not_found")
    return run


def run_header_context(*, viewer, run) -> dict:
    """`runs/detail.html#run-header`: who, what, when, how it ended; parent and sub-runs."""
    sub_runs = list(
        runs_access.runs_visible_to(viewer=viewer)
        .filter(parent_run_id=run.external_id)
        .order_by("started_at", "id")
        .values("external_id", "status", "current_agent_id")[:100]
    )
    return {
        "run": run,
        "roles": run.role_ids or [],
        "trace_ids": run_trace_ids(run),
        "sub_runs": sub_runs,
        "input": _content_view(run.input) if run.input is not None else None,
        "result": _content_view(run.result) if run.result is not None else None,
    }


def run_usage_context(*, viewer, run) -> dict:
    """`runs/detail.html#run-usage`: limits as bars, usage in total and per model."""
    limits = run.limits or {}
    elapsed_ms = ((run.finished_at or timezone.now()) - run.started_at) // timedelta(milliseconds=1)
    bars = [
        _bar("Cost", run.cost_minor_units, limits.get("costCeilingMinorUnits"), "money"),
        _bar("Steps", run.steps, limits.get("maxSteps"), "count"),
        _bar("Time", max(0, elapsed_ms), limits.get("wallClockTimeoutMs"), "ms"),
    ]
    by_model = sorted((run.usage_by_model or {}).items())
    return {
        "run": run,
        "bars": bars,
        "usage": run.usage,
        "by_model": [{"model": model or "(unnamed)", **usage} for model, usage in by_model],
        "currency": run.tenant.currency,
    }


def _bar(label: str, value: int, limit: int | None, unit: str) -> dict:
    return {
        "label": label,
        "value": value,
        "limit": limit,
        "unit": unit,
        "max": max(limit or 0, value, 1),
        "over": limit is not None and value > limit,
    }


def run_steps_context(*, viewer, run) -> dict:
    """`runs/detail.html#steps`: every step with its messages, tool calls and handoffs."""
    return {"run": run, "steps": _steps(run, number=None)}


def run_step_context(*, viewer, run, number: int) -> dict:
    """`runs/detail.html#run-step`: one step (`step-<n>`), e.g. to append it live."""
    steps = _steps(run, number=number)
    if not steps:
        raise NotFound(f"run '{run.external_id}' has no step {number}", code="step_not_found")
    return {"run": run, "step": steps[0]}


def _steps(run, *, number: int | None) -> list[dict]:
    """Steps with what happened in them (4 queries). Step 0 holds what came before step 1."""
    only = {} if number is None else {"step": number} if number else {"step__isnull": True}
    steps = Step.objects.filter(run=run, **({} if number is None else {"number": number}))
    messages = Message.objects.filter(run=run, **only).order_by("position")
    results = ToolResult.objects.filter(run=run, **only).order_by("id")
    handoffs = Handoff.objects.filter(run=run, **only).order_by("position", "id")
    by_call = {r.tool_call_id: r for r in results}
    views: dict[int, dict] = {s.number: _step_view(s) for s in steps}
    for message in messages:
        item = {"kind": "message", "at": message.created_at, **_message_view(message, by_call)}
        _step_of(views, message.step)["items"].append(item)
    for handoff in handoffs:
        item = {"kind": "handoff", "at": handoff.created_at, "handoff": handoff}
        _step_of(views, handoff.step)["items"].append(item)
    for view in views.values():  # handoffs drawn where they happen, between the messages
        view["items"].sort(key=lambda item: item["at"])
    return [views[k] for k in sorted(views)]


def _step_view(step) -> dict:
    return {"number": step.number, "row": step, "items": []}


def _step_of(views: dict, number: int | None) -> dict:
    number = number or 0
    if number not in views:
        views[number] = {"number": number, "row": None, "items": []}
    return views[number]


def _message_view(message, results_by_call: dict) -> dict:
    calls = []
    for call in message.tool_calls or []:
        if not isinstance(call, dict):
            continue
        result = results_by_call.get(call.get("id"))
        calls.append(
            {
                "id": call.get("id"),
                "name": call.get("name"),
                "arguments": _json_view(call.get("arguments")),
                "result": _json_view(result.result) if result else None,
                "is_error": bool(result and result.is_error),
                "has_result": result is not None,
            }
        )
    return {
        "message": message,
        "role": message.role,
        "parts": _content_view(message.content),
        "tool_calls": calls,
        "tool_call_id": message.tool_call_id,
    }


def _content_view(content) -> list[dict]:
    """Message content as parts the template knows how to show."""
    if isinstance(content, str):
        return [_text_view(content)]
    if isinstance(content, list) and all(isinstance(p, dict) and "type" in p for p in content):
        return [_part_view(part) for part in content]
    return [{"kind": "json", **_json_view(content)}]


def _text_view(text: str) -> dict:
    return {"kind": "text", "text": text, "long": len(text) > LONG_TEXT, "size": len(text)}


def _json_view(value) -> dict:
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return {"json": text, "long": text.count("\n") > LONG_JSON_LINES, "size": len(text)}


def _part_view(part: dict) -> dict:
    kind = part.get("type")
    if kind == "text":
        return _text_view(str(part.get("text", "")))
    if kind == "json":
        return {"kind": "json", **_json_view(part.get("value"))}
    if kind in ("image", "file"):
        return _media_view(kind, part)
    return {"kind": "json", **_json_view(part)}


def _media_view(kind: str, part: dict) -> dict:
    media_type = str(part.get("mediaType") or "application/octet-stream")
    data = part.get("data") or {}
    view = {"kind": kind, "media_type": media_type, "src": None, "href": None, "size": None}
    if isinstance(data.get("$url"), str):
        url = data["$url"]
        # Shown as a link, never auto-loaded (privacy); only web URLs are links at all.
        view["href"] = url if url.lower().startswith(("https://", "http://")) else None
        view["url_text"] = url
        return view
    encoded = data.get("$bytes")
    if isinstance(encoded, str) and BASE64_RE.match(encoded):
        view["size"] = _decoded_size(encoded)
        if kind == "image" and media_type.lower() in INLINE_IMAGE_TYPES:
            view["src"] = f"data:{media_type.lower()};base64,{encoded}"
    return view


def _decoded_size(encoded: str) -> int | None:
    try:
        return len(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        return None


def run_todos_context(*, viewer, run) -> dict:
    """`runs/detail.html#run-todos`: the run's todo list with status."""
    todos = [t for t in (run.todos or []) if isinstance(t, dict)]
    done = sum(1 for t in todos if t.get("status") == "done")
    return {"run": run, "todos": todos, "todos_done": done}


def _turn_key(turn: str) -> tuple:
    head, _, tail = str(turn).partition(":")
    return (int(head) if head.isdigit() else 10**9, int(tail) if tail.isdigit() else 0, turn)


def run_verdicts_context(*, viewer, run) -> dict:
    """`runs/detail.html#run-verdicts`: the widest verdict per turn, its history, taint flags."""
    history: dict[str, list] = {}
    for row in Verdict.objects.filter(run=run).order_by("id"):
        history.setdefault(row.turn, []).append(row)
    verdicts = [
        {"turn": turn, **v, "history": history.get(turn, [])}
        for turn, v in sorted(run_verdicts(run).items(), key=lambda kv: _turn_key(kv[0]))
    ]
    taint = run.taint_summary if isinstance(run.taint_summary, dict) else {}
    return {
        "run": run,
        "verdicts": verdicts,
        "blocked_count": sum(1 for v in verdicts if v.get("verdict") == "blocked"),
        "taint": sorted(taint.items()),
        "taint_raw": run.taint_summary,
    }


def run_approvals_context(*, viewer, run) -> dict:
    """`runs/detail.html#run-approvals`: the run's held calls as the inbox's approval cards
    (approvals.selectors builds each card; decision controls only for those who may decide).
    Pending first, then decided, each in request order. 2 queries (3 when some expired)."""
    held = approvals_access.approvals_visible_to(viewer=viewer).filter(run=run)
    due = held.filter(status=ApprovalStatus.PENDING, expires_at__lte=timezone.now())
    due_ids = list(due.values_list("pk", flat=True))
    if due_ids:  # never show a call past its expiry as pending (as the inbox does)
        approvals_expire_due(approval_ids=due_ids)
    approvals = card_rows(held.order_by("requested_at", "position", "id"))
    cards = cards_context(approvals=approvals, viewer=viewer) if approvals else []
    order = {a.pk: i for i, a in enumerate(approvals)}
    cards.sort(key=lambda c: (not c["pending"], order[c["approval"].pk]))
    return {"run": run, "cards": cards, "pending_count": sum(c["pending"] for c in cards)}


def run_page_context(*, viewer, run_id: str) -> dict:
    """The whole run page: every partial's context, merged (they never share a key's meaning)."""
    run = run_page_run(viewer=viewer, run_id=run_id)
    context = {"run": run, "nav_active": "runs"}
    for part in PARTIALS.values():
        context.update(part(viewer=viewer, run=run))
    return context


# Fragment name → the one function that builds its context (the page and the fragment view
# use the same table, so they cannot drift apart).


PARTIALS = {
    "run-header": run_header_context,
    "run-usage": run_usage_context,
    "steps": run_steps_context,
    "run-todos": run_todos_context,
    "run-verdicts": run_verdicts_context,
    "run-approvals": run_approvals_context,
}
