"""The approvals API: deciding with a `decide` key or a browser session, the approvals list,
and the decisions long-poll runtimes read (its sync semantics; the async waits are in
test_longpoll.py)."""

import pytest
from django.db import OperationalError
from django.test import Client
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services.decisions import approval_decide
from console.models import AuditEvent, Role
from tests.support.api import ApiClient
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory, make_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def run_a(tenant_a):
    return RunFactory(tenant=tenant_a, external_id="run_a1")


@pytest.fixture
def approval(run_a):
    return ApprovalFactory(run=run_a, tool_call_id="call_1")


def decide_path(approval):
    return f"/api/v1/approvals/{approval.public_id}/decision"


def test_a_decide_key_approves_and_gets_the_approval(decide_a, approval):
    response = decide_a.post(decide_path(approval), {"decision": "approve"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["id"] == approval.public_id
    assert body["status"] == "approved"
    assert body["decidedBy"] == "reviewer@a.example"
    assert body["runId"] == "run_a1" and body["toolCallId"] == "call_1"


def test_a_decided_call_answers_409_with_who_and_status(decide_a, approval, lead_a):
    approval_decide(approval=approval, viewer=lead_a, decision="deny")
    response = decide_a.post(decide_path(approval), {"decision": "approve"})
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["details"] == {"decidedBy": "lead@a.example", "status": "denied"}


def test_a_database_lost_while_the_answer_is_read_is_503_and_decides_nothing(
    decide_a, approval, monkeypatch
):
    """The contract: a request that fails changes nothing. The answer's costs are read before
    the decision is written (approvals/api.py), so a 503 leaves the call pending, with no
    audit entry, and the reviewer's retry decides it."""

    def dropped(**kwargs):
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr("approvals.api.run_costs", dropped)
    response = decide_a.post(decide_path(approval), {"decision": "approve"})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "database_unavailable"
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING and approval.decided_at is None
    assert not AuditEvent.objects.filter(action="approval.decided").exists()
    monkeypatch.undo()
    assert decide_a.post(decide_path(approval), {"decision": "approve"}).status_code == 200
    assert AuditEvent.objects.filter(action="approval.decided").count() == 1


def test_a_decision_on_a_call_past_its_expiry_is_409_and_leaves_it_expired(decide_a, approval):
    """The refusal keeps the lazy expiry its service committed before refusing (the request's
    transaction commits on a deliberate refusal), so the runtime reads the call expired."""
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now())
    response = decide_a.post(decide_path(approval), {"decision": "approve"})
    assert response.status_code == 409
    assert response.json()["error"]["details"]["status"] == "expired"
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.EXPIRED


def test_decide_errors_in_the_contracts_order(client, tenant_a, tenant_b, approval, viewer_a):
    path = decide_path(approval)
    assert ApiClient(client, None).post(path, {"decision": "approve"}).status_code == 401
    assert ApiClient(client, "gvl_wrong").post(path, {"decision": "approve"}).status_code == 401
    ingest_only = ApiClient(client, make_key(tenant_a, scopes=("ingest",)))
    assert ingest_only.post(path, {"decision": "approve"}).status_code == 403
    other = PrincipalFactory(tenant=tenant_b, role="reviewer")
    foreign = ApiClient(client, make_key(tenant_b, scopes=("decide",), principal=other))
    assert foreign.post(path, {"decision": "approve"}).status_code == 404
    assert foreign.post(path, {"decision": "maybe"}).status_code == 404  # 404 before 422
    viewer_key = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=viewer_a))
    assert viewer_key.post(path, {"decision": "approve"}).status_code == 403
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_invalid_bodies_are_422_and_change_nothing(decide_a, approval):
    bodies = (
        {"decision": "maybe"},
        {},
        {"decision": "deny", "arguments": {"a": 1}},
        {"decision": "deny", "mesage": "a misspelt field is not dropped"},
        {"decision": "deny", "message": 7},
    )
    for body in bodies:
        response = decide_a.post(decide_path(approval), body)
        assert response.status_code == 422, body
        assert response.json()["error"]["code"] == "validation_error"
        assert response.json()["error"]["details"], body
    malformed = decide_a.post(decide_path(approval), raw="{nope")
    assert malformed.status_code == 422  # a body that is not JSON at all does not validate
    assert malformed.json()["error"]["code"] == "validation_error"
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING
    assert not AuditEvent.objects.filter(action="approval.decided").exists()


