"""SIGTERM to a server process: the MCP calls it holds answer at once with the bounded hold's
"call again with the same arguments" (gateway.flow.stop_waiting) instead of being dropped with
the connection, and so does any call held from then on.

It is one of the process's shutdown hooks (ops/context.py `on_shutdown`, registered from
gateway/apps.py), which ops/serving.py runs under daphne before it waits for the requests in
flight (GAVEL_SHUTDOWN_GRACE_SECONDS): the answered calls' requests finish inside that wait,
then the server stops."""

from __future__ import annotations

from gateway import flow
from ops.context import on_shutdown

NAME = "MCP calls answered"


def answer_waiting() -> int:
    """Every call this process holds answers now; returns how many were held."""
    held = flow.Waiting.held
    flow.stop_waiting()
    return held


def register() -> None:
    on_shutdown(NAME, answer_waiting)
