"""POST /api/v1/runs/{runId}/outcome: an llm-client invocation's IRunOutcome."""

import pytest

from approvals.models import Approval
from approvals.services.decisions import approval_decide
from runs.models import Message, Run, UsageDaily, run_trace_ids
from tests.support.states import RUNS, outcome, outcome_url, pending_call, text, usage

pytestmark = pytest.mark.django_db


@pytest.fixture
def admitted(ingest_a):
    body = {
        "id": "run_o",
        "agentId": "gateway-bot",
        "agentVersion": 1,
        "principalId": "alice@example.com",
    }
    assert ingest_a.post(RUNS, body).status_code == 201
    return "run_o"


def post(api, body, run_id="run_o"):
    return api.post(outcome_url(run_id), body)


def paused():
    return outcome(
        "PAUSED",
        messages=[
            text("user", "refund order 7 and 8"),
            {
                "role": "assistant",
                "content": "",
                "toolCalls": [
                    {"id": "c1", "name": "refund", "arguments": {"order": 7}},
                    {"id": "c2", "name": "refund", "arguments": {"order": 8}},
                ],
            },
        ],
        pendingCalls=[pending_call("c1"), pending_call("c2", arguments={"order": 8})],
        steps=1,
        usage=usage(100, 20, 7),
        traceIds=["tr_1"],
    )


def done():
    body = paused()
    body.update(
        status="DONE",
        messages=[
            *body["messages"],
            {"role": "tool", "content": "refunded", "toolCallId": "c1"},
            {"role": "tool", "content": "denied by a human", "toolCallId": "c2"},
            text("assistant", "Order 7 is refunded."),
        ],
        result={"text": "Order 7 is refunded.", "finishReason": "STOP"},
        steps=2,
        usage=usage(50, 10, 3),
        traceIds=["tr_2", "tr_3"],
        endedByTool="final_answer",
    )
    del body["pendingCalls"]
    return body


def decide_all(reviewer):
    """c1 approved, c2 denied with a message, through the decision service."""
    for call_id, decision, message in (("c1", "approve", None), ("c2", "deny", "no")):
        approval = Approval.objects.select_related("run").get(tool_call_id=call_id)
        approval_decide(approval=approval, viewer=reviewer, decision=decision, message=message)


def snapshot(run_id="run_o"):
    run = Run.objects.get(external_id=run_id)
    return {
        "status": run.status,
        "usage": run.usage,
        "by_model": run.usage_by_model,
        "steps": run.steps,
        "trace_ids": run_trace_ids(run),
        "messages": Message.objects.filter(run=run).count(),
        "approvals": sorted(Approval.objects.filter(run=run).values_list("tool_call_id", "status")),
        "rollup": sorted(UsageDaily.objects.values_list("input_tokens", "steps")),
        "updated_at": run.updated_at,
    }


# --- acceptance: PAUSED → decisions → DONE, each replay a no-op ---


def test_paused_then_decisions_then_done_ends_the_run_with_the_right_usage(
    ingest_a, admitted, reviewer_a
):
    response = post(ingest_a, paused())
    assert response.status_code == 200, response.content
    run = response.json()
    assert run["status"] == "awaiting_approval"
    assert [c["toolCallId"] for c in run["pendingCalls"]] == ["c1", "c2"]
    assert run["pendingCalls"][0]["reason"] == "refund moves money"
    assert run["pendingCalls"][0]["rejectionMessage"] == "The user declined refund."
    assert run["pendingCalls"][1]["arguments"] == {"order": 8}
    assert run["usage"] == usage(100, 20, 7)

    decide_all(reviewer_a)
    response = post(ingest_a, done())
    assert response.status_code == 200, response.content
    run = response.json()
    assert run["status"] == "done"
    assert run["endedByTool"] == "final_answer"
    assert run["finishReason"] == "STOP"
    assert run["result"] == {"text": "Order 7 is refunded.", "finishReason": "STOP"}
    assert run["usage"] == usage(150, 30, 10)
    assert run["steps"] == 3
    assert run["pendingCalls"] == []
    assert Message.objects.filter(run__external_id="run_o").count() == 5
    held = Run.objects.get(external_id="run_o")
    assert run_trace_ids(held) == ["tr_1", "tr_2", "tr_3"]
    assert sum(UsageDaily.objects.values_list("input_tokens", flat=True)) == 150
    statuses = dict(Approval.objects.values_list("tool_call_id", "status"))
    assert statuses == {"c1": "approved", "c2": "denied"}  # decided calls stay decided


