"""/ws/inbox/: the reviewer's desk live (its rows, its count, the card in its pane), and the
navigation's pending count on every page (`?only=count`: the count alone, for other pages)."""

from __future__ import annotations

from approvals import access as approvals_access
from approvals import live, live_desk, selectors_desk
from approvals.nav import NavCountMixin, nav_audience
from console.live import realtime
from console.web.sockets import (
    LiveConsumer,
    SharedResults,
    card_audience,
    query,
)
from notifications.live import BellMixin, CallsMixin

FACTS = SharedResults(5.0)  # a run's principal and self-approval rule, per event


class InboxConsumer(BellMixin, CallsMixin, NavCountMixin, LiveConsumer):
    def authorize(self) -> list[str]:
        params = query(self.scope)
        self.count_only = params.get("only") == "count"
        if not self.count_only:
            approvals_access.approvals_visible_to(viewer=self.viewer)  # Forbidden without one
        # The desk's rows (`desk=1`, which every inbox socket now is: the grouped inbox it
        # replaced is gone), with the desk's filters.
        self.filters = selectors_desk.desk_filters(params)
        return [realtime.inbox_group(self.viewer.tenant_id)]

    def check_key(self):
        return (self.count_only, tuple(sorted(self.filters.items())))

    async def approvals_updated(self, message):
        if not self.first_time(message):
            return
        if self.count_only:
            await self.nav_count(message)
            return
        ids, change = tuple(message.get("approvals") or ()), message.get("change", "")
        run_id, principal_id = message["run"], message.get("principal")
        allow_self = message.get("selfApproval")
        if allow_self is None:  # not in the message: ask once per process
            principal_id, allow_self = await self.shared(
                FACTS, ("run", run_id), self._facts, run_id
            )
        audience = card_audience(
            self.viewer, run_principal_id=principal_id, allow_self_approval=allow_self
        )
        filters = tuple(sorted(self.filters.items()))
        key = (message.get("id"), "desk", nav_audience(self.viewer), audience, filters)
        await self.push(await self.render(key, self._render, ids, change))

    def _facts(self, run_id):
        return live.run_facts(viewer=self.viewer, run_id=run_id)

    def _render(self, ids, change):
        """The nav count and the cards, in one trip to the database thread."""
        return live_desk.desk_html(
            viewer=self.viewer, approval_ids=ids, change=change, filters=self.filters
        )
