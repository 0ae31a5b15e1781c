"""The inbox and the decision forms in the browser's terms (Django's test client)."""

import json
import re
from urllib.parse import unquote

import pytest
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services.decisions import approval_decide
from console.models import Role
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory

pytestmark = pytest.mark.django_db


def login(client, principal, password):
    assert client.login(username=principal.external_id, password=password)
    return client


@pytest.fixture
def run_a(tenant_a):
    return RunFactory(
        tenant=tenant_a,
        role_ids=["editor"],
        limits={"costCeilingMinorUnits": 500},
        cost_minor_units=120,
        todos=[{"id": "t1", "content": "Email Bob", "status": "in_progress"}],
        verdicts={"1:0": {"verdict": "flagged", "guard": "pii", "reason": "an address"}},
        taint_summary={"untrustedInput": True, "secretRead": False},
    )


@pytest.fixture
def approval(run_a):
    return ApprovalFactory(
        run=run_a,
        arguments={
            "to": "bob@example.com",
            "api_key": "sk-live-1234567890abcdef",
            "body": "x" * 400,
        },
    )


@pytest.fixture
def as_reviewer(client, reviewer_a):
    return login(client, reviewer_a, "reviewer-pass-123")


def htmx_post(client, path, data):
    return client.post(path, data, headers={"HX-Request": "true"})


def test_inbox_shows_the_card_with_everything_a_reviewer_needs(as_reviewer, approval):
    response = as_reviewer.get("/approvals/")
    assert response.status_code == 200
    html = response.content.decode()
    assert f'id="approval-{approval.public_id}"' in html
    assert "send_email" in html and approval.reason in html
    assert "Message the model reads" in html
    assert ">Approve</button>" in html and ">Deny</button>" in html
    assert approval.rejection_message in html  # pre-filled
    assert "editor" in html and approval.run.agent.external_id in html
    assert "$1.20 of $5.00" in html  # cost against ceiling, in the tenant's currency
    assert "Email Bob" in html and "flagged" in html and "taint: untrustedInput" in html
    assert "secretRead" not in html
    assert 'class="secret"' in html  # the key is masked until revealed
    assert 'class="long-value"' in html  # the long body collapsed
    assert f'href="/runs/{approval.run.external_id}/"' in html
    assert "data-expires-at" in html


def test_inbox_is_one_row_a_call_oldest_first_across_runs(as_reviewer, tenant_a):
    run1, run2 = RunFactory(tenant=tenant_a), RunFactory(tenant=tenant_a)
    now = timezone.now()
    old = ApprovalFactory(run=run2, step=2, requested_at=now - timezone.timedelta(minutes=5))
    mid = ApprovalFactory(run=run1, step=1, requested_at=now - timezone.timedelta(minutes=3))
    new = ApprovalFactory(run=run2, step=2, requested_at=now - timezone.timedelta(minutes=1))
    html = as_reviewer.get("/approvals/").content.decode()
    rows = re.findall(r'id="desk-row-(apr_[0-9a-f]+)"', html)
    assert rows == [old.public_id, mid.public_id, new.public_id]
    assert "3 to decide" in html
    assert f'id="approval-{old.public_id}"' in html  # the oldest call's whole card, in the pane


def test_inbox_filters_by_tool_agent_principal_and_run(as_reviewer, tenant_a):
    a = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name="send_email")
    b = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name="drop_table")
    html = as_reviewer.get("/approvals/", {"tool": "drop_table"}).content.decode()
    assert b.public_id in html and a.public_id not in html
    html = as_reviewer.get("/approvals/", {"run": a.run.external_id}).content.decode()
    assert a.public_id in html and b.public_id not in html
    html = as_reviewer.get("/approvals/", {"agent": b.run.agent.external_id}).content.decode()
    assert b.public_id in html and a.public_id not in html
    principal = a.run.principal.external_id
    html = as_reviewer.get("/approvals/", {"principal": principal}).content.decode()
    assert a.public_id in html and b.public_id not in html


