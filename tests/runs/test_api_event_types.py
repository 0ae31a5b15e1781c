"""What each event type does to the run: messages and their parts, tool results,
verdicts, todos and taint, handoffs, usage, approval requests and run.finished."""

import base64

import pytest

from approvals.models import Approval
from runs.models import Handoff, Message, Run, ToolResult, UsageDaily, Verdict
from tests.support.batches import RUNS, approval_requested, finished, post_events, step_events

pytestmark = pytest.mark.django_db


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