def test_wrong_tool_role_and_self_approval_are_403(client, tenant_a, reviewer_a):
    role = Role.objects.create(
        tenant=tenant_a, name="db", capabilities=["decide"], decide_tools=["db_*"]
    )
    db_person = PrincipalFactory(tenant=tenant_a)
    db_person.roles.add(role)
    email = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name="send_email")
    key = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=db_person))
    response = key.post(decide_path(email), {"decision": "approve"})
    assert response.status_code == 403 and "send_email" in response.json()["error"]["message"]
    own = ApprovalFactory(run=RunFactory(tenant=tenant_a, principal=reviewer_a))
    mine = ApiClient(client, make_key(tenant_a, scopes=("decide",), principal=reviewer_a))
    assert mine.post(decide_path(own), {"decision": "approve"}).status_code == 403


def test_a_browser_session_decides_with_csrf_only(reviewer_a, approval):
    browser = Client(enforce_csrf_checks=True)
    browser.login(username="reviewer@a.example", password="reviewer-pass-123")
    path = decide_path(approval)
    refused = browser.post(path, '{"decision": "deny"}', content_type="application/json")
    assert refused.status_code == 403
    browser.get("/approvals/")  # sets the CSRF cookie
    token = browser.cookies["csrftoken"].value
    response = browser.post(
        path,
        '{"decision": "deny", "message": "No."}',
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 200, response.content
    assert response.json()["message"] == "No."


def test_list_pending_approvals_for_a_decide_key(decide_a, tenant_b, approval):
    ApprovalFactory(run=RunFactory(tenant=tenant_b))  # never listed for tenant A
    decided = ApprovalFactory(run=approval.run, status=ApprovalStatus.APPROVED)
    body = decide_a.get("/api/v1/approvals", status="pending").json()
    assert [item["id"] for item in body["items"]] == [approval.public_id]
    assert body["nextCursor"] is None
    everything = decide_a.get("/api/v1/approvals").json()["items"]
    assert {i["id"] for i in everything} == {approval.public_id, decided.public_id}
    assert decide_a.get("/api/v1/approvals", status="bogus").status_code == 422


def test_list_pages_with_a_cursor(decide_a, run_a):
    ids = [ApprovalFactory(run=run_a).public_id for _ in range(3)]
    first = decide_a.get("/api/v1/approvals", limit=2).json()
    second = decide_a.get("/api/v1/approvals", limit=2, cursor=first["nextCursor"]).json()
    assert [i["id"] for i in first["items"] + second["items"]] == ids
    assert second["nextCursor"] is None


def test_an_ingest_key_may_not_list_approvals(ingest_a):
    assert ingest_a.get("/api/v1/approvals").status_code == 403


# ---- decisions (no waiting) ------------------------------------------------------------------


def decisions(api, run, **params):
    return api.get(f"/api/v1/runs/{run.external_id}/decisions", **params)


def test_nothing_decided_yet_answers_pending_and_incomplete(ingest_a, run_a, approval):
    body = decisions(ingest_a, run_a, wait=0).json()
    assert body == {"complete": False, "decisions": [], "pending": ["call_1"], "cursor": "0"}


def test_decisions_are_delivered_once_then_replayed_with_after(ingest_a, run_a, reviewer_a):
    first = ApprovalFactory(run=run_a, tool_call_id="c1")
    second = ApprovalFactory(run=run_a, tool_call_id="c2")
    approval_decide(approval=first, viewer=reviewer_a, decision="deny", message="no")
    body = decisions(ingest_a, run_a).json()
    assert [d["toolCallId"] for d in body["decisions"]] == ["c1"]
    assert body["decisions"][0]["message"] == "no"
    assert body["decisions"][0]["decision"] == "denied"
    assert body["decisions"][0]["decidedBy"] == "reviewer@a.example"
    assert body["pending"] == ["c2"] and body["complete"] is False
    assert Approval.objects.get(pk=first.pk).delivered_at is not None  # the runtime's pickup
    assert decisions(ingest_a, run_a).json()["decisions"] == []  # delivered already
    cursor = body["cursor"]
    approval_decide(approval=second, viewer=reviewer_a, decision="approve")
    after = decisions(ingest_a, run_a, after=cursor).json()
    assert [d["toolCallId"] for d in after["decisions"]] == ["c2"]
    assert after["complete"] is True and after["pending"] == []
    replay = decisions(ingest_a, run_a, after="0").json()
    assert [d["toolCallId"] for d in replay["decisions"]] == ["c1", "c2"]


def test_approved_with_edited_arguments_reads_those_arguments(ingest_a, decide_a, approval):
    edited = {"to": "carol@example.com", "subject": "Edited"}
    decide_a.post(decide_path(approval), {"decision": "approve", "arguments": edited})
    decision = decisions(ingest_a, approval.run).json()["decisions"][0]
    assert decision["decision"] == "approved"
    assert decision["arguments"] == edited


def test_denied_with_an_edited_message_reads_exactly_that_text(ingest_a, decide_a, approval):
    text = "Don't email Bob — ask Alice first.\n(Policy 7)"
    decide_a.post(decide_path(approval), {"decision": "deny", "message": text})
    decision = decisions(ingest_a, approval.run).json()["decisions"][0]
    assert decision["message"] == text
    assert decision["arguments"] is None


def test_an_expired_call_reads_like_a_denial_with_the_rejection_message(ingest_a, approval):
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now())
    body = decisions(ingest_a, approval.run).json()
    assert body["decisions"][0]["decision"] == "expired"
    assert body["decisions"][0]["message"] == approval.rejection_message
    assert body["decisions"][0]["decidedBy"] is None
    assert body["complete"] is True


