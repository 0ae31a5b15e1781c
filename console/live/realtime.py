"""The only code that touches the channel layer: the publisher, and the listeners' fan-out.

Services call `run_changed` / `approvals_changed` / `notifications_changed` (deferred to
`transaction.on_commit`). Messages are small dicts of ids and facts, never HTML, never
content. Sockets and the decisions long-poll listen through `Fanout` (one layer subscription
per group per process).
docs/realtime.md lists every event and its group.

Publishing is safe from every context: from async code (a task on the running loop), from a
sync thread inside daphne (handed to daphne's own loop, so the Redis pub/sub layer reuses that
loop's connection, and sent there in order without the thread waiting: `_Outbox`) and from
plain sync code such as a management command (a publisher loop of its own, in one daemon
thread, so the connection is made once, not once per message; the caller waits for the send).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import hashlib
import logging
import os
import secrets
import threading
import weakref

from asgiref.sync import SyncToAsync
from channels.layers import get_channel_layer
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_init, post_save
from django.dispatch import receiver

log = logging.getLogger("console.realtime")
SEND_TIMEOUT = 5.0  # seconds a send may take at most (a sync caller outside a server waits)
OUTBOX_LIMIT = 10_000  # messages a server's sync threads may leave waiting for the layer


def run_group(tenant_id: int, run_id: str) -> str:
    # Group names allow only ASCII alphanumerics, hyphens, underscores and periods (< 100 chars).
    digest = hashlib.sha1(run_id.encode()).hexdigest()[:20]  # noqa: S324 - a name, not a secret
    return f"run.{tenant_id}.{digest}"


def inbox_group(tenant_id: int) -> str:
    return f"inbox.{tenant_id}"


def runlist_group(tenant_id: int) -> str:
    return f"runs.{tenant_id}"


def budgets_group(tenant_id: int) -> str:
    return f"budgets.{tenant_id}"


def user_group(user_id: int) -> str:
    """Every socket of one signed-in user (sign-out and deactivation close them)."""
    return f"user.{user_id}"


def session_tag(session_key: str | None) -> str | None:
    """A short digest naming a session on the layer (the key itself never travels)."""
    if not session_key:
        return None
    return hashlib.sha256(session_key.encode()).hexdigest()[:24]


_server_loops: weakref.WeakSet = weakref.WeakSet()


def serving(app):
    """Wrap the ASGI application: the loops it is called on are servers' loops (daphne's), which
    live as long as the process. Sync code in their threads publishes on them (`_outer_loop`)."""

    async def application(scope, receive, send):
        _server_loops.add(asyncio.get_running_loop())
        return await app(scope, receive, send)

    return application


def _outer_loop():
    """The server's event loop when this is one of its sync threads (a sync view under daphne,
    or database_sync_to_async), else None. Only a server's loop: the short-lived loop that
    async_to_sync makes for an async view under WSGI (the test live server) may stop between
    the check and the send, and a send scheduled on a stopped loop would block its caller
    for SEND_TIMEOUT (it did: a background task of the decisions long-poll, run in the
    request's own thread while that loop was closing, held the answer 5 s)."""
    local = SyncToAsync.threadlocal
    loop = getattr(local, "main_event_loop", None)
    if loop is None or getattr(local, "main_event_loop_pid", None) != os.getpid():
        return None
    return loop if loop in _server_loops and loop.is_running() else None


class _PublisherLoop:
    """An event loop of our own, in one daemon thread, for sync code outside any server."""

    lock = threading.Lock()
    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls.lock:
            if cls.loop is None or cls.loop.is_closed():
                cls.loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=cls.loop.run_forever, name="gavel-realtime", daemon=True
                )
                thread.start()
            return cls.loop


_pending_tasks: set = set()


async def _publish(layer, groups: list[str], message: dict) -> None:
    """One message to several groups, concurrently (one layer round trip, not one each).
    This loop's own wake-ups of those groups are woken first, without the layer's round trip
    (`_wake_here`)."""
    _wake_here(groups)
    results = await asyncio.gather(
        *(layer.group_send(group, message) for group in groups), return_exceptions=True
    )
    for group, result in zip(groups, results, strict=True):
        if isinstance(result, BaseException):
            log.warning("channel layer publish to %s failed", group, exc_info=result)


