"""Page selectors: the reads behind the console pages, one context function per partial.

Each `*_context` function builds the whole context of one named partial, so the page, the htmx
fragment view and the WebSocket consumer render identical HTML from it. Every function runs a
constant number of queries, whatever the size of the page.
"""

from __future__ import annotations

from console import access
from console.errors import Forbidden


def nav_pending_count_context(*, viewer) -> dict:
    """`base.html#nav-pending-count`: the calls pending a human in the viewer's tenant."""
    from approvals.models import ApprovalStatus

    try:
        approvals = access.approvals_visible_to(viewer=viewer)
    except Forbidden:
        return {"nav_pending_count": 0}
    # A parent's mirror of a parked child's call is the same call: count it once.
    pending = approvals.filter(status=ApprovalStatus.PENDING, mirror_of__isnull=True)
    return {"nav_pending_count": pending.count()}
