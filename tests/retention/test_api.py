"""GET|PATCH /api/v1/retention, GET /api/v1/runs/{runId}/export and GET /api/v1/export:
scopes, the order of checks, validation, the audit row, and tenant isolation."""

import json

import pytest

from approvals.models import ApprovalStatus
from approvals.services.decisions import approval_decide
from console.models import AuditEvent, Tenant
from retention.models import RetentionPolicy
from tests.support.api import ApiClient
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory, make_key

pytestmark = pytest.mark.django_db

RETENTION = "/api/v1/retention"


@pytest.fixture
def manage_admin(client, tenant_a, admin_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))


@pytest.fixture
def manage_admin_b(client, tenant_b):
    admin_b = PrincipalFactory(tenant=tenant_b, external_id="admin@b.example", role="admin")
    return ApiClient(client, make_key(tenant_b, scopes=("manage",), principal=admin_b))


def test_get_answers_the_defaults(manage_admin):
    response = manage_admin.get(RETENTION)
    assert response.status_code == 200
    assert response.json() == {
        "runDays": None,
        "sentMailDays": 30,
        "webhookDeliveryDays": 30,
        "readNotificationDays": 90,
        "auditDays": None,
    }


def test_patch_sets_days_audits_once_and_auditdays_is_the_tenants_setting(manage_admin, tenant_a):
    response = manage_admin.patch(
        RETENTION, {"runDays": 90, "auditDays": 365, "sentMailDays": None}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["runDays"], body["auditDays"], body["sentMailDays"]) == (90, 365, None)
    assert Tenant.objects.get(pk=tenant_a.pk).audit_retention_days == 365
    assert manage_admin.get("/api/v1/tenant").json()["auditRetentionDays"] == 365
    policy = RetentionPolicy.objects.get(tenant=tenant_a)
    assert (policy.run_days, policy.sent_mail_days, policy.webhook_delivery_days) == (90, None, 30)
    entry = AuditEvent.objects.get(tenant=tenant_a, action="retention.updated")
    assert entry.before["runDays"] is None and entry.after["runDays"] == 90
    assert entry.actor_key is not None
    again = manage_admin.patch(RETENTION, {"runDays": 90})
    assert again.status_code == 200
    assert AuditEvent.objects.filter(action="retention.updated").count() == 1  # no change


@pytest.mark.parametrize(
    "body",
    [{"runDays": 0}, {"runDays": 3651}, {"runDays": "30"}, {"runDays": 1.5}, {"nope": 1}],
)
def test_bad_bodies_are_422_and_change_nothing(manage_admin, tenant_a, body):
    response = manage_admin.patch(RETENTION, body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["code"] == "validation_error"
    assert not RetentionPolicy.objects.filter(tenant=tenant_a).exists()


def test_scopes_and_capabilities(client, tenant_a, reviewer_a, ingest_a):
    assert ApiClient(client, None).get(RETENTION).status_code == 401
    assert ingest_a.get(RETENTION).status_code == 403
    reviewer = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=reviewer_a))
    assert reviewer.get(RETENTION).status_code == 403
    assert reviewer.patch(RETENTION, {"runDays": 1}).status_code == 403
    assert reviewer.get("/api/v1/export").status_code == 403
    assert ingest_a.get("/api/v1/export").status_code == 403
    assert not RetentionPolicy.objects.exists()


def test_each_tenant_has_its_own_policy(manage_admin, manage_admin_b, tenant_b):
    manage_admin.patch(RETENTION, {"runDays": 7})
    assert manage_admin_b.get(RETENTION).json()["runDays"] is None
    assert not RetentionPolicy.objects.filter(tenant=tenant_b).exists()


# --- exports ---


def _decided_run(tenant, reviewer, run_id="run_x"):
    run = RunFactory(tenant=tenant, external_id=run_id)
    approval = ApprovalFactory(run=run, tool_call_id="call_1")
    approval_decide(approval=approval, viewer=reviewer, decision="approve")
    ApprovalFactory(run=run, tool_call_id="call_2")
    return run, approval


