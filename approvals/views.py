"""The reviewer's inbox and the decision forms. Views only translate and call services.

After an htmx POST the view re-renders the card (or the step's group) instead of redirecting;
a plain form POST (no JavaScript) redirects back to the inbox.
"""

import json

from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from approvals import access as approvals_access
from approvals import selectors
from approvals.services.decisions import UNSET, approval_decide, approval_extend
from console.core.errors import Conflict, Invalid
from console.directory import access
from console.web.pages import viewer_view
from runs import access as runs_access

CARD = "approvals/card.html"
GROUP = "approvals/group.html"
CARD_PAGE = "approvals/card_page.html"


@require_GET
@viewer_view
def card(request, approval_id):
    """One card: the fragment for htmx (the inbox's detail pane, a live client re-fetching it
    after a gap); a full page for every link from outside (mail, Slack, notifications)."""
    approval = approvals_access.approval_for(viewer=request.viewer, approval_id=approval_id)
    if request.htmx:
        return _card(request, approval)
    # Opened from outside (mail, Slack, a notification): the whole page around the card.
    context = selectors.approval_card_context(approval=approval, viewer=request.viewer)
    return render(request, CARD_PAGE, {**context, "nav_active": "inbox"})


def _card(request, approval, *, notice=None, status=200):
    context = selectors.approval_card_context(
        approval=approval, viewer=request.viewer, notice=notice
    )
    return render(request, CARD, context, status=status)


def _after_post(request, response):
    return response if request.htmx else redirect("/approvals/")


def _arguments(request, approval, decision):
    raw = request.POST.get("arguments")
    if decision != "approve" or raw is None or not raw.strip():
        return UNSET
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # not JSON, or nested too deeply to parse
        raise Invalid(f"the edited arguments are not valid JSON: {exc}") from None
    return UNSET if value == approval.arguments else value


@require_POST
@viewer_view
def decide(request, approval_id):
    viewer = request.viewer
    approval = approvals_access.approval_for(viewer=viewer, approval_id=approval_id)
    approvals_access.may_decide(viewer, approval)
    decision = request.POST.get("decision", "")
    try:
        arguments = _arguments(request, approval, decision)
        message = request.POST.get("message") if decision == "deny" else None
        approval = approval_decide(
            approval=approval,
            viewer=viewer,
            decision=decision,
            message=message,
            arguments=arguments,
        )
    except Invalid as exc:
        return _card(request, approval, notice=exc.message, status=200 if request.htmx else 422)
    except Conflict as exc:
        # The loser of a race sees the card as it now is, saying who decided.
        return _after_post(request, _card(request, approval, notice=_lost(exc)))
    return _after_post(request, _card(request, approval))


def _lost(exc: Conflict) -> str:
    details = exc.details or {}
    who = details.get("decidedBy")
    return f"Already {details.get('status', 'decided')}" + (f" by {who}." if who else ".")


@require_POST
@viewer_view
def extend(request, approval_id):
    viewer = request.viewer
    approval = approvals_access.approval_for(viewer=viewer, approval_id=approval_id)
    try:
        approval = approval_extend(approval=approval, viewer=viewer)
    except Conflict as exc:
        return _after_post(request, _card(request, approval, notice=exc.message))
    return _after_post(request, _card(request, approval, notice="Extended."))


@require_POST
@viewer_view
def decide_step(request, run_id, step):
    """Bulk: decide every call of a step this viewer may decide, each its own decision."""
    viewer = request.viewer
    run = runs_access.run_for(viewer=viewer, run_id=run_id)
    pending = selectors.step_pending_for(viewer=viewer, run=run, step=step)
    if not pending:
        access.require(viewer, "decide")  # 403 before the body's 422
    decision = request.POST.get("decision", "")
    if decision not in ("approve", "deny"):
        return HttpResponse("decision must be approve or deny", status=422)
    for approval in pending:
        try:
            approval_decide(approval=approval, viewer=viewer, decision=decision)
        except Conflict:
            continue  # someone else decided it meanwhile: the card will say who
    if not pending:
        return _after_post(request, HttpResponse(status=204))
    approvals = selectors.approvals_reloaded(approvals=pending)
    context = selectors.group_context(approvals=approvals, viewer=viewer)
    return _after_post(request, render(request, GROUP, context))
