"""Reminders and escalation, run by the sweep: a call still pending `reminderAfterSeconds`
after its request re-notifies everyone who may decide it; one pending `escalateAfterSeconds`
notifies the run's principal's team leads (else the admins). Each once per call, with mail and
webhooks; expiry stays fail-closed and comes first."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, WebhookDelivery
from approvals.services import webhooks
from console.models import Principal, Team
from notifications.models import ApprovalNotice, Notification, OutboundEmail
from notifications.sweep import ESCALATED, REMINDER, approvals_notice_due, sweep
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory

pytestmark = pytest.mark.django_db

T0 = None  # each test's start (the autouse fixture below)


@pytest.fixture(autouse=True)
def _t0():
    global T0
    T0 = timezone.now().replace(microsecond=0)


def at(seconds):
    return T0 + timezone.timedelta(seconds=seconds)


@pytest.fixture
def setup(tenant_a, admin_a, lead_a, reviewer_a, viewer_a):
    tenant_a.reminder_after_seconds = 60
    tenant_a.escalate_after_seconds = 300
    tenant_a.save()
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice@a.example")
    team = Team.objects.create(tenant=tenant_a, name="support")
    alice.teams.add(team)
    lead_a.teams.add(team)
    team.leads.add(lead_a)
    Principal.objects.filter(pk=reviewer_a.pk).update(email="rita@a.example")
    run = RunFactory(tenant=tenant_a, principal=alice, external_id="run_s")
    approval = ApprovalFactory(run=run, tool_name="email.send", requested_at=T0, expires_at=at(900))
    webhooks.webhook_create(tenant=tenant_a, url="https://hooks.example/")
    return {"approval": approval, "run": run, "team": team, "alice": alice}


def recipients(kind):
    return sorted(n.principal.external_id for n in Notification.objects.filter(kind=kind))


def test_nothing_fires_before_the_delays(setup):
    assert approvals_notice_due(kind=REMINDER, now=at(59)) == 0
    assert approvals_notice_due(kind=ESCALATED, now=at(299)) == 0
    assert not Notification.objects.exists() and not ApprovalNotice.objects.exists()


def test_the_reminder_renotifies_every_decider_once(setup):
    assert approvals_notice_due(kind=REMINDER, now=at(60)) == 1
    # Everyone who may decide it: the admin, the lead and the reviewer (not the viewer, not
    # alice, whose run it is).
    assert recipients(REMINDER) == ["admin@a.example", "lead@a.example", "reviewer@a.example"]
    notification = Notification.objects.get(principal__external_id="reviewer@a.example")
    approval = setup["approval"]
    assert notification.url == f"https://gavel.example.com/approvals/{approval.public_id}/"
    assert notification.title == "A call still waits for a decision: email.send"
    assert "Run run_s for alice@a.example" in notification.body
    assert OutboundEmail.objects.get().to == "rita@a.example"  # the one with an address
    delivery = WebhookDelivery.objects.get(event=REMINDER)
    assert delivery.payload["approval"]["id"] == approval.public_id
    assert approvals_notice_due(kind=REMINDER, now=at(120)) == 0  # once per call
    assert Notification.objects.count() == 3


def test_escalation_goes_to_the_team_leads_of_the_runs_principal(setup):
    assert approvals_notice_due(kind=ESCALATED, now=at(300)) == 1
    assert recipients(ESCALATED) == ["lead@a.example"]
    assert Notification.objects.get().title == "Escalated: email.send has waited 5 min"
    assert WebhookDelivery.objects.filter(event=ESCALATED).count() == 1
    assert approvals_notice_due(kind=ESCALATED, now=at(600)) == 0


def test_escalation_without_team_leads_goes_to_the_admins(setup):
    setup["team"].leads.clear()
    approvals_notice_due(kind=ESCALATED, now=at(300))
    assert recipients(ESCALATED) == ["admin@a.example"]


def test_a_decided_or_expired_call_is_neither_reminded_nor_escalated(setup, tenant_a):
    approval = setup["approval"]
    # Past its expiry by the real clock too (the decision writer checks it at the real time).
    other = ApprovalFactory(run=setup["run"], requested_at=at(-60), expires_at=at(-1))
    counts = sweep(now=at(400))  # `other` is past its expiry: expired, fail closed
    assert counts["expired"] == 1 and counts["reminded"] == 1 and counts["escalated"] == 1
    other.refresh_from_db()
    assert other.status == ApprovalStatus.EXPIRED
    assert set(ApprovalNotice.objects.values_list("approval_id", flat=True)) == {approval.pk}
    late = ApprovalFactory(run=setup["run"], requested_at=T0, expires_at=at(900))
    late.status = ApprovalStatus.DENIED
    late.save()
    assert sweep(now=at(500))["reminded"] == 0


def test_a_tenant_without_the_settings_hears_nothing(setup, tenant_a):
    tenant_a.reminder_after_seconds = tenant_a.escalate_after_seconds = None
    tenant_a.save()
    counts = sweep(now=at(800))
    assert counts["reminded"] == counts["escalated"] == 0
    assert not Notification.objects.exists()


def test_another_tenants_calls_do_not_reach_this_tenants_people(setup, tenant_b, reviewer_b):
    tenant_b.reminder_after_seconds = 60
    tenant_b.save()
    approvals_notice_due(kind=REMINDER, now=at(60))
    assert not Notification.objects.filter(principal=reviewer_b).exists()


def test_the_command_reports_what_the_sweep_did(setup, tenant_a):
    tenant_a.reminder_after_seconds = 60  # due now: the command sweeps at the real time
    tenant_a.escalate_after_seconds = 10**6
    tenant_a.save()
    Approval.objects.filter(pk=setup["approval"].pk).update(requested_at=at(-120))
    out = StringIO()
    call_command("expire_approvals", stdout=out)
    assert "sent 1 reminders and 0 escalations" in out.getvalue()
