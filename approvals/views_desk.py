"""The reviewer's desk at /approvals/: a dense triage list beside the whole card of the call in
focus, keyboard first (static/js/desk.js). Views only translate and call selectors; decisions go
through the API (`POST /api/v1/approvals/decisions`, one call or many, each its own decision).

An htmx request gets a partial: with `cursor`, the next keyset page of rows (and the next "more"
row); without, the list region (a live client's re-fetch after a gap)."""

from django.shortcuts import render
from django.views.decorators.http import require_GET

from approvals import access as approvals_access
from approvals import selectors, selectors_desk
from console.web.pages import viewer_view

TEMPLATE = "approvals/desk.html"


@require_GET
@viewer_view
def desk(request):
    viewer = request.viewer
    approvals_access.approvals_visible_to(viewer=viewer)  # Forbidden without view_runs or decide
    filters = selectors_desk.desk_filters(request.GET)
    page = selectors_desk.desk_page(
        viewer=viewer, filters=filters, cursor=request.GET.get("cursor") or None
    )
    query = {k: v for k, v in filters.items() if v and not (k == "view" and v == "all")}
    if not query and page["decides"]:  # the navigation's count is this very number
        setattr(viewer, selectors_desk.NAV_COUNT, page["count"])
    context = {"page": page, "filters": filters, "query": query, "nav_active": "inbox"}
    if request.htmx:
        part = "desk-page" if request.GET.get("cursor") else "desk-list"
        return render(request, f"{TEMPLATE}#{part}", context)
    first = page["rows"][0]["approval"] if page["rows"] else None
    if first is not None:
        context.update(selectors.approval_card_context(approval=first, viewer=viewer))
    context["choices"] = selectors_desk.desk_choices(viewer=viewer, filters=filters)
    return render(request, TEMPLATE, context)
