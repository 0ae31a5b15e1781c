"""Each HTTP request's sync code on a thread kept between requests, not on a new one.

Django runs a request's sync code (its sync middleware and views, `sync_to_async` calls,
thread-sensitive by default) on one thread of the request's own: its ASGI handler opens a
`ThreadSensitiveContext`, asgiref makes a one-thread executor for it at the first call, and
at the end joins that thread from yet another new thread. Two threads started and joined per
request: on a small CPU about a millisecond of the request's CPU (bench budget_check's
floor). `ThreadSensitiveContext(executor=...)` (asgiref 3.10+) lets the caller own the
executor: here each request borrows a one-thread executor that a finished request gave back,
so its sync code still runs on one thread, alone, as Django expects (its connections are the
thread's, as under a WSGI server's kept threads), and no thread is started or joined.

An executor goes back only when its request ended normally; a cancelled request's sync call
may still be running in it, so that executor is shut down (its thread ends after that call),
and so is any beyond `IDLE_MAX` idle ones. Tasks a request starts must not make
thread-sensitive calls after it ends (asgiref refuses them): a view's background work is
thread-insensitive (approvals/api.py's announcement).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext

IDLE_MAX = 64  # kept idle threads: more than a server's concurrent sync requests

_lock = threading.Lock()
_idle: list[ThreadPoolExecutor] = []


def _take() -> ThreadPoolExecutor:
    with _lock:
        if _idle:
            return _idle.pop()
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="gavel-request")


def _give_back(executor: ThreadPoolExecutor) -> None:
    with _lock:
        if len(_idle) < IDLE_MAX:
            _idle.append(executor)
            return
    executor.shutdown(wait=False)


def idle() -> int:
    """How many kept threads wait for a request (tests, metrics)."""
    return len(_idle)


def kept_threads(app):
    """Wrap Django's ASGI application: each HTTP request runs in a `ThreadSensitiveContext`
    with a kept one-thread executor (Django's own context, inside it, then adds nothing)."""

    async def application(scope, receive, send):
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        executor = _take()
        ended = False
        try:
            async with ThreadSensitiveContext(executor=executor):
                await app(scope, receive, send)
            ended = True
        finally:
            if ended:
                _give_back(executor)
            else:  # cancelled or failed: a sync call of it may still run there
                executor.shutdown(wait=False)

    return application


__all__ = ["idle", "kept_threads"]
