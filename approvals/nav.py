"""The navigation's pending count on every live page (`base.html#nav-pending-count`): the
count and `hello` on subscribe, the count again on every change of the tenant's inbox."""

from __future__ import annotations

from channels.db import database_sync_to_async

from approvals.selectors_desk import nav_pending_count_context
from console.directory import access
from console.web.sockets import oob


def nav_count_html(viewer, count: int | None = None) -> str:
    """The navigation's pending count; `count`: the same number, when the caller has read it."""
    if count is None:
        return oob("base.html#nav-pending-count", nav_pending_count_context(viewer=viewer))
    return oob("base.html#nav-pending-count", {"nav_pending_count": count})


def nav_audience(viewer) -> str:
    """The nav count is what this principal may decide (its own runs and the budgets it leads
    count): one render per principal."""
    if access.can(viewer, "view_runs") or access.can(viewer, "decide"):
        return f"count:{viewer.pk}"
    return "none"


class NavCountMixin:
    """A socket that also keeps the navigation's pending count current (it listens to the
    tenant's inbox): the count and `hello` on subscribe, the count again on every change."""

    async def send_state(self) -> None:
        await self.push(await database_sync_to_async(nav_count_html)(self.viewer))
        await self.control("hello")

    async def nav_count(self, message):
        key = (message.get("id"), "nav", nav_audience(self.viewer))
        await self.push(await self.render(key, nav_count_html, self.viewer))