def _wake_here(groups: list[str]) -> None:
    """Wake this loop's `wait_for` listeners of `groups` now: a decision made in the process
    where its runtime's long-poll or its held MCP call waits wakes it without going through
    the layer and back (about 1 ms with Redis, on the decision's path). The layer still
    carries the message, to the other processes and to every listener here (such a wake-up
    then hears it twice: a wake-up is a hint to read the database again, so a second one
    costs at most one more read). Only wake-ups: a live page's socket renders each message
    it hears, so it hears each once, from the layer."""
    fanout = Fanout._by_loop.get(asyncio.get_running_loop())
    if fanout is None:
        return
    for group in groups:
        held = fanout.groups.get(group)
        if held is None:
            continue
        for listener in list(held.listeners):
            if isinstance(listener, _Waiter):
                listener.wake()


def _send(groups: list[str], message: dict) -> None:
    layer = get_channel_layer()
    if layer is None or not groups:
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    try:
        if running is not None:  # async code: never block the loop
            task = running.create_task(_publish(layer, groups, message))
            _pending_tasks.add(task)
            task.add_done_callback(_sent)
            return
        loop = _outer_loop()
        if loop is not None:  # a server's thread (a view's): hand it over, never wait
            loop.call_soon_threadsafe(_Outbox.put, loop, layer, groups, message)
            return
        # Sync code outside any server (a management command, the worker): one hop to the
        # publisher loop for every group, waiting for the send, so one thread's events reach
        # the layer in the order they happened and none is left behind when the command ends.
        asyncio.run_coroutine_threadsafe(
            _publish(layer, groups, message), _PublisherLoop.get()
        ).result(SEND_TIMEOUT)
    except Exception:  # the layer is lossy by design: a lost hint delays, never loses
        log.warning("channel layer publish to %s failed", ", ".join(groups), exc_info=True)


class _Outbox:
    """A server loop's messages from its sync threads, published in the order they were
    handed over (`call_soon_threadsafe` keeps it), one after another, by one task on that
    loop. The view's thread goes on at once: it used to wait for each message's round trip
    on a loop that was busy with what the first one caused (an inbox socket hearing the new
    call and rendering its row), 6-10 ms of an `approval.requested` POST's 19 ms. Bounded:
    past OUTBOX_LIMIT messages waiting (a layer that stopped answering), a new one is
    dropped and logged, as a failed send always was."""

    _by_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self):
        self.waiting: collections.deque = collections.deque()
        self.task: asyncio.Task | None = None

    @classmethod
    def put(cls, loop, layer, groups: list[str], message: dict) -> None:  # on `loop`
        box = cls._by_loop.get(loop)
        if box is None:
            box = cls._by_loop[loop] = cls()
        if len(box.waiting) >= OUTBOX_LIMIT:
            log.warning("channel layer outbox full: a message to %s dropped", ", ".join(groups))
            return
        box.waiting.append((layer, groups, message))
        if box.task is None or box.task.done():
            box.task = loop.create_task(box._drain())

    async def _drain(self) -> None:
        while self.waiting:
            layer, groups, message = self.waiting.popleft()
            try:
                await asyncio.wait_for(_publish(layer, groups, message), SEND_TIMEOUT)
            except Exception:  # TimeoutError included: the next message still goes
                log.warning("channel layer publish to %s failed", ", ".join(groups), exc_info=True)


def _sent(task) -> None:
    _pending_tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("channel layer publish failed", exc_info=task.exception())


def publish_on_commit(groups: list[str], message: dict) -> None:
    """Send `message` to each group once the current transaction commits."""

    message = {**message, "id": secrets.token_hex(8)}  # one event, however many groups

    transaction.on_commit(lambda: _send(groups, message))


# What services call (on commit). Consumers decide what to re-render from these facts.
def run_changed(*, run, what: list[str]) -> None:
    """A run's stored state moved: `what` names the parts (steps, messages, header, usage,
    todos, verdicts, approvals, status). Carries the run's lastSeq, and `prev`, the lastSeq this
    change started from (None when unknown), so a listener can tell that it missed one."""
    message = {
        "type": "run.updated",
        "tenant": run.tenant_id,
        "run": run.external_id,
        "seq": run.last_seq,
        "prev": getattr(run, "_realtime_seq", None),
        "what": sorted(set(what)),
    }
    run._realtime_seq = run.last_seq  # the next change of this instance starts here
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
        # Who may see decision controls depends on these (consumers need no lookup for them).
        "principal": run.principal_id,
        "selfApproval": run.tenant.allow_self_approval if _loaded(run, "tenant") else None,
    }
    # The run's group first: the held decisions long-poll listens there.
    publish_on_commit(
        [run_group(run.tenant_id, run.external_id), inbox_group(run.tenant_id)], message
    )


