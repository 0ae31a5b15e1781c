"""/ws/budgets/ (the budgets page, its range in the query string as on the page) and
/ws/budgets/<budgetId>/ (one budget): spend, charts and alerts live as steps finish.

Both authorize through console/access.py before they subscribe (`view_budgets`; another
tenant's budget is 4404), listen to the tenant's `budgets.<tenant>` group and, for the
navigation's count, its inbox. Every push is rendered once per event per audience: the budget
partials do not depend on who looks beyond `view_budgets`, so an audience is the page (the
index with its range, or the budget) and the nav count's.
"""

from __future__ import annotations

from datetime import date

from approvals.nav import NavCountMixin, nav_audience, nav_count_html
from budgets import access as budgets_access
from budgets import live
from budgets import selectors_pages as pages
from console.core.errors import Invalid
from console.live import realtime
from console.web.sockets import (
    LiveConsumer,
    SharedResults,
    query,
)
from notifications.live import BellMixin, CallsMixin

STATES = SharedResults(1.0)  # the state sent on subscribe: shared for a second at most


class BudgetsConsumer(BellMixin, CallsMixin, NavCountMixin, LiveConsumer):
    def authorize(self) -> list[str]:
        self.budget_id = self.scope["url_route"]["kwargs"].get("budget_id")
        self.usage = None
        if self.budget_id is None:
            budgets_access.budgets_visible_to(viewer=self.viewer)  # Forbidden without view_budgets
            params = query(self.scope)
            try:
                self.usage = pages.usage_range(
                    viewer=self.viewer, raw_from=params.get("from"), raw_to=params.get("to")
                )
            except Invalid:  # the page shows no breakdowns then: nothing of them to push
                self.usage = None
        else:
            budgets_access.budget_for(viewer=self.viewer, budget_id=self.budget_id)  # 4404 / 4403
        tenant_id = self.viewer.tenant_id
        return [realtime.budgets_group(tenant_id), realtime.inbox_group(tenant_id)]

    def page_key(self) -> tuple:
        usage = self.usage
        span = (usage.date_from, usage.date_to) if usage is not None else None
        return (self.viewer.tenant_id, self.budget_id, span)

    def check_key(self):
        return self.page_key()

    async def send_state(self) -> None:
        key = ("budgets-state", *self.page_key(), nav_audience(self.viewer))
        await self.push(await self.shared(STATES, key, self._state))
        await self.control("hello")

    def _state(self) -> str:
        return nav_count_html(self.viewer) + self._page(days=None)

    def _page(self, *, days) -> str:
        if self.budget_id is not None:
            return live.detail_html(viewer=self.viewer, budget_id=self.budget_id)
        return live.index_html(viewer=self.viewer, usage=self.usage, days=days)

    async def budgets_changed(self, message):
        if not self.first_time(message):
            return
        days = tuple(message.get("days") or ())
        key = (message.get("id"), "budgets", *self.page_key())
        await self.push(await self.render(key, self._changed, days))

    def _changed(self, days) -> str:
        return self._page(days=[date.fromisoformat(day) for day in days])

    async def approvals_updated(self, message):
        """The nav count; on a budget's page also its overrides (their approvals' states)."""
        if not self.first_time(message):
            return
        if self.budget_id is None:
            await self.nav_count(message)
            return
        key = (message.get("id"), "budget-overrides", *self.page_key(), nav_audience(self.viewer))
        await self.push(await self.render(key, self._overrides))

    def _overrides(self) -> str:
        parts = ("budget-overrides",)
        overrides = live.detail_html(viewer=self.viewer, budget_id=self.budget_id, parts=parts)
        return nav_count_html(self.viewer) + overrides
