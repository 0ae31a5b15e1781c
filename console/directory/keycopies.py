"""A process's copies of the API keys it authenticated (with their tenant and principal), so
that a key's next request costs no query — without a revoked key working a moment longer.

Every write that can change a key's answer (a key, its principal or its tenant saved or
deleted) moves the **keys epoch** on, in Redis, once it commits (`bump`). A copy is kept with
the epoch read *before* its rows were read, and it is used only while the epoch is still that
one: the epoch comes back from the key's rate-limit script (console/core/ratelimit.py), which
every request runs anyway, so checking a copy costs no round trip. A revoked key is 401 at
its next request, on every process, as the contract says; the process that wrote the change
drops its copies at once, Redis or not.

Kept only while there is a shared epoch (REDIS_URL set and answering): without Redis every
request reads its key, as before. A copy also goes after GAVEL_KEY_COPY_SECONDS, whatever the
epoch says (an epoch that Redis failed to move; `0`: no copies). Copies never leave the
process, and each request gets its own copy of the rows (a request may annotate them).
"""

from __future__ import annotations

import copy
import hashlib
import threading
import time

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.core import ratelimit

MAX_COPIES = 10_000  # keys in use by one process; past it the copies start over

_lock = threading.Lock()
_copies: dict[str, tuple[float, int, object]] = {}  # sha-256 of the token -> (at, epoch, key)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _seconds() -> float:
    return getattr(settings, "GAVEL_KEY_COPY_SECONDS", 5)


def find(token: str):
    """(the kept key, the epoch it was read at), or None."""
    entry = _copies.get(_digest(token))
    if entry is None:
        return None
    at, epoch, key = entry
    if time.monotonic() - at >= _seconds():
        drop(token)
        return None
    return key, epoch


def usable(key, epoch: int, now_epoch: int | None) -> bool:
    """May this kept key answer now? The epoch has not moved and the key has not expired."""
    if now_epoch is None or now_epoch != epoch:
        return False
    return key.revoked_at is None and (key.expires_at is None or key.expires_at > timezone.now())


def enabled() -> bool:
    return _seconds() > 0


def epoch_now() -> int | None:
    """The epoch to keep a copy with, read before the key's rows are (None: no shared epoch
    now: keep nothing)."""
    return ratelimit.limiter().epoch()


def keep(token: str, key, epoch: int | None) -> None:
    if key is None or epoch is None or _seconds() <= 0:
        return
    with _lock:
        if len(_copies) >= MAX_COPIES:
            _copies.clear()
        _copies[_digest(token)] = (time.monotonic(), epoch, key)


def drop(token: str) -> None:
    with _lock:
        _copies.pop(_digest(token), None)


def fresh(key):
    """The request's own copy of a kept key, its tenant and its principal."""
    mine = copy.copy(key)
    mine.tenant = copy.copy(key.tenant)
    if key.principal_id is not None:
        mine.principal = copy.copy(key.principal)
    return mine


def touched(token: str, at) -> None:
    """The key's `last_used_at` was written: the kept copy says so too."""
    entry = _copies.get(_digest(token))
    if entry is not None:
        entry[2].last_used_at = at


def forget_all() -> None:
    with _lock:
        _copies.clear()


def bump(**_) -> None:
    """A key, a principal or a tenant changed (a signal's receiver): this process's copies go
    now, and every other process's at its next request once this transaction commits."""
    forget_all()
    transaction.on_commit(_bump_now)


def _bump_now() -> None:
    forget_all()  # a copy read meanwhile, in this process, from before the commit
    ratelimit.limiter().bump_epoch()


__all__ = ["bump", "drop", "enabled", "epoch_now", "find", "fresh", "keep", "touched", "usable"]
