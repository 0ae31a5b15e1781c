"""Durable outboxes: rows written in the transaction of what they report, sent after commit.

Each kind of outgoing message (webhook deliveries, Slack responses, mail) is a table of rows
with a state, an attempt count and a `next_attempt_at`, and a *sender* that registers in its
app's `ready()`: `run_due(now=, limit=)` attempts the rows that are due once each (claimed
with a conditional UPDATE, a lease, so two processes never send one attempt twice) and
`next_due()` says when the soonest pending one is due.

Outbound HTTP (webhooks, Slack responses) is sent by a `Dispatcher`: the sender's `claim`
picks due rows round-robin by tenant, at most `GAVEL_OUTBOUND_PER_TENANT` of one tenant and
one per endpoint in flight, and each request runs in a bounded pool of threads
(`GAVEL_OUTBOUND_WORKERS`) under console/outbound.py's deadline, size cap and address policy;
the rows are written back in the dispatcher's own thread as requests finish. So a tenant's
slow endpoint holds at most its own share of the pool for at most the deadline, and every
other tenant's deliveries go on beside it.

Two things run the senders. One daemon thread per process, woken on commit by `kick()`, runs
the senders that are not `sweep_only` and dispatches outbound HTTP (so a request never waits
on an endpoint, and a delivery leaves at once). The sweep `manage.py expire_approvals --loop`
(its own process) starts the same thread for outbound HTTP only (`start()`, polling every
`--interval`) and runs the other senders in its own pass after expiry, reminders and
escalations, which therefore never wait on an endpoint. Mail is `sweep_only`: expanding a
batch of new calls into mails, rendering and SMTP are CPU and GIL the server's event loop
needs, so a server process does no mail work at all; the sweep polls for it (every
`--interval`, default 1 s). Without a running sweep mail is written and stays pending
(nothing is lost; it leaves when a sweep starts). A crash between commit and send loses
nothing either way: the rows say what is left to do.

Retries share one schedule: after attempts 1..5 wait 5 s, 30 s, 2 min, 10 min, 1 h; the 6th
failure is final (`failed`).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Hashable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

log = logging.getLogger("console.outbox")

BACKOFF_SECONDS = (5, 30, 120, 600, 3600)  # after attempts 1..5; attempt 6 is the last
MAX_ATTEMPTS = len(BACKOFF_SECONDS) + 1
LEASE = timedelta(seconds=60)  # a claimed row is not retried by another worker meanwhile
IDLE_SECONDS = 30.0  # the thread's longest sleep when nothing is due


def next_attempt(*, attempts: int, now: datetime) -> datetime | None:
    """When to try again after `attempts` failed attempts (None: give up)."""
    if attempts >= MAX_ATTEMPTS:
        return None
    return now + timedelta(seconds=BACKOFF_SECONDS[attempts - 1])


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


def soonest_due(pending) -> datetime | None:
    """When the soonest of an outbox's pending rows (a queryset) is due (None: none)."""
    return pending.order_by("next_attempt_at").values_list("next_attempt_at", flat=True).first()


# --- outbound HTTP: fair claims, a bounded pool ---


def claim(row, now: datetime, *, pending: str, state_field: str = "status") -> bool:
    """Lease one due row of any outbox for one attempt: a conditional UPDATE on its state, its
    attempt count and its due time, so two processes never send one attempt twice."""
    lookup = {state_field: pending, "attempts": row.attempts, "next_attempt_at__lte": now}
    leased = type(row).objects.filter(pk=row.pk, **lookup).update(next_attempt_at=now + LEASE)
    return leased == 1


@dataclass(frozen=True)
class Job:
    """One claimed row's request. `send` runs in a pool thread (HTTP only, no database);
    `record(status_code, error)` runs in the dispatcher's thread."""

    tenant_id: int
    endpoint: Hashable | None  # one request per endpoint in flight (None: no such limit)
    send: Callable[[], tuple[int | None, str]]
    record: Callable[[int | None, str], None]


