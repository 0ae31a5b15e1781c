"""Two sweeps (`manage.py expire_approvals --loop`) running at once on one PostgreSQL database:
the reminder and the escalation of a held call each fire exactly once, at their delays (the
unique ApprovalNotice row is the claim; the loser's INSERT waits for the winner's commit)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from django.db import connection
from django.utils import timezone

from approvals.models import WebhookDelivery
from approvals.services import webhooks
from console.models import Team
from notifications.models import ApprovalNotice, Notification
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory
from tests.support.live_console import PYTHON, ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

REMIND, ESCALATE = 2, 4  # seconds


def _database_url() -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _sweep(env: dict, log) -> subprocess.Popen:
    return subprocess.Popen(  # noqa: S603 - our own manage.py and arguments
        [PYTHON, "manage.py", "expire_approvals", "--loop", "--interval", "0.1"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def test_two_sweeps_fire_the_reminder_and_the_escalation_once_each_at_their_delays(
    on_postgres, tenant_a, admin_a, lead_a, reviewer_a, tmp_path, settings
):
    if not on_postgres:
        pytest.skip("needs PostgreSQL: two processes on one database")
    tenant_a.reminder_after_seconds = REMIND
    tenant_a.escalate_after_seconds = ESCALATE
    tenant_a.save()
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice@a.example")
    team = Team.objects.create(tenant=tenant_a, name="support")
    alice.teams.add(team)
    team.leads.add(lead_a)
    # A closed port on loopback: the deliveries are counted, and no request leaves the machine.
    settings.GAVEL_WEBHOOK_ALLOW_HTTP = True
    webhooks.webhook_create(tenant=tenant_a, url="http://127.0.0.1:9/")
    env = {
        **os.environ,
        "GAVEL_WEBHOOK_ALLOW_HTTP": "1",
        "DATABASE_URL": _database_url(),
        "DEBUG": "1",
        "PYTHONUNBUFFERED": "1",
    }
    logs = [(tmp_path / f"sweep{i}.log").open("wb") for i in (1, 2)]
    sweeps = [_sweep(env, log) for log in logs]
    try:
        time.sleep(3)  # both are sweeping (and finding nothing) before the call arrives
        run = RunFactory(tenant=tenant_a, principal=alice, external_id="run_two")
        requested = timezone.now()
        approval = ApprovalFactory(
            run=run, requested_at=requested, expires_at=requested + timezone.timedelta(minutes=5)
        )
        deadline = time.monotonic() + 60
        while ApprovalNotice.objects.count() < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # both go on sweeping: nothing fires again
        assert all(s.poll() is None for s in sweeps), "a sweep died"
    finally:
        for s in sweeps:
            s.terminate()
        for s in sweeps:
            s.wait(10)
        for log in logs:
            log.close()
    notices = {n.kind: n.at for n in ApprovalNotice.objects.filter(approval=approval)}
    output = "\n".join((tmp_path / f"sweep{i}.log").read_text() for i in (1, 2))
    assert set(notices) == {"approval.reminder", "approval.escalated"}, output
    reminded = (notices["approval.reminder"] - requested).total_seconds()
    escalated = (notices["approval.escalated"] - requested).total_seconds()
    assert REMIND <= reminded < REMIND + 15 and ESCALATE <= escalated < ESCALATE + 15
    reminders = Notification.objects.filter(kind="approval.reminder")
    assert sorted(n.principal.external_id for n in reminders) == [
        "admin@a.example",
        "lead@a.example",
        "reviewer@a.example",
    ]  # once each
    assert [n.principal_id for n in Notification.objects.filter(kind="approval.escalated")] == [
        lead_a.pk
    ]
    assert WebhookDelivery.objects.filter(event="approval.reminder").count() == 1
    assert WebhookDelivery.objects.filter(event="approval.escalated").count() == 1


def test_a_sweep_process_mails_a_batch_that_a_request_committed(
    on_postgres, tenant_a, reviewer_a, lead_a, smtp_server, tmp_path
):
    """The request side writes the batch and nothing else; a separate sweep process (as
    `make run` and production run it) expands it and sends one mail to each "now" decider."""
    if not on_postgres:
        pytest.skip("needs PostgreSQL: two processes on one database")
    from approvals.services.requests import approvals_request
    from notifications.models import CallBatch, EmailChoice, NotificationSettings

    for principal, address in ((reviewer_a, "rita@a.example"), (lead_a, "lena@a.example")):
        principal.email = address
        principal.save(update_fields=["email"])
        NotificationSettings.objects.create(
            tenant=tenant_a, principal=principal, email=EmailChoice.NOW
        )
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "DEBUG": "1",
        "PYTHONUNBUFFERED": "1",
        "EMAIL_URL": smtp_server.url,
    }
    with (tmp_path / "sweep.log").open("wb") as log:
        sweep = _sweep(env, log)
        try:
            run = RunFactory(tenant=tenant_a, external_id="run_mail")
            calls = [{"tool_call_id": f"c{i}", "tool_name": "email.send"} for i in range(3)]
            approvals_request(run=run, step=1, calls=calls)  # committed: no transaction around
            deadline = time.monotonic() + 60
            while len(smtp_server.inbox.envelopes) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert sweep.poll() is None, "the sweep died"
        finally:
            sweep.terminate()
            sweep.wait(10)
    output = (tmp_path / "sweep.log").read_text()
    assert sorted(m["To"] for m in smtp_server.inbox.messages) == [
        "lena@a.example",
        "rita@a.example",
    ], output
    assert all("3 new calls" in m["Subject"] for m in smtp_server.inbox.messages)
    assert CallBatch.objects.get().mailed_at is not None
