"""This process's lifecycle (warm, draining) and the current request's id. Imports nothing of
the project: every floor may read it."""

from __future__ import annotations

import contextvars
import re
import uuid

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gavel_request_id", default=None
)

# An incoming X-Request-Id is kept when it is this sane (a load balancer's or a client's id);
# anything else is replaced by one of ours, so a log line never carries what a client forged
# into it beyond these characters.
_SANE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}")


def new_request_id() -> str:
    return "req_" + uuid.uuid4().hex


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
