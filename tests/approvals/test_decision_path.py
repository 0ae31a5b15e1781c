"""A decision POST's own path: the approval answered is the row as the winning UPDATE ...
RETURNING wrote it (no read back), and its audit entry is sealed on commit, before the answer
(sealing after the response raced what the client did next: a test database's flush deadlocked
with a late seal)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Approval
from approvals.services.decisions import approval_decide
from console.models import AuditEvent
from tests.support.factories import ApprovalFactory, RunFactory
from tests.support.queries import reading_run_json

pytestmark = pytest.mark.django_db


@pytest.fixture
def approval(tenant_a):
    run = RunFactory(tenant=tenant_a, external_id="run_p1")
    return ApprovalFactory(run=run, tool_call_id="call_1", arguments={"to": "a@x"})


def test_the_decided_approval_is_the_row_as_written(approval, reviewer_a):
    decided = approval_decide(
        approval=approval, viewer=reviewer_a, decision="approve", arguments={"to": "b@x"}
    )
    stored = Approval.objects.get(pk=approval.pk)
    for field in Approval._meta.concrete_fields:
        assert getattr(decided, field.attname) == getattr(stored, field.attname), field.name
    assert stored.status == "approved" and stored.decision_seq == 1
    assert stored.decided_arguments == {"to": "b@x"}
    with CaptureQueriesContext(connection) as read:  # the answer's relations stay loaded
        assert decided.decided_by.external_id == reviewer_a.external_id
        assert decided.run.external_id == "run_p1"
    assert read.captured_queries == []


def test_the_post_reads_nothing_back_after_its_update(decide_a, approval):
    path = f"/api/v1/approvals/{approval.public_id}/decision"
    with CaptureQueriesContext(connection) as queries:
        response = decide_a.post(path, {"decision": "deny", "message": "no"})
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "denied" and response.json()["message"] == "no"
    sqls = [q["sql"] for q in queries.captured_queries]
    update = next(i for i, s in enumerate(sqls) if s.startswith('UPDATE "approvals_approval"'))
    assert "RETURNING" in sqls[update]
    after = sqls[update + 1 :]
    assert not [s for s in after if s.startswith("SELECT") and '"approvals_approval"' in s]
    assert not [s for s in after if s.startswith("SELECT") and 'FROM "runs_run"' in s]


@pytest.mark.django_db(transaction=True)  # commits for real: the seal follows the commit
def test_the_entry_is_sealed_when_the_answer_is_sent(decide_a, approval):
    path = f"/api/v1/approvals/{approval.public_id}/decision"
    assert decide_a.post(path, {"decision": "deny"}).status_code == 200
    entry = AuditEvent.objects.get(action="approval.decided", object_id=approval.public_id)
    assert entry.hash is not None and entry.chain_seq is not None  # sealed on commit


@pytest.mark.django_db(transaction=True)  # the decision's own COMMIT is what is looked at
def test_the_decision_commits_as_soon_as_it_is_written(decide_a, approval):
    """The answer is read before the decision (approvals/api.py): the UPDATE, its audit entry,
    then the COMMIT that publishes the runtime's wake. No read of the answer, no SAVEPOINT of
    an outer transaction, stands between the decision and its wake."""
    path = f"/api/v1/approvals/{approval.public_id}/decision"
    with CaptureQueriesContext(connection) as queries:
        response = decide_a.post(path, {"decision": "approve"})
    assert response.status_code == 200, response.content
    assert response.json()["runCostMinorUnits"] == 0 and response.json()["budgets"] == []
    sqls = [q["sql"] for q in queries.captured_queries]
    update = next(i for i, s in enumerate(sqls) if s.startswith('UPDATE "approvals_approval"'))
    commit = next(i for i, s in enumerate(sqls) if i > update and s == "COMMIT")
    between = sqls[update + 1 : commit]
    assert [s.split(" ")[0] for s in between] == ["INSERT"], between  # the audit entry
    assert '"console_auditevent"' in between[0]
    assert not [s for s in sqls[:update] if s.startswith("SAVEPOINT")]


def test_a_decision_never_reads_its_runs_snapshot(decide_a, tenant_a):
    """A run of a long conversation carries a snapshot of hundreds of KB: a decision reads
    none of it (nor the run's other JSON it never shows), and no deferred field is loaded
    later (no second read of the run)."""
    snapshot = {"messages": [{"role": "user", "content": "x" * 400} for _ in range(300)]}
    run = RunFactory(tenant=tenant_a, external_id="run_big", snapshot=snapshot)
    approval = ApprovalFactory(run=run, tool_call_id="call_big", arguments={"to": "a@x"})
    path = f"/api/v1/approvals/{approval.public_id}/decision"
    with CaptureQueriesContext(connection) as queries:
        response = decide_a.post(path, {"decision": "approve"})
    assert response.status_code == 200, response.content
    assert response.json()["runId"] == "run_big" and response.json()["runCostMinorUnits"] == 0
    sqls = [q["sql"] for q in queries.captured_queries]
    assert reading_run_json(sqls) == []
    reread = [s for s in sqls if 'FROM "runs_run"' in s and 'AS "hooked"' not in s]
    assert reread == []  # the run's lock (settle.py `_lock_runs`) is its only other read


def test_the_key_and_the_call_are_read_by_their_unique_ids_unordered(decide_a, approval):
    """The key (by its hash) and the call (by its id in the tenant) are unique rows: read with
    no ORDER BY (first()'s ordered the call by requested_at, position, id: compiled and
    sorted at every decision), and a missing or another tenant's id is still a 404."""
    path = f"/api/v1/approvals/{approval.public_id}/decision"
    with CaptureQueriesContext(connection) as queries:
        response = decide_a.post(path, {"decision": "approve"})
    assert response.status_code == 200, response.content
    sqls = [q["sql"] for q in queries.captured_queries]
    key = [s for s in sqls if s.startswith("SELECT") and 'FROM "console_apikey"' in s]
    call = [s for s in sqls if s.startswith("SELECT") and 'FROM "approvals_approval"' in s]
    assert len(key) == 1 and len(call) == 1
    assert "ORDER BY" not in key[0] and "ORDER BY" not in call[0]
    missing = decide_a.post("/api/v1/approvals/apr_missing/decision", {"decision": "approve"})
    assert missing.status_code == 404, missing.content
    assert "approval_not_found" in missing.content.decode()
