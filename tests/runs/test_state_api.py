"""PUT/GET /api/v1/runs/{runId}/state: whole RunStates in, RunStates with decisions out."""

import pytest
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services.decisions import UNSET, approval_decide
from approvals.services.settle import approval_mirror_targets
from console.models import Principal
from runs.models import Handoff, Message, Run, Step, ToolResult, UsageDaily, Verdict
from tests.support.states import (
    RUNS,
    approval,
    child_state,
    rich_state,
    state,
    state_url,
    step,
    text,
    usage,
    without_decisions,
)

pytestmark = pytest.mark.django_db


def put(api, body, run_id=None):
    return api.put(state_url(run_id or body["id"]), body)


def decide(call, decision, *, by, message=None, arguments=UNSET):
    """A reviewer's decision, through the decision service (it decides mirrors too)."""
    approval = Approval.objects.select_related("run").get(pk=call.pk)
    return approval_decide(
        approval=approval, viewer=by, decision=decision, message=message, arguments=arguments
    )


# --- acceptance: the whole state lands in one PUT and decisions show in GET state ---


def test_a_rich_state_lands_in_one_put_and_get_run_shows_all_of_it(ingest_a):
    response = put(ingest_a, rich_state())
    assert response.status_code == 201, response.content
    run = ingest_a.get(f"{RUNS}/run_rich").json()
    assert run["status"] == "awaiting_approval"
    assert run["agentVersion"] == 0
    assert run["principalId"] == "alice@example.com"
    assert run["conversationId"] == "conv_42"
    assert run["currentAgentId"] == "support-bot"  # the child is in handoffs, not here
    assert [c["toolCallId"] for c in run["pendingCalls"]] == ["call_a", "call_b", "call_c"]
    assert run["pendingCalls"][2]["subRunToolCallId"] == "call_sub"
    assert run["pendingCalls"][1]["reason"] == "refund needs a human"
    assert run["todos"][0] == {"id": "t1", "content": "refund", "status": "in_progress"}
    assert run["verdicts"]["2:0"]["verdict"] == "flagged"
    assert run["taintSummary"] == {"untrustedInput": True, "exfiltrationRisk": False}
    assert run["usage"] == usage(30, 13, 6)
    assert run["usageByModel"] == {"model-a": usage(30, 13, 6)}
    assert run["steps"] == 2
    handoff = Handoff.objects.get(run__external_id="run_rich")
    assert (handoff.from_agent_id, handoff.to_agent_id, handoff.step) == (
        "support-bot",
        "researcher",
        2,
    )
    child = ingest_a.get(f"{RUNS}/run_child").json()
    assert child["parentRunId"] == "run_rich"
    assert child["status"] == "awaiting_approval"
    assert [c["toolCallId"] for c in child["pendingCalls"]] == ["call_c"]
    mirror = Approval.objects.get(run__external_id="run_rich", tool_call_id="call_c")
    assert mirror.mirror_of == Approval.objects.get(run__external_id="run_child")


def test_deciding_both_parent_calls_and_the_mirrored_child_call_shows_in_get_state(
    ingest_a, reviewer_a
):
    put(ingest_a, rich_state())
    parent = Approval.objects.filter(run__external_id="run_rich")
    decide(
        parent.get(tool_call_id="call_a"),
        "approve",
        by=reviewer_a,
        arguments={"to": "carol"},
    )
    decide(parent.get(tool_call_id="call_b"), "deny", by=reviewer_a, message="No.")
    decide(parent.get(tool_call_id="call_c"), "approve", by=reviewer_a)
    child_call = Approval.objects.get(run__external_id="run_child", tool_call_id="call_c")
    assert child_call.status == ApprovalStatus.APPROVED  # the mirror decided the child's too

    got = ingest_a.get(state_url("run_rich"))
    assert got.status_code == 200, got.content
    body = got.json()
    assert body["pendingApprovals"] == []
    decisions = {d["toolCallId"]: d for d in body["decisions"]}
    assert decisions["call_a"]["decision"] == "approved"
    assert decisions["call_a"]["arguments"] == {"to": "carol"}
    assert decisions["call_b"] == {
        **decisions["call_b"],
        "decision": "denied",
        "message": "No.",
        "arguments": None,
        "decidedBy": "reviewer@a.example",
    }
    assert decisions["call_c"]["arguments"] == {"to": "bob@example.com", "call": "call_c"}
    sub = body["pendingSubRuns"][0]
    assert sub["toolCallId"] == "call_sub"
    assert sub["state"]["pendingApprovals"] == []
    assert [d["toolCallId"] for d in sub["state"]["decisions"]] == ["call_c"]
    assert set(decisions["call_a"]) == {
        "approvalId",
        "toolCallId",
        "decision",
        "message",
        "arguments",
        "decidedBy",
        "decidedByRule",
        "decidedAt",
    }


