"""Reads of the reviewer's desk: the triage list (one dense row a pending call), its counts and
its keyset pages.

`decidable_pending` is the ONE answer to "which pending calls may this viewer decide?" for the
list, the navigation's count and the bulk decision: the same rules as `access.decidable`, asked
in SQL (`access.decidable_q`), so a tenant with 10,000 pending calls is counted and paged by the
database, and every count on screen equals what this viewer may decide.
"""

from __future__ import annotations

import time
from datetime import timedelta
from urllib.parse import urlencode

from django.db.models import BigIntegerField, Count, F, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from approvals import access as approvals_access
from approvals.models import Approval
from approvals.selectors import card_rows, pending_calls
from approvals.services.expiry import approvals_expire_due
from budgets.models import OVERRIDE_TOOL
from budgets.spend import run_costs
from console.core import paging
from console.core.errors import Forbidden
from console.directory import access
from runs.models import Agent, runs_verdicts

PAGE = 50  # rows a page of the list holds
MAX_PAGE = 200
# Built-in views (saved filters): name → label. "mine": the tools this viewer decided in the
# last MINE_DAYS days; "overdue": waiting longer than the tenant's reminder delay (half the
# time to live when reminders are off); "over_budget": over-budget requests and calls of runs
# at or past their cost ceiling.
VIEWS = {
    "all": "All",
    "mine": "My tools",
    "overdue": "Overdue",
    "over_budget": "Over budget",
}
MINE_DAYS = 30
NAV_COUNT = "_gavel_desk_count"  # set by the desk view on its request's viewer only
FILTERS = ("view", "tool", "agent", "principal", "run")  # principal, run: from links


def desk_filters(params) -> dict:
    """The desk's filters from a query string (unknown views are 'all')."""
    found = {name: (params.get(name) or "").strip()[:255] for name in FILTERS}
    if found["view"] not in VIEWS:
        found["view"] = "all"
    return found


def desk_query(filters: dict) -> dict:
    """The filters that are set, as the desk's query string holds them (a saved view's)."""
    return {k: v for k, v in filters.items() if v and not (k == "view" and v == "all")}


def desk_href(filters: dict) -> str:
    """The desk's address showing these filters, in FILTERS' order (PostgreSQL's JSON keeps
    no key order: one filter set, one address)."""
    query = desk_query(desk_filters(filters))
    return "/approvals/" + (f"?{urlencode(query)}" if query else "")


def saved_views(*, viewer, query: dict) -> list[dict]:
    """This viewer's saved views of the desk, by name: each one's link, and whether it is the
    filter set shown now."""
    try:
        views = list(approvals_access.saved_views_of(viewer=viewer))
    except Forbidden:
        return []
    return [
        {
            "id": v.public_id,
            "name": v.name,
            "href": desk_href(v.filters),
            "selected": v.filters == query,
        }
        for v in views
    ]


def _ceiling():
    limits = "run__limits"
    return Coalesce(
        Cast(KeyTextTransform("costCeilingMinorUnits", limits), BigIntegerField()),
        Cast(KeyTextTransform("cost_ceiling_minor_units", limits), BigIntegerField()),
    )


