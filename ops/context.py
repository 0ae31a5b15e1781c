"""This process's lifecycle (warm, draining) and the current request's id. Imports nothing of
the project: every floor may read it."""

from __future__ import annotations

import contextvars
import itertools
import os
import re
import secrets

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