def test_a_cancelled_call_is_neither_pending_nor_a_decision(ingest_a, run_a):
    ApprovalFactory(run=run_a, status=ApprovalStatus.CANCELLED)
    body = decisions(ingest_a, run_a).json()
    assert body["complete"] is True and body["decisions"] == [] and body["pending"] == []


@pytest.mark.parametrize("wait", ["-1", "30.5", "31", "abc"])
def test_wait_outside_0_to_30_is_422(ingest_a, run_a, wait):
    response = decisions(ingest_a, run_a, wait=wait)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == "query.wait"


def test_a_bad_cursor_is_422(ingest_a, run_a):
    assert decisions(ingest_a, run_a, after="yesterday").status_code == 422


def test_decisions_of_another_tenants_run_are_404(ingest_b, run_a, approval):
    assert decisions(ingest_b, run_a).status_code == 404
    assert decisions(ingest_b, run_a, wait="99").status_code == 404  # 404 before 422


def test_a_decide_key_may_not_read_decisions(decide_a, run_a):
    assert decisions(decide_a, run_a).status_code == 403


def test_the_openapi_schema_describes_the_approvals_endpoints(client):
    schema = client.get("/api/v1/openapi.json").json()
    paths = schema["paths"]
    poll = paths["/api/v1/runs/{runId}/decisions"]["get"]
    assert {p["name"] for p in poll["parameters"]} >= {"runId", "wait", "after"}
    decide = paths["/api/v1/approvals/{approvalId}/decision"]["post"]
    assert set(decide["responses"]) >= {"200", "401", "403", "404", "409", "422"}
    out = schema["components"]["schemas"]["DecisionsOut"]["properties"]
    assert set(out) == {"complete", "decisions", "pending", "cursor"}
    decision = schema["components"]["schemas"]["DecisionOut"]["properties"]
    assert set(decision) == {
        "approvalId", "toolCallId", "decision", "message", "arguments", "decidedBy",
        "decidedByRule", "decidedAt",
    }  # fmt: skip
    assert "/api/v1/approvals" in paths


@pytest.mark.parametrize(
    ("params", "path"),
    [({"wiat": "30"}, "query.wiat"), ({"after": "\x00"}, "query.after")],
)
def test_the_long_poll_refuses_an_unknown_or_nul_query_parameter_with_422(
    ingest_a, run_a, params, path
):
    """A misspelt `wait` would silently not wait; U+0000 cannot name a cursor (once a 500:
    the 422 path looked the run up from inside the event loop)."""
    response = decisions(ingest_a, run_a, **params)
    assert response.status_code == 422, response.content
    assert path in [d["path"] for d in response.json()["error"]["details"]]
