"""Token buckets per API key: the contract's default is 6,000 requests a minute with bursts of
500; a key may override both.

With `REDIS_URL` set, a key's bucket is shared by every server process through Redis, so N
processes give a key its rate once, not N times: one Lua script (GCRA, the token bucket kept as
its "theoretical arrival time") reads the clock of the Redis server, decides and stores in one
atomic step. Without `REDIS_URL` each process keeps its own buckets in memory.

Redis unreachable fails open to the local buckets (ingest and decisions must keep working while
Redis is down, issue 18): each process limits on its own, as without Redis, a warning is logged
at most once a minute, and Redis is asked again after `RETRY_SECONDS`, so a dead Redis costs
one short timeout per process per interval, not one per request.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref

import redis
import redis.asyncio
from django.conf import settings
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

logger = logging.getLogger("console.ratelimit")

RETRY_SECONDS = 5.0  # after a Redis failure: local buckets only, for this long
WARN_EVERY_SECONDS = 60.0  # at most one "Redis unreachable" warning per process per minute
TIMEOUT_SECONDS = 0.25  # connect and answer: Redis is next to the app, a slow one is down

# KEYS[1]: the key's bucket; KEYS[2]: the keys epoch (console/directory/keycopies.py, read
# here so that checking a kept key copy costs no round trip of its own). ARGV[1]: microseconds
# per token; ARGV[2]: the burst (tokens).
# The bucket is the time at which it would be full again (its theoretical arrival time, TAT):
# a request is allowed while TAT + interval - burst * interval <= now, and moves TAT on by one
# interval. Answers {0 (allowed) or the microseconds until a token is there, the epoch}.
# Times are the Redis server's clock (TIME), so the processes' clocks need not agree; whole
# microseconds (about 2^51 today) stay exact in Lua's doubles, and are written with %.0f, not
# tostring.
GCRA = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local epoch = tonumber(redis.call('GET', KEYS[2]) or 0)
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then
  tat = now
end
local next_tat = tat + interval
local allowed_at = next_tat - burst * interval
if allowed_at > now then
  return {math.ceil(allowed_at - now), epoch}
end
local ttl_ms = math.ceil((next_tat - now) / 1000)
redis.call('SET', KEYS[1], string.format('%.0f', next_tat), 'PX', ttl_ms)
return {0, epoch}
"""


def _rate(per_minute: int | None, burst: int | None) -> tuple[float, int]:
    """(tokens per second, capacity) with the defaults for what the key leaves unset."""
    per_minute = per_minute or settings.GAVEL_DEFAULT_RATE_PER_MINUTE
    return per_minute / 60.0, int(burst or settings.GAVEL_DEFAULT_RATE_BURST)


class LocalBuckets:
    """One process's buckets, in memory."""

    def __init__(self):
        self._lock = threading.Lock()
        self._buckets: dict[int, tuple[float, float]] = {}  # key id -> (tokens, last refill)

    def take(self, key_id: int, rate: float, capacity: int) -> float:
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key_id, (float(capacity), now))
            tokens = min(float(capacity), tokens + (now - last) * rate)
            if tokens >= 1.0:
                self._buckets[key_id] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key_id] = (tokens, now)
            return (1.0 - tokens) / rate

    def reset(self) -> None:
        with self._lock:
            self._buckets.clear()


class RedisBuckets:
    """Every process's buckets, in Redis under `<prefix>:ratelimit:<key id>`."""

    def __init__(self, url: str, prefix: str):
        self.prefix = f"{prefix}:ratelimit:"
        self.epoch_key = f"{prefix}:keys:epoch"
        self.url = url
        self.options = {
            "socket_connect_timeout": TIMEOUT_SECONDS,
            "socket_timeout": TIMEOUT_SECONDS,
            # one immediate retry on a fresh connection (a pooled one dead since a Redis
            # restart), never redis-py's default of ten with back-off: the request waits
            "retry": Retry(NoBackoff(), 1),
        }
        self.client = redis.Redis.from_url(url, **self.options)
        self.script = self.client.register_script(GCRA)
        self._async_scripts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def take(self, key_id: int, rate: float, capacity: int) -> tuple[float, int]:
        """(seconds to wait, 0 if allowed; the keys epoch)."""
        interval_us = 1_000_000.0 / rate
        keys = [f"{self.prefix}{key_id}", self.epoch_key]
        wait_us, epoch = self.script(keys=keys, args=[interval_us, capacity])
        return int(wait_us) / 1_000_000, int(epoch)

    def epoch(self) -> int:
        return int(self.client.get(self.epoch_key) or 0)

    def bump_epoch(self) -> int:
        return int(self.client.incr(self.epoch_key))

    async def take_async(self, key_id: int, rate: float, capacity: int) -> tuple[float, int]:
        """`take` from an event loop, on that loop's own async client (no thread hop)."""
        script = self._async_scripts.get(asyncio.get_running_loop())
        if script is None:
            options = {**self.options, "retry": AsyncRetry(NoBackoff(), 1)}
            client = redis.asyncio.Redis.from_url(self.url, **options)
            script = self._async_scripts[asyncio.get_running_loop()] = client.register_script(GCRA)
        interval_us = 1_000_000.0 / rate
        keys = [f"{self.prefix}{key_id}", self.epoch_key]
        wait_us, epoch = await script(keys=keys, args=[interval_us, capacity])
        return int(wait_us) / 1_000_000, int(epoch)

    def reset(self) -> None:
        keys = list(self.client.scan_iter(match=f"{self.prefix}*", count=1000))
        if keys:
            self.client.delete(*keys)