def test_get_state_reads_back_exactly_what_was_put(ingest_a):
    body = rich_state()
    put(ingest_a, body)
    got = ingest_a.get(state_url("run_rich")).json()
    assert got["decisions"] == []
    assert without_decisions(got) == body


def test_mirror_targets_follow_the_chain_both_ways(ingest_a):
    put(ingest_a, rich_state())
    mirror = Approval.objects.get(run__external_id="run_rich", tool_call_id="call_c")
    original = Approval.objects.get(run__external_id="run_child")
    assert [a.pk for a in approval_mirror_targets(mirror)] == [original.pk]
    assert [a.pk for a in approval_mirror_targets(original)] == [mirror.pk]
    assert approval_mirror_targets(original)[0].run.tenant.slug == "tenant-a"
    own = Approval.objects.get(run__external_id="run_rich", tool_call_id="call_a")
    assert approval_mirror_targets(own) == []


def test_an_expired_call_is_a_decision_in_get_state(ingest_a):
    put(ingest_a, state("run_exp", status="awaiting_approval", pendingApprovals=[approval("c1")]))
    Approval.objects.filter(tool_call_id="c1").update(expires_at=timezone.now())
    body = ingest_a.get(state_url("run_exp")).json()
    assert body["pendingApprovals"] == []
    (decision,) = body["decisions"]
    assert decision["decision"] == "expired"
    assert decision["message"] == "The user declined send_email."
    assert decision["decidedBy"] is None


# --- semantics of the reconciliation ---


def test_identical_put_is_200_changes_nothing_and_publishes_nothing(
    ingest_a, django_capture_on_commit_callbacks
):
    body = rich_state()
    with django_capture_on_commit_callbacks() as first:
        assert put(ingest_a, body).status_code == 201
    assert first  # the first one did publish
    before = Run.objects.get(external_id="run_rich").updated_at
    with django_capture_on_commit_callbacks() as again:
        response = put(ingest_a, body)
    assert response.status_code == 200
    assert again == []
    assert Run.objects.get(external_id="run_rich").updated_at == before
    assert Message.objects.filter(run__external_id="run_rich").count() == 2
    assert Approval.objects.filter(run__external_id="run_rich").count() == 3


def test_a_run_first_seen_by_snapshot_without_user_is_for_no_principal(ingest_a, tenant_a):
    body = state("run_anon")
    del body["userId"]
    principals = Principal.objects.count()
    assert put(ingest_a, body).status_code == 201
    run = ingest_a.get(f"{RUNS}/run_anon").json()
    assert run["principalId"] is None
    assert run["agentVersion"] == 0
    assert Principal.objects.count() == principals
    assert "userId" not in ingest_a.get(state_url("run_anon")).json()


def test_a_new_state_for_a_deactivated_principal_is_403(ingest_a, tenant_a):
    Principal.objects.create(tenant=tenant_a, external_id="gone@example.com", is_active=False)
    response = put(ingest_a, state("run_gone", userId="gone@example.com"))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "principal_deactivated"
    assert not Run.objects.filter(external_id="run_gone").exists()


def test_an_admitted_run_keeps_its_principal_roles_and_limits(ingest_a):
    admission = {
        "id": "run_adm",
        "agentId": "support-bot",
        "agentVersion": 3,
        "principalId": "alice@example.com",
        "roleIds": ["editor"],
        "limits": {"maxSteps": 20},
    }
    assert ingest_a.post(RUNS, admission).status_code == 201
    response = put(ingest_a, state("run_adm", userId="mallory@example.com", sessionId="conv_9"))
    assert response.status_code == 200, response.content
    run = response.json()
    assert run["principalId"] == "alice@example.com"
    assert run["roleIds"] == ["editor"]
    assert run["limits"] == {"maxSteps": 20}
    assert run["agentVersion"] == 3
    assert run["conversationId"] == "conv_9"  # it had none: the snapshot's is taken