class Room:
    """What a dispatcher can still take: `slots` requests, at most `per_tenant` of a tenant
    and one per endpoint in flight (counting those already in flight)."""

    def __init__(self, *, slots: int, per_tenant: int, tenants: Counter, endpoints: set):
        self.slots = slots
        self.per_tenant = per_tenant
        self._tenants = tenants
        self._endpoints = endpoints

    def busy_tenants(self) -> list[int]:
        return [t for t, n in self._tenants.items() if n >= self.per_tenant]

    def busy_endpoints(self) -> list:
        return list(self._endpoints)

    @property
    def window(self) -> int:
        """How many due rows a claim should look at to fill the slots fairly."""
        return max(1, self.slots) * 4

    def pick(self, rows, *, tenant_of, endpoint_of=lambda row: None) -> list:
        """Up to `slots` of `rows` (oldest first), round-robin by tenant."""
        queues: dict[int, deque] = defaultdict(deque)
        for row in rows:
            queues[tenant_of(row)].append(row)
        picked: list = []
        taken = Counter(self._tenants)
        endpoints = set(self._endpoints)
        while queues and len(picked) < self.slots:
            for tenant in list(queues):
                queue = queues[tenant]
                while queue and endpoint_of(queue[0]) in endpoints - {None}:
                    queue.popleft()
                if not queue or taken[tenant] >= self.per_tenant:
                    del queues[tenant]
                    continue
                row = queue.popleft()
                picked.append(row)
                taken[tenant] += 1
                endpoints.add(endpoint_of(row))
                if len(picked) >= self.slots:
                    break
        return picked


class Dispatcher:
    """Outbound requests of the HTTP senders in a bounded pool of threads; their rows are
    written back here, in the thread that calls `reap`."""

    def __init__(self, *, on_done: Callable[[], None] | None = None):
        self.workers = settings.GAVEL_OUTBOUND_WORKERS
        self.per_tenant = settings.GAVEL_OUTBOUND_PER_TENANT
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="gavel-outbound")
        self._in_flight: dict[Future, tuple[Job, str]] = {}
        self._tenants: Counter = Counter()
        self._endpoints: set = set()
        self._on_done = on_done

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def room(self, *, limit: int | None = None) -> Room:
        slots = self.workers - len(self._in_flight)
        return Room(
            slots=slots if limit is None else min(slots, limit),
            per_tenant=self.per_tenant,
            tenants=+self._tenants,
            endpoints=set(self._endpoints),
        )

    def fill(self, sender: Sender, *, now=None, client=None, limit: int | None = None) -> int:
        """Claim and start as many of the sender's due rows as there is room for."""
        started = 0
        while (room := self.room(limit=None if limit is None else limit - started)).slots > 0:
            jobs = sender.claim(now=now, room=room, client=client)
            if not jobs:
                break
            for job in jobs:
                future = self._pool.submit(job.send)
                self._in_flight[future] = (job, sender.name)
                self._tenants[job.tenant_id] += 1
                if job.endpoint is not None:
                    self._endpoints.add(job.endpoint)
                if self._on_done is not None:
                    future.add_done_callback(lambda _future: self._on_done())
            started += len(jobs)
        return started

    def reap(self, *, timeout: float | None = 0) -> Counter:
        """Write back the requests that have finished (waiting up to `timeout` for one).
        Returns how many of each sender."""
        if not self._in_flight:
            return Counter()
        done, _ = wait(list(self._in_flight), timeout=timeout, return_when=FIRST_COMPLETED)
        recorded: Counter = Counter()
        for future in done:
            job, name = self._in_flight.pop(future)
            self._tenants[job.tenant_id] -= 1
            self._endpoints.discard(job.endpoint)
            try:
                status_code, error = future.result()
            except Exception:  # a bug in send: the row is retried like any failure
                log.exception("an outbound request failed unexpectedly")
                status_code, error = None, "request failed"
            job.record(status_code, error)
            recorded[name] += 1
        return recorded

    def close(self) -> None:
        """Stop taking work. Requests in flight end by their deadline; their rows, not
        written back, are retried when their lease ends."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def dispatch_due(name: str, *, now=None, client=None, limit: int = 50) -> int:
    """Attempt the due rows of one HTTP sender once each, here and now (the one-shot sweep,
    tests): claimed fairly and sent concurrently like the thread does, waiting for the
    last. Returns how many were attempted."""
    sender = SENDERS[name]
    dispatcher = Dispatcher()
    attempted = started = 0
    try:
        while True:
            if started < limit:
                started += dispatcher.fill(sender, now=now, client=client, limit=limit - started)
            if not dispatcher.in_flight:
                return attempted
            attempted += sum(dispatcher.reap(timeout=None).values())
    finally:
        dispatcher.close()


# --- the senders ---


@dataclass(frozen=True)
class Sender:
    name: str  # what the sweep reports: "webhook deliveries", "emails"
    run_due: Callable[..., int]
    next_due: Callable[[], datetime | None]
    # Only the sweep process runs it, never a server's outbox thread (mail: see above).
    sweep_only: bool = False
    # Outbound HTTP: `claim(now=, room=, client=)` claims due rows as `Job`s (a Dispatcher
    # sends them); `run_due` is then `dispatch_due` of it.
    claim: Callable[..., list[Job]] | None = None


SENDERS: dict[str, Sender] = {}


def register(sender: Sender) -> None:
    SENDERS[sender.name] = sender


def _senders(*, in_server: bool, http: bool | None = None) -> list[Sender]:
    return [
        s
        for s in SENDERS.values()
        if not (in_server and s.sweep_only) and (http is None or (s.claim is not None) == http)
    ]


def run_due(
    *, now: datetime | None = None, in_server: bool = False, http: bool = True
) -> dict[str, int]:
    """Attempt every due row of every outbox once (`in_server`: only those a server's thread
    runs; `http=False`: not the outbound HTTP senders). Returns how many each attempted."""
    senders = _senders(in_server=in_server, http=None if http else False)
    return {s.name: s.run_due(now=now) for s in senders}


def _seconds_to_next_due(senders: list[Sender]) -> float:
    soonest = [due for sender in senders if (due := sender.next_due()) is not None]
    if not soonest:
        return IDLE_SECONDS
    return max(0.0, (min(soonest) - timezone.now()).total_seconds())


_wake = threading.Event()
_stop = threading.Event()
_worker_lock = threading.Lock()
_worker: threading.Thread | None = None


def _worker_loop(*, local: bool, idle: float) -> None:
    """`local`: also run the server's other senders (not `sweep_only`); else outbound HTTP
    only (the sweep's thread). `idle`: the longest sleep (the sweep polls for rows other
    processes write)."""
    dispatcher = Dispatcher(on_done=_wake.set)
    http = _senders(in_server=True, http=True)
    try:
        while not _stop.is_set():
            _wake.clear()
            try:
                dispatcher.reap()
                if local:
                    run_due(in_server=True, http=False)
                for sender in http:
                    dispatcher.fill(sender)
                due = _seconds_to_next_due(_senders(in_server=True, http=None if local else True))
                # Rows due but no room (the pool full, a tenant or endpoint busy): a finished
                # request wakes the thread.
                wait_for = idle if dispatcher.in_flight and due == 0 else min(idle, due)
            except Exception:  # keep the worker alive: the rows say what is left to do
                log.exception("outbox worker iteration failed")
                wait_for = 5.0
            finally:
                close_old_connections()
            _wake.wait(timeout=wait_for)
    finally:
        dispatcher.close()
        connection.close()


def start(*, local: bool = True, idle: float = IDLE_SECONDS) -> None:
    """Start this process's outbox thread if it is not running, and wake it."""
    global _worker
    with _worker_lock:
        if _worker is None or not _worker.is_alive():
            _stop.clear()
            _worker = threading.Thread(
                target=_worker_loop,
                kwargs={"local": local, "idle": idle},
                name="gavel-outbox",
                daemon=True,
            )
            _worker.start()
    _wake.set()


