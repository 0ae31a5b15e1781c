"""The API keys' rate limits (issue 18, item 6): shared through Redis when REDIS_URL is set, so
N processes give a key its rate once; per process without Redis; and when Redis is unreachable,
each process falls back to its own buckets (ingest must keep working), with one warning.

Two `Limiter` objects play two server processes: each has its own memory and its own Redis
connection pool, exactly as two daphnes would (tests/console/core/test_ratelimit_two_processes.py
does it with two real daphnes)."""

import asyncio
import logging
import os
import socket
import threading
import time
import uuid

import pytest
import redis

from console.core import ratelimit
from console.core.ratelimit import Limiter
from tests.support.api import ApiClient
from tests.support.factories import make_key

REDIS_URL = os.environ.get("REDIS_URL", "")
needs_redis = pytest.mark.skipif(not REDIS_URL, reason="needs Redis (REDIS_URL)")
SLOW = {"per_minute": 1, "burst": 5}  # 5 at once, then one a minute: no refill during a test


@pytest.fixture
def prefix():
    """A prefix of this test's own, its keys removed afterwards."""
    name = f"{os.environ.get('REDIS_PREFIX', 'gavel')}-rl-{uuid.uuid4().hex[:8]}"
    yield name
    if REDIS_URL:
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(match=f"{name}*"):  # with "{name}-other"
            client.delete(key)
        client.close()


