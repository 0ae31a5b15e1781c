"""The worker (`manage.py worker`; the old spelling `expire_approvals --loop` runs the same):
expiry, reminders, escalations, digests and mail in passes (notifications/sweep.py), webhook
and Slack retries on its outbox thread (console/outbox.py).

It never exits on a lost database, Redis or SMTP connection: a pass that fails is logged,
the process's database connections are dropped (a pooled one is checked before reuse), and
the next pass comes after a back-off (1, 2, 4 … 30 s; reset by a pass that succeeds). Mail
and webhook failures are the outboxes' own: the row is retried on its schedule, the pass
goes on.

SIGTERM or SIGINT: the mail in hand is sent and recorded, the pass stops there (what is left
stays due for the next worker), the heartbeat row is removed and the process exits 0.

Several workers may run at once: each piece of work is claimed in the database (a call's
expiry is a conditional UPDATE, a reminder or escalation an `ApprovalNotice` row unique per
call and kind, a mail or delivery a lease on its row), so each is done once.

Heartbeat: after each pass that reached the database, at most every HEARTBEAT_SECONDS, the
worker's `ops.WorkerHeartbeat` row (host:pid) says when; `/readyz` fails when the freshest is
older than GAVEL_WORKER_STALE_SECONDS, and `/metrics` serves it as
`gavel_worker_last_pass_timestamp_seconds`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from datetime import timedelta

from django.db import close_old_connections, connections
from django.utils import timezone

from ops.context import Lifecycle

log = logging.getLogger("ops.worker")
HEARTBEAT_SECONDS = 5.0
BACKOFF = (1, 2, 4, 8, 15, 30)
FORGET_AFTER = timedelta(days=1)  # a killed worker's heartbeat row is deleted after this


class Worker:
    def __init__(self, *, interval: float = 1.0, out=None):
        self.interval = interval
        self.name = f"{socket.gethostname()}:{os.getpid()}"[:200]
        self.stop = threading.Event()
        self.failures = 0
        self.last_beat = 0.0
        self.out = out

    # --- signals ---

    def install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # (tests run a worker in a thread and stop it with `request_stop`)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, frame) -> None:
        log.info(
            "worker %s: %s, finishing the item in hand", self.name, signal.Signals(signum).name
        )
        self.request_stop()

    def request_stop(self) -> None:
        Lifecycle.drain()  # the mail loop stops after the mail in hand (notifications/mail.py)
        self.stop.set()

    # --- one pass ---

    def one_pass(self) -> dict[str, int]:
        from notifications.sweep import sweep

        counts = sweep(http=False)
        self.beat()
        return counts

    def beat(self, *, force: bool = False) -> None:
        import time

        from ops.models import WorkerHeartbeat

        now_mono = time.monotonic()
        if not force and now_mono - self.last_beat < HEARTBEAT_SECONDS:
            return
        now = timezone.now()
        WorkerHeartbeat.objects.update_or_create(
            worker=self.name,
            defaults={"last_pass_at": now},
            create_defaults={"last_pass_at": now, "started_at": now},
        )
        WorkerHeartbeat.objects.filter(last_pass_at__lt=now - FORGET_AFTER).delete()
        self.last_beat = now_mono

    def forget(self) -> None:
        from ops.models import WorkerHeartbeat

        try:
            WorkerHeartbeat.objects.filter(worker=self.name).delete()
        except Exception:  # the database is down: the row ages out
            log.warning("worker %s: could not remove its heartbeat", self.name)

    # --- the loop ---

    def run(self) -> None:
        from console.core import outbox

        log.info("worker %s: started (a pass every %.1f s when idle)", self.name, self.interval)
        outbox.start(local=False, idle=self.interval)  # outbound HTTP: its own thread
        try:
            while not self.stop.is_set():
                wait = self._iteration()
                if wait:
                    self.stop.wait(wait)
        finally:
            outbox.stop()
            self.forget()
            connections.close_all()
            log.info("worker %s: stopped", self.name)

    def _iteration(self) -> float:
        """One pass; returns how long to wait before the next (0: at once, more is due)."""
        try:
            counts = self.one_pass()
        except Exception as exc:
            self.failures += 1
            wait = BACKOFF[min(self.failures, len(BACKOFF)) - 1]
            log.error(
                "worker %s: pass failed (%s: %s); retrying in %d s",
                self.name, type(exc).__name__, str(exc)[:300], wait,
                exc_info=self.failures == 1,
            )  # fmt: skip
            _drop_connections()
            return float(wait)
        if self.failures:
            log.info("worker %s: passes succeed again after %d failures", self.name, self.failures)
            self.failures = 0
        close_old_connections()
        busy = any(counts.values())
        if busy and self.out is not None:
            self.out(counts)
        return 0.0 if busy else self.interval


def _drop_connections() -> None:
    """Every database connection of this thread closed (a broken one is not reused)."""
    for conn in connections.all(initialized_only=True):
        try:
            conn.close()
        except Exception:  # closing a dead connection may itself fail
            log.debug("closing a broken connection failed", exc_info=True)
            conn.connection = None
