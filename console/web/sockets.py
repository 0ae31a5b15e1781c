"""The base of every live socket: authorize before subscribing, push htmx OOB swaps, stay honest.

A consumer only translates. `authorize()` (sync, through its app's access.py) names what the
socket may watch and its audience, or raises Forbidden/NotFound (close 4403/4404). Each layer
message is a hint: the consumer re-reads the database and renders the SAME partials the pages
use, once per event per audience per process (`RENDERS`), so a thousand sockets on one run
cost a handful of renders. A gap in a run's seq makes the client re-fetch over HTTP.

Hygiene: sign-out or deactivation publishes `sockets.close` to the user's group; the socket
also re-checks its viewer every GAVEL_WS_RECHECK_SECONDS, so a lost message or a revoked
capability only delays the close.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
import weakref
from collections import Counter, OrderedDict
from importlib import import_module
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.template.loader import render_to_string

from console.audit.log import audit_refused
from console.core import auditchain
from console.core.errors import Forbidden, NotFound
from console.directory import access, signin
from console.live import frames as wsframes
from console.live import realtime

log = logging.getLogger("console.consumers")
CLOSE_DENIED = 4403  # anonymous, signed out, deactivated, missing capability
CLOSE_NOT_FOUND = 4404  # another tenant's object, or none
CLOSE_TOO_MANY = 4429  # the principal or the session already has its cap of sockets here
RECHECK_SECONDS = float(os.environ.get("GAVEL_WS_RECHECK_SECONDS", "10"))
RENDER_TTL = 10.0  # seconds a render stays shared between the sockets of one process
LAYER_EVENTS = frozenset(
    {
        "run.updated",
        "approvals.updated",
        "budgets.changed",
        "sockets.close",
        "notifications.updated",
    }
)


class Refused(Exception):
    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


class SharedResults:
    """Per event loop: one computation per key, awaited by every socket that asks within the
    TTL (the render-once cache, and the de-duplicated re-checks).

    Every entry belongs to one tenant: `tenant` is a required argument and part of the key, so
    two tenants' sockets never share a result, whatever else their keys hold (two tenants may
    both hold a run `run_1`; a viewer's audience is "viewer" in every tenant)."""

    def __init__(self, ttl: float, limit: int = 4096):
        self.ttl = ttl
        self.limit = limit
        self.computed = 0  # how many computations ran (tests and the bench read it)
        self._by_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    async def get(self, key, compute, *args, tenant: int):
        """`compute(*args)` is sync (it reads the database): it runs in a worker thread.
        `tenant`: the id of the tenant whose data `compute` reads (the socket's)."""
        if not isinstance(tenant, int) or isinstance(tenant, bool):
            raise TypeError(f"a shared result needs its tenant's id, not {tenant!r}")
        key = (tenant, key)
        items = self._by_loop.setdefault(asyncio.get_running_loop(), OrderedDict())
        now = time.monotonic()
        hit = items.get(key)
        if hit is None or hit[0] <= now:
            self.computed += 1
            # Not the thread sync views share: a render never queues behind a slow request.
            call = database_sync_to_async(compute, thread_sensitive=False)
            future = asyncio.ensure_future(call(*args))
            items[key] = hit = (now + self.ttl, future)
            while len(items) > self.limit:
                items.popitem(last=False)
            future.add_done_callback(lambda f: _failed(f) and items.pop(key, None))
        return await asyncio.shield(hit[1])


def _failed(future) -> bool:
    return future.cancelled() or future.exception() is not None


RENDERS = SharedResults(RENDER_TTL)
CHECKS = SharedResults(max(0.5, RECHECK_SECONDS / 2))


