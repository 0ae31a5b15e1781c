"""The reviewer's desk at /approvals/: a dense triage list beside the whole card of the call in
focus, keyboard first (static/js/desk.js). Views only translate and call selectors; decisions go
through the API (`POST /api/v1/approvals/decisions`, one call or many, each its own decision).

An htmx request gets a partial: with `cursor`, the next keyset page of rows (and the next "more"
row); without, the list region (a live client's re-fetch after a gap)."""

from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from approvals import access as approvals_access
from approvals import selectors, selectors_desk
from approvals.services.saved_views import (
    saved_view_create,
    saved_view_delete,
    saved_view_rename,
)
from console.core.errors import Conflict, Invalid
from console.web.pages import viewer_view

TEMPLATE = "approvals/desk.html"
NOTICE = "gavel_desk_notice"  # the session's one-shot message of a saved view's form


@require_GET
@viewer_view
def desk(request):
    viewer = request.viewer
    approvals_access.approvals_visible_to(viewer=viewer)  # Forbidden without view_runs or decide
    filters = selectors_desk.desk_filters(request.GET)
    tools = selectors_desk.open_tools(viewer=viewer)  # read once: the page's and the choices'
    page = selectors_desk.desk_page(
        viewer=viewer, filters=filters, cursor=request.GET.get("cursor") or None, tools=tools
    )
    query = selectors_desk.desk_query(filters)
    if not query and page["decides"]:  # the navigation's count is this very number
        setattr(viewer, selectors_desk.NAV_COUNT, page["count"])
    context = {"page": page, "filters": filters, "query": query, "nav_active": "inbox"}
    if request.htmx:
        part = "desk-page" if request.GET.get("cursor") else "desk-list"
        return render(request, f"{TEMPLATE}#{part}", context)
    if page["rows"]:  # the first call's card, from what the page read of it
        first = page["rows"][0]["approval"]
        context.update(selectors.card_context_read(approval=first, viewer=viewer, **page["reads"]))
    # An unfiltered page of a decider counted its tools: the choices' tools are those.
    decided_tools = page["tools"] if page["decides"] and not query else None
    context["choices"] = selectors_desk.desk_choices(
        viewer=viewer, filters=filters, tools=decided_tools, open_tools=tools
    )
    context["notice"] = request.session.pop(NOTICE, None)
    return render(request, TEMPLATE, context)


def _back(request, query: dict):
    return redirect(selectors_desk.desk_href(query))


def _saved(request, write, query: dict):
    """Run a saved view's write; its refusal (a bad or taken name) is shown on the desk."""
    try:
        write()
    except (Invalid, Conflict) as exc:
        request.session[NOTICE] = exc.message[:1].upper() + exc.message[1:] + "."
    return _back(request, query)


@require_POST
@viewer_view
def saved_view_new(request):
    """Save the filters the desk shows (the form's hidden fields) under the name typed."""
    filters = selectors_desk.desk_filters(request.POST)
    query = selectors_desk.desk_query(filters)
    name = request.POST.get("name")
    return _saved(
        request, lambda: saved_view_create(viewer=request.viewer, name=name, filters=query), query
    )


@require_POST
@viewer_view
def saved_view_edit(request, view_id):
    """Rename one of the viewer's saved views, back on the desk showing it."""
    view = approvals_access.saved_view_for(viewer=request.viewer, view_id=view_id)
    name = request.POST.get("name")
    return _saved(request, lambda: saved_view_rename(view=view, name=name), view.filters)


@require_POST
@viewer_view
def saved_view_remove(request, view_id):
    """Delete one of the viewer's saved views, back on the unfiltered desk."""
    view = approvals_access.saved_view_for(viewer=request.viewer, view_id=view_id)
    saved_view_delete(view=view)
    return _back(request, {})
