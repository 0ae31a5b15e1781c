"""Page selectors: the reads behind the console pages, one context function per partial.

Each `*_context` function builds the whole context of one named partial, so the page, the htmx
fragment view and the WebSocket consumer render identical HTML from it. Every function runs a
constant number of queries, whatever the size of the page. No HTML is built here: values go to
templates, which escape them.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from urllib.parse import quote

from django.db.models import Count, IntegerField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from console import access
from console.errors import Forbidden, Invalid, NotFound
from console.templatetags import gavel as gavel_tags
from runs.models import Agent, Handoff, Message, RunStatus, Step, ToolResult, Verdict

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
LONG_TEXT = 1200  # characters before a text is collapsed into <details>
LONG_JSON_LINES = 30
INLINE_IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif"}
BASE64_RE = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
CURSOR_RE = re.compile(r"^(\d{1,20})-(\d{1,20})$")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LIST_FIELDS = (
    "id",
    "tenant_id",
    "external_id",
    "agent_version",
    "current_agent_id",
    "status",
    "limits",
    "cost_minor_units",
    "steps",
    "started_at",
    "finished_at",
    "parent_run_id",
    "agent__external_id",
    "principal__external_id",
    "principal__name",
    "conversation__external_id",
)


def nav_pending_count_context(*, viewer) -> dict:
    """`base.html#nav-pending-count`: the calls pending a human in the viewer's tenant."""
    from approvals.models import ApprovalStatus

    try:
        approvals = access.approvals_visible_to(viewer=viewer)
    except Forbidden:
        return {"nav_pending_count": 0}
    # A parent's mirror of a parked child's call is the same call: counted once (as the inbox).
    pending = approvals.filter(status=ApprovalStatus.PENDING, mirror_of__isnull=True)
    return {"nav_pending_count": pending.count()}


# --- the run list ---


@dataclass(frozen=True)
class RunFilters:
    principal: str = ""
    no_principal: bool = False
    conversation: str = ""
    no_conversation: bool = False
    agent: str = ""
    status: str = ""
    since: date | None = None
    until: date | None = None
    q: str = ""
    group: str = "principal"  # or "conversation"
    limit: int = PAGE_SIZE
    before: str = ""  # keyset cursor: runs older than this one
    after: str = ""  # keyset cursor: runs newer than this one


def cursor_for(run) -> str:
    """An opaque keyset position: microseconds since the epoch and the row id."""
    micros = (run.started_at - EPOCH) // timedelta(microseconds=1)
    return f"{micros}-{run.pk}"


def cursor_parse(cursor: str) -> tuple[datetime, int]:
    match = CURSOR_RE.match(cursor or "")
    if not match:
        raise Invalid(f"'{cursor}' is not a page cursor", code="invalid_cursor")
    micros, pk = (int(g) for g in match.groups())
    try:
        return EPOCH + timedelta(microseconds=micros), pk
    except OverflowError:
        raise Invalid(f"'{cursor}' is not a page cursor", code="invalid_cursor") from None


def _pending_calls():
    from approvals.models import Approval, ApprovalStatus

    pending = (
        Approval.objects.filter(run=OuterRef("pk"), status=ApprovalStatus.PENDING)
        .order_by()
        .values("run")
        .annotate(n=Count("*"))
        .values("n")
    )
    return Coalesce(Subquery(pending, output_field=IntegerField()), Value(0))


def _list_rows(qs):
    """Runs as the list shows them: one query, related names joined, pending calls counted."""
    return (
        qs.select_related("agent", "principal", "conversation")
        .only(*LIST_FIELDS)
        .annotate(pending_calls=_pending_calls())
    )


def _filtered(qs, f: RunFilters, *, tenant_id: int):
    if f.no_principal:
        qs = qs.filter(principal__isnull=True)
    elif f.principal:
        qs = qs.filter(principal__external_id=f.principal)
    if f.no_conversation:
        qs = qs.filter(conversation__isnull=True)
    elif f.conversation:
        qs = qs.filter(conversation__external_id=f.conversation)
    if f.agent:
        # The agent's id first (one indexed lookup): filtering on the id lets PostgreSQL walk
        # run_agent_newest in order under the LIMIT instead of joining and sorting every match.
        agent = Agent.objects.filter(tenant_id=tenant_id, external_id=f.agent).first()
        qs = qs.filter(agent_id=agent.pk) if agent else qs.none()
    if f.status:
        qs = qs.filter(status=f.status)
    if f.since:
        qs = qs.filter(started_at__gte=datetime.combine(f.since, time.min, tzinfo=UTC))
    if f.until:
        qs = qs.filter(started_at__lt=datetime.combine(f.until, time.min, tzinfo=UTC) + _DAY)
    if f.q:
        qs = qs.filter(external_id__startswith=f.q)
    return qs


_DAY = timedelta(days=1)


def _page(qs, f: RunFilters) -> tuple[list, bool, bool]:
    """One keyset page, newest first: (runs, has_newer, has_older)."""
    if f.after:
        at, pk = cursor_parse(f.after)
        # `>=` on the indexed column bounds the scan; the OR only breaks ties.
        qs = qs.filter(started_at__gte=at).filter(Q(started_at__gt=at) | Q(pk__gt=pk))
        rows = list(qs.order_by("started_at", "id")[: f.limit + 1])
        has_newer = len(rows) > f.limit
        return list(reversed(rows[: f.limit])), has_newer, True
    if f.before:
        at, pk = cursor_parse(f.before)
        qs = qs.filter(started_at__lte=at).filter(Q(started_at__lt=at) | Q(pk__lt=pk))
    rows = list(qs.order_by("-started_at", "-id")[: f.limit + 1])
    return rows[: f.limit], bool(f.before), len(rows) > f.limit


