"""The only publisher to the channel layer. Services call `publish_on_commit`; nothing else
touches the layer. Messages are small dicts of ids and facts, never HTML, never content."""

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def run_group(tenant_id: int, run_id: str) -> str:
    # Group names allow only ASCII alphanumerics, hyphens, underscores and periods (< 100 chars).
    import hashlib

    digest = hashlib.sha1(run_id.encode()).hexdigest()[:20]  # noqa: S324 - a name, not a secret
    return f"run.{tenant_id}.{digest}"


def inbox_group(tenant_id: int) -> str:
    return f"inbox.{tenant_id}"


def runlist_group(tenant_id: int) -> str:
    return f"runs.{tenant_id}"


def _send(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # the layer is lossy by design: a lost hint delays, never loses
        log.warning("channel layer publish to %s failed", group, exc_info=True)


def publish_on_commit(groups: list[str], message: dict) -> None:
    """Send `message` to each group once the current transaction commits."""

    def send():
        for group in groups:
            _send(group, message)

    transaction.on_commit(send)


# What services call (on commit). Consumers decide what to re-render from these facts.
def run_changed(*, run, what: list[str]) -> None:
    """A run's stored state moved: `what` names the parts (steps, messages, header, usage,
    todos, verdicts, approvals, status). Carries the run's lastSeq so clients can spot a gap."""
    message = {
        "type": "run.updated",
        "tenant": run.tenant_id,
        "run": run.external_id,
        "seq": run.last_seq,
        "what": sorted(set(what)),
    }
    publish_on_commit(
        [run_group(run.tenant_id, run.external_id), runlist_group(run.tenant_id)], message
    )


def approvals_changed(*, run, approval_ids: list[str], change: str) -> None:
    """Approvals of a run were requested, decided, expired or cancelled (`change`)."""
    message = {
        "type": "approvals.updated",
        "tenant": run.tenant_id,
        "run": run.external_id,
        "seq": run.last_seq,
        "approvals": list(approval_ids),
        "change": change,
    }
    publish_on_commit(
        [inbox_group(run.tenant_id), run_group(run.tenant_id, run.external_id)], message
    )


# Listening (the decisions long-poll). Added for approvals/api.py: an async context manager
# that hears a group's messages without ever losing its subscription between waits.
class _Subscription:
    """`async with wait_for(group) as woken: await woken.wait(timeout)` → True when a message
    arrived on the group since the last wait. Lossy like the layer: callers re-check the
    database on a timer, so a lost message only delays. A reader task owns `receive()` (a
    timed-out receive would drop the pub/sub layer's channel), and waits only on an Event."""

    def __init__(self, group: str):
        self.group = group
        self.layer = None
        self.channel = None
        self.task = None
        self.event = None

    async def __aenter__(self):
        import asyncio

        self.event = asyncio.Event()
        self.layer = get_channel_layer()
        if self.layer is None:
            return self
        try:
            self.channel = await self.layer.new_channel()
            await self.layer.group_add(self.group, self.channel)
            self.task = asyncio.ensure_future(self._read())
        except Exception:  # no layer: the timer still answers
            log.warning("channel layer subscribe to %s failed", self.group, exc_info=True)
        return self

    async def _read(self):
        while True:
            await self.layer.receive(self.channel)
            self.event.set()

    async def wait(self, timeout: float) -> bool:
        import asyncio

        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        self.event.clear()
        return True

    async def __aexit__(self, *exc):
        import asyncio
        import contextlib

        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        if self.channel is not None:
            with contextlib.suppress(Exception):
                await self.layer.group_discard(self.group, self.channel)
        return False


def wait_for(group: str) -> _Subscription:
    return _Subscription(group)
