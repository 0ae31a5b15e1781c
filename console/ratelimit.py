"""Token buckets per API key (in-process: each server process enforces the rate on its own share).

The contract's default is 6,000 requests a minute with bursts of 500; a key may override both.
"""

import threading
import time

from django.conf import settings

_lock = threading.Lock()
_buckets: dict[int, tuple[float, float]] = {}  # key id -> (tokens, last refill monotonic time)


def take(key_id: int, *, per_minute: int | None, burst: int | None) -> float:
    """Take one token; return 0 if allowed, else the seconds until one is available."""
    rate = (per_minute or settings.GAVEL_DEFAULT_RATE_PER_MINUTE) / 60.0
    capacity = float(burst or settings.GAVEL_DEFAULT_RATE_BURST)
    now = time.monotonic()
    with _lock:
        tokens, last = _buckets.get(key_id, (capacity, now))
        tokens = min(capacity, tokens + (now - last) * rate)
        if tokens >= 1.0:
            _buckets[key_id] = (tokens - 1.0, now)
            return 0.0
        _buckets[key_id] = (tokens, now)
        return (1.0 - tokens) / rate


def reset() -> None:
    with _lock:
        _buckets.clear()
