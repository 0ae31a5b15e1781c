"""What every live page carries for notifications: the bell's count (`BellMixin`: in the first
frame, and again when the principal's notifications change) and the `calls` control frames that
become system notifications (`CallsMixin`: static/js/notify.js)."""

from __future__ import annotations

import logging
from collections import OrderedDict

from channels.db import database_sync_to_async

from console.web.sockets import oob
from notifications.selectors import browser_calls, nav_unread_count_context

log = logging.getLogger("console.consumers")  # the name these frames have always logged under


def nav_unread_html(viewer) -> str:
    """The bell's count (`base.html#nav-notification-count`): one principal's, never shared."""
    return oob("base.html#nav-notification-count", nav_unread_count_context(viewer=viewer))


class BellMixin:
    """Every page's bell: its count rides in the first frame of the state, and follows the
    principal's notifications (`notifications.updated` on the user's group)."""

    async def first_frame(self) -> str:
        return await database_sync_to_async(nav_unread_html)(self.viewer)

    async def notifications_updated(self, message):
        """Every page's bell: this principal's notifications were added or read."""
        if not self.first_time(message) or message.get("principal") != self.viewer.pk:
            return
        key = (message.get("id"), "bell", self.viewer.pk)
        await self.push(await self.render(key, nav_unread_html, self.viewer))


class CallsMixin:
    """New calls the viewer may decide, as `calls` control frames, on every live page."""

    async def _handle(self, message):
        await super()._handle(message)
        if message.get("type") == "approvals.updated" and message.get("change") == "requested":
            await self.browser_notify(message)

    async def browser_notify(self, message):
        """New calls this viewer may decide, as a `calls` control frame: every console page
        shows each as a system notification (static/js/notify.js, with the person's
        permission). Once per event, whichever of the socket's groups brought it."""
        notified = self.__dict__.setdefault("notified", OrderedDict())
        mid = message.get("id")
        if mid in notified:
            return
        notified[mid] = True
        while len(notified) > 64:
            notified.popitem(last=False)
        ids = tuple(message.get("approvals") or ())
        try:
            calls = await self.render((mid, "calls", self.viewer.pk), _calls, self.viewer, ids)
            if calls:
                await self.control("calls", calls=calls)
        except Exception:  # a hint: the inbox and the nav count carry the truth
            log.warning("browser notification frame failed", exc_info=True)


def _calls(viewer, approval_ids) -> list[dict]:
    return browser_calls(viewer=viewer, approval_ids=approval_ids)
