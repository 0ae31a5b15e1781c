"""Where ingest meets approvals: a runtime's next event is its pickup, an expired call is never
reported pending by the run resource, and new held calls reach the tenant's webhooks."""

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import Approval, WebhookDelivery
from approvals.services.decisions import approval_decide
from approvals.services.webhooks import webhook_create
from tests.support.ingest import RUNS, admit_and_hold

pytestmark = pytest.mark.django_db


def test_posting_an_event_after_a_decision_marks_it_picked_up(ingest_a, reviewer_a):
    admit_and_hold(ingest_a)
    approval = Approval.objects.get(tool_call_id="call_1")
    approval_decide(approval=approval, viewer=reviewer_a, decision="approve")
    assert Approval.objects.get(pk=approval.pk).delivered_at is None
    step2 = {"seq": 3, "type": "step.started", "step": 2, "agentId": "bot", "model": "m"}
    assert ingest_a.post(f"{RUNS}/run_hook/events", {"events": [step2]}).status_code == 200
    assert Approval.objects.get(pk=approval.pk).delivered_at is not None


def test_the_run_resource_never_reports_an_expired_call_as_pending(ingest_a):
    soon = (timezone.now() + timedelta(milliseconds=200)).isoformat()
    admit_and_hold(ingest_a, expires_at=soon)
    Approval.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    body = ingest_a.get(f"{RUNS}/run_hook").json()
    assert body["pendingCalls"] == []
    approval = Approval.objects.get(tool_call_id="call_1")
    assert approval.status == "expired"
    assert approval.message == "Not sent."
    listed = ingest_a.get(RUNS).json()["items"][0]
    assert listed["pendingCalls"] == []


def test_held_calls_are_queued_for_the_tenants_webhooks(ingest_a, ingest_b, tenant_a):
    webhook_create(tenant=tenant_a, url="https://hooks.example.com/gavel")
    admit_and_hold(ingest_a)
    admit_and_hold(ingest_b, run_id="run_other_tenant")
    deliveries = list(WebhookDelivery.objects.filter(event="approval.requested"))
    assert len(deliveries) == 1
    assert deliveries[0].webhook.tenant_id == tenant_a.pk
    assert "call_1" in str(deliveries[0].payload)