@pytest.fixture
def dead_redis_url():
    """A Redis URL where nothing listens (a port just bound and closed again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


def allowed(limiters, n, key_id=7, **rate):
    """Take n tokens, round robin over the limiters; how many were allowed."""
    rate = rate or SLOW
    return sum(limiters[i % len(limiters)].take(key_id, **rate) == 0 for i in range(n))


def test_without_redis_each_process_gives_a_key_its_rate():
    one, two = Limiter(), Limiter()
    assert one.shared is None
    assert allowed([one], 8) == 5
    assert allowed([one, two], 12, key_id=8) == 10  # 5 from each: a per-process limit
    wait = one.take(7, per_minute=60, burst=1)
    assert 0.99 < wait <= 1.0  # one token a second, none left


@needs_redis
def test_two_processes_sharing_redis_give_a_key_its_rate_once(prefix):
    one, two = Limiter(REDIS_URL, prefix), Limiter(REDIS_URL, prefix)
    assert allowed([one, two], 10) == 5
    assert allowed([two, one], 10) == 0  # still empty, whichever process is asked
    assert allowed([one, two], 10, key_id=8) == 5  # another key has a bucket of its own
    other = Limiter(REDIS_URL, f"{prefix}-other")  # another console on the same Redis
    assert allowed([other], 10) == 5


@needs_redis
def test_the_shared_bucket_refills_at_the_rate_and_says_when(prefix):
    one, two = Limiter(REDIS_URL, prefix), Limiter(REDIS_URL, prefix)
    rate = {"per_minute": 60, "burst": 2}  # one token a second
    started = time.monotonic()
    assert one.take(1, **rate) == 0 and two.take(1, **rate) == 0
    wait = one.take(1, **rate)
    assert 1.0 - (time.monotonic() - started) - 0.01 <= wait <= 1.0
    assert two.take(1, **rate) > 0
    time.sleep(wait + 0.01)
    assert two.take(1, **rate) == 0  # one token came back, for either process
    assert one.take(1, **rate) > 0


@needs_redis
def test_concurrent_takes_over_two_processes_are_atomic(prefix):
    limiters = [Limiter(REDIS_URL, prefix), Limiter(REDIS_URL, prefix)]
    rate = {"per_minute": 1, "burst": 50}
    results = []

    def worker(limiter):
        results.extend(limiter.take(3, **rate) == 0 for _ in range(25))

    threads = [threading.Thread(target=worker, args=(limiters[i % 2],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 200
    assert sum(results) == 50


@needs_redis
def test_the_key_settings_are_read_on_every_take(prefix):
    one = Limiter(REDIS_URL, prefix)
    assert allowed([one], 3, per_minute=1, burst=2) == 2
    assert allowed([one], 3, per_minute=1, burst=4) == 2  # a raised burst is there at once


def test_redis_down_falls_back_to_the_local_bucket_with_one_warning(
    dead_redis_url, caplog, monkeypatch
):
    limiter = Limiter(dead_redis_url, "gavel-down")
    caplog.set_level(logging.WARNING, logger="console.ratelimit")
    started = time.monotonic()
    assert allowed([limiter], 8) == 5  # the local bucket's burst, then refused
    assert time.monotonic() - started < 1.0  # one refused connection, not one per request
    warnings = [r for r in caplog.records if r.name == "console.ratelimit"]
    assert len(warnings) == 1
    assert "Redis is unreachable" in warnings[0].getMessage()
    assert warnings[0].levelno == logging.WARNING

    asked = []
    real_take = limiter.shared.take
    monkeypatch.setattr(limiter.shared, "take", lambda *a: asked.append(a) or real_take(*a))
    limiter.take(9, **SLOW)
    assert asked == []  # within RETRY_SECONDS Redis is not asked again
    monkeypatch.setattr(limiter, "_down_until", 0.0)  # the interval is over
    assert limiter.take(9, **SLOW) == 0  # still answered, by the local bucket
    assert len(asked) == 1
    assert len([r for r in caplog.records if r.name == "console.ratelimit"]) == 1  # a minute


@needs_redis
def test_when_redis_answers_again_the_bucket_is_shared_again(prefix, caplog, monkeypatch):
    one, two = Limiter(REDIS_URL, prefix), Limiter(REDIS_URL, prefix)
    caplog.set_level(logging.WARNING, logger="console.ratelimit")
    real_take = one.shared.take

    def down(*args):
        raise redis.ConnectionError("Connection refused")

    monkeypatch.setattr(one.shared, "take", down)
    assert allowed([one], 6) == 5  # Redis down: its own bucket
    monkeypatch.setattr(one.shared, "take", real_take)
    monkeypatch.setattr(one, "_down_until", 0.0)
    assert allowed([one, two], 10) == 5  # shared again: the two processes, once
    messages = [r.getMessage() for r in caplog.records if r.name == "console.ratelimit"]
    assert len(messages) == 2
    assert "unreachable" in messages[0] and "shared through Redis again" in messages[1]


def test_a_redis_that_never_answers_costs_one_short_wait_per_interval(caplog):
    """The worst outage: the port accepts, nothing answers. The request waits the read timeout
    (twice: one retry), then the local bucket answers; the next requests do not wait at all."""
    caplog.set_level(logging.WARNING, logger="console.ratelimit")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections complete in the kernel's backlog; no reply ever comes
        limiter = Limiter(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", "gavel-silent")
        started = time.monotonic()
        assert limiter.take(1, **SLOW) == 0
        first = time.monotonic() - started
        started = time.monotonic()
        assert allowed([limiter], 9, key_id=1) == 4  # the rest of the local burst of 5
        rest = time.monotonic() - started
        limiter.shared.client.close()
    assert 2 * ratelimit.TIMEOUT_SECONDS <= first < 2 * ratelimit.TIMEOUT_SECONDS + 1.5
    assert rest < ratelimit.TIMEOUT_SECONDS  # not even one more timeout for the next nine
    assert "TimeoutError" in caplog.records[0].getMessage()


def test_reset_with_redis_down_does_not_raise(dead_redis_url):
    limiter = Limiter(dead_redis_url, "gavel-down")
    limiter.reset()
    assert limiter.take(1, **SLOW) == 0


def test_the_process_limiter_follows_the_settings(settings, dead_redis_url):
    settings.REDIS_URL = ""
    assert ratelimit.limiter().shared is None
    settings.REDIS_URL, settings.REDIS_PREFIX = dead_redis_url, "gavel-x"
    current = ratelimit.limiter()
    assert current.shared is not None and current.shared.prefix == "gavel-x:ratelimit:"
    assert ratelimit.limiter() is current


@pytest.mark.django_db
def test_the_api_answers_429_with_retry_after_while_redis_is_down(
    client, tenant_a, settings, dead_redis_url, caplog
):
    from console.models import ApiKey

    settings.REDIS_URL = dead_redis_url
    raw = make_key(tenant_a)
    ApiKey.objects.update(rate_per_minute=1, rate_burst=2)
    api = ApiClient(client, raw)
    assert api.get("/api/v1/runs").status_code == 200  # ingest goes on without Redis
    assert api.get("/api/v1/runs").status_code == 200
    refused = api.get("/api/v1/runs")
    assert refused.status_code == 429
    assert 55 <= int(refused["Retry-After"]) <= 60
    error = refused.json()["error"]
    assert error["code"] == "rate_limited" and error["details"] is None
    assert any("unreachable" in r.getMessage() for r in caplog.records)


@needs_redis
@pytest.mark.django_db
def test_the_api_limits_through_redis(client, tenant_a, settings, prefix):
    from console.models import ApiKey

    settings.REDIS_URL, settings.REDIS_PREFIX = REDIS_URL, prefix
    raw = make_key(tenant_a)
    ApiKey.objects.update(rate_per_minute=1, rate_burst=2)
    key_id = ApiKey.objects.get().pk
    api = ApiClient(client, raw)
    assert [api.get("/api/v1/runs").status_code for _ in range(3)] == [200, 200, 429]
    stored = redis.Redis.from_url(REDIS_URL).get(f"{prefix}:ratelimit:{key_id}")
    assert stored is not None and int(stored) > time.time() * 1_000_000  # a TAT ahead of now


@needs_redis
def test_an_event_loops_take_shares_the_bucket_with_the_threads_take(prefix):
    """The MCP gateway's edge takes a key's token on the event loop (take_async): the same
    bucket as a view's take in a thread, and another process's."""
    one, two = Limiter(REDIS_URL, prefix), Limiter(REDIS_URL, prefix)

    async def on_the_loop(n: int) -> int:
        return sum([await one.take_async(7, **SLOW) == 0 for _ in range(n)])

    assert allowed([two], 3) == 3
    assert asyncio.run(on_the_loop(4)) == 2  # the burst of 5, once across both
    wait = asyncio.run(one.take_async(7, **SLOW))
    assert 0 < wait <= 60  # refused, saying when a token is there


def test_an_event_loops_take_falls_back_to_the_local_bucket_when_redis_is_down(
    dead_redis_url, caplog
):
    limiter = Limiter(dead_redis_url, "gavel-down-async")
    caplog.set_level(logging.WARNING, logger="console.ratelimit")

    async def takes(n: int) -> list[float]:
        return [await limiter.take_async(9, **SLOW) for _ in range(n)]

    started = time.monotonic()
    waits = asyncio.run(takes(7))
    assert [w == 0 for w in waits] == [True] * 5 + [False] * 2  # the local bucket's burst
    assert time.monotonic() - started < 1.0  # one refused connection, then not asked
    assert len([r for r in caplog.records if r.name == "console.ratelimit"]) == 1
