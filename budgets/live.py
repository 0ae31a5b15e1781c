"""Live pushes of the budgets pages: which partials a `budgets.changed` hint touches, rendered
as htmx OOB swaps through the pages' own context functions (budgets/selectors_pages.py), so a
push is byte-for-byte what a reload would show. They run in a worker thread, once per event per
audience (the consumers share the result between their sockets).
"""

from __future__ import annotations

from budgets import selectors_pages as pages
from console.web.sockets import oob

INDEX = "budgets/index.html"
DETAIL = "budgets/detail.html"
CARD = f"{INDEX}#budget-card"
DETAIL_PARTS = ("card", "budget-alerts", "budget-overrides")


def _usage_html(*, viewer, usage: pages.UsageRange) -> list[str]:
    html = []
    for dimension in pages.DIMENSIONS:
        context = pages.usage_breakdown_context(viewer=viewer, dimension=dimension, usage=usage)
        if dimension == "day":  # the range's totals come from the day's report
            html.append(oob(f"{INDEX}#usage-summary", context))
        html.append(oob(f"{INDEX}#usage-breakdown", context))
    return html


def index_html(*, viewer, usage: pages.UsageRange | None, days=None) -> str:
    """/budgets/: every budget's card and, when the page's range holds one of `days` (None:
    in any case), the range's totals and breakdowns."""
    html = [oob(f"{INDEX}#budget-list", pages.budget_list_context(viewer=viewer))]
    touched = days is None or any(usage.date_from <= day <= usage.date_to for day in days or ())
    if usage is not None and touched:
        html += _usage_html(viewer=viewer, usage=usage)
    return "".join(html)


def detail_html(*, viewer, budget_id: str, parts=DETAIL_PARTS) -> str:
    """/budgets/<budgetId>/: its card, alerts and overrides (those `parts` name)."""
    budget = pages.budget_page_budget(viewer=viewer, budget_id=budget_id)
    html = []
    if "card" in parts:
        html.append(oob(CARD, pages.budget_card_context(viewer=viewer, budget=budget)))
    for name, build in pages.DETAIL_PARTIALS.items():
        if name in parts:
            html.append(oob(f"{DETAIL}#{name}", build(viewer=viewer, budget=budget)))
    return "".join(html)