def notifications_changed(*, principals) -> None:
    """Principals' notifications were added or read: each one's bell count is stale. Sent to
    the user group of each principal that signs in (ids only, one message per principal)."""
    for principal in principals:
        if principal.user_id is None:
            continue
        message = {"type": "notifications.updated", "principal": principal.pk}
        publish_on_commit([user_group(principal.user_id)], message)


def budgets_changed(*, run, days) -> None:
    """Usage was added to the tenant's rollups (one ingest unit that carried usage): the
    budgets pages re-read their spend. `days`: the tenant-local days it counted on."""
    message = {
        "type": "budgets.changed",
        "tenant": run.tenant_id,
        "days": sorted(day.isoformat() for day in days),
    }
    publish_on_commit([budgets_group(run.tenant_id)], message)


def _loaded(instance, relation: str) -> bool:
    return relation in instance._state.fields_cache


def user_sockets_close(
    *, user_id: int, session_key: str | None = None, reason: str, tenant_id: int | None = None
) -> None:
    """Close a user's sockets on commit: those of one session (sign-out, a tenant switch) or
    all (deactivation); with `tenant_id`, only those watching that tenant. Consumers also
    re-check their viewer on a timer, so a lost message only delays."""
    message = {"type": "sockets.close", "session": session_tag(session_key), "reason": reason}
    if tenant_id is not None:
        message["tenant"] = tenant_id
    publish_on_commit([user_group(user_id)], message)


@receiver(user_logged_out, dispatch_uid="gavel-realtime-logout")
def _signed_out(sender, request, user, **kwargs):
    if user is not None:
        session_key = getattr(getattr(request, "session", None), "session_key", None)
        user_sockets_close(user_id=user.pk, session_key=session_key, reason="signed_out")


@receiver(post_save, sender="auth.User", dispatch_uid="gavel-realtime-user-saved")
def _user_saved(sender, instance, created, **kwargs):
    if not created and not instance.is_active:
        user_sockets_close(user_id=instance.pk, reason="deactivated")


@receiver(post_save, sender="console.Principal", dispatch_uid="gavel-realtime-principal-saved")
def _principal_saved(sender, instance, created, **kwargs):
    if not created and not instance.is_active and instance.user_id:
        user_sockets_close(
            user_id=instance.user_id, reason="deactivated", tenant_id=instance.tenant_id
        )


@receiver(post_init, sender="runs.Run", dispatch_uid="gavel-realtime-run-loaded")
def _run_loaded(sender, instance, **kwargs):
    # The lastSeq as loaded: `run_changed` reports it as `prev` (never triggers a query).
    instance._realtime_seq = instance.__dict__.get("last_seq")


# Listening: one layer subscription per group per process, fanned out to local listeners.
#
# A thousand sockets on one run used to mean a thousand layer channels: a thousand queue puts,
# a thousand deserializations and a thousand consumer wake-ups per event, before one shared
# render and a thousand sends. Now each process (each event loop) holds one channel per group
# it has listeners for; a reader task takes each message off the layer once and hands it to
# every local listener in turn (`await listener.deliver(message)`), in the order the layer
# gave them, with the cycle collector paused meanwhile (`_collector_paused`). A listener that
# renders shares its render with the others (the consumers' render cache), and a daphne
# socket's frame is built once for all (console/wsframes.py), so the sends follow one another
# without a wake-up in between.


_pauses = 0  # fan-outs under way in this process (the loop's thread only)


@contextlib.contextmanager
def _collector_paused():
    """Python's cycle collector off while one event goes to every local listener, back on
    (with its counts intact) after the last. Each delivery allocates a few dozen short-lived
    objects (its coroutines, autobahn's and Twisted's write bookkeeping), nearly all freed by
    reference counting at once; with the collector on, every 700 allocations start a
    collection, and their survivors (the writes still queued) are promoted until a full
    collection walks every object of the process: with 2,000 sockets open, about half a
    million, hundreds of ms each time (docs/benchmarks.md, "Fan-out over two processes").
    Paused, one young-generation collection follows the fan-out instead."""
    global _pauses
    if _pauses == 0 and not gc.isenabled():  # someone else turned it off: leave it so
        yield
        return
    _pauses += 1
    gc.disable()
    try:
        yield
    finally:
        _pauses -= 1
        if _pauses == 0:
            gc.enable()