def test_messages_keep_what_is_held_and_append_the_rest(ingest_a):
    put(ingest_a, state("run_m"))
    longer = state(
        "run_m",
        messages=[
            text("user", "refund order 7"),
            text("assistant", "looking"),
            {
                "role": "assistant",
                "content": "",
                "toolCalls": [{"id": "call_1", "name": "lookup", "arguments": {}}],
            },
            {"role": "tool", "content": "order 7: 12 EUR", "toolCallId": "call_1"},
        ],
    )
    assert put(ingest_a, longer).status_code == 200
    rows = Message.objects.filter(run__external_id="run_m").order_by("position")
    assert [m.position for m in rows] == [0, 1, 2, 3]
    assert rows[3].tool_call_id == "call_1"
    result = ToolResult.objects.get(run__external_id="run_m")
    assert (result.tool_name, result.result) == ("lookup", "order 7: 12 EUR")
    compacted = state("run_m", messages=[text("system", "summary")])
    assert put(ingest_a, compacted).status_code == 200
    assert Message.objects.filter(run__external_id="run_m").count() == 4  # held ones stay


def test_approvals_no_longer_listed_are_cancelled_new_ones_created(ingest_a):
    put(ingest_a, state("run_p", status="awaiting_approval", pendingApprovals=[approval("c1")]))
    response = put(
        ingest_a, state("run_p", status="awaiting_approval", pendingApprovals=[approval("c2")])
    )
    assert response.status_code == 200
    statuses = dict(
        Approval.objects.filter(run__external_id="run_p").values_list("tool_call_id", "status")
    )
    assert statuses == {"c1": "cancelled", "c2": "pending"}
    assert [c["toolCallId"] for c in response.json()["pendingCalls"]] == ["c2"]


def test_a_dropped_mirror_cancels_the_childs_call_too(ingest_a):
    put(ingest_a, rich_state())
    body = rich_state()
    body["pendingApprovals"] = body["pendingApprovals"][:2]
    del body["pendingSubRuns"]
    assert put(ingest_a, body).status_code == 200
    assert Approval.objects.get(run__external_id="run_child").status == "cancelled"
    assert (
        Approval.objects.get(run__external_id="run_rich", tool_call_id="call_c").status
        == "cancelled"
    )


def test_verdicts_widen_only(ingest_a):
    first = state("run_v", verdicts={"1:0": {"verdict": "blocked", "guard": "g", "reason": "r"}})
    put(ingest_a, first)
    lower = state(
        "run_v",
        steps=[step(1), step(2)],
        verdicts={"2:0": {"verdict": "allowed", "guard": "g", "reason": ""}},
    )
    put(ingest_a, lower)
    same_turn_lower = state(
        "run_v", verdicts={"1:0": {"verdict": "allowed", "guard": "g", "reason": ""}}
    )
    put(ingest_a, same_turn_lower)
    verdicts = ingest_a.get(f"{RUNS}/run_v").json()["verdicts"]
    assert verdicts["1:0"]["verdict"] == "blocked"
    assert verdicts["2:0"]["verdict"] == "allowed"
    assert Verdict.objects.filter(run__external_id="run_v").count() == 3
    assert ingest_a.get(state_url("run_v")).json()["verdicts"]["1:0"]["verdict"] == "blocked"


def test_without_usage_by_model_one_entry_for_the_primary_model(ingest_a, tenant_a):
    body = state("run_u", steps=[step(1, model="model-x", u=(7, 3, 1))], usage=usage(7, 3, 1))
    put(ingest_a, body)
    run = ingest_a.get(f"{RUNS}/run_u").json()
    assert run["usageByModel"] == {"model-x": usage(7, 3, 1)}
    assert run["usage"] == usage(7, 3, 1)
    # The daily rollup holds exactly the run's usage, also after a second, larger state.
    put(
        ingest_a,
        state("run_u", steps=[step(1, model="model-x", u=(7, 3, 1))], usage=usage(9, 4, 2)),
    )
    rollup = UsageDaily.objects.filter(tenant=tenant_a)
    assert sum(r.input_tokens for r in rollup) == 9
    assert sum(r.cost_minor_units for r in rollup) == 2
    assert ingest_a.get(f"{RUNS}/run_u").json()["usage"] == usage(9, 4, 2)


def test_steps_are_reconciled_and_a_finished_state_finishes_the_run(ingest_a):
    put(ingest_a, state("run_f", status="awaiting_approval", pendingApprovals=[approval("c1")]))
    done = state(
        "run_f",
        status="completed",
        steps=[step(1), step(2, model="model-b", u=(1, 1, 1))],
        usage=usage(11, 6, 3),
        finishedAt="2026-12-02T11:00:00Z",
    )
    response = put(ingest_a, done)
    assert response.status_code == 200, response.content
    run = response.json()
    assert run["status"] == "done"
    assert run["finishedAt"].startswith("2026-12-02T11:00:00")
    assert Step.objects.filter(run__external_id="run_f").count() == 2
    assert Approval.objects.get(run__external_id="run_f").status == "cancelled"
    assert ingest_a.get(state_url("run_f")).json()["status"] == "completed"


