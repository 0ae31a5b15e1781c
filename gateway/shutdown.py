"""SIGTERM to a server process: the MCP calls it holds answer at once with the bounded hold's
"call again with the same arguments" (gateway.flow.stop_waiting) instead of being dropped with
the connection, and so does any call held from then on; the results answered but not yet
recorded (gateway.flow.Recorder) are written before the server stops.

Both are the process's shutdown hooks (ops/context.py `on_shutdown`, registered from
gateway/apps.py), which ops/serving.py runs under daphne: `answer_waiting` before it waits for
the requests in flight (GAVEL_SHUTDOWN_GRACE_SECONDS) — the answered calls' requests finish
inside that wait — and `record_answered` after them, bounded by RECORD_SECONDS."""

from __future__ import annotations

from ops.context import on_shutdown

# gateway.flow (and with it the `mcp` SDK, ~1 s of imports on a slow core) is imported when a
# hook runs, not when Django starts: manage.py's commands (the worker, the sweep, the demo
# agent) never serve the gateway, and a server that does has imported it with gateway.asgi.

NAME = "MCP calls answered"
RECORDED = "MCP results recorded"
RECORD_SECONDS = 2.0  # at most this long for the last records after the requests finished


def answer_waiting() -> int:
    """Every call this process holds answers now; returns how many were held."""
    from gateway import flow

    held = flow.Waiting.held
    flow.stop_waiting()
    return held


async def record_answered() -> int:
    """The records of results already answered, written now (bounded); returns how many were
    pending."""
    from gateway import flow

    pending = len(flow.Recorder.pending)
    await flow.Recorder.drain(RECORD_SECONDS)
    return pending


def register() -> None:
    on_shutdown(NAME, answer_waiting)
    on_shutdown(RECORDED, record_answered, after_requests=True)
