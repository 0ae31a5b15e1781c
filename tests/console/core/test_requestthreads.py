"""Each HTTP request's sync code on a kept thread (console/core/requestthreads.py): one thread
for all of a request's thread-sensitive calls, the same kept thread for the next request, a
thread of its own for each of two concurrent requests, and a cancelled request's thread
never handed to another."""

from __future__ import annotations

import asyncio
import threading

from asgiref.sync import sync_to_async

from console.core import requestthreads


def recording_app(seen: list, *, calls: int = 2, hold: asyncio.Event | None = None):
    async def app(scope, receive, send):
        for _ in range(calls):
            seen.append(await sync_to_async(threading.get_ident)())
        if hold is not None:
            await hold.wait()

    return requestthreads.kept_threads(app)


async def test_a_requests_calls_share_one_thread_and_the_next_request_reuses_it():
    seen_one, seen_two = [], []
    await recording_app(seen_one)({"type": "http"}, None, None)
    started = threading.active_count()
    await recording_app(seen_two)({"type": "http"}, None, None)
    assert len(set(seen_one)) == 1 and seen_one[0] != threading.get_ident()
    assert seen_two == seen_one  # the kept thread
    assert threading.active_count() == started  # no thread started for the second request


async def test_concurrent_requests_each_get_a_thread_of_their_own():
    release = asyncio.Event()
    seen_a, seen_b = [], []
    a = asyncio.ensure_future(recording_app(seen_a, hold=release)({"type": "http"}, None, None))
    b = asyncio.ensure_future(recording_app(seen_b, hold=release)({"type": "http"}, None, None))
    while len(seen_a) < 2 or len(seen_b) < 2:
        await asyncio.sleep(0.01)
    release.set()
    await asyncio.gather(a, b)
    assert len(set(seen_a)) == 1 and len(set(seen_b)) == 1
    assert seen_a[0] != seen_b[0]


async def test_a_cancelled_requests_thread_is_not_handed_on():
    """Its sync call still runs (a thread cannot be stopped): the next request must not queue
    behind it on the same thread."""
    blocked, go, ran_on = threading.Event(), threading.Event(), []

    def slow():
        ran_on.append(threading.get_ident())
        blocked.set()
        go.wait(5)

    async def app(scope, receive, send):
        await sync_to_async(slow)()

    request = asyncio.ensure_future(requestthreads.kept_threads(app)({"type": "http"}, None, None))
    while not blocked.is_set():
        await asyncio.sleep(0.01)
    request.cancel()
    await asyncio.gather(request, return_exceptions=True)
    try:
        seen = []
        await asyncio.wait_for(recording_app(seen)({"type": "http"}, None, None), 2)
        assert len(seen) == 2 and ran_on[0] not in seen  # at once, on another thread
    finally:
        go.set()


async def test_websockets_and_other_scopes_pass_through_untouched():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])

    await requestthreads.kept_threads(app)({"type": "websocket"}, None, None)
    await requestthreads.kept_threads(app)({"type": "lifespan"}, None, None)
    assert seen == ["websocket", "lifespan"]
