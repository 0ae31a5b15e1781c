"""Live pushes of the inbox: new held calls appended, changed cards re-rendered in place.

Every function re-reads the database through approvals.selectors (the ONE card context) and
renders the inbox's own partials; they run in a worker thread, once per event per audience.
"""

from __future__ import annotations

from approvals import access as approvals_access
from approvals import selectors
from console.core.errors import NotFound
from console.web.sockets import delete, oob, wrap
from runs import access as runs_access


def run_facts(*, viewer, run_id: str) -> tuple[int | None, bool]:
    """What a card's audience depends on: the run's principal and the self-approval rule."""
    run = runs_access.run_for(viewer=viewer, run_id=run_id)
    return run.principal_id, run.tenant.allow_self_approval


def _shown(*, viewer, approval_ids, filters: dict) -> list:
    """The new calls this viewer's inbox (with these filters) lists: pending, not a parent's
    mirror, and (for one who decides) a call this viewer may decide."""
    approvals = selectors.pending_calls(approvals_access.approvals_visible_to(viewer=viewer))
    qs = selectors.inbox_filtered(approvals, filters).filter(public_id__in=list(approval_ids))
    rows = selectors.card_rows(qs.order_by("position", "id"))
    return selectors.inbox_shown(viewer=viewer, approvals=rows)


def requested_html(*, viewer, approval_ids, filters: dict) -> str:
    """New held calls (one run's step): appended to their group if the page shows it, else a
    new group at the end of the inbox (oldest first), unless the inbox is paged (its "more
    calls wait" note is shown: the page holds the oldest calls, a new one is not among them;
    the nav count says it arrived)."""
    shown = _shown(viewer=viewer, approval_ids=approval_ids, filters=filters)
    if not shown:
        return ""
    group = selectors.group_context(approvals=shown, viewer=viewer)
    dom_id = group["group"]["dom_id"]
    cards = "".join(oob("approvals/card.html", {"card": c}) for c in group["group"]["cards"])
    first = f"#{group['group']['cards'][0]['dom_id']}"
    return "".join(
        [
            wrap(target=f"#{dom_id} .approval-cards", inner=cards, unless=first),
            wrap(
                target="#inbox-groups",
                inner=oob("approvals/group.html", group),
                unless=f"#{dom_id}, #inbox-groups > .inbox-more",
            ),
            delete("#inbox-groups > .inbox-empty"),
        ]
    )


def cards_html(*, viewer, approval_ids) -> str:
    """Cards that changed (decided, expired, picked up, extended, cancelled), re-rendered where
    the page shows them: a reviewer sees who decided."""
    html = []
    for approval_id in approval_ids:
        try:
            approval = approvals_access.approval_for(viewer=viewer, approval_id=approval_id)
        except NotFound:
            continue
        context = selectors.approval_card_context(approval=approval, viewer=viewer)
        html.append(oob("approvals/card.html", context))
    return "".join(html)