def _filtered(qs: QuerySet, *, viewer, filters: dict, now) -> QuerySet:
    filters = filters or {}
    if filters.get("tool"):
        qs = qs.filter(tool_name=filters["tool"])
    if filters.get("agent"):
        qs = qs.filter(run__agent__external_id=filters["agent"])
    if filters.get("principal"):
        qs = qs.filter(run__principal__external_id=filters["principal"])
    if filters.get("run"):
        qs = qs.filter(run__external_id=filters["run"])
    view = filters.get("view") or "all"
    if view == "mine":
        principal = access.acting_principal(viewer)
        mine = Approval.objects.filter(
            tenant_id=viewer.tenant_id,
            decided_by_id=principal.pk if principal else None,
            decided_at__gte=now - timedelta(days=MINE_DAYS),
        ).values("tool_name")
        qs = qs.filter(tool_name__in=mine)
    elif view == "overdue":
        tenant = viewer.tenant
        delay = tenant.reminder_after_seconds or max(tenant.approval_ttl_seconds // 2, 1)
        qs = qs.filter(requested_at__lte=now - timedelta(seconds=delay))
    elif view == "over_budget":
        qs = qs.annotate(desk_ceiling=_ceiling()).filter(
            Q(tool_name=OVERRIDE_TOOL) | Q(desk_ceiling__lte=F("run__cost_minor_units"))
        )
    return qs


def _open(*, viewer) -> QuerySet:
    """Pending calls of the viewer's tenant, not past their expiry, a parent's mirror of a
    parked child's call listed once (as the child's). Forbidden without a capability."""
    return pending_calls(approvals_access.approvals_visible_to(viewer=viewer)).filter(
        expires_at__gt=timezone.now()
    )


def open_tools(*, viewer) -> list[str] | None:
    """The distinct tool names of the tenant's open pending calls (one DISTINCT): what
    `decidable_pending` asks the roles about. A page reads it once and hands it on. None, with
    nothing read, for a viewer whose roles decide every tool: there is nothing to ask."""
    if access.decides_every_tool(viewer):
        return None
    return list(_open(viewer=viewer).order_by().values_list("tool_name", flat=True).distinct())


def decidable_pending(
    *, viewer, filters: dict | None = None, tools: list[str] | None = None
) -> QuerySet:
    """The pending calls this viewer may decide (exactly `access.decidable`'s choice among
    them), filtered. `tools`: the tool names among the open pending calls when the caller
    has read them already (`open_tools`; any superset of the filtered calls' tools gives the
    same answer), else one DISTINCT reads them. Forbidden for a viewer who may not see
    approvals. A viewer whose roles decide every tool needs no tool names (nothing is read)."""
    now = timezone.now()
    qs = _filtered(_open(viewer=viewer), viewer=viewer, filters=filters or {}, now=now)
    if tools is None and not access.decides_every_tool(viewer):
        tools = list(qs.order_by().values_list("tool_name", flat=True).distinct())
    return qs.filter(approvals_access.decidable_q(viewer, tools))


def desk_count(*, viewer, filters: dict | None = None) -> int:
    """How many pending calls this viewer may decide (0 for one who may not see them). The
    desk's page, which counts them already, leaves its count on its request's viewer
    (`NAV_COUNT`) for the navigation: one count a page, the same number twice."""
    if not filters and getattr(viewer, NAV_COUNT, None) is not None:
        return getattr(viewer, NAV_COUNT)
    try:
        return decidable_pending(viewer=viewer, filters=filters).count()
    except Forbidden:
        return 0


def may_decide_any(viewer) -> bool:
    """Does the desk list calls to decide (else: every pending call, read-only)? Deciding
    needs `decide`, or leading a budget (its over-budget requests)."""
    principal = access.acting_principal(viewer)
    if principal is None:
        return False
    return (
        access.can(viewer, "decide")
        or access.can(principal, "manage_budgets")
        or (principal.led_budgets.exists())
    )


def _cursor(raw: str | None):
    if not raw:
        return None
    return paging.read(
        paging.decode_time_pk, raw,
        message="the cursor is not one this server issued", detail="invalid cursor",
    )  # fmt: skip


def _listed(*, viewer, filters: dict | None, tools=None) -> tuple[QuerySet, bool]:
    """The calls the desk lists for this viewer and whether they are its to decide: the ones it
    may decide, else (a viewer who decides nothing) every pending call, read-only."""
    decides = may_decide_any(viewer)
    if decides:
        return decidable_pending(viewer=viewer, filters=filters, tools=tools), True
    qs = _filtered(_open(viewer=viewer), viewer=viewer, filters=filters or {}, now=timezone.now())
    return qs, False


def desk_list_count(*, viewer, filters: dict | None = None) -> dict:
    """`{"count", "decides"}` of the desk's list (its heading)."""
    try:
        qs, decides = _listed(viewer=viewer, filters=filters)
    except Forbidden:
        return {"count": 0, "decides": False}
    return {"count": qs.count(), "decides": decides}


def desk_page(
    *,
    viewer,
    filters: dict | None = None,
    cursor: str | None = None,
    size: int | None = None,
    tools: list[str] | None = None,
) -> dict:
    """One keyset page of the desk's list, oldest first: `rows` (see `desk_rows`), `next`:
    the cursor of the next page (None: the last), `count`: every call the list holds,
    `decides`: whether the rows are the viewer's to decide (else read-only), `tools`: the
    tools of the calls it holds, counted with them (one GROUP BY, not a COUNT and a
    DISTINCT), `reads`: the rows' runs' costs and verdicts (the first card reuses them).
    `tools` given: `open_tools`, read once by the caller."""
    size = max(1, min(size or PAGE, MAX_PAGE))
    approvals_expire_due(tenant_id=viewer.tenant_id)
    qs, decides = _listed(viewer=viewer, filters=filters, tools=tools)
    at = time.time_ns() // 1000  # when the count's read began (live.js keeps the newest)
    by_tool = dict(qs.order_by().values_list("tool_name").annotate(n=Count("id")))
    count = sum(by_tool.values())
    after = _cursor(cursor)
    if after:
        at, pk = after
        qs = qs.filter(Q(requested_at__gt=at) | Q(requested_at=at, id__gt=pk))
    rows = card_rows(qs.order_by("requested_at", "id")[: size + 1], tenant=viewer.tenant)
    more = len(rows) > size
    rows = rows[:size]
    reads = _reads(rows)
    return {
        "rows": desk_rows(rows, viewer=viewer, decides=decides, reads=reads),
        "next": paging.encode_time_pk(rows[-1].requested_at, rows[-1].pk) if more else None,
        "count": count,
        "tools": sorted(by_tool),
        "at": at,
        "decides": decides,
        "reads": reads,
    }


def _reads(approvals: list[Approval]) -> dict:
    """What rows (and cards) read of their runs: costs against budgets, and verdicts."""
    if not approvals:
        return {"costs": {}, "verdicts": {}}
    return {
        "costs": run_costs(runs=[a.run for a in approvals]),
        "verdicts": runs_verdicts({a.run_id for a in approvals}),
    }


def desk_rows(
    approvals: list[Approval], *, viewer, decides: bool = True, reads: dict | None = None
) -> list[dict]:
    """What a row shows of each call: tool, agent, for whom, age, expiry, the run's cost and
    ceiling, its budgets' state, the run's verdicts and taint marks. `reads`: `_reads` of
    these calls, when the caller has them."""
    if not approvals:
        return []
    reads = reads or _reads(approvals)
    costs, verdicts = reads["costs"], reads["verdicts"]
    rows = []
    for a in approvals:
        run = a.run
        limits = run.limits or {}
        ceiling = limits.get("costCeilingMinorUnits", limits.get("cost_ceiling_minor_units"))
        budgets = costs[a.run_id]["budgets"]
        worst = max((b["percent"] for b in budgets), default=None)
        marks = sorted(
            {v["verdict"] for v in verdicts.get(run.pk, {}).values()} & {"flagged", "blocked"}
        )
        taint = run.taint_summary if isinstance(run.taint_summary, dict) else {}
        rows.append(
            {
                "approval": a,
                "id": a.public_id,
                "dom_id": f"desk-row-{a.public_id}",
                "run": run,
                "agent_id": run.current_agent_id or run.agent.external_id,
                "principal": run.principal,
                "cost": run.cost_minor_units,
                "ceiling": ceiling,
                "over_ceiling": ceiling is not None and run.cost_minor_units >= ceiling,
                "currency": a.tenant.currency,
                "budget_percent": worst,
                "over_budget": a.tool_name == OVERRIDE_TOOL or (worst is not None and worst >= 100),
                "override": a.tool_name == OVERRIDE_TOOL,
                "verdicts": marks,
                "taint": sorted(k for k, v in taint.items() if v),
                "decides": decides,
            }
        )
    return rows


def desk_arrivals(*, viewer, approval_ids, filters: dict | None = None) -> tuple[list, dict]:
    """Live arrivals: the rows of these calls that this viewer's list (with these filters)
    holds, and then the list's count (`desk_list_count`'s, with `at`: when its read began, in
    microseconds), from one build of the list's query."""
    try:
        qs, decides = _listed(viewer=viewer, filters=filters)
    except Forbidden:
        return [], {"count": 0, "decides": False, "at": time.time_ns() // 1000}
    arrived = qs.filter(public_id__in=list(approval_ids)).order_by("requested_at", "id")
    # No tenant handed on: a socket keeps its viewer (and its tenant) for hours; rows read it.
    rows = desk_rows(card_rows(arrived), viewer=viewer, decides=decides)
    at = time.time_ns() // 1000
    return rows, {"count": qs.count(), "decides": decides, "at": at}


def desk_choices(
    *, viewer, filters: dict, tools: list[str] | None = None, open_tools: list[str] | None = None
) -> dict:
    """The filters' values: the tools of the pending calls this viewer may decide, and the
    tenant's agents (each list bounded). `tools`: those tools when the caller read them
    already (an unfiltered page's `tools`); `open_tools`: as for `decidable_pending`."""
    if tools is None:
        try:
            pending = decidable_pending(viewer=viewer, tools=open_tools).order_by()
            tools = list(pending.values_list("tool_name", flat=True).distinct()[:100])
        except Forbidden:
            tools = []
    tools = sorted(tools)[:100]
    agents = list(
        Agent.objects.filter(tenant_id=viewer.tenant_id)
        .order_by("external_id")
        .values_list("external_id", flat=True)[:100]
    )
    saved = saved_views(viewer=viewer, query=desk_query(filters))
    builtin = not any(v["selected"] for v in saved)  # one view is the current page
    return {
        "views": [
            {"name": k, "label": v, "selected": builtin and filters.get("view") == k}
            for k, v in VIEWS.items()
        ],
        "saved": saved,
        "tools": sorted(set(tools) | ({filters["tool"]} if filters.get("tool") else set())),
        "agents": sorted(set(agents) | ({filters["agent"]} if filters.get("agent") else set())),
    }


def nav_pending_count_context(*, viewer) -> dict:
    """`base.html#nav-pending-count`: the pending calls this viewer may decide (the desk's
    count, `decidable_pending`)."""
    return {"nav_pending_count": desk_count(viewer=viewer)}