class SocketSlots:
    """The open sockets of each principal and of each session in this process (per event
    loop), against GAVEL_WS_MAX_PER_PRINCIPAL and GAVEL_WS_MAX_PER_SESSION. Process-local: N
    server processes allow N times the cap (docs/realtime.md)."""

    _by_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @classmethod
    def take(cls, *, principal_id: int, session_key: str | None) -> tuple | None:
        """The slots taken (give them back with `give`), or None when a cap is reached."""
        counts = cls._by_loop.setdefault(asyncio.get_running_loop(), Counter())
        caps = {
            ("principal", principal_id): settings.GAVEL_WS_MAX_PER_PRINCIPAL,
            ("session", session_key): settings.GAVEL_WS_MAX_PER_SESSION,
        }
        slots = tuple(slot for slot in caps if slot[1] is not None)
        if any(counts[slot] >= caps[slot] for slot in slots):
            return None
        counts.update(slots)
        return slots

    @classmethod
    def give(cls, slots: tuple) -> None:
        counts = cls._by_loop.get(asyncio.get_running_loop())
        if counts is not None:
            counts.subtract(slots)
            for slot in slots:
                if counts[slot] <= 0:
                    del counts[slot]


def oob(template: str, context: dict) -> str:
    """One named partial, rendered as the pages render it (no request: no per-user token)."""
    return render_to_string(template, context)


def wrap(
    *,
    target: str,
    inner: str,
    how: str = "beforeend",
    unless: str | None = None,
    rows: bool = False,
    unfiltered: bool = False,
) -> str:
    """An append/insert through a wrapper whose children are the new elements (a <tbody> for
    table rows); `unless` names an element whose presence makes the client skip it, and
    `unfiltered` skips it on a filtered list (live.js)."""
    context = {"how": how, "target": target, "inner": inner, "unless": unless}
    context["unfiltered"] = unfiltered
    return render_to_string(f"live/oob.html#{'wrap-rows' if rows else 'wrap'}", context)


def delete(selector: str) -> str:
    return render_to_string("live/oob.html#delete", {"selector": selector})


def card_audience(viewer, *, run_principal_id, allow_self_approval: bool) -> str:
    """Who sees which decision controls on a card: viewers never; deciders by their roles (the
    tool globs) and whether the run is their own. Any viewer of one audience renders alike
    ("Always approve calls like this" needs `manage_rules` and the right to decide the tool:
    the roles' key covers it for deciders; viewers who may not decide never see it)."""
    if not access.can(viewer, "decide"):
        return "viewer"
    own = run_principal_id == viewer.pk and not allow_self_approval
    return f"decider:{access.roles_key(viewer)}{':own' if own else ''}"


def _session_now(session_key: str | None):
    """The session as it is now (a fresh read: sign-out or a tenant switch elsewhere shows)."""
    if not session_key:
        return None
    return import_module(settings.SESSION_ENGINE).SessionStore(session_key)


