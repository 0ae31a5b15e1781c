"""Two workers (`manage.py worker`, real processes) on the test's PostgreSQL database, with a
Redis server and an SMTP server of the test's own (never the shared Redis): while calls wait
for their reminder, escalation and expiry and mail waits to be sent, every worker database
connection is terminated (pg_terminate_backend, three times, and each one caught in the middle
of a pass in between, so the outage certainly meets a pass), Redis is stopped and the SMTP
server is down for a few seconds. The workers outlive all of it, and afterwards every
reminder, escalation and expiry happened exactly once and every mail was sent, with at most
one duplicate in all (the documented at-least-once window: docs/operations.md). SIGTERM then
stops each worker (exit 0) and removes its heartbeat."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from console.models import AuditEvent, Team
from notifications.models import ApprovalNotice, EmailState, Notification, OutboundEmail
from ops.models import WorkerHeartbeat
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory
from tests.support.live_console import PYTHON, ROOT
from tests.support.mail import Inbox, free_port
from tests.support.processes import RedisServer

pytestmark = [pytest.mark.postgres, pytest.mark.outage, pytest.mark.django_db(transaction=True)]

CALLS = 6
MAILS = 30
# Seconds after the request: the reminder and the escalation fall due during the outage; the
# expiry well after it, beyond the workers' back-off (1, 2, 4 s after failed passes, each of
# which may also wait DB_POOL_TIMEOUT for a connection). At 9 s, one CI run's workers came
# back at 12 s: the calls expired before their late reminders, which are then not due.
REMIND, ESCALATE, EXPIRE = 2, 4, 30
APP_NAME = "gavel-worker-outage-test"  # the workers' connections (libpq's PGAPPNAME)


def _database_url() -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class Smtp:
    """aiosmtpd on one port, stopped and started again; one inbox across restarts."""

    def __init__(self):
        self.port = free_port()
        self.inbox = Inbox()
        self.controller = None

    def start(self):
        from aiosmtpd.controller import Controller

        self.controller = Controller(
            self.inbox, hostname="127.0.0.1", port=self.port, ready_timeout=5
        )
        self.controller.start()

    def stop(self):
        if self.controller is not None:
            self.controller.stop()
            self.controller = None


def _terminate_worker_connections(admin, *, busy_only: bool = False) -> int:
    """pg_terminate_backend on every backend of the workers (named by PGAPPNAME), or only on
    those in the middle of a pass (a query running, or a transaction open): that pass fails."""
    busy = " AND state IN ('active', 'idle in transaction')" if busy_only else ""
    rows = admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"  # noqa: S608 - no input
        f" WHERE datname = %s AND application_name = %s{busy}",
        [connection.settings_dict["NAME"], APP_NAME],
    ).fetchall()
    return len(rows)


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_workers_outlive_database_redis_and_smtp_outages_and_do_each_thing_once(
    on_postgres, tenant_a, admin_a, lead_a, reviewer_a, tmp_path
):
    if not on_postgres:
        pytest.skip("needs PostgreSQL: workers are processes of their own")
    tenant_a.reminder_after_seconds = REMIND
    tenant_a.escalate_after_seconds = ESCALATE
    tenant_a.save()
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice@a.example")
    team = Team.objects.create(tenant=tenant_a, name="support")
    alice.teams.add(team)
    team.leads.add(lead_a)

    smtp = Smtp()
    smtp.start()
    redis = RedisServer()
    redis.start()
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "REDIS_URL": redis.url,
        "REDIS_PREFIX": "ops-run-worker-test",
        "EMAIL_URL": f"smtp://127.0.0.1:{smtp.port}",
        "DEBUG": "1",
        "PYTHONUNBUFFERED": "1",
        "PGAPPNAME": APP_NAME,
        "DB_CONNECT_TIMEOUT": "2",
        "DB_POOL_TIMEOUT": "3",
    }
    logs = [(tmp_path / f"worker{i}.log").open("wb") for i in (1, 2)]
    workers = [
        subprocess.Popen(  # noqa: S603 - our own manage.py and arguments
            [PYTHON, "manage.py", "worker", "--interval", "0.2"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        for log in logs
    ]
    try:
        _wait(lambda: WorkerHeartbeat.objects.count() == 2, 60, "both workers beat")
        now = timezone.now()
        approvals = [
            ApprovalFactory(
                run=RunFactory(tenant=tenant_a, principal=alice, external_id=f"run_w{i}"),
                tool_name=f"tool_{i}",
                requested_at=now,
                expires_at=now + timedelta(seconds=EXPIRE),
            )
            for i in range(CALLS)
        ]
        for i in range(MAILS):
            OutboundEmail.objects.create(
                tenant=tenant_a, to=f"m{i}@a.example", subject=f"mail {i}", text_body=f"body {i}"
            )
        # The outages, while the work is due.
        smtp.stop()
        redis.stop()
        # Every worker connection three times, a second apart; in between, any caught in the
        # middle of a pass (a pass that only met the idle pool's dead connections would
        # replace them unnoticed: one CI run's outage fell between two passes).
        terminated = 0
        admin_url = _database_url().rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin_url, autocommit=True) as admin:
            for _ in range(3):
                terminated += _terminate_worker_connections(admin)
                until = time.monotonic() + 1.0
                while time.monotonic() < until:
                    terminated += _terminate_worker_connections(admin, busy_only=True)
                    time.sleep(0.01)
        redis.start()
        smtp.start()
        assert terminated >= 2, "the workers held no connection to terminate"

        def done():
            return (
                Approval.objects.filter(pk__in=[a.pk for a in approvals])
                .exclude(status=ApprovalStatus.EXPIRED)
                .count()
                == 0
                and ApprovalNotice.objects.count() == 2 * CALLS
                and not OutboundEmail.objects.filter(state=EmailState.PENDING).exists()
            )

        _wait(done, 90, "every expiry, reminder, escalation and mail")
        time.sleep(1.5)  # both go on working: nothing happens again
        assert [w.poll() for w in workers] == [None, None], "a worker exited"

        # Each expiry once (one audit entry per call).
        expired = Counter(
            AuditEvent.objects.filter(action="approval.expired").values_list("object_id", flat=True)
        )
        assert sorted(expired.values()) == [1] * CALLS, expired
        # Each reminder and escalation once per recipient and call.
        told = Counter(Notification.objects.values_list("principal_id", "kind", "url"))
        assert told and set(told.values()) == {1}, told
        kinds = Counter(kind for _, kind, _ in told)
        assert kinds["approval.reminder"] >= CALLS and kinds["approval.escalated"] >= CALLS
        # Every mail sent; received once each, with at most one duplicate in all.
        rows = list(OutboundEmail.objects.values_list("to", "subject", "state"))
        assert {state for *_, state in rows} == {EmailState.SENT}
        received = Counter((m["To"], m["Subject"]) for m in smtp.inbox.messages)
        wanted = Counter((to, subject) for to, subject, _ in rows)
        assert set(received) == set(wanted), set(wanted) ^ set(received)
        duplicates = sum(received.values()) - sum(wanted.values())
        assert 0 <= duplicates <= 1, received - wanted

        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        assert [w.wait(15) for w in workers] == [0, 0]
        assert WorkerHeartbeat.objects.count() == 0
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
        for log in logs:
            log.close()
        redis.close()
        smtp.stop()
    text = "".join((tmp_path / f"worker{i}.log").read_text() for i in (1, 2))
    assert "pass failed" in text  # the outages were met, and survived
