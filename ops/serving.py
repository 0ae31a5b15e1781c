"""A server process's life under daphne: warm before ready, and a graceful stop on SIGTERM.

`install()` (console/asgi.py, as console/serving.py's is) hooks daphne's server class before
daphne starts it:

- **Warm-up.** Until a thread has loaded the URLconf and the API's routes, the migration graph
  `/readyz` compares against, a database connection and the base templates, `/readyz` answers
  503 "warming up" (so a balancer sends nothing to a process that would stall on its first
  requests), while `/healthz` already answers.
- **SIGTERM.** Twisted turns the signal into a reactor stop, whose "before shutdown" phase runs
  daphne's `kill_all_applications`, which cancelled every request at once (held long-polls got
  no answer, sockets closed without a close frame: 1006). It now first
  1. marks the process draining (`/readyz` 503 "shutting down") and stops listening (new
     connections are refused; the balancer's other servers take them);
  2. runs the process's shutdown hooks (ops/context.py `on_shutdown`, the one registry every
     app registers into), each answering what it holds at once: the MCP gateway's waiting
     calls ("call again with the same arguments", gateway/shutdown.py), and this module's
     own two: every held decisions long-poll is woken and answers with what it holds
     (`complete: false` while calls still wait; approvals/api.py reads the flag), and every
     WebSocket is closed with code 1012 (service restart: browsers reconnect, to another
     server);
  3. waits for the requests still in flight (those answers among them), up to
     GAVEL_SHUTDOWN_GRACE_SECONDS (default 7),
  and only then cancels what is left, as before. The process exits well within 10 s.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
import threading
import time

from ops import instruments
from ops.context import Lifecycle, on_shutdown, run_shutdown_hooks

log = logging.getLogger(__name__)
SERVICE_RESTART = 1012  # RFC 6455 (IANA registry): the server is restarting
_sockets: dict[int, object] = {}  # id -> the server's own `send` of an open WebSocket
POLL_SECONDS = 0.05


# --- WebSockets: counted, and closed with 1012 on shutdown ---


def sockets(app):
    """ASGI middleware for the WebSocket stack: counts open sockets (gavel_websocket_connections)
    and remembers each one's server `send`, so a shutdown can close it with 1012. After that
    close, what the application still sends to the socket is dropped."""

    async def middleware(scope, receive, send):
        if scope["type"] != "websocket":
            return await app(scope, receive, send)
        key = id(scope)
        state = {"open": False, "closed": False}

        async def tracked(message):
            if state["closed"]:
                return
            kind = message["type"]
            if kind == "websocket.accept" and not state["open"]:
                state["open"] = True
                _sockets[key] = (send, state)
                instruments.WEBSOCKETS.inc()
            elif kind == "websocket.close":
                state["closed"] = True
            await send(message)

        try:
            return await app(scope, receive, tracked)
        finally:
            if state["open"]:
                _sockets.pop(key, None)
                instruments.WEBSOCKETS.dec()

    return middleware


async def close_sockets(code: int = SERVICE_RESTART) -> int:
    """Close every open socket of this process with `code`. Returns how many."""
    closed = 0
    for send, state in list(_sockets.values()):
        if state["closed"]:
            continue
        state["closed"] = True
        try:
            protocol = _daphne_protocol(send)
            if protocol is not None:
                # autobahn's public sendClose allows only 1000 and 3000-4999 (the codes an
                # application may send); 1012 is the server's own, written as daphne would.
                protocol.sendCloseFrame(code=code, reasonUtf8=b"service restart")
            else:
                await send({"type": "websocket.close", "code": code})
            closed += 1
        except Exception:  # already gone
            log.debug("closing a socket on shutdown failed", exc_info=True)
    return closed


def _daphne_protocol(send):
    """The autobahn protocol behind daphne's own `send` (None under another server)."""
    if not isinstance(send, functools.partial) or len(send.args) != 1:
        return None
    if getattr(send.func, "__name__", "") != "handle_reply":
        return None
    protocol = send.args[0]
    return protocol if hasattr(protocol, "sendCloseFrame") else None