class _Group:
    """The local listeners of one group in one process, and its one layer subscription."""

    def __init__(self, name: str):
        self.name = name
        self.listeners: dict = {}  # listener -> None: insertion-ordered, no duplicates
        self.channel: str | None = None
        self.ready: asyncio.Future | None = None
        self.reader: asyncio.Task | None = None

    @property
    def failed(self) -> bool:
        """The subscription could not be made (the layer was down): the watch retries it."""
        ready = self.ready
        return ready is not None and ready.done() and (ready.cancelled() or bool(ready.exception()))

    async def subscribe(self, layer) -> None:
        self.channel = await layer.new_channel()
        await layer.group_add(self.name, self.channel)
        self.reader = asyncio.ensure_future(self._read(layer))

    async def _read(self, layer) -> None:
        while True:
            message = await layer.receive(self.channel)
            with _collector_paused():
                for listener in list(self.listeners):
                    if listener not in self.listeners:  # left while an earlier one was served
                        continue
                    try:
                        await listener.deliver(message)
                    except Exception:  # one listener's failure is not the others'
                        log.warning("live delivery on %s failed", self.name, exc_info=True)

    async def unsubscribe(self, layer) -> None:
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.reader
        if self.channel is not None:
            with contextlib.suppress(Exception):
                await layer.group_discard(self.name, self.channel)


# Is the layer passing messages? (Redis stopped: no.) While a process has listeners, it sends
# itself a heartbeat through the layer. It is down after DOWN_AFTER_FAILURES sends in a row
# fail (Redis refused: about a second), or when no heartbeat came back for DOWN_AFTER_SILENCE
# seconds (a slow loop under load is not an outage); then every local listener with
# `layer_changed` hears False (a socket tells its page "reconnecting"). While down it probes
# every PROBE_SECONDS, and the first heartbeat heard brings it back: the subscriptions that
# could not be made are made, and every listener hears True (the page re-reads what it
# missed). Publishing meanwhile fails fast and is only logged: ingest and decisions never wait
# for the layer.
BEAT_SECONDS = 0.5
PROBE_SECONDS = 0.1
SEND_LIMIT = 2.0
DOWN_AFTER_FAILURES = 3
DOWN_AFTER_SILENCE = 10.0


class _Watch:
    """The heartbeat of one process's (one event loop's) layer connection."""

    def __init__(self, fanout: Fanout, layer):
        self.fanout = fanout
        self.layer = layer
        self.up = True
        self.failures = 0
        self.loop = asyncio.get_running_loop()
        self.heard_at = self.loop.time()
        self.channel: str | None = None
        self.hearing: asyncio.Task | None = None
        self.task = asyncio.ensure_future(self._beat())

    async def _beat(self) -> None:
        try:
            while True:
                try:
                    await asyncio.wait_for(self._send(), SEND_LIMIT)
                    self.failures = 0
                except Exception:  # refused, lost, timed out
                    self.failures += 1
                silent = self.loop.time() - self.heard_at > DOWN_AFTER_SILENCE
                if self.up and (self.failures >= DOWN_AFTER_FAILURES or silent):
                    await self.fanout.layer_state(False)
                await asyncio.sleep(BEAT_SECONDS if self.up else PROBE_SECONDS)
        finally:
            if self.hearing is not None:
                self.hearing.cancel()

    async def _send(self) -> None:
        if self.channel is None:
            self.channel = await self.layer.new_channel()
            self.hearing = asyncio.ensure_future(self._hear(self.channel))
        await self.layer.send(self.channel, {"type": "layer.heartbeat"})

    async def _hear(self, channel: str) -> None:
        while True:  # the layer re-subscribes the channel itself when it reconnects
            await self.layer.receive(channel)
            self.heard_at = self.loop.time()
            await self.fanout.layer_state(True)

    def stop(self) -> None:
        self.task.cancel()


def _watched(layer) -> bool:
    """The in-process layer cannot go down; any other (Redis) is watched."""
    from channels.layers import InMemoryChannelLayer

    return not isinstance(layer, InMemoryChannelLayer)


