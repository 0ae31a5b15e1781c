"""SIGTERM to a server process: the MCP calls it holds answer at once with the bounded hold's
"call again with the same arguments" (gateway.flow.stop_waiting) instead of being dropped with
the connection, the results answered but not yet recorded are written (gateway.flow.Recorder);
then the server's own handler (daphne's: Twisted stops the reactor and cancels
every application) runs, once they are answered or after DRAIN_SECONDS.

daphne runs no ASGI lifespan, and its own "before shutdown" trigger cancels the applications
first, so the hook wraps the SIGTERM handler Twisted installed: the first request to the
gateway installs it (in the main thread, where daphne's loop and signal handlers live)."""

from __future__ import annotations

import asyncio
import signal
import threading

from gateway import flow

DRAIN_SECONDS = 3.0  # at most this long between SIGTERM and the server's own stop
FLUSH_SECONDS = 0.2  # for the last answers' bytes to leave


def answer_waiting_on_sigterm() -> bool:
    """Wrap the process's SIGTERM handler (once; only a Python one: none installed, nothing
    to wrap). True when installed now."""
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous) or getattr(previous, "gavel_mcp", False):
        return False
    loop = asyncio.get_running_loop()

    async def drain_then_stop(signum, frame) -> None:
        end = loop.time() + DRAIN_SECONDS
        while flow.Waiting.held and loop.time() < end:
            await asyncio.sleep(0.05)
        await flow.Recorder.drain(max(0.0, end - loop.time()))  # results answered, unrecorded
        await asyncio.sleep(FLUSH_SECONDS)
        previous(signum, frame)

    def start(signum, frame) -> None:
        flow.stop_waiting()
        loop.create_task(drain_then_stop(signum, frame))

    def handler(signum, frame) -> None:  # in the loop's thread, between any two bytecodes
        loop.call_soon_threadsafe(start, signum, frame)

    handler.gavel_mcp = True
    signal.signal(signal.SIGTERM, handler)
    return True