def test_a_finished_run_takes_only_an_identical_state(ingest_a):
    done = state("run_x", status="completed", finishedAt="2026-12-02T11:00:00Z")
    put(ingest_a, done)
    assert put(ingest_a, done).status_code == 200
    response = put(ingest_a, {**done, "usage": usage(99, 0, 0)})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "run_finished"


def test_a_state_for_another_agent_is_409(ingest_a):
    put(ingest_a, state("run_ag"))
    response = put(ingest_a, state("run_ag", agentId="other-bot"))
    assert response.status_code == 409
    assert response.json()["error"]["details"] == {"agentId": "support-bot"}


# --- bad input: 422 with the field path, nothing written ---


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"id": "run_other"}, "id"),
        ({"status": "paused"}, "status"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "mediaType": "image/png", "data": "iVBORw0K"}
                        ],
                    }
                ]
            },
            "messages.0.content",
        ),
        ({"verdicts": {"turn-1": {"verdict": "allowed", "guard": "g", "reason": ""}}}, "verdicts"),
        ({"steps": [step(1), step(1)]}, "steps.1.stepNumber"),
        ({"pendingApprovals": [approval("c1", sub="call_nowhere")]}, "pendingApprovals.0"),
        ({"startedAt": "yesterday"}, "startedAt"),
        ({"messages": [text("user", "nul \x00 here")]}, "messages.0.content.0.text"),
        ({"extraField": 1}, "extraField"),
    ],
)
def test_bad_states_are_422_with_the_field_path_and_write_nothing(ingest_a, change, path):
    put(ingest_a, state("run_bad"))
    before = Run.objects.get(external_id="run_bad")
    body = {**state("run_bad"), **change}
    response = ingest_a.put(state_url("run_bad"), body)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert any(d["path"].startswith(path) for d in error["details"]), error
    after = Run.objects.get(external_id="run_bad")
    assert (after.snapshot_digest, after.updated_at) == (before.snapshot_digest, before.updated_at)
    assert Message.objects.filter(run=after).count() == 2


def test_a_bad_state_for_a_new_run_is_422_not_404_and_creates_nothing(ingest_a):
    response = ingest_a.put(state_url("run_new"), {**state("run_new"), "status": "paused"})
    assert response.status_code == 422
    assert not Run.objects.filter(external_id="run_new").exists()


def test_a_bytes_payload_in_a_url_envelope_or_a_naive_uint8array_is_422(ingest_a):
    for data in ({"$url": "aGVsbG8="}, {"0": 137, "1": 80}):
        part = {"type": "file", "mediaType": "application/pdf", "data": data}
        body = state("run_env", messages=[{"role": "user", "content": [part]}])
        response = put(ingest_a, body)
        assert response.status_code == 422, data
    ok = {"type": "file", "mediaType": "application/pdf", "data": {"$bytes": "aGVsbG8="}}
    assert (
        put(ingest_a, state("run_env", messages=[{"role": "user", "content": [ok]}])).status_code
        == 201
    )


# --- GET state for runs fed otherwise ---


def test_get_state_renders_an_event_fed_run_with_decisions(ingest_a, reviewer_a):
    admission = {"id": "run_ev", "agentId": "support-bot", "agentVersion": 2, "principalId": "al"}
    ingest_a.post(RUNS, admission)
    events = [
        {"seq": 1, "type": "step.started", "step": 1, "agentId": "support-bot", "model": "m"},
        {"seq": 2, "type": "message", "step": 1, "message": text("user", "hi")},
        {
            "seq": 3,
            "type": "step.finished",
            "step": 1,
            "model": "m",
            "usage": usage(3, 2, 1),
            "finishReason": "tool_calls",
        },
        {
            "seq": 4,
            "type": "approval.requested",
            "step": 1,
            "calls": [
                {"toolCallId": "c1", "toolName": "refund", "reason": "money"},
                {"toolCallId": "c2", "toolName": "refund", "reason": "money"},
            ],
        },
    ]
    assert ingest_a.post(f"{RUNS}/run_ev/events", {"events": events}).status_code == 200
    decide(Approval.objects.get(tool_call_id="c1"), "deny", by=reviewer_a)
    body = ingest_a.get(state_url("run_ev")).json()
    assert body["id"] == "run_ev"
    assert body["userId"] == "al"
    assert body["sessionId"] is None
    assert body["status"] == "awaiting_approval"
    assert body["steps"][0]["usage"] == usage(3, 2, 1)
    assert body["messages"] == [text("user", "hi")]
    assert [a["toolCallId"] for a in body["pendingApprovals"]] == ["c2"]
    assert body["decisions"][0]["toolCallId"] == "c1"
    assert body["decisions"][0]["decision"] == "denied"
    assert body["usageByModel"] == {"m": usage(3, 2, 1)}