class Fanout:
    """Per event loop: `join(group, listener)` / `leave(group, listener)`. A listener has
    `async deliver(message)`, and may have `async layer_changed(up)` (see _Watch). Joining
    returns once the group's subscription is in place (True), so a listener that reads the
    database after joining misses nothing published after that read; False: the layer is
    down, the subscription is retried when it is back, and the listener is told."""

    _by_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self):
        self.groups: dict[str, _Group] = {}
        self.watch: _Watch | None = None
        self.changing = asyncio.Lock()
        self.anchor: str | None = None

    @property
    def layer_up(self) -> bool:
        return self.watch is None or self.watch.up

    async def layer_state(self, up: bool) -> None:
        """What the heartbeat found. Back up: the failed subscriptions are made again first,
        then the listeners hear it (those of a group that still fails wait for the next)."""
        async with self.changing:
            await self._layer_state(up)

    async def _layer_state(self, up: bool) -> None:
        was_up = self.layer_up
        if self.watch is not None:
            self.watch.up = up
        if not up:
            if was_up:
                log.warning("channel layer down: live pages show reconnecting")
                await self._tell(self.groups.values(), False)
            return
        failed = [held for held in self.groups.values() if held.failed]
        if was_up and not failed:
            return
        layer = get_channel_layer()
        for held in failed:
            held.ready = asyncio.ensure_future(held.subscribe(layer))
            with contextlib.suppress(Exception):
                await asyncio.shield(held.ready)
        if not was_up:
            log.warning("channel layer back: live pages catch up")
        back = self.groups.values() if not was_up else failed
        await self._tell([held for held in back if not held.failed], True)

    async def _tell(self, groups, up: bool) -> None:
        listeners = {listener: None for held in list(groups) for listener in held.listeners}
        for listener in listeners:
            changed = getattr(listener, "layer_changed", None)
            if changed is None:
                continue
            try:
                await changed(up)
            except Exception:  # one listener's failure is not the others'
                log.warning("telling a listener the layer is %s failed", up, exc_info=True)

    @classmethod
    def here(cls) -> Fanout:
        loop = asyncio.get_running_loop()
        fanout = cls._by_loop.get(loop)
        if fanout is None:
            fanout = cls._by_loop[loop] = cls()
        return fanout

    def listeners(self, group: str) -> int:
        held = self.groups.get(group)
        return len(held.listeners) if held else 0

    async def join(self, group: str, listener) -> bool:
        layer = get_channel_layer()
        if layer is None:
            return True
        if self.watch is None and _watched(layer):
            self.watch = _Watch(self, layer)
        if self.anchor is None and _watched(layer):
            await self._anchor(layer)
        held = self.groups.get(group)
        if held is None:
            held = self.groups[group] = _Group(group)
            held.ready = asyncio.ensure_future(held.subscribe(layer))
        held.listeners[listener] = None
        try:
            await asyncio.shield(held.ready)
        except Exception:  # no layer: the page still works over HTTP, the poll on its timer
            log.warning("channel layer subscribe to %s failed", group, exc_info=True)
            return False
        return self.layer_up

    async def _anchor(self, layer) -> None:
        """One channel of this loop that stays subscribed for the loop's life (nothing is ever
        sent to it). channels_redis's pub/sub receiver sleeps 100 ms whenever its connection
        is subscribed to nothing, and a group subscribed during that sleep hears nothing
        before it ends: a process whose one listener (a runtime's long-poll, a held MCP call)
        had just left heard the next one's wake up to 100 ms late (bench/decisions.py,
        docs/benchmarks.md "2026-12-07, evening"). With this one always there, the receiver
        always waits on its socket."""
        try:
            self.anchor = await layer.new_channel(prefix="anchor.")
        except Exception:  # the layer is down: the next join tries again
            log.warning("channel layer anchor subscription failed", exc_info=True)

    async def leave(self, group: str, listener) -> None:
        held = self.groups.get(group)
        if held is None or listener not in held.listeners:
            return
        del held.listeners[listener]
        if not held.listeners:
            del self.groups[group]  # a later join subscribes afresh
            if not self.groups and self.watch is not None:  # no one listens: no heartbeat
                self.watch.stop()
                self.watch = None
            layer = get_channel_layer()
            if layer is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(held.ready)
                await held.unsubscribe(layer)


class _Waiter:
    """`async with wait_for(group) as woken: await woken.wait(timeout)` → True when a message
    arrived on the group since the last wait. Lossy like the layer: callers re-check the
    database on a timer, so a lost message only delays."""

    def __init__(self, group: str):
        self.group = group
        self.event: asyncio.Event | None = None

    async def deliver(self, message) -> None:
        self.wake()

    def wake(self) -> None:
        if self.event is not None:
            self.event.set()

    async def __aenter__(self):
        self.event = asyncio.Event()
        await Fanout.here().join(self.group, self)
        return self

    async def wait(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        self.event.clear()
        return True

    async def __aexit__(self, *exc):
        await Fanout.here().leave(self.group, self)
        return False


def wait_for(group: str) -> _Waiter:
    """The decisions long-poll's wake-up: a listener of `group` for the `async with` block."""
    return _Waiter(group)
