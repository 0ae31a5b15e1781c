"""Durable outboxes: rows written in the transaction of what they report, sent after commit.

Each kind of outgoing message (webhook deliveries, mail) is a table of rows with a state, an
attempt count and a `next_attempt_at`, and a *sender*: `run_due(now=, limit=)` attempts the
rows that are due once each (claimed with a conditional UPDATE, a lease, so two processes never
send one attempt twice) and `next_due()` says when the soonest pending one is due. Senders
register in their app's `ready()`.

Two things run them. The sweep `manage.py expire_approvals --loop` (its own process) runs every
sender. One daemon thread per server process, woken on commit by `kick()`, runs the senders that
are not `sweep_only` (webhook deliveries: so a request never waits on an endpoint, and a
delivery leaves at once). Mail is `sweep_only`: expanding a batch of new calls into mails,
rendering and SMTP are CPU and GIL the server's event loop needs, so a server process does no
mail work at all; the sweep polls for it (every `--interval`, default 1 s). Without a running
sweep mail is written and stays pending (nothing is lost; it leaves when a sweep starts). A
crash between commit and send loses nothing either way: the rows say what is left to do.

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


def post(client, url: str, *, content: bytes, headers: dict) -> tuple[int | None, str]:
    """One HTTP attempt of an outbox row: (status code or None, error or "" when 2xx)."""
    import httpx

    try:
        response = client.post(url, content=content, headers=headers)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:1000]
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, f"HTTP {response.status_code}"


def attempt_fields(
    *, attempts: int, status_code: int | None, error: str, now: datetime, delivered, failed
) -> dict:
    """The row's fields after one more attempt (`attempts`: those before it): `delivered` on
    success, `failed` after the last one, else the next attempt's time."""
    attempts += 1
    fields = {"attempts": attempts, "last_status_code": status_code, "last_error": error}
    retry_at = next_attempt(attempts=attempts, now=now)
    if not error:
        fields.update(status=delivered, delivered_at=now)
    elif retry_at is None:
        fields.update(status=failed)
    else:
        fields.update(next_attempt_at=retry_at)
    return fields


@dataclass(frozen=True)
class Sender:
    name: str  # what the sweep reports: "webhook deliveries", "emails"
    run_due: Callable[..., int]
    next_due: Callable[[], datetime | None]
    # Only the sweep process runs it, never a server's outbox thread (mail: see above).
    sweep_only: bool = False


SENDERS: dict[str, Sender] = {}


def register(sender: Sender) -> None:
    SENDERS[sender.name] = sender


def _senders(*, in_server: bool) -> list[Sender]:
    return [s for s in SENDERS.values() if not (in_server and s.sweep_only)]


def run_due(*, now: datetime | None = None, in_server: bool = False) -> dict[str, int]:
    """Attempt every due row of every outbox once (`in_server`: only those a server's thread
    runs). Returns how many each attempted."""
    return {s.name: s.run_due(now=now) for s in _senders(in_server=in_server)}


def _seconds_to_next_due() -> float:
    senders = _senders(in_server=True)
    soonest = [due for sender in senders if (due := sender.next_due()) is not None]
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
            run_due(in_server=True)
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