def wake_held_polls() -> int:
    """Wake every decisions long-poll held on this loop (they see `Lifecycle.draining` and
    answer with what they hold)."""
    from console.live.realtime import Fanout, _Waiter

    woken = 0
    for group in list(Fanout.here().groups.values()):
        for listener in list(group.listeners):
            if isinstance(listener, _Waiter) and listener.event is not None:
                listener.event.set()
                woken += 1
    return woken


# --- daphne's server: warm-up, and drain before its applications are killed ---


def _grace() -> float:
    from django.conf import settings

    return float(getattr(settings, "GAVEL_SHUTDOWN_GRACE_SECONDS", 7))


on_shutdown("held long-polls answered", wake_held_polls)
on_shutdown("sockets closed with 1012", close_sockets)


async def drain(server) -> None:
    """Steps 2-3 of the module's list (step 1 is synchronous, in `kill_all_applications`)."""
    started = time.monotonic()
    done = await run_shutdown_hooks()
    log.info("shutting down: %s", "; ".join(f"{name}: {count}" for name, count in done.items()))
    deadline = started + _grace()
    while time.monotonic() < deadline:
        running = [
            d["application_instance"]
            for d in server.connections.values()
            if d.get("application_instance") is not None and not d["application_instance"].done()
        ]
        if not running:
            break
        await asyncio.sleep(POLL_SECONDS)
    # What the finished requests left to write (the MCP gateway's records written after the
    # answer), bounded by the grace left: on_shutdown(..., after_requests=True).
    flushed = await run_shutdown_hooks(after_requests=True)
    if flushed:
        log.info("shutting down: %s", "; ".join(f"{n}: {c}" for n, c in flushed.items()))
    # Let the transports write what the applications just answered.
    await asyncio.sleep(POLL_SECONDS)


def _patch(server_module) -> None:
    from twisted.internet import defer

    cls = server_module.Server
    if getattr(cls, "gavel_graceful", False):
        return
    original_kill = cls.kill_all_applications
    original_listen = cls.listen_success

    def listen_success(self, port):
        self.__dict__.setdefault("gavel_ports", []).append(port)
        return original_listen(self, port)

    def kill_all_applications(self):
        Lifecycle.drain()
        for port in self.__dict__.get("gavel_ports", []):
            port.stopListening()
        log.info("SIGTERM: draining (no new connections, readiness failing)")
        waited = defer.Deferred.fromFuture(asyncio.ensure_future(drain(self)))
        waited.addErrback(lambda failure: log.error("draining failed: %s", failure.value))
        waited.addCallback(lambda _: original_kill(self))
        return waited

    cls.listen_success = listen_success
    cls.kill_all_applications = kill_all_applications
    cls.gavel_graceful = True


def warm_up() -> None:
    """What a process's first requests would otherwise pay for."""
    from django.db import connection
    from django.template.loader import get_template
    from django.urls import get_resolver

    from ops import checks

    try:
        get_resolver().url_patterns  # noqa: B018 - loads the URLconf and the API's routes
        checks.migration_leaves()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        for name in ("base.html", "approvals/inbox.html"):
            try:
                get_template(name)
            except Exception:  # a template renamed: not worth failing the warm-up
                log.debug("warm-up: no template %s", name)
    except Exception:
        log.exception("warm-up failed; the process serves all the same")
    finally:
        connection.close()
        Lifecycle.warming = False
        log.info("warm: ready to serve")


def install() -> bool:
    """Under daphne: warm up in a thread, and drain on SIGTERM. True when installed."""
    server_module = sys.modules.get("daphne.server")
    if server_module is None:
        return False
    _patch(server_module)
    if not Lifecycle.warming:
        Lifecycle.warming = True
        threading.Thread(target=warm_up, name="gavel-warm-up", daemon=True).start()
    return True
