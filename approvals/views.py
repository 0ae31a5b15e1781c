"""The card page and the decision forms. Views only translate and call services (the desk,
/approvals/, is views_desk's).

After an htmx POST the view re-renders the card (or the step's cards) instead of redirecting;
a plain form POST (no JavaScript) redirects back to the inbox.
"""

import json

from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_POST

from approvals import access as approvals_access
from approvals import selectors, selectors_desk
from approvals.services.bulk import approvals_decide_many
from approvals.services.decisions import UNSET, approval_decide, approval_extend
from console.core.errors import Conflict, Invalid
from console.directory import access
from console.web.pages import viewer_view
from runs import access as runs_access

CARD = "approvals/card.html"
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
    """Bulk by step (the grouped inbox's form, gone; its URL still answers): decide every call
    of a run's step this viewer may decide, each its own decision (`services.bulk`); step 0 is
    a call of no step. An htmx request gets the step's cards as they now are."""
    viewer = request.viewer
    run = runs_access.run_for(viewer=viewer, run_id=run_id)
    pending = selectors_desk.decidable_pending(viewer=viewer, filters={"run": run.external_id})
    ids = list(
        pending.filter(**({"step": step} if step else {"step__isnull": True}))
        .order_by("position", "id")
        .values_list("public_id", flat=True)
    )
    if not ids:
        access.require(viewer, "decide")  # 403 before the body's 422
    decision = request.POST.get("decision", "")
    if decision not in ("approve", "deny"):
        return HttpResponse("decision must be approve or deny", status=422)
    if not ids:
        return _after_post(request, HttpResponse(status=204))
    # A call someone else decided meanwhile is reported per call; its card says who.
    approvals_decide_many(viewer=viewer, approval_ids=ids, decision=decision)
    now = selectors.approvals_of(tenant_id=viewer.tenant_id, public_ids=ids)
    cards = selectors.cards_context(approvals=now, viewer=viewer)
    html = "".join(render_to_string(CARD, {"card": c}, request=request) for c in cards)
    return _after_post(request, HttpResponse(html))