def test_replaying_either_outcome_changes_nothing(ingest_a, admitted, reviewer_a):
    assert post(ingest_a, paused()).status_code == 200
    before = snapshot()
    again = post(ingest_a, paused())
    assert again.status_code == 200
    assert snapshot() == before
    decide_all(reviewer_a)
    assert post(ingest_a, done()).status_code == 200
    finished = snapshot()
    for body in (done(), paused()):
        response = post(ingest_a, body)
        assert response.status_code == 200, response.content
        assert response.json()["status"] == "done"
        assert snapshot() == finished


def test_replay_publishes_nothing(ingest_a, admitted, django_capture_on_commit_callbacks):
    post(ingest_a, paused())
    with django_capture_on_commit_callbacks() as callbacks:
        post(ingest_a, paused())
    assert callbacks == []


def test_a_new_outcome_for_a_finished_run_is_409(ingest_a, admitted):
    assert post(ingest_a, done()).status_code == 200
    other = {**done(), "usage": usage(1, 1, 1), "traceIds": ["tr_9"]}
    response = post(ingest_a, other)
    assert response.status_code == 409
    assert response.json()["error"]["details"] == {"status": "done"}


def test_length_with_usage_denied_is_kept_for_the_warning(ingest_a, admitted):
    body = done()
    body["result"] = {"text": "partial", "finishReason": "LENGTH"}
    body["usageDenied"] = {"reason": "budget", "deniedAtStep": 2}
    run = post(ingest_a, body).json()
    assert run["finishReason"] == "LENGTH"
    assert run["usageDenied"] == {"reason": "budget", "deniedAtStep": 2}
    assert run["status"] == "done"


def test_aborted_finishes_the_run_and_cancels_pending_calls(ingest_a, admitted):
    post(ingest_a, paused())
    body = outcome("ABORTED", messages=paused()["messages"], steps=0, usage=usage(), traceIds=[])
    run = post(ingest_a, body).json()
    assert run["status"] == "aborted"
    assert set(Approval.objects.values_list("status", flat=True)) == {"cancelled"}


def test_usage_is_booked_under_the_results_model(ingest_a, admitted):
    body = done()
    body["result"]["model"] = "model-z"
    run = post(ingest_a, body).json()
    assert run["usageByModel"] == {"model-z": usage(50, 10, 3)}


def test_get_state_of_an_outcome_fed_run_lists_the_decisions(ingest_a, admitted, reviewer_a):
    post(ingest_a, paused())
    decide_all(reviewer_a)
    body = ingest_a.get(f"{RUNS}/run_o/state").json()
    assert body["status"] == "awaiting_approval"
    assert body["pendingApprovals"] == []
    assert {d["toolCallId"]: d["decision"] for d in body["decisions"]} == {
        "c1": "approved",
        "c2": "denied",
    }
    assert body["decisions"][1]["message"] == "no"


# --- bad input ---


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({**paused(), "pendingCalls": []}, "pendingCalls"),
        ({k: v for k, v in paused().items() if k != "pendingCalls"}, "pendingCalls"),
        ({**done(), "pendingCalls": [pending_call("c9")]}, "pendingCalls"),
        ({**done(), "status": "FINISHED"}, "status"),
        ({**done(), "steps": -1}, "steps"),
        ({**paused(), "pendingCalls": [pending_call("c1"), pending_call("c1")]}, "pendingCalls"),
        ({**done(), "usage": {"inputTokens": 1, "outputTokens": 2}}, "usage.costMinorUnits"),
    ],
)
def test_bad_outcomes_are_422_with_the_path_and_change_nothing(ingest_a, admitted, body, path):
    before = snapshot()
    response = post(ingest_a, body)
    assert response.status_code == 422, response.content
    assert [d["path"] for d in response.json()["error"]["details"]] == [path]
    assert snapshot() == before


# --- who may ---


def test_another_tenants_run_is_404_and_an_unknown_run_is_404(ingest_a, ingest_b, admitted):
    assert post(ingest_b, done()).status_code == 404
    assert post(ingest_a, done(), run_id="run_nowhere").status_code == 404
    assert Run.objects.get(external_id="run_o").status == "running"


def test_a_decide_only_key_is_403_and_no_key_is_401(decide_a, admitted, client):
    assert post(decide_a, done()).status_code == 403
    assert client.post(outcome_url("run_o"), {}, content_type="application/json").status_code == 401
    assert Run.objects.get(external_id="run_o").status == "running"


def test_pausing_again_on_a_decided_call_is_409_and_changes_nothing(ingest_a, admitted, reviewer_a):
    post(ingest_a, paused())
    decide_all(reviewer_a)
    before = snapshot()
    again = {**paused(), "traceIds": ["tr_9"]}  # a new invocation holding c1 again
    response = post(ingest_a, again)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "approval_exists"
    assert snapshot() == before