def test_a_run_export_holds_state_approvals_decisions_and_audit(manage_admin, tenant_a, reviewer_a):
    run, decided = _decided_run(tenant_a, reviewer_a)
    response = manage_admin.get(f"/api/v1/runs/{run.external_id}/export")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["runId"] == "run_x" and body["state"]["id"] == "run_x"
    assert [a["toolCallId"] for a in body["approvals"]] == ["call_1", "call_2"]
    assert [d["approvalId"] for d in body["decisions"]] == [decided.public_id]
    assert body["decisions"][0]["decision"] == "approved"
    actions = [(e["action"], e["objectId"]) for e in body["auditEntries"]]
    assert ("approval.decided", decided.public_id) in actions
    assert body["state"]["pendingApprovals"][0]["toolCallId"] == "call_2"


def test_a_run_of_another_tenant_is_404_like_a_missing_one(
    manage_admin, manage_admin_b, tenant_a, reviewer_a
):
    run, _ = _decided_run(tenant_a, reviewer_a)
    foreign = manage_admin_b.get(f"/api/v1/runs/{run.external_id}/export")
    missing = manage_admin_b.get("/api/v1/runs/run_nope/export")
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["error"]["code"] == missing.json()["error"]["code"]


def test_an_ingest_key_cannot_export_a_run(ingest_a, tenant_a, reviewer_a):
    run, _ = _decided_run(tenant_a, reviewer_a)
    assert ingest_a.get(f"/api/v1/runs/{run.external_id}/export").status_code == 403


def _lines(response) -> list[dict]:
    text = b"".join(response.streaming_content).decode()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_a_tenant_export_streams_only_that_tenant(
    manage_admin, manage_admin_b, tenant_a, tenant_b, reviewer_a, reviewer_b
):
    _decided_run(tenant_a, reviewer_a, "run_a1")
    _decided_run(tenant_a, reviewer_a, "run_a2")
    _decided_run(tenant_b, reviewer_b, "run_b1")
    response = manage_admin.get("/api/v1/export")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/x-ndjson")
    lines = _lines(response)
    kinds = [line["type"] for line in lines]
    assert kinds[:2] == ["tenant", "retention"] and kinds[-1] == "end"
    assert lines[0]["data"]["slug"] == "tenant-a"
    runs = [line["data"]["runId"] for line in lines if line["type"] == "run"]
    assert runs == ["run_a1", "run_a2"]
    principals = {line["data"]["id"] for line in lines if line["type"] == "principal"}
    assert "reviewer@a.example" in principals and "reviewer@b.example" not in principals
    text = json.dumps(lines)
    assert "run_b1" not in text and "tenant-b" not in text
    audit = [line for line in lines if line["type"] == "auditEntry"]
    assert lines[-1]["data"] == {
        "principals": len(principals),
        "runs": 2,
        "auditEntries": len(audit),
    }
    assert len(audit) == AuditEvent.objects.filter(tenant=tenant_a).count()


def test_a_tenant_export_reads_in_chunks(monkeypatch, manage_admin, tenant_a, reviewer_a):
    from retention import export

    monkeypatch.setattr(export, "CHUNK", 2)
    for n in range(5):
        _decided_run(tenant_a, reviewer_a, f"run_{n}")
    lines = _lines(manage_admin.get("/api/v1/export"))
    assert [x["data"]["runId"] for x in lines if x["type"] == "run"] == [
        f"run_{n}" for n in range(5)
    ]
    assert lines[-1]["data"]["runs"] == 5


def test_the_approval_states_survive_the_export(manage_admin, tenant_a, reviewer_a):
    run, decided = _decided_run(tenant_a, reviewer_a)
    body = manage_admin.get(f"/api/v1/runs/{run.external_id}/export").json()
    statuses = {a["id"]: a["status"] for a in body["approvals"]}
    assert statuses[decided.public_id] == ApprovalStatus.APPROVED