def _group_key(run, by: str) -> tuple[str | None, str]:
    if by == "conversation":
        conv = run.conversation
        return (conv.external_id, conv.external_id) if conv else (None, "no conversation")
    principal = run.principal
    if principal is None:
        return None, "no principal"
    label = principal.external_id
    if principal.name and principal.name != label:
        label = f"{principal.name} ({label})"
    return principal.external_id, label


def _groups(runs: list, by: str) -> list[dict]:
    """Runs of the page grouped (groups in the order of their newest run); None = no such."""
    groups: dict = {}
    now = timezone.now()
    for run in runs:
        key, label = _group_key(run, by)
        group = groups.setdefault(
            key, {"key": key, "label": label, "none": key is None, "runs": []}
        )
        group["runs"].append(_row_facts(run, now))
    return list(groups.values())


def _row_facts(run, now=None) -> dict:
    """Everything a list row shows, computed here once: a row is rendered per run, so the
    template only places values (each row costs a fraction of a millisecond at 200 rows)."""
    limits = run.limits or {}
    ceiling = limits.get("costCeilingMinorUnits")
    current = run.current_agent_id
    agent = run.agent.external_id
    return {
        "run": run,
        "dom_id": f"run-row-{run.pk}",
        "href": f"/runs/{quote(run.external_id, safe='')}/",
        "status_label": run.status.replace("_", " "),
        "status_class": gavel_tags.status_class(run.status),
        "agent": agent,
        "current_agent": current if current and current != agent else None,
        "principal": run.principal.external_id if run.principal else None,
        "conversation": run.conversation.external_id if run.conversation else None,
        "max_steps": limits.get("maxSteps"),
        "cost": gavel_tags.money(run.cost_minor_units),
        "ceiling": ceiling,
        "meter_max": max(ceiling or 0, 1),
        "ceiling_text": gavel_tags.money(ceiling) if ceiling is not None else None,
        "over_ceiling": ceiling is not None and run.cost_minor_units > ceiling,
        "started_iso": run.started_at.isoformat(),
        "age": gavel_tags.short_duration((now or timezone.now()) - run.started_at),
    }


def runs_list_context(*, viewer, filters: RunFilters) -> dict:
    """`runs/list.html#run-list`: one page of runs, grouped, with its cursors (2 queries)."""
    qs = _filtered(access.runs_visible_to(viewer=viewer), filters, tenant_id=viewer.tenant_id)
    runs, has_newer, has_older = _page(_list_rows(qs), filters)
    return {
        "filters": filters,
        "group_by": filters.group,
        "groups": _groups(runs, filters.group),
        "run_count": len(runs),
        "newer_cursor": cursor_for(runs[0]) if runs and has_newer else None,
        "older_cursor": cursor_for(runs[-1]) if runs and has_older else None,
        "currency": viewer.tenant.currency,
        "statuses": RunStatus.choices,
    }


def run_row_context(*, viewer, run_id: str) -> dict:
    """`runs/list.html#run-row`: one row of the list, for a live update of that run."""
    qs = access.runs_visible_to(viewer=viewer).filter(external_id=run_id)
    run = _list_rows(qs).first()
    if run is None:
        raise NotFound(f"no run '{run_id}'", code="run_not_found")
    return {"row": _row_facts(run), "currency": viewer.tenant.currency}


# --- the run page ---


def run_page_run(*, viewer, run_id: str):
    """The run a page shows, with its agent, principal and conversation (one query)."""
    qs = access.runs_visible_to(viewer=viewer).select_related(
        "tenant", "agent", "principal", "conversation"
    )
    run = qs.filter(external_id=run_id).first()
    if run is None:
        raise NotFound(f"no run '{run_id}'", code="run_not_found")
    return run


def run_header_context(*, viewer, run) -> dict:
    """`runs/detail.html#run-header`: who, what, when, how it ended; parent and sub-runs."""
    sub_runs = list(
        access.runs_visible_to(viewer=viewer)
        .filter(parent_run_id=run.external_id)
        .order_by("started_at", "id")
        .values("external_id", "status", "current_agent_id")[:100]
    )
    return {
        "run": run,
        "roles": run.role_ids or [],
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
        for turn, v in sorted((run.verdicts or {}).items(), key=lambda kv: _turn_key(kv[0]))
        if isinstance(v, dict)
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
    from approvals.models import ApprovalStatus
    from approvals.selectors import CARD_RELATED, group_context
    from approvals.services.expiry import approvals_expire_due

    held = access.approvals_visible_to(viewer=viewer).filter(run=run)
    due = held.filter(status=ApprovalStatus.PENDING, expires_at__lte=timezone.now())
    due_ids = list(due.values_list("pk", flat=True))
    if due_ids:  # never show a call past its expiry as pending (as the inbox does)
        approvals_expire_due(approval_ids=due_ids)
    approvals = list(held.select_related(*CARD_RELATED).order_by("requested_at", "position", "id"))
    cards = group_context(approvals=approvals, viewer=viewer)["group"]["cards"] if approvals else []
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


def filters_replace(filters: RunFilters, **changes) -> RunFilters:
    return replace(filters, **changes)
