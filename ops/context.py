"""This process's lifecycle (warm, draining), its shutdown hooks, and the current request's
id. Imports nothing of the project: every floor may read it, and register into it."""

from __future__ import annotations

import contextvars
import inspect
import itertools
import logging
import os
import re
import secrets
from collections.abc import Callable

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gavel_request_id", default=None
)

# An incoming X-Request-Id is kept when it is this sane (a load balancer's or a client's id);
# anything else is replaced by one of ours, so a log line never carries what a client forged
# into it beyond these characters.
_SANE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}")


# A new id is this process's random prefix and a counter: unique across processes (64 random
# bits each) and cheap (no system call, no UUID object per request). A forked child draws its
# own prefix.
_prefix = ""
_counter = itertools.count(1)


def _reseed() -> None:
    global _prefix, _counter
    _prefix, _counter = "req_" + secrets.token_hex(8), itertools.count(1)


_reseed()
os.register_at_fork(after_in_child=_reseed)


def new_request_id() -> str:
    """`req_` and 32 hex digits (the old uuid4 form's length): the prefix, then the count."""
    return f"{_prefix}{next(_counter):016x}"


def accept_request_id(incoming: str | None) -> str:
    """The request's id: the incoming one when it is sane, else a new one."""
    if incoming and _SANE_ID.fullmatch(incoming):
        return incoming
    return new_request_id()


def current_request_id() -> str:
    """The id of the request being served (a new one outside any request)."""
    return request_id.get() or new_request_id()


class Lifecycle:
    """A server process is ready once warm and until it drains (SIGTERM). A server started
    by daphne warms up first (ops/shutdown.py: `warming` until then); any other process
    (tests, a management command) has nothing to warm."""

    warming = False
    draining = False

    @classmethod
    def state(cls) -> str | None:
        """None when ready, else why not."""
        if cls.draining:
            return "shutting down"
        if cls.warming:
            return "warming up"
        return None

    @classmethod
    def drain(cls) -> None:
        cls.draining = True


# --- shutdown hooks: the one SIGTERM mechanism ---

log = logging.getLogger("ops.shutdown")
_hooks: dict[str, Callable[[], object]] = {}
_final_hooks: dict[str, Callable[[], object]] = {}


def on_shutdown(name: str, hook: Callable[[], object], *, after_requests: bool = False) -> None:
    """Run `hook` when this server process drains (SIGTERM), before it waits for the requests
    still in flight: what the hook answers now is sent before the server stops. `hook` takes
    no argument, may be a coroutine function, runs on the server's event loop, must be quick
    (wake waiters, close, flag: never wait for them) and returns a count for the log line.
    `name` says what it did ("MCP calls answered"); registering a name again replaces its
    hook. Hooks run in the order their names were first registered.

    With `after_requests=True` the hook runs later instead: once the requests in flight have
    finished (or the grace period is over), before the server stops. Such a hook may wait
    (flush what those requests left to write, bounded by the time left) and is awaited.

    ops/serving.py drives them under daphne (its `drain`); the apps register from their
    AppConfig.ready() or on import of their ASGI edge."""
    (_final_hooks if after_requests else _hooks)[name] = hook


async def run_shutdown_hooks(*, after_requests: bool = False) -> dict[str, object]:
    """Every hook of the phase once, in order; one failing is logged and the rest still run.
    Returns each name's result (None when it failed)."""
    results: dict[str, object] = {}
    for name, hook in list((_final_hooks if after_requests else _hooks).items()):
        try:
            result = hook()
            if inspect.isawaitable(result):
                result = await result
        except Exception:
            log.exception("shutdown hook %r failed", name)
            result = None
        results[name] = result
    return results
