"""Live pushes of the run pages: which partials a hint touches, rendered as htmx OOB swaps.

Every function re-reads the database through the pages' own context functions
(runs/selectors_pages.py) and renders the pages' own partials, so a push is byte-for-byte what
a reload would show. They run in a worker thread, once per event per audience (the consumers
share the result between their sockets).
"""

from __future__ import annotations

from approvals.live import cards_html
from approvals.nav import nav_count_html
from console.core.errors import NotFound
from console.web.sockets import delete, oob, wrap
from runs import selectors_pages as pages
from runs.models import RunEvent

DETAIL = "runs/detail.html"
# The hint's `what` → the run page's partials it changes.
PARTS_OF = {
    "created": {"run-header"},
    "header": {"run-header"},
    "status": {"run-header", "run-usage"},
    "events": {"run-header"},
    "steps": {"steps", "run-usage", "run-header"},
    "messages": {"steps"},
    "tool_results": {"steps"},
    "handoffs": {"steps", "run-header"},
    "usage": {"run-usage"},
    "todos": {"run-todos"},
    "verdicts": {"run-verdicts"},
    "taint": {"run-verdicts"},
}
SIDE_PARTS = ("run-header", "run-usage", "run-todos", "run-verdicts")
MAX_INCREMENTAL_EVENTS = 500  # beyond this, the whole timeline is re-rendered


def parts_for(what) -> set[str]:
    return set().union(*(PARTS_OF.get(w, set()) for w in what))


def _part(viewer, run, name: str) -> str:
    return oob(f"{DETAIL}#{name}", pages.PARTIALS[name](viewer=viewer, run=run))


def touched_steps(*, run, since: int | None, seq: int) -> list[int] | None:
    """The step numbers the events (since, seq] wrote to, from the run's event log; None when
    the log cannot say (no range, a snapshot or outcome, steps before the first)."""
    if since is None or seq <= since or seq - since > MAX_INCREMENTAL_EVENTS:
        return None
    rows = RunEvent.objects.filter(run=run, seq__gt=since, seq__lte=seq)
    entries = list(rows.values_list("type", "data__step"))
    if not entries:
        return None
    steps = {step for kind, step in entries if kind in STEP_EVENTS}
    if any(not isinstance(step, int) or step < 1 for step in steps):
        return None
    return sorted(steps)


STEP_EVENTS = {
    "step.started",
    "message",
    "tool.result",
    "step.finished",
    "approval.requested",
    "handoff",
    "handoff.returned",
}


def steps_html(*, viewer, run, since: int | None, seq: int) -> str:
    """Touched steps: replaced by id where the page has them, else appended to #steps (the
    client keeps whichever applies, live.js); or the whole timeline when the log cannot say."""
    numbers = touched_steps(run=run, since=since, seq=seq)
    if numbers is None:
        return _part(viewer, run, "steps")
    out = []
    for number in numbers:
        try:
            context = pages.run_step_context(viewer=viewer, run=run, number=number)
        except NotFound:
            continue
        article = oob(f"{DETAIL}#run-step", context)
        out += [article, wrap(target="#steps", inner=article, unless=f"#step-{number}")]
    return "".join(out)


def run_update_html(*, viewer, run_id: str, since: int | None, seq: int, what) -> str:
    """A run changed (`run.updated`): the partials its `what` names, re-read and rendered."""
    run = pages.run_page_run(viewer=viewer, run_id=run_id)
    parts = parts_for(what)
    html = [_part(viewer, run, name) for name in SIDE_PARTS if name in parts]
    if "steps" in parts:
        html.append(steps_html(viewer=viewer, run=run, since=since, seq=seq))
    return "".join(html)


def run_state_html(*, viewer, run_id: str, client_seq: int | None) -> tuple[str, int]:
    """The run page's live state right after a socket subscribes: every side partial, the held
    calls and, when the page is behind the run, the whole timeline. Returns (html, lastSeq)."""
    run = pages.run_page_run(viewer=viewer, run_id=run_id)
    html = [_part(viewer, run, name) for name in (*SIDE_PARTS, "run-approvals")]
    if client_seq is None or client_seq < run.last_seq:
        html.append(_part(viewer, run, "steps"))
    html.append(nav_count_html(viewer))
    return "".join(html), run.last_seq


def run_approvals_html(*, viewer, run_id: str, approval_ids, change: str) -> str:
    """Held calls of the run changed: a new or cancelled set re-renders the run's whole list;
    a decision, expiry, pickup or extension re-renders just those cards (a reviewer typing a
    message in another card keeps it)."""
    if change in ("requested", "cancelled"):
        run = pages.run_page_run(viewer=viewer, run_id=run_id)
        return _part(viewer, run, "run-approvals")
    return cards_html(viewer=viewer, approval_ids=approval_ids)


# --- the run list ---


def row_html(*, viewer, run_id: str, insert: bool) -> str:
    """One row of /runs/, replaced where the page shows it; a new run is also put at the top
    of an unfiltered first page."""
    try:
        context = pages.run_row_context(viewer=viewer, run_id=run_id)
    except NotFound:
        return ""
    row = oob("runs/list.html#run-row", context)
    if not insert:
        return row
    row_id = f"#run-row-{context['row']['run'].pk}"
    top = wrap(
        target="#run-rows", how="afterbegin", inner=row, unless=row_id, rows=True, unfiltered=True
    )
    return row + top + delete("#run-rows > tr.empty")
