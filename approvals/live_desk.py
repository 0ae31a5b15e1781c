"""Live pushes of the desk (/approvals/): new calls appended as rows, calls decided elsewhere
(or expired, or cancelled) leaving the list, the card in the pane re-rendered, and the count.

Every function re-reads the database through approvals.selectors_desk and renders the desk's own
partials (`approvals/desk_row.html`, `approvals/desk.html#desk-count`); the client (live.js)
drops what targets nothing on its page."""

from __future__ import annotations

import time

from approvals import live, selectors_desk
from approvals.models import Approval, ApprovalStatus
from approvals.nav import nav_count_html
from console.web.sockets import delete, oob, wrap


def count_html(page: dict) -> str:
    """The heading's count (`read_count`'s page), stamped with when its read began
    (microseconds): frames of different events render concurrently and may arrive out of
    order; the client keeps the newest (desk.js)."""
    return oob("approvals/desk.html#desk-count", {"page": page, "oob": True})


def read_count(*, viewer, filters: dict) -> dict:
    """`{"count", "decides", "at"}`: the desk list's count and when its read began."""
    at = time.time_ns() // 1000
    return {**selectors_desk.desk_list_count(viewer=viewer, filters=filters), "at": at}


def desk_html(*, viewer, approval_ids, change: str, filters: dict) -> str:
    """What an inbox socket pushes for one change of these calls: the navigation's count, the
    rows (or cards) and the heading's count. An unfiltered list of calls to decide holds
    exactly what the navigation counts: one COUNT serves both."""
    render = _requested if change == "requested" else _changed
    html, page = render(viewer=viewer, approval_ids=approval_ids, filters=filters)
    same = page["decides"] and not selectors_desk.desk_query(filters)
    nav = nav_count_html(viewer, count=page["count"] if same else None)
    return nav + html + count_html(page)


def requested_html(*, viewer, approval_ids, filters: dict) -> str:
    """New calls this viewer's list holds (with its filters), appended at its end unless more
    pages wait (oldest first: a new call belongs to the last page, which the list loads when
    its reviewer comes near) or the row is there already; then the heading's count."""
    html, page = _requested(viewer=viewer, approval_ids=approval_ids, filters=filters)
    return html + count_html(page)


def _requested(*, viewer, approval_ids, filters: dict) -> tuple[str, dict]:
    rows, page = selectors_desk.desk_arrivals(
        viewer=viewer, approval_ids=approval_ids, filters=filters
    )
    html = [
        wrap(
            target="#desk-rows",
            inner=oob("approvals/desk_row.html", {"row": row}),
            unless=f"#desk-more, #{row['dom_id']}",
        )
        for row in rows
    ]
    if html:
        html.append(delete("#desk-list > .desk-empty"))
    return "".join(html), page


def changed_html(*, viewer, approval_ids, filters: dict) -> str:
    """Calls that changed: those no longer pending leave the list; the card in the pane shows
    what happened (who decided); then the heading's count."""
    html, page = _changed(viewer=viewer, approval_ids=approval_ids, filters=filters)
    return html + count_html(page)


def _changed(*, viewer, approval_ids, filters: dict) -> tuple[str, dict]:
    ids = list(approval_ids)
    gone = (
        Approval.objects.filter(tenant_id=viewer.tenant_id, public_id__in=ids)
        .exclude(status=ApprovalStatus.PENDING)
        .values_list("public_id", flat=True)
    )
    html = [delete(f"#desk-row-{public_id}") for public_id in gone]
    html.append(live.cards_html(viewer=viewer, approval_ids=ids))
    return "".join(html), read_count(viewer=viewer, filters=filters)
