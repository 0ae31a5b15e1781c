"""Contract tests for admission, listing and events (POST/GET /api/v1/runs...)."""

import base64
import json

import pytest
from django.db import OperationalError

from approvals.models import Approval
from console.models import Principal
from runs.models import (
    Agent,
    AgentVersion,
    Conversation,
    Handoff,
    Message,
    Run,
    RunEvent,
    Step,
    ToolResult,
    UsageDaily,
    Verdict,
)
from tests.conftest import ApiClient
from tests.factories import make_key

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs"


def new_run(run_id="run_1", **extra):
    body = {
        "id": run_id,
        "agentId": "support-bot",
        "agentVersion": 3,
        "principalId": "alice@example.com",
        "roleIds": ["editor"],
        "conversationId": "conv_42",
        "input": {"ask": "refund order 7"},
        "limits": {"maxSteps": 20},
        "startedAt": "2026-12-02T10:00:00Z",
    }
    body.update(extra)
    return body


def events_url(run_id="run_1"):
    return f"{RUNS}/{run_id}/events"


def step_events(first_seq, step, *, model="model-a", usage=(10, 5, 3), agent="support-bot"):
    i, o, c = usage
    return [
        {"seq": first_seq, "type": "step.started", "step": step, "agentId": agent, "model": model},
        {
            "seq": first_seq + 1,
            "type": "message",
            "step": step,
            "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        },
        {
            "seq": first_seq + 2,
            "type": "step.finished",
            "step": step,
            "model": model,
            "finishReason": "stop",
            "traceId": f"tr_{step}",
            "usage": {"inputTokens": i, "outputTokens": o, "costMinorUnits": c},
        },
    ]


def finished(seq, status="done"):
    return {"seq": seq, "type": "run.finished", "status": status, "result": {"text": "bye"}}


@pytest.fixture
def admitted(ingest_a):
    response = ingest_a.post(RUNS, new_run())
    assert response.status_code == 201, response.content
    return response.json()


def post_events(api, events, run_id="run_1"):
    return api.post(events_url(run_id), {"events": events})


# --- admission ---


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
    from tests.factories import RunFactory

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


# --- auth, scopes, tenancy ---


def test_no_key_wrong_key_revoked_key_are_401(client, tenant_a):
    from django.utils import timezone

    from console.models import ApiKey

    assert ApiClient(client, None).post(RUNS, new_run()).status_code == 401
    assert ApiClient(client, "gvl_wrong").post(RUNS, new_run()).status_code == 401
    raw = make_key(tenant_a)
    ApiKey.objects.update(revoked_at=timezone.now())
    response = ApiClient(client, raw).post(RUNS, new_run())
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


def test_a_decide_only_key_is_403_on_ingest(decide_a):
    response = decide_a.post(RUNS, new_run())
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "missing_scope"
    assert decide_a.get(RUNS).status_code == 403


def test_another_tenants_run_is_404_and_both_tenants_may_hold_run_1(ingest_a, ingest_b, admitted):
    assert ingest_b.get(f"{RUNS}/run_1").status_code == 404
    response = post_events(ingest_b, step_events(1, 1))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "run_not_found"
    assert ingest_b.post(RUNS, new_run()).status_code == 201
    assert post_events(ingest_b, step_events(1, 1)).status_code == 200
    assert ingest_a.get(f"{RUNS}/run_1").json()["lastSeq"] == 0
    assert [r["id"] for r in ingest_b.get(RUNS).json()["items"]] == ["run_1"]
    assert Run.objects.filter(external_id="run_1").count() == 2


# --- order of checks: 401 → 403 → 404 → 413 → 422 → 409 ---


def test_order_of_checks(client, ingest_a, admitted, tenant_a, settings):
    huge = json.dumps({"events": [{"seq": 1, "type": "nope", "pad": "x" * 3_000_000}]})
    bad = {"events": [{"seq": 1, "type": "nope"}]}
    decide_key = make_key(tenant_a, scopes=("decide",), principal=Principal.objects.first())
    anonymous = ApiClient(client, None)
    decider = ApiClient(client, decide_key)
    # No key beats a missing scope, which beats an unknown run, which beats a huge body...
    assert anonymous.post(events_url("nope"), raw=huge).status_code == 401
    assert decider.post(events_url("nope"), raw=huge).status_code == 403
    assert ingest_a.post(events_url("nope"), raw=huge).status_code == 404
    assert ingest_a.post(events_url("nope"), bad).status_code == 404
    response = ingest_a.post(events_url(), raw=huge)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    # ...which beats an invalid body, which beats a conflict.
    assert ingest_a.post(events_url(), bad).status_code == 422
    gap = step_events(5, 1)
    assert post_events(ingest_a, gap).status_code == 409


def test_a_body_that_is_not_json_is_422_after_the_404_check(ingest_a, admitted):
    assert ingest_a.post(events_url("nope"), raw="{not json").status_code == 404
    response = ingest_a.post(events_url(), raw="{not json")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"
    assert response.json()["error"]["details"] == [{"path": "body", "message": "not valid JSON"}]
    assert ingest_a.post(RUNS, raw="[1, 2").status_code == 422
    assert RunEvent.objects.count() == 0


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json_422_and_nothing_written(ingest_a, admitted, constant):
    raw = (
        '{"events": [{"seq": 1, "type": "tool.result", "step": 1, "toolCallId": "c",'
        f' "toolName": "t", "isError": false, "result": {{"x": {constant}}}}}]}}'
    )
    response = ingest_a.post(events_url(), raw=raw)
    assert response.status_code == 422
    assert response.json()["error"]["details"] == [{"path": "body", "message": "not valid JSON"}]
    assert RunEvent.objects.count() == 0


def test_unknown_api_path_and_wrong_method_answer_json(ingest_a):
    response = ingest_a.get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    response = ingest_a.put(RUNS, new_run())
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


# --- events: seq rules ---


def test_events_apply_and_answer_last_seq(ingest_a, admitted):
    response = post_events(ingest_a, step_events(1, 1))
    assert response.status_code == 200
    assert response.json() == {"lastSeq": 3}
    run = ingest_a.get(f"{RUNS}/run_1").json()
    assert run["lastSeq"] == 3 and run["steps"] == 1
    assert run["usage"] == {"inputTokens": 10, "outputTokens": 5, "costMinorUnits": 3}
    assert RunEvent.objects.count() == 3
    assert Message.objects.get().content == [{"type": "text", "text": "hello"}]


def test_replayed_batch_is_harmless_and_a_different_event_at_a_held_seq_is_409(ingest_a, admitted):
    batch = step_events(1, 1)
    post_events(ingest_a, batch)
    assert post_events(ingest_a, batch).json() == {"lastSeq": 3}
    assert RunEvent.objects.count() == 3 and Message.objects.count() == 1
    # A retry overlapping the held tail plus new events applies only the new ones.
    overlap = [*batch[1:], *step_events(4, 2)]
    assert post_events(ingest_a, overlap).json() == {"lastSeq": 6}
    assert Step.objects.count() == 2 and Message.objects.count() == 2
    changed = [dict(batch[1], message={"role": "user", "content": "other"})]
    response = post_events(ingest_a, changed)
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "seq_conflict"
    assert error["details"]["seq"] == 2
    assert error["details"]["held"]["message"]["role"] == "assistant"


def test_a_gap_is_409_with_expected_seq(ingest_a, admitted):
    post_events(ingest_a, step_events(1, 1))
    response = post_events(ingest_a, step_events(7, 2))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "seq_gap"
    assert response.json()["error"]["details"]["expectedSeq"] == 4
    assert RunEvent.objects.count() == 3


def test_seqs_within_a_batch_must_increase_by_one(ingest_a, admitted):
    batch = step_events(1, 1)
    batch[2]["seq"] = 5
    response = post_events(ingest_a, batch)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == "events.2.seq"
    assert not RunEvent.objects.exists()


def test_unknown_event_type_and_bad_fields_are_422_with_paths(ingest_a, admitted):
    response = post_events(ingest_a, [{"seq": 1, "type": "step.exploded", "step": 1}])
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"].startswith("events.0")
    bad = step_events(1, 1)
    bad[2]["usage"]["inputTokens"] = -1
    response = post_events(ingest_a, bad)
    paths = [d["path"] for d in response.json()["error"]["details"]]
    assert response.status_code == 422
    assert any(p.startswith("events.2") and p.endswith("usage.inputTokens") for p in paths)
    assert post_events(ingest_a, []).status_code == 422
    too_many = [{"seq": i + 1, "type": "todos.updated", "todos": []} for i in range(501)]
    assert post_events(ingest_a, too_many).status_code == 422


def test_message_parts_envelopes_are_validated(ingest_a, admitted):
    def message(part):
        return [
            {
                "seq": 1,
                "type": "message",
                "step": 1,
                "message": {"role": "user", "content": [part]},
            }
        ]

    data = base64.b64encode(b"\x89PNG").decode()
    good = {"type": "image", "mediaType": "image/png", "data": {"$bytes": data}}
    bad_bytes = {"type": "image", "mediaType": "image/png", "data": {"$bytes": "%%%"}}
    raw_bytes = {"type": "file", "mediaType": "text/plain", "data": data}
    bad_url = {"type": "file", "mediaType": "text/plain", "data": {"$url": "ftp://x/y"}}
    for part in (bad_bytes, raw_bytes, bad_url):
        assert post_events(ingest_a, message(part)).status_code == 422, part
    assert post_events(ingest_a, message(good)).status_code == 200
    assert Message.objects.get().content == [good]


def test_a_failing_batch_writes_nothing(ingest_a, admitted):
    post_events(ingest_a, step_events(1, 1))
    batch = [
        *step_events(4, 2),
        {
            "seq": 7,
            "type": "todos.updated",
            "todos": [{"id": "t", "content": "x", "status": "done"}],
        },
        finished(8),
        {
            "seq": 9,
            "type": "verdict",
            "turn": "2:0",
            "verdict": "flagged",
            "guard": "g",
            "reason": "r",
        },
    ]
    response = post_events(ingest_a, batch)
    assert response.status_code == 409  # an event after run.finished in the same batch
    assert response.json()["error"]["code"] == "run_finished"
    run = Run.objects.get()
    assert (run.last_seq, run.status, run.todos, run.input_tokens) == (3, "running", [], 10)
    assert RunEvent.objects.count() == 3 and Step.objects.count() == 1
    assert UsageDaily.objects.get().input_tokens == 10


def test_event_after_run_finished_is_409_but_a_full_replay_is_200(ingest_a, admitted):
    batch = [*step_events(1, 1), finished(4)]
    assert post_events(ingest_a, batch).status_code == 200
    assert post_events(ingest_a, batch).json() == {"lastSeq": 4}
    response = post_events(ingest_a, step_events(5, 2))
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "run_finished"
    run = ingest_a.get(f"{RUNS}/run_1").json()
    assert run["status"] == "done" and run["result"] == {"text": "bye"}
    assert run["finishedAt"] is not None


# --- events: effects ---


def test_verdicts_are_widen_only(ingest_a, admitted):
    def verdict(seq, level, reason):
        return {
            "seq": seq,
            "type": "verdict",
            "turn": "1:0",
            "verdict": level,
            "guard": "pii",
            "reason": reason,
        }

    post_events(ingest_a, [verdict(1, "flagged", "an email"), verdict(2, "allowed", "fine")])
    run = ingest_a.get(f"{RUNS}/run_1").json()
    assert run["verdicts"] == {"1:0": {"verdict": "flagged", "guard": "pii", "reason": "an email"}}
    post_events(ingest_a, [verdict(3, "blocked", "a card number")])
    run = ingest_a.get(f"{RUNS}/run_1").json()
    assert run["verdicts"]["1:0"]["verdict"] == "blocked"
    assert Verdict.objects.count() == 3


def test_todos_replace_and_taint_replaces(ingest_a, admitted):
    one = [{"id": "a", "content": "look up order", "status": "in_progress"}]
    two = [{"id": "b", "content": "refund", "status": "pending"}]
    post_events(
        ingest_a,
        [
            {"seq": 1, "type": "todos.updated", "todos": one},
            {"seq": 2, "type": "taint.updated", "taintSummary": {"untrusted": True}},
            {"seq": 3, "type": "todos.updated", "todos": two},
            {"seq": 4, "type": "taint.updated", "taintSummary": {"exfil": False}},
        ],
    )
    run = ingest_a.get(f"{RUNS}/run_1").json()
    assert run["todos"] == two
    assert run["taintSummary"] == {"exfil": False}


def test_handoffs_move_current_agent_and_return_restores_it(ingest_a, admitted):
    post_events(
        ingest_a,
        [
            {
                "seq": 1,
                "type": "handoff",
                "step": 1,
                "fromAgentId": "support-bot",
                "toAgentId": "billing-bot",
                "childRunId": "run_child",
            },
        ],
    )
    assert ingest_a.get(f"{RUNS}/run_1").json()["currentAgentId"] == "billing-bot"
    post_events(
        ingest_a, [{"seq": 2, "type": "handoff.returned", "step": 2, "toAgentId": "support-bot"}]
    )
    assert ingest_a.get(f"{RUNS}/run_1").json()["currentAgentId"] == "support-bot"
    assert Handoff.objects.filter(child_run_id="run_child").count() == 1


def test_usage_sums_exactly_per_run_model_and_day(ingest_a, admitted, tenant_a):
    batch = [
        *step_events(1, 1, model="model-a", usage=(100, 20, 7)),
        *step_events(4, 2, model="model-b", usage=(50, 10, 3)),
    ]
    post_events(ingest_a, batch)
    post_events(ingest_a, step_events(7, 3, model="model-a", usage=(1, 2, 3)))
    run = ingest_a.get(f"{RUNS}/run_1").json()
    assert run["usage"] == {"inputTokens": 151, "outputTokens": 32, "costMinorUnits": 13}
    assert run["usageByModel"] == {
        "model-a": {"inputTokens": 101, "outputTokens": 22, "costMinorUnits": 10},
        "model-b": {"inputTokens": 50, "outputTokens": 10, "costMinorUnits": 3},
    }
    rollup = {
        r.model: (r.input_tokens, r.output_tokens, r.cost_minor_units, r.steps)
        for r in UsageDaily.objects.filter(
            tenant=tenant_a, principal_id="alice@example.com", agent_id="support-bot"
        )
    }
    assert rollup == {"model-a": (101, 22, 10, 2), "model-b": (50, 10, 3, 1)}


def test_tool_results_are_recorded(ingest_a, admitted):
    post_events(
        ingest_a,
        [
            {
                "seq": 1,
                "type": "tool.result",
                "step": 1,
                "toolCallId": "c1",
                "toolName": "lookup",
                "result": {"ok": True},
                "isError": False,
            }
        ],
    )
    row = ToolResult.objects.get()
    assert (row.tool_call_id, row.result, row.is_error) == ("c1", {"ok": True}, False)


def approval_requested(seq, *ids):
    return {
        "seq": seq,
        "type": "approval.requested",
        "step": 1,
        "calls": [
            {
                "toolCallId": i,
                "toolName": "send_email",
                "arguments": {"to": "bob"},
                "reason": "email needs a human",
                "rejectionMessage": "The user declined.",
            }
            for i in ids
        ],
    }


def test_approval_requested_creates_pending_approvals_in_order(ingest_a, admitted):
    post_events(ingest_a, [approval_requested(1, "call_b", "call_a")])
    run = ingest_a.get(f"{RUNS}/run_1").json()
    assert run["status"] == "awaiting_approval"
    assert [c["toolCallId"] for c in run["pendingCalls"]] == ["call_b", "call_a"]
    call = run["pendingCalls"][0]
    assert call["status"] == "pending" and call["runId"] == "run_1"
    assert call["rejectionMessage"] == "The user declined." and call["decidedBy"] is None
    assert call["id"].startswith("apr_")


def test_a_held_tool_call_requested_again_is_409(ingest_a, admitted):
    post_events(ingest_a, [approval_requested(1, "call_a")])
    response = post_events(ingest_a, [approval_requested(2, "call_a")])
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "approval_exists"
    assert Run.objects.get().last_seq == 1


def test_run_finished_cancels_pending_approvals(ingest_a, admitted):
    post_events(ingest_a, [approval_requested(1, "call_a", "call_b"), finished(2, "aborted")])
    assert set(Approval.objects.values_list("status", flat=True)) == {"cancelled"}
    run = ingest_a.get(f"{RUNS}/run_1").json()
    assert run["status"] == "aborted" and run["pendingCalls"] == []


def test_realtime_is_published_on_commit(
    ingest_a, admitted, django_capture_on_commit_callbacks, monkeypatch
):
    from console import realtime

    sent = []
    monkeypatch.setattr(realtime, "_send", lambda group, message: sent.append((group, message)))
    with django_capture_on_commit_callbacks(execute=True):
        post_events(ingest_a, [*step_events(1, 1), approval_requested(4, "call_a")])
    types = [m["type"] for _, m in sent]
    assert "run.updated" in types and "approvals.updated" in types
    update = next(m for _, m in sent if m["type"] == "run.updated")
    assert update["run"] == "run_1" and update["seq"] == 4
    assert {"steps", "messages", "usage", "approvals"} <= set(update["what"])
    assert all("hello" not in json.dumps(m) for _, m in sent), "no tenant content on the layer"


def test_nothing_is_published_when_the_batch_fails(
    ingest_a, admitted, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        post_events(ingest_a, step_events(9, 1))
    assert callbacks == []


# --- listing ---


def test_list_newest_first_with_filters_and_an_opaque_cursor(ingest_a):
    for i in range(5):
        ingest_a.post(
            RUNS,
            new_run(
                f"run_{i}",
                startedAt=f"2026-12-02T10:0{i}:00Z",
                principalId="bob" if i % 2 else "alice",
            ),
        )
    page = ingest_a.get(RUNS, limit=2).json()
    assert [r["id"] for r in page["items"]] == ["run_4", "run_3"]
    page2 = ingest_a.get(RUNS, limit=2, cursor=page["nextCursor"]).json()
    assert [r["id"] for r in page2["items"]] == ["run_2", "run_1"]
    page3 = ingest_a.get(RUNS, limit=2, cursor=page2["nextCursor"]).json()
    assert [r["id"] for r in page3["items"]] == ["run_0"] and page3["nextCursor"] is None
    bobs = ingest_a.get(RUNS, principalId="bob").json()["items"]
    assert [r["id"] for r in bobs] == ["run_3", "run_1"]
    assert ingest_a.get(RUNS, agentId="support-bot", status="done").json()["items"] == []
    assert len(ingest_a.get(RUNS, conversationId="conv_42").json()["items"]) == 5


def test_list_bad_cursor_and_bad_filters_are_422(ingest_a):
    response = ingest_a.get(RUNS, cursor="not-a-cursor")
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == "query.cursor"
    assert ingest_a.get(RUNS, status="sleeping").status_code == 422
    assert ingest_a.get(RUNS, limit=0).status_code == 422


def test_list_costs_a_fixed_number_of_queries(ingest_a, django_assert_max_num_queries):
    for i in range(6):
        ingest_a.post(RUNS, new_run(f"run_{i}"))
        post_events(ingest_a, [approval_requested(1, f"c{i}")], run_id=f"run_{i}")
    with django_assert_max_num_queries(6):
        items = ingest_a.get(RUNS).json()["items"]
    assert all(len(r["pendingCalls"]) == 1 for r in items)


def test_a_batch_costs_a_fixed_number_of_queries(ingest_a, admitted, django_assert_max_num_queries):
    batch = []
    for step in range(1, 101):
        batch += step_events(len(batch) + 1, step)
    with django_assert_max_num_queries(20):
        assert post_events(ingest_a, batch).json() == {"lastSeq": 300}
    assert Step.objects.count() == 100 and Message.objects.count() == 100


# --- failure modes ---


@pytest.mark.parametrize("method", ["get", "post"])
def test_database_unreachable_is_503_with_retry_after(ingest_a, admitted, monkeypatch, method):
    """Every statement fails, as when PostgreSQL is down: the first one (the key lookup)
    answers 503 with the contract's body."""
    from django.db.backends import utils

    def down(self, *args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(utils.CursorWrapper, "execute", down)
    if method == "get":
        response = ingest_a.get(f"{RUNS}/run_1")
    else:
        response = post_events(ingest_a, step_events(1, 1))
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "database_unavailable"


def test_rate_limit_is_429_with_retry_after(client, tenant_a):
    from console.models import ApiKey

    raw = make_key(tenant_a)
    ApiKey.objects.update(rate_per_minute=60, rate_burst=2)
    api = ApiClient(client, raw)
    assert api.get(RUNS).status_code == 200
    assert api.get(RUNS).status_code == 200
    response = api.get(RUNS)
    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    assert response.json()["error"]["code"] == "rate_limited"


def test_openapi_describes_the_runs_endpoints_in_camel_case(client):
    schema = client.get("/api/v1/openapi.json").json()
    paths = schema["paths"]
    assert {"/api/v1/runs", "/api/v1/runs/{runId}", "/api/v1/runs/{runId}/events"} <= set(paths)
    new_run_schema = schema["components"]["schemas"]["NewRunIn"]
    assert {"id", "agentId", "agentVersion", "principalId"} <= set(new_run_schema["required"])
    run_out = schema["components"]["schemas"]["RunOut"]["properties"]
    assert "pendingCalls" in run_out and "usageByModel" in run_out
    events = json.dumps(schema["components"]["schemas"]["EventBatchIn"])
    assert "discriminator" in events


def test_openapi_names_path_parameters_as_the_contract_does(client):
    schema = client.get("/api/v1/openapi.json").json()
    assert "/api/v1/runs/{runId}/events" in schema["paths"]
    assert "/api/v1/approvals/{approvalId}/decision" in schema["paths"]
    assert not [p for p in schema["paths"] if "run_id" in p or "approval_id" in p]
    params = schema["paths"]["/api/v1/runs/{runId}"]["get"]["parameters"]
    assert [p["name"] for p in params if p["in"] == "path"] == ["runId"]


def test_what_the_database_makes_from_the_log_is_exactly_what_was_sent(ingest_a, admitted):
    """Messages, tool results and verdicts are made from the stored events: integers beyond
    64 bits, explicit nulls, offsets other than UTC and both content shapes come out as sent,
    and the same batch again changes nothing."""
    from datetime import UTC, datetime

    from runs.models import Message, ToolResult, Verdict

    big = 2**70
    parts = [{"type": "text", "text": "hi"}, {"type": "json", "value": {"n": big}}]
    events = [
        {"seq": 1, "type": "step.started", "step": 1, "agentId": "a", "model": "m"},
        {
            "seq": 2,
            "type": "message",
            "step": 1,
            "at": "2026-12-02T12:00:00+02:00",
            "message": {"role": "assistant", "content": parts, "toolCalls": None},
        },
        {
            "seq": 3,
            "type": "tool.result",
            "step": 1,
            "toolCallId": "c1",
            "toolName": "lookup",
            "result": {"id": big, "none": None},
            "isError": True,
        },
        {"seq": 4, "type": "message", "step": 1, "message": {"role": "tool", "content": "{}"}},
        {
            "seq": 5,
            "type": "tool.result",
            "step": 1,
            "toolCallId": "c2",
            "toolName": "t",
            "result": None,
            "isError": False,
        },  # fmt: skip
        {
            "seq": 6,
            "type": "verdict",
            "turn": "1:0",
            "verdict": "flagged",
            "guard": "g",
            "reason": "r",
        },  # fmt: skip
    ]
    assert post_events(ingest_a, events).status_code == 200
    first, second = Message.objects.filter(run__external_id="run_1").order_by("position")
    assert (first.position, first.step, first.role, first.content) == (0, 1, "assistant", parts)
    assert first.tool_calls is None and first.tool_call_id is None
    assert first.created_at == datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    assert (second.position, second.content) == (1, "{}")
    results = ToolResult.objects.filter(run__external_id="run_1").order_by("tool_call_id")
    assert [(r.tool_call_id, r.result, r.is_error) for r in results] == [
        ("c1", {"id": big, "none": None}, True),
        ("c2", None, False),
    ]
    verdict = Verdict.objects.get(run__external_id="run_1")
    assert (verdict.turn, verdict.verdict, verdict.guard, verdict.reason) == (
        "1:0",
        "flagged",
        "g",
        "r",
    )
    assert post_events(ingest_a, events).status_code == 200  # a replay: identical, no change
    assert Message.objects.filter(run__external_id="run_1").count() == 2
    more = [{"seq": 7, "type": "message", "step": 1, "message": {"role": "user", "content": "x"}}]
    assert post_events(ingest_a, more).status_code == 200
    assert Message.objects.get(run__external_id="run_1", content="x").position == 2
