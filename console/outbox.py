"""Durable outboxes: rows written in the transaction of what they report, sent after commit.

Each kind of outgoing message (webhook deliveries, mail) is a table of rows with a state, an
attempt count and a `next_attempt_at`, and a *sender*: `run_due(now=, limit=)` attempts the
rows that are due once each (claimed with a conditional UPDATE, a lease, so two processes never
send one attempt twice) and `next_due()` says when the soonest pending one is due. Senders
register in their app's `ready()`.

Two things run them: one daemon thread per process, woken on commit by `kick()` (so a request
never waits on an endpoint or a mail server), and the sweep `manage.py expire_approvals
--loop`, which sends what is due after a crash or a restart. A crash between commit and send
therefore loses nothing: the rows say what is left to do.

Retries share one schedule: after attempts 1..5 wait 5 s, 30 s, 2 min, 10 min, 1 h; the 6th
failure is final (`failed`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

log = logging.getLogger(__name__)

BACKOFF_SECONDS = (5, 30, 120, 600, 3600)  # after attempts 1..5; attempt 6 is the last
MAX_ATTEMPTS = len(BACKOFF_SECONDS) + 1
LEASE = timedelta(seconds=60)  # a claimed row is not retried by another worker meanwhile
IDLE_SECONDS = 30.0  # the thread's longest sleep when nothing is due


def next_attempt(*, attempts: int, now: datetime) -> datetime | None:
    """When to try again after `attempts` failed attempts (None: give up)."""
    if attempts >= MAX_ATTEMPTS:
        return None
    return now + timedelta(seconds=BACKOFF_SECONDS[attempts - 1])


@dataclass(frozen=True)
class Sender:
    name: str  # what the sweep reports: "webhook deliveries", "emails"
    run_due: Callable[..., int]
    next_due: Callable[[], datetime | None]


SENDERS: dict[str, Sender] = {}


def register(sender: Sender) -> None:
    SENDERS[sender.name] = sender


def run_due(*, now: datetime | None = None) -> dict[str, int]:
    """Attempt every due row of every outbox once. Returns how many each attempted."""
    return {name: sender.run_due(now=now) for name, sender in SENDERS.items()}


def _seconds_to_next_due() -> float:
    soonest = [due for sender in SENDERS.values() if (due := sender.next_due()) is not None]
    if not soonest:
        return IDLE_SECONDS
    return min(IDLE_SECONDS, max(0.0, (min(soonest) - timezone.now()).total_seconds()))


_wake = threading.Event()
_stop = threading.Event()
_worker_lock = threading.Lock()
_worker: threading.Thread | None = None


def _worker_loop() -> None:
    while not _stop.is_set():
        _wake.clear()
        try:
            run_due()
            wait = _seconds_to_next_due()
        except Exception:  # keep the worker alive: the rows say what is left to do
            log.exception("outbox worker iteration failed")
            wait = 5.0
        finally:
            close_old_connections()
        _wake.wait(timeout=wait)
    connection.close()


def kick() -> None:
    """Wake (and on first use start) this process's outbox thread. Disabled with
    GAVEL_WEBHOOK_WORKER=False (tests run the senders themselves)."""
    global _worker
    if not getattr(settings, "GAVEL_WEBHOOK_WORKER", True):
        return
    with _worker_lock:
        if _worker is None or not _worker.is_alive():
            _stop.clear()
            _worker = threading.Thread(target=_worker_loop, name="gavel-outbox", daemon=True)
            _worker.start()
    _wake.set()


def stop(timeout: float = 5.0) -> None:
    """Stop this process's outbox thread (tests; a clean shutdown)."""
    global _worker
    with _worker_lock:
        worker, _worker = _worker, None
    if worker is not None:
        _stop.set()
        _wake.set()
        worker.join(timeout)