def test_deny_with_an_edited_message_over_htmx_rerenders_the_card(as_reviewer, approval):
    response = htmx_post(
        as_reviewer,
        f"/approvals/{approval.public_id}/decision/",
        {"decision": "deny", "message": "Ask Bob first.", "arguments": "{not json"},
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith(f'<article id="approval-{approval.public_id}"')
    assert "reviewer@a.example" in html or "Person" in html
    assert "waiting for runtime" in html
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.DENIED and approval.message == "Ask Bob first."


def test_approve_with_edited_arguments(as_reviewer, approval):
    edited = {"to": "carol@example.com"}
    htmx_post(
        as_reviewer,
        f"/approvals/{approval.public_id}/decision/",
        {"decision": "approve", "message": "ignored", "arguments": json.dumps(edited)},
    )
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED
    assert approval.decided_arguments == edited
    assert approval.message is None


def test_invalid_json_arguments_change_nothing(as_reviewer, approval):
    response = as_reviewer.post(
        f"/approvals/{approval.public_id}/decision/",
        {"decision": "approve", "arguments": "{oops"},
    )
    assert response.status_code == 422
    assert "not valid JSON" in response.content.decode()
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_a_plain_form_post_redirects_back_to_the_inbox(as_reviewer, approval):
    response = as_reviewer.post(f"/approvals/{approval.public_id}/decision/", {"decision": "deny"})
    assert response.status_code == 302 and response["Location"] == "/approvals/"


def test_the_loser_of_a_race_sees_who_decided(as_reviewer, approval, lead_a):
    approval_decide(approval=approval, viewer=lead_a, decision="approve")
    response = htmx_post(
        as_reviewer, f"/approvals/{approval.public_id}/decision/", {"decision": "deny"}
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "Already approved by lead@a.example." in html
    assert "decision-form" not in html


def test_bulk_decides_every_call_of_the_step(as_reviewer, tenant_a):
    run = RunFactory(tenant=tenant_a)
    calls = [ApprovalFactory(run=run, step=3) for _ in range(3)]
    other_step = ApprovalFactory(run=run, step=4)
    response = htmx_post(
        as_reviewer, f"/approvals/runs/{run.external_id}/steps/3/decision/", {"decision": "deny"}
    )
    assert response.status_code == 200
    for call in calls:
        call.refresh_from_db()
        assert call.status == ApprovalStatus.DENIED
        assert call.message == call.rejection_message
    assert Approval.objects.get(pk=other_step.pk).status == ApprovalStatus.PENDING


def test_viewer_sees_no_controls_and_gets_403_on_deciding(client, viewer_a, approval):
    login(client, viewer_a, "viewer-pass-123")
    html = client.get("/approvals/").content.decode()
    assert approval.public_id in html
    assert "decision-form" not in html and ">Approve</button>" not in html
    response = client.post(f"/approvals/{approval.public_id}/decision/", {"decision": "approve"})
    assert response.status_code == 403
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_bulk_deciding_without_decide_is_403_before_the_bad_decision_is_422(
    client, viewer_a, approval
):
    """The contract's order: 403 (may not decide) comes before 422 (an invalid body)."""
    login(client, viewer_a, "viewer-pass-123")
    url = f"/approvals/runs/{approval.run.external_id}/steps/{approval.step}/decision/"
    assert client.post(url, {"decision": "maybe"}).status_code == 403
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_wrong_tool_role_gets_403(client, tenant_a, approval):
    role = Role.objects.create(
        tenant=tenant_a, name="db", capabilities=["view_runs", "decide"], decide_tools=["db_*"]
    )
    person = PrincipalFactory(tenant=tenant_a, external_id="db@a.example", password="db-pass-123")
    person.roles.add(role)
    login(client, person, "db-pass-123")
    assert approval.public_id not in client.get("/approvals/").content.decode()
    response = client.post(f"/approvals/{approval.public_id}/decision/", {"decision": "approve"})
    assert response.status_code == 403


def test_self_approval_gets_403(as_reviewer, tenant_a, reviewer_a):
    own = ApprovalFactory(run=RunFactory(tenant=tenant_a, principal=reviewer_a))
    response = as_reviewer.post(f"/approvals/{own.public_id}/decision/", {"decision": "approve"})
    assert response.status_code == 403
    assert Approval.objects.get(pk=own.pk).status == ApprovalStatus.PENDING


def test_another_tenants_approval_is_404(client, reviewer_b, approval):
    login(client, reviewer_b, "reviewer-pass-123")
    assert approval.public_id not in client.get("/approvals/").content.decode()
    response = client.post(f"/approvals/{approval.public_id}/decision/", {"decision": "approve"})
    assert response.status_code == 404
    assert client.get(f"/approvals/{approval.public_id}/").status_code == 404
    assert Approval.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_anonymous_is_sent_to_sign_in(client, approval):
    response = client.get("/approvals/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_a_card_past_expiry_is_never_shown_pending(as_reviewer, approval):
    Approval.objects.filter(pk=approval.pk).update(expires_at=timezone.now())
    html = as_reviewer.get(f"/approvals/{approval.public_id}/").content.decode()
    assert 'data-status="expired"' in html
    assert approval.public_id not in as_reviewer.get("/approvals/").content.decode()


def test_runtime_pickup_turns_waiting_into_resumed(as_reviewer, approval):
    from approvals.services.decisions import approvals_mark_delivered

    htmx_post(as_reviewer, f"/approvals/{approval.public_id}/decision/", {"decision": "deny"})
    approvals_mark_delivered(run=approval.run)
    html = as_reviewer.get(f"/approvals/{approval.public_id}/").content.decode()
    assert "runtime resumed" in html


def test_extend_in_the_last_minute(as_reviewer, approval):
    Approval.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() + timezone.timedelta(seconds=20)
    )
    response = htmx_post(as_reviewer, f"/approvals/{approval.public_id}/extend/", {})
    assert response.status_code == 200 and "Extended." in response.content.decode()
    approval.refresh_from_db()
    assert approval.extended_at is not None


def _queries(client, path) -> tuple[int, str]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        response = client.get(path)
    assert response.status_code == 200
    return len(ctx.captured_queries), response.content.decode()


def test_inbox_shows_the_oldest_page_of_calls_in_a_constant_number_of_queries(
    as_reviewer, tenant_a, monkeypatch
):
    from approvals import selectors_desk

    monkeypatch.setattr(selectors_desk, "PAGE", 3)
    now = timezone.now()

    def hold(n):
        run = RunFactory(tenant=tenant_a, external_id=f"run_{n:02d}")
        return ApprovalFactory(run=run, step=1, requested_at=now - timezone.timedelta(minutes=n))

    calls = [hold(n) for n in range(60, 57, -1)]  # three: the page is full, nothing beyond
    few, html = _queries(as_reviewer, "/approvals/")
    assert [c.public_id for c in calls] == re.findall(r'id="desk-row-(apr_[0-9a-f]+)"', html)
    assert "Show older calls" not in html
    calls += [hold(n) for n in range(40, 0, -1)]  # forty more, newer
    many, html = _queries(as_reviewer, "/approvals/")
    assert re.findall(r'id="desk-row-(apr_[0-9a-f]+)"', html) == [c.public_id for c in calls[:3]]
    assert "Show older calls" in html and "43 to decide" in html
    assert many == few
    # The next pages, by the cursor the page links to: every call reachable, each once.
    seen = re.findall(r'id="desk-row-(apr_[0-9a-f]+)"', html)
    while (found := re.search(r'hx-get="/approvals/\?cursor=([^"&]+)', html)) is not None:
        html = as_reviewer.get(
            "/approvals/", {"cursor": unquote(found.group(1))}, HTTP_HX_REQUEST="true"
        ).content.decode()
        seen += re.findall(r'id="desk-row-(apr_[0-9a-f]+)"', html)
    assert seen == [c.public_id for c in calls]


def test_inbox_refuses_a_forged_cursor(as_reviewer):
    response = as_reviewer.get("/approvals/", {"cursor": "not-ours"})
    assert response.status_code == 422
