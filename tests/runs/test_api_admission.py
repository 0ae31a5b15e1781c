"""Admission (POST /api/v1/runs): a new run, an identical replay, a differing body, and
what a body must hold."""

import pytest
from django.db import OperationalError

from console.models import Principal
from runs.models import Agent, AgentVersion, Conversation, Run
from tests.support.batches import RUNS, finished, new_run, post_events

pytestmark = pytest.mark.django_db


def test_admission_creates_the_run_and_registers_unknown_ids(ingest_a, tenant_a):
    response = ingest_a.post(RUNS, new_run())
    assert response.status_code == 201
    body = response.json()
    assert body["id"] == "run_1"
    assert body["principalId"] == "alice@example.com"
    assert body["conversationId"] == "conv_42"
    assert body["status"] == "running"
    assert body["limits"] == {"maxSteps": 20}
    assert body["usage"] == {"inputTokens": 0, "outputTokens": 0, "costMinorUnits": 0}
    assert body["lastSeq"] == 0 and body["pendingCalls"] == []
    assert body["startedAt"].startswith("2026-12-02T10:00:00")
    principal = Principal.objects.get(tenant=tenant_a, external_id="alice@example.com")
    assert principal.reviewed is False
    assert Agent.objects.filter(tenant=tenant_a, external_id="support-bot").exists()
    assert AgentVersion.objects.filter(agent__external_id="support-bot", version=3).exists()
    assert Conversation.objects.filter(tenant=tenant_a, external_id="conv_42").exists()


def test_a_database_lost_while_the_answer_is_read_is_503_and_admits_nothing(
    ingest_a, tenant_a, monkeypatch
):
    """The contract: a request that fails changes nothing. The answer's reads (the pending
    calls, the verdicts) come after the run's INSERT: a connection PostgreSQL drops between
    them (CI's outage test stops it at any moment) leaves no admitted run behind a 503."""

    def dropped(**kwargs):
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr("runs.api.run_resource", dropped)
    response = ingest_a.post(RUNS, new_run())
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "database_unavailable"
    assert not Run.objects.filter(tenant=tenant_a).exists()
    monkeypatch.undo()
    assert ingest_a.post(RUNS, new_run()).status_code == 201  # the runtime's retry admits it


def test_identical_admission_replay_is_200_and_changes_nothing(ingest_a, admitted):
    response = ingest_a.post(RUNS, new_run())
    assert response.status_code == 200
    assert response.json() == admitted
    assert Run.objects.count() == 1


def test_admission_with_a_different_body_is_409_naming_the_fields(ingest_a, admitted):
    response = ingest_a.post(RUNS, new_run(agentVersion=4))
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "run_exists"
    assert error["details"]["differs"] == ["agentVersion"]
    assert error["details"]["held"]["agentVersion"] == 3
    assert Run.objects.get().agent_version == 3


def test_a_run_first_seen_through_a_snapshot_adopts_its_first_admission(ingest_a, tenant_a):
    from tests.support.factories import RunFactory

    RunFactory(tenant=tenant_a, external_id="run_1", principal=None, agent_version=0)
    response = ingest_a.post(RUNS, new_run())
    assert response.status_code == 200
    body = response.json()
    assert (body["principalId"], body["agentVersion"]) == ("alice@example.com", 3)
    assert body["limits"] == {"maxSteps": 20}
    assert ingest_a.post(RUNS, new_run()).status_code == 200
    assert ingest_a.post(RUNS, new_run(agentVersion=9)).status_code == 409


def test_deactivated_principal_is_403(ingest_a, tenant_a):
    Principal.objects.create(tenant=tenant_a, external_id="alice@example.com", is_active=False)
    response = ingest_a.post(RUNS, new_run())
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "principal_deactivated"
    assert not Run.objects.exists()


def test_admission_422_lists_each_bad_field(ingest_a):
    body = new_run(id="bad id!", agentVersion=-1)
    del body["principalId"]
    response = ingest_a.post(RUNS, body)
    assert response.status_code == 422
    error = response.json()["error"]
    paths = {d["path"] for d in error["details"]}
    assert {"id", "agentVersion", "principalId"} <= paths
    assert not Run.objects.exists()


def test_times_without_an_offset_are_422(ingest_a, admitted):
    response = ingest_a.post(RUNS, new_run("run_2", startedAt="2026-12-02T10:00:00"))
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == "startedAt"
    event = dict(finished(1), at="2026-12-02T10:00:00")
    assert post_events(ingest_a, [event]).status_code == 422


def test_admission_rejects_unknown_fields(ingest_a):
    response = ingest_a.post(RUNS, new_run(principalID="typo"))
    assert response.status_code == 422
    assert "principalID" in {d["path"] for d in response.json()["error"]["details"]}


def test_a_run_may_belong_to_no_conversation(ingest_a):
    body = new_run()
    del body["conversationId"]
    assert ingest_a.post(RUNS, body).json()["conversationId"] is None