def test_events_after_a_snapshot_make_get_state_render_the_rows(ingest_a):
    put(ingest_a, state("run_mix"))
    event = {"seq": 1, "type": "message", "step": 1, "message": text("assistant", "more")}
    assert ingest_a.post(f"{RUNS}/run_mix/events", {"events": [event]}).status_code == 200
    body = ingest_a.get(state_url("run_mix")).json()
    assert [m["content"][0]["text"] for m in body["messages"]] == [
        "refund order 7",
        "looking",
        "more",
    ]


# --- who may ---


def test_another_tenants_run_is_404_and_a_put_makes_the_tenants_own_run(ingest_a, ingest_b):
    put(ingest_b, state("run_shared"))
    assert ingest_a.get(state_url("run_shared")).status_code == 404
    assert put(ingest_a, state("run_shared", usage=usage(1, 1, 1))).status_code == 201
    theirs = ingest_b.get(f"{RUNS}/run_shared").json()
    assert theirs["usage"] == usage(10, 5, 2)
    assert Run.objects.filter(external_id="run_shared").count() == 2


def test_a_decide_only_key_is_403_and_no_key_is_401(decide_a, ingest_a, client):
    put(ingest_a, state("run_k"))
    assert decide_a.put(state_url("run_k"), state("run_k")).status_code == 403
    assert decide_a.get(state_url("run_k")).status_code == 403
    assert client.get(state_url("run_k")).status_code == 401


def test_openapi_describes_state_in_camel_case(client):
    schema = client.get("/api/v1/openapi.json").json()
    operations = schema["paths"]["/api/v1/runs/{runId}/state"]
    assert {"put", "get"} <= set(operations)
    props = schema["components"]["schemas"]["RunStateIn"]["properties"]
    assert {"pendingApprovals", "pendingSubRuns", "usageByModel", "sessionId"} <= set(props)


def test_child_state_builder_is_valid_on_its_own(ingest_a):
    assert put(ingest_a, child_state("run_solo")).status_code == 201


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_puts_of_a_new_state_create_one_run_once(tenant_a):
    """Racing PUTs of the same new state (with a sub-run): one creates, the others find it."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from runs.schemas_state import RunStateIn
    from runs.services.snapshots import run_state_put

    body = RunStateIn.model_validate(rich_state("run_race"))

    def one(_):
        try:
            return run_state_put(tenant=tenant_a, run_id="run_race", state=body)[1]
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        created = list(pool.map(one, range(4)))
    assert sorted(created) == [False, False, False, True]
    assert Run.objects.filter(external_id__in=["run_race", "run_child"]).count() == 2
    assert Message.objects.filter(run__external_id="run_race").count() == 2
    assert Approval.objects.filter(run__external_id="run_race").count() == 3


def test_an_identical_put_costs_a_few_queries_even_reformatted(
    ingest_a, django_assert_max_num_queries
):
    import json

    body = rich_state()
    put(ingest_a, body)
    # The key, the run, its pending calls, its verdicts (rows of their own) and the tenant's
    # budgets (the cost beside each pending call; with budgets, their spend too); and the
    # service's SAVEPOINT and its RELEASE (the request and its answer are one transaction).
    with django_assert_max_num_queries(8):
        assert ingest_a.put(state_url("run_rich"), body).status_code == 200
    reformatted = json.dumps(body, indent=2)  # other bytes, the same state
    with django_assert_max_num_queries(8):
        assert ingest_a.put(state_url("run_rich"), raw=reformatted).status_code == 200


def test_a_parent_dropping_a_mirror_leaves_a_still_parked_childs_own_call(ingest_a):
    put(ingest_a, rich_state())
    body = rich_state()
    body["pendingApprovals"] = body["pendingApprovals"][:2]  # the child still parks call_c
    assert put(ingest_a, body).status_code == 200
    assert Approval.objects.get(run__external_id="run_child").status == "pending"
    mirror = Approval.objects.get(run__external_id="run_rich", tool_call_id="call_c")
    assert mirror.status == "cancelled"
