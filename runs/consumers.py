"""Sockets of the run pages: /ws/runs/<runId>/ (one run) and /ws/runs/ (the list).

Both also keep the navigation's pending count current (they listen to the tenant's inbox).
"""

from __future__ import annotations

from approvals.nav import NavCountMixin, nav_audience, nav_count_html
from console.live import realtime
from console.web.sockets import (
    LiveConsumer,
    SharedResults,
    card_audience,
    query,
)
from notifications.live import BellMixin, CallsMixin
from runs import access as runs_access
from runs import live

STATES = SharedResults(1.0)  # the state sent on subscribe: shared for a second at most


class RunConsumer(BellMixin, CallsMixin, NavCountMixin, LiveConsumer):
    """One run: steps appended and replaced live, header, usage, todos, verdicts, held calls."""

    def authorize(self) -> list[str]:
        self.run_id = self.scope["url_route"]["kwargs"]["run_id"]
        run = runs_access.run_for(viewer=self.viewer, run_id=self.run_id)
        self.tenant_id = run.tenant_id
        self.run_principal_id = run.principal_id
        self.allow_self = run.tenant.allow_self_approval
        self.audience_changed()
        return [
            realtime.run_group(run.tenant_id, run.external_id),
            realtime.inbox_group(run.tenant_id),
        ]

    def check_key(self):
        return self.run_id

    def audience_changed(self) -> None:
        self.audience = card_audience(
            self.viewer, run_principal_id=self.run_principal_id, allow_self_approval=self.allow_self
        )

    async def send_state(self) -> None:
        raw = query(self.scope).get("seq", "")
        client_seq = int(raw) if raw.isdigit() else None
        behind = client_seq  # the state differs only by whether the page is behind
        key = ("run-state", self.run_id, self.audience, behind)
        html, self.seq = await self.shared(STATES, key, self._state, client_seq)
        await self.push(html)
        await self.control("hello", seq=self.seq)

    def _state(self, client_seq):
        return live.run_state_html(viewer=self.viewer, run_id=self.run_id, client_seq=client_seq)

    async def run_updated(self, message):
        if not self.first_time(message) or message.get("run") != self.run_id:
            return
        prev, seq = message.get("prev"), message["seq"]
        if prev is not None and prev > self.seq:  # a hint was lost (or overtaken): HTTP
            self.seq = seq
            await self.control("resync", seq=seq)
            return
        if prev is not None and prev < self.seq:  # the state we sent already holds it
            return
        since = prev if prev is not None else self.seq
        self.seq = max(self.seq, seq)
        key = (message.get("id"), self.audience, since)
        what = tuple(message.get("what") or ())
        html = await self.render(key, self._update, since, seq, what)
        await self.push(html)  # one frame per event: no separate seq frame to fan out

    def _update(self, since, seq, what):
        return live.run_update_html(
            viewer=self.viewer, run_id=self.run_id, since=since, seq=seq, what=what
        )

    async def approvals_updated(self, message):
        if not self.first_time(message):
            return
        if message.get("run") != self.run_id:
            await self.nav_count(message)
            return
        key = (message.get("id"), "run-approvals", self.audience, nav_audience(self.viewer))
        ids, change = tuple(message.get("approvals") or ()), message.get("change", "")
        await self.push(await self.render(key, self._approvals, ids, change))

    def _approvals(self, ids, change):
        cards = live.run_approvals_html(
            viewer=self.viewer, run_id=self.run_id, approval_ids=ids, change=change
        )
        return nav_count_html(self.viewer) + cards


# Filters under which a brand-new run cannot be placed at the top without a query.
LIST_FILTERS = (
    "principal",
    "no_principal",
    "conversation",
    "no_conversation",
    "agent",
    "status",
    "since",
    "until",
    "q",
    "before",
    "after",
)


class RunListConsumer(BellMixin, CallsMixin, NavCountMixin, LiveConsumer):
    """/runs/: status badges and counts of the rows shown; new runs at the top."""

    def authorize(self) -> list[str]:
        runs_access.runs_visible_to(viewer=self.viewer)  # Forbidden without view_runs
        params = query(self.scope)
        self.inserts = not any(params.get(name) for name in LIST_FILTERS)
        tenant_id = self.viewer.tenant_id
        return [realtime.runlist_group(tenant_id), realtime.inbox_group(tenant_id)]

    async def run_updated(self, message):
        if not self.first_time(message):
            return
        insert = self.inserts and "created" in (message.get("what") or ())
        key = (message.get("id"), "row", insert)
        await self.push(await self.render(key, self._row, message["run"], insert))

    def _row(self, run_id, insert):
        return live.row_html(viewer=self.viewer, run_id=run_id, insert=insert)

    async def approvals_updated(self, message):
        if not self.first_time(message):
            return
        key = (message.get("id"), "row+nav", nav_audience(self.viewer))
        await self.push(await self.render(key, self._row_and_count, message["run"]))

    def _row_and_count(self, run_id):
        return nav_count_html(self.viewer) + self._row(run_id, False)