class LiveConsumer(AsyncWebsocketConsumer):
    """Subclasses define `authorize()` (sync: set what the socket watches; return the groups
    to join) and the `run_updated` / `approvals_updated` handlers they need."""

    # No layer channel of its own: the socket listens through the process's fan-out
    # (`realtime.Fanout`), one layer subscription per group however many sockets watch it.
    channel_layer_alias = None

    async def connect(self):
        self.frames = wsframes.for_scope(self.scope)  # None unless the server is daphne
        self.viewer = None
        self.recent: OrderedDict = OrderedDict()  # message ids handled (a socket in 2 groups)
        self.backlog: list | None = []  # events heard before the state was sent (then None)
        self.session_key = getattr(self.scope.get("session"), "session_key", None)
        auditchain.current_origin.set(origin(self.scope))  # for what the socket audits
        try:
            groups = await database_sync_to_async(self._authorize)()
            self.slots = SocketSlots.take(principal_id=self.viewer.pk, session_key=self.session_key)
            if self.slots is None:
                log.info("socket refused: principal %s has too many open", self.viewer.pk)
                raise Refused(CLOSE_TOO_MANY)
        except Refused as refused:
            await self.accept()  # then close: the browser sees the code and does not retry
            await self.close(code=refused.code)
            return
        self.tenant_id = self.viewer.tenant_id  # a socket watches one tenant for its life
        self.joined = [*groups, realtime.user_group(self.viewer.user_id)]
        fanout = realtime.Fanout.here()
        self.layer_down = False
        for group in self.joined:
            if not await fanout.join(group, self):
                self.layer_down = True
        await self.accept()
        # What rides in the first frame of the state: the bell's count (every page has the
        # bell: notifications.live.BellMixin).
        self.bell = await self.first_frame()
        await self.send_state()
        while self.backlog:  # in the order heard; nothing can overtake them
            await self._handle(self.backlog.pop(0))
        self.backlog = None
        if self.layer_down:  # the page is complete, but nothing live reaches it yet
            await self.control("reconnecting")
        self.recheck = asyncio.ensure_future(self._recheck_forever())

    async def layer_changed(self, up: bool) -> None:
        """The channel layer stopped passing messages (Redis down), or passes them again
        (realtime.Fanout's heartbeat). Down: the page shows "reconnecting…". Back: the current
        state, and `resync` (the page re-reads its partials over HTTP): what was missed
        meanwhile is on the page within a heartbeat of the layer's return."""
        self.layer_down = not up
        if self.backlog is not None:  # still connecting: `connect` says it at its end
            return
        if up:
            await self.send_state()
            await self.control("resync")
        else:
            await self.control("reconnecting")

    async def deliver(self, message):
        """A layer event, handed over by the process's fan-out (console/realtime.py) in its own
        task. Until the state is sent, events wait in the backlog (handled right after it, in
        order, as a per-socket channel would have queued them)."""
        if message.get("type") not in LAYER_EVENTS:
            return
        if self.backlog is not None:
            self.backlog.append(message)
            return
        await self._handle(message)

    async def _handle(self, message):
        """Skips Channels' per-message `aclose_old_connections()` (a hop to a sync thread per
        socket): the handlers touch the database only through database_sync_to_async, which
        closes stale connections in its own thread."""
        try:
            await getattr(self, get_handler_name(message))(message)
        except NotFound:  # the object is gone, or no longer this viewer's to see
            await self.close(code=CLOSE_NOT_FOUND)
        except Forbidden:
            await self.close(code=CLOSE_DENIED)
        except Exception:  # a hint we could not render: the page re-reads over HTTP
            log.warning("live push failed; asking the client to resync", exc_info=True)
            await self.control("resync")

    def _authorize(self) -> list[str]:
        viewer = access.principal_for_session(
            user=self.scope.get("user"), session=self.scope.get("session")
        )
        if viewer is None:
            raise Refused(CLOSE_DENIED)
        self.viewer = viewer
        try:
            return self.authorize()
        except NotFound:
            raise Refused(CLOSE_NOT_FOUND) from None
        except Forbidden as exc:
            if self.backlog is not None:  # refused at connect (not a later re-check): audited
                path = self.scope.get("path", "")
                audit_refused(actor=viewer, path=path, method="WEBSOCKET", reason=exc.message)
            raise Refused(CLOSE_DENIED) from None

    def authorize(self) -> list[str]:
        raise NotImplementedError

    async def send_state(self) -> None:
        """The current state right after subscribing (nothing between page and socket lost)."""

    async def disconnect(self, code):
        SocketSlots.give(self.__dict__.pop("slots", None) or ())
        task = getattr(self, "recheck", None)
        if task is not None:
            task.cancel()
        fanout = realtime.Fanout.here()
        for group in getattr(self, "joined", []):
            await fanout.leave(group, self)

    async def receive(self, text_data=None, bytes_data=None):
        """Clients only listen; "ping" answers "pong" (a liveness check, and the bare round
        trip bench/live.py compares against). Anything else is ignored."""
        if text_data == "ping":
            await self.send(text_data="pong")

    # --- helpers for subclasses ---

    def first_time(self, message: dict) -> bool:
        """False for a message this socket already handled (it arrived through 2 groups)."""
        mid = message.get("id")
        if mid is None:
            return True
        if mid in self.recent:
            return False
        self.recent[mid] = True
        while len(self.recent) > 64:
            self.recent.popitem(last=False)
        return True

    async def push(self, html: str) -> None:
        html = self._with_bell(html)
        if html.strip():
            await self.send(text_data=html)

    async def send(self, text_data=None, bytes_data=None, close=False):
        """A text frame goes straight to daphne's transport (console/wsframes.py: built once
        per text for every socket it goes to), else the ordinary way. Both write at once, so
        frames keep their order whichever way each went."""
        frames = self.__dict__.get("frames")
        if frames is not None and text_data and not close and frames.send_text(text_data):
            return
        await super().send(text_data=text_data, bytes_data=bytes_data, close=close)

    def _with_bell(self, html: str) -> str:
        bell, self.bell = getattr(self, "bell", ""), ""
        return bell + html

    async def control(self, kind: str, **facts) -> None:
        """A JSON frame for live.js (never swapped): hello, resync, reconnecting."""
        if getattr(self, "bell", ""):  # a state that pushed nothing: the bell goes first
            await self.push("")
        await self.send(text_data=json.dumps({"live": kind, **facts}))

    async def shared(self, cache: SharedResults, key, compute, *args):
        """`cache.get` for this socket: the result is shared only with sockets of its tenant."""
        return await cache.get(key, compute, *args, tenant=self.tenant_id)

    async def render(self, key, compute, *args) -> str:
        return await self.shared(RENDERS, key, compute, *args)

    async def first_frame(self) -> str:
        """HTML that goes out with the first frame of the state (held in `bell`, pushed
        before anything else): none here; notifications.live.BellMixin adds the bell's count."""
        return ""

    # --- hygiene ---

    async def sockets_close(self, message):
        """Sign-out and a tenant switch close the sockets of that session; deactivation
        closes them all (of that tenant, when the message names one: the person may still be
        a principal elsewhere)."""
        if message.get("tenant") not in (None, getattr(self, "tenant_id", None)):
            return
        if message.get("session") in (None, realtime.session_tag(self.session_key)):
            await self.close(code=CLOSE_DENIED)

    async def _recheck_forever(self):
        while True:
            await asyncio.sleep(RECHECK_SECONDS * random.uniform(0.8, 1.0))  # noqa: S311
            if not await self.recheck_now():
                return

    async def recheck_now(self) -> bool:
        """Is the viewer still signed in, active and allowed? Closes the socket if not; else
        takes the fresh viewer (its roles may have changed, and with them the audience)."""
        key = ("check", type(self).__name__, self.session_key, self.check_key())
        viewer = await self.shared(CHECKS, key, self._check)
        if viewer is None:
            await self.close(code=CLOSE_DENIED)
            return False
        self.viewer = viewer
        self.audience_changed()
        return True

    def check_key(self):
        """What `authorize()` depends on besides the viewer (e.g. the run id)."""
        return None

    def audience_changed(self) -> None:
        """Recompute the socket's audience from `self.viewer` (no database)."""

    def _check(self):
        from django.contrib.auth import SESSION_KEY, get_user_model

        session = _session_now(self.session_key)
        user_id = session.get(SESSION_KEY) if session is not None else None
        if user_id is None or str(user_id) != str(self.viewer.user_id):
            return None
        self.scope["user"] = get_user_model().objects.filter(pk=self.viewer.user_id).first()
        self.scope["session"] = session
        try:
            self._authorize()
        except Refused:
            return None
        if self.viewer.tenant_id != self.tenant_id:  # switched tenant since: not this socket's
            return None
        access.roles_key(self.viewer)  # loads the roles here, in the worker thread
        return self.viewer


class _ScopeMeta:
    """A socket's scope seen as a request's META, for `signin.client_address`."""

    def __init__(self, scope):
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", [])
        }
        client = scope.get("client") or ("", 0)
        self.META = {
            "REMOTE_ADDR": client[0] or "",
            "HTTP_X_FORWARDED_FOR": headers.get("x-forwarded-for", ""),
            "HTTP_USER_AGENT": headers.get("user-agent", ""),
        }


def origin(scope) -> tuple[str, str | None]:
    """A socket's address (GAVEL_TRUSTED_PROXIES honoured, as for requests) and user agent."""
    meta = _ScopeMeta(scope)
    return signin.client_address(meta), meta.META["HTTP_USER_AGENT"] or None


def query(scope) -> dict[str, str]:
    """A socket's query string as a dict (the last value of each name)."""
    raw = parse_qs(scope.get("query_string", b"").decode(errors="replace"))
    return {key: values[-1] for key, values in raw.items()}
