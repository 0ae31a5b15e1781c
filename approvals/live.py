"""Live pushes of held calls' cards: changed cards re-rendered in place (the desk's pane, the
card page); the desk's rows are `live_desk`'s.

Every function re-reads the database through approvals.selectors (the ONE card context); they
run in a worker thread, once per event per audience.
"""

from __future__ import annotations

from approvals import access as approvals_access
from approvals import selectors
from console.core.errors import NotFound
from console.web.sockets import oob
from runs import access as runs_access


def run_facts(*, viewer, run_id: str) -> tuple[int | None, bool]:
    """What a card's audience depends on: the run's principal and the self-approval rule."""
    run = runs_access.run_for(viewer=viewer, run_id=run_id)
    return run.principal_id, run.tenant.allow_self_approval


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