class Limiter:
    """The shared buckets when there is a Redis, else (or while it is unreachable) the local
    ones. One per process (`take` below); a test makes two to play two processes."""

    def __init__(self, redis_url: str = "", prefix: str = "gavel"):
        self.config = (redis_url, prefix)
        self.local = LocalBuckets()
        self.shared = RedisBuckets(redis_url, prefix) if redis_url else None
        self._down_until = 0.0  # monotonic time before which Redis is not asked
        self._warned_at: float | None = None
        self._degraded = False

    def take(self, key_id: int, *, per_minute: int | None, burst: int | None) -> float:
        """Take one token; return 0 if allowed, else the seconds until one is available."""
        return self.take_with_epoch(key_id, per_minute=per_minute, burst=burst)[0]

    def take_with_epoch(
        self, key_id: int, *, per_minute: int | None, burst: int | None
    ) -> tuple[float, int | None]:
        """`take`, and the keys epoch read in the same round trip (None: no shared epoch now,
        without Redis or while it is unreachable)."""
        rate, capacity = _rate(per_minute, burst)
        if self._shared_now():
            try:
                wait, epoch = self.shared.take(key_id, rate, capacity)
                return self._answered(wait), epoch
            except redis.RedisError as exc:
                self._unreachable(exc)
        return self.local.take(key_id, rate, capacity), None

    def epoch(self) -> int | None:
        """The keys epoch now (None: none shared now)."""
        if self._shared_now():
            try:
                return self._answered(self.shared.epoch())
            except redis.RedisError as exc:
                self._unreachable(exc)
        return None

    def bump_epoch(self) -> bool:
        """Move the keys epoch on (every process's key copies are stale). False: Redis did not
        take it (the copies then live out their GAVEL_KEY_COPY_SECONDS)."""
        if self.shared is None:
            return False
        try:
            self._answered(self.shared.bump_epoch())
            return True
        except redis.RedisError as exc:
            self._unreachable(exc)
            return False

    async def take_async(self, key_id: int, *, per_minute: int | None, burst: int | None) -> float:
        """`take` from an event loop (the MCP gateway's edge): the same buckets, no thread."""
        return (await self.take_async_with_epoch(key_id, per_minute=per_minute, burst=burst))[0]

    async def take_async_with_epoch(
        self, key_id: int, *, per_minute: int | None, burst: int | None
    ) -> tuple[float, int | None]:
        """`take_with_epoch` from an event loop."""
        rate, capacity = _rate(per_minute, burst)
        if self._shared_now():
            try:
                wait, epoch = await self.shared.take_async(key_id, rate, capacity)
                return self._answered(wait), epoch
            except redis.RedisError as exc:
                self._unreachable(exc)
        return self.local.take(key_id, rate, capacity), None

    def _shared_now(self) -> bool:
        return self.shared is not None and time.monotonic() >= self._down_until

    def _answered(self, wait: float) -> float:
        if self._degraded:
            self._degraded = False
            logger.warning("rate limits are shared through Redis again")
        return wait

    def _unreachable(self, exc: Exception) -> None:
        now = time.monotonic()
        self._down_until = now + RETRY_SECONDS
        self._degraded = True
        if self._warned_at is None or now - self._warned_at >= WARN_EVERY_SECONDS:
            self._warned_at = now
            logger.warning(
                "rate limits: Redis is unreachable (%s: %s); this process limits each key on "
                "its own until Redis answers (asked again every %.0f s)",
                type(exc).__name__,
                exc,
                RETRY_SECONDS,
            )

    def reset(self) -> None:
        """Forget every bucket (tests)."""
        self.local.reset()
        self._down_until = 0.0
        if self.shared is not None:
            try:
                self.shared.reset()
            except redis.RedisError as exc:
                self._unreachable(exc)


_lock = threading.Lock()
_limiter: Limiter | None = None


def limiter() -> Limiter:
    """This process's limiter, for the settings in force (a test may override REDIS_URL)."""
    global _limiter
    wanted = (settings.REDIS_URL, settings.REDIS_PREFIX)
    current = _limiter
    if current is not None and current.config == wanted:
        return current
    with _lock:
        if _limiter is None or _limiter.config != wanted:
            _limiter = Limiter(*wanted)
        return _limiter


def take(key_id: int, *, per_minute: int | None, burst: int | None) -> float:
    """Take one token from the key's bucket; 0 if allowed, else the seconds to wait."""
    return limiter().take(key_id, per_minute=per_minute, burst=burst)


def take_with_epoch(
    key_id: int, *, per_minute: int | None, burst: int | None
) -> tuple[float, int | None]:
    """`take` and the keys epoch (console/directory/keycopies.py), in one round trip."""
    return limiter().take_with_epoch(key_id, per_minute=per_minute, burst=burst)


async def take_async(key_id: int, *, per_minute: int | None, burst: int | None) -> float:
    """`take` from an event loop."""
    return await limiter().take_async(key_id, per_minute=per_minute, burst=burst)


async def take_async_with_epoch(
    key_id: int, *, per_minute: int | None, burst: int | None
) -> tuple[float, int | None]:
    """`take_with_epoch` from an event loop."""
    return await limiter().take_async_with_epoch(key_id, per_minute=per_minute, burst=burst)


def reset() -> None:
    limiter().reset()