def kick() -> None:
    """Wake (and on first use start) this process's outbox thread. Disabled with
    GAVEL_WEBHOOK_WORKER=False (tests run the senders themselves)."""
    if not getattr(settings, "GAVEL_WEBHOOK_WORKER", True):
        return
    start()


def stop(timeout: float = 5.0) -> None:
    """Stop this process's outbox thread (tests; a clean shutdown)."""
    global _worker
    with _worker_lock:
        worker, _worker = _worker, None
    if worker is not None:
        _stop.set()
        _wake.set()
        worker.join(timeout)


# --- mail from the platform ---
# The mail outbox (its table, its sender) is the notifications app's. A platform room that
# mails a person (a password reset, an SSO domain's confirmation) queues it here; the app
# registers its writer in `ready()`, so the platform never imports a feature.

_mail_queue: Callable[..., object] | None = None


def register_mail(queue: Callable[..., object]) -> None:
    """The mail outbox's writer: `queue(tenant=, to=, subject=, text_body=)` writes one row."""
    global _mail_queue
    _mail_queue = queue


def mail(*, tenant, to: str, subject: str, text_body: str):
    """Queue one mail in the caller's transaction (sent by the mail sender, like every
    other mail). Returns the outbox's row."""
    if _mail_queue is None:
        raise RuntimeError("no mail outbox is registered (the notifications app registers it)")
    return _mail_queue(tenant=tenant, to=to, subject=subject, text_body=text_body)
