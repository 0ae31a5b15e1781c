"""The shared write primitives (runs/services/common.py) and the ingest services."""

from datetime import UTC, datetime

import pytest

from approvals.models import Approval
from approvals.services.requests import approvals_cancel_pending, approvals_request
from console.core.errors import Conflict, Forbidden
from runs.models import Handoff, Message, Step, UsageDaily, Verdict, run_trace_ids, run_verdicts
from runs.services import common
from runs.services.writes import RunWrites
from tests.support.factories import RunFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(tenant_a):
    return RunFactory(tenant=tenant_a, external_id="run_1", principal__external_id="alice")


def usage(i, o, c):
    return {"input_tokens": i, "output_tokens": o, "cost_minor_units": c}


def test_step_finish_usage_adds_to_run_model_and_daily_rollup_once(run):
    at = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    common.step_start(run=run, step=1, agent_id="bot", model="m-a")
    common.step_finish_usage(run=run, step=1, model="m-a", usage=usage(10, 5, 3), finished_at=at)
    common.step_finish_usage(run=run, step=2, model="m-b", usage=usage(1, 2, 4), finished_at=at)
    run.refresh_from_db()
    assert (run.input_tokens, run.output_tokens, run.cost_minor_units) == (11, 7, 7)
    assert run.usage_by_model == {"m-a": usage(10, 5, 3), "m-b": usage(1, 2, 4)}
    rows = UsageDaily.objects.filter(tenant=run.tenant).order_by("model")
    assert [(r.model, r.principal_id, r.input_tokens, r.steps) for r in rows] == [
        ("m-a", "alice", 10, 1),
        ("m-b", "alice", 1, 1),
    ]
    assert rows[0].day.isoformat() == "2026-12-02"


def test_step_reported_finished_again_counts_only_the_difference(run):
    at = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    common.step_finish_usage(run=run, step=1, model="m-a", usage=usage(10, 5, 3), finished_at=at)
    common.step_finish_usage(run=run, step=1, model="m-a", usage=usage(12, 5, 3), finished_at=at)
    run.refresh_from_db()
    assert run.input_tokens == 12
    assert run.usage_by_model["m-a"]["input_tokens"] == 12
    row = UsageDaily.objects.get(tenant=run.tenant)
    assert (row.input_tokens, row.steps) == (12, 1)


def test_verdicts_widen_only_and_rows_are_only_added(run):
    common.verdict_record(run=run, turn="1:0", verdict="flagged", guard="pii", reason="email")
    common.verdict_record(run=run, turn="1:0", verdict="allowed", guard="pii", reason="ok")
    assert run_verdicts(run)["1:0"]["verdict"] == "flagged"
    common.verdict_record(run=run, turn="1:0", verdict="flagged", guard="x", reason="later")
    assert run_verdicts(run)["1:0"]["reason"] == "email"  # equal severity: the earlier stands
    common.verdict_record(run=run, turn="1:0", verdict="blocked", guard="pii", reason="ssn")
    assert run_verdicts(run) == {"1:0": {"verdict": "blocked", "guard": "pii", "reason": "ssn"}}
    assert Verdict.objects.filter(run=run).count() == 4


def test_verdicts_of_one_unit_widen_per_turn_against_what_the_run_holds(run):
    common.verdict_record(run=run, turn="2:0", verdict="flagged", guard="g", reason="held")
    w = RunWrites(run)
    for turn, verdict, reason in [
        ("2:0", "allowed", "narrower than held"),
        ("2:0", "flagged", "as wide as held"),
        ("3:0", "flagged", "first"),
        ("3:0", "blocked", "wider"),
        ("3:0", "blocked", "as wide, later"),
        ("1:0", "allowed", "new turn"),
    ]:
        common.verdict_record(
            run=run, turn=turn, verdict=verdict, guard="g", reason=reason, writes=w
        )
    w.flush()
    assert run_verdicts(run) == {
        "2:0": {"verdict": "flagged", "guard": "g", "reason": "held"},
        "3:0": {"verdict": "blocked", "guard": "g", "reason": "wider"},
        "1:0": {"verdict": "allowed", "guard": "g", "reason": "new turn"},
    }
    assert Verdict.objects.filter(run=run).count() == 7


def test_trace_ids_are_kept_once_each_in_the_order_first_reported(run):
    for step, trace in enumerate(["t1", "t2", "t1", "t3"], start=1):
        common.step_finish_usage(
            run=run, step=step, model="m", usage=usage(1, 1, 1), trace_id=trace
        )
    w = RunWrites(run)
    for step, trace in enumerate(["t3", "t4", "t4", "t2"], start=5):
        common.step_finish_usage(
            run=run, step=step, model="m", usage=usage(1, 1, 1), trace_id=trace, writes=w
        )
    w.flush()
    assert run_trace_ids(run) == ["t1", "t2", "t3", "t4"]


def test_messages_append_in_order_across_calls(run):
    common.messages_append(run=run, messages=[{"role": "user", "content": "hi"}], step=1)
    common.messages_append(
        run=run,
        messages=[{"role": "assistant", "content": [{"type": "text", "text": "yo"}]}],
        step=1,
    )
    assert list(Message.objects.filter(run=run).values_list("position", "role")) == [
        (0, "user"),
        (1, "assistant"),
    ]


def test_handoff_moves_and_return_restores_current_agent(run):
    common.handoff_record(run=run, step=1, from_agent_id="bot", to_agent_id="billing")
    assert run.current_agent_id == "billing"
    common.handoff_record(run=run, step=2, to_agent_id="bot", returned=True)
    run.refresh_from_db()
    assert run.current_agent_id == "bot"
    assert list(Handoff.objects.filter(run=run).values_list("kind", "from_agent_id")) == [
        ("handoff", "bot"),
        ("returned", "billing"),
    ]


def test_calls_hold_in_order_then_run_finish_cancels(run, django_capture_on_commit_callbacks):
    calls = [
        {"tool_call_id": "c2", "tool_name": "b", "arguments": {}},
        {"tool_call_id": "c1", "tool_name": "a", "arguments": {"x": 1}},
    ]
    with django_capture_on_commit_callbacks() as callbacks:
        rows = common.calls_hold(run=run, step=1, calls=calls)
    assert callbacks, "approvals_changed is published on commit"
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    assert [a.tool_call_id for a in Approval.objects.filter(run=run)] == ["c2", "c1"]
    ttl = run.tenant.approval_ttl_seconds
    assert (rows[0].expires_at - rows[0].requested_at).total_seconds() == ttl
    with pytest.raises(Conflict):
        approvals_request(run=run, step=2, calls=calls[:1])
    common.run_finish(run=run, status="done", result={"text": "bye"})
    run.refresh_from_db()
    assert run.status == "done" and run.finished_at is not None
    assert set(Approval.objects.filter(run=run).values_list("status", flat=True)) == {"cancelled"}
    assert approvals_cancel_pending(run=run) == []


def test_approvals_request_makes_approvals_and_leaves_the_run_to_its_caller(run):
    rows = approvals_request(
        run=run, step=1, calls=[{"tool_call_id": "c9", "tool_name": "a", "arguments": {}}]
    )
    run.refresh_from_db()
    assert [r.tool_call_id for r in rows] == ["c9"]
    assert run.status == "running"


def test_deactivated_principal_is_forbidden(tenant_a):
    common.principal(tenant=tenant_a, external_id="bob")
    from console.models import Principal

    Principal.objects.filter(external_id="bob").update(is_active=False)
    with pytest.raises(Forbidden):
        common.principal(tenant=tenant_a, external_id="bob")


def test_step_start_sets_current_agent_and_step_count(run):
    common.step_start(run=run, step=3, agent_id="planner", model="m")
    run.refresh_from_db()
    assert (run.current_agent_id, run.steps) == ("planner", 3)
    assert Step.objects.get(run=run, number=3).model == "m"


def test_an_explicit_expiry_is_kept_and_a_missing_one_takes_the_tenant_ttl(run):
    from datetime import timedelta

    at = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    calls = [
        {"tool_call_id": "c1", "tool_name": "a", "expires_at": at + timedelta(hours=2)},
        {"tool_call_id": "c2", "tool_name": "b"},
    ]
    first, second = approvals_request(run=run, step=1, calls=calls, requested_at=at)
    assert first.expires_at == at + timedelta(hours=2)
    assert second.expires_at == at + timedelta(seconds=run.tenant.approval_ttl_seconds)
    assert (first.position, second.position) == (1, 2)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_same_batch_posted_twice_at_once_is_applied_once():
    """The run's row lock serializes batches: the second sees the first's events as held."""
    import threading

    from django.db import connection

    from runs.schemas import EventBatchIn
    from runs.services.ingest import run_events_apply
    from tests.support.factories import TenantFactory

    tenant = TenantFactory(slug="race")
    run = RunFactory(tenant=tenant, external_id="run_race")
    events = [
        {"seq": 1, "type": "step.started", "step": 1, "agentId": "a", "model": "m"},
        {
            "seq": 2,
            "type": "step.finished",
            "step": 1,
            "model": "m",
            "usage": {"inputTokens": 5, "outputTokens": 1, "costMinorUnits": 2},
        },
    ]
    batch = EventBatchIn.model_validate({"events": events}).events
    results, barrier = [], threading.Barrier(2)

    def post():
        try:
            barrier.wait()
            results.append(
                run_events_apply(tenant_id=tenant.pk, run_id=run.external_id, events=batch)
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=post) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.refresh_from_db()
    assert results == [2, 2]
    assert (run.last_seq, run.input_tokens) == (2, 5)
    assert UsageDaily.objects.get(tenant=tenant).input_tokens == 5


def test_a_run_awaits_approval_only_while_one_of_its_calls_waits_for_a_person(run):
    """At a batch's end a run none of whose calls waits any more is running again (a gateway
    reports a held call's result with no new step after it)."""
    from django.utils import timezone

    from runs import schemas as s
    from runs.services.ingest import run_events_apply

    seq = iter(range(1, 100))

    def post(*events) -> str:
        events = [{"seq": next(seq), "step": 1, **e} for e in events]
        run_events_apply(
            tenant_id=run.tenant_id, run_id=run.external_id, events=s.EVENTS.validate_python(events)
        )
        run.refresh_from_db()
        return run.status

    def held(call_id):
        return {"toolCallId": call_id, "toolName": "send", "arguments": {}, "reason": "r",
                "rejectionMessage": "no"}  # fmt: skip

    def result(call_id):
        return {"type": "tool.result", "toolCallId": call_id, "toolName": "send",
                "result": "ok", "isError": False}  # fmt: skip

    started = {"type": "step.started", "agentId": "bot", "model": "m"}
    asked = {"type": "approval.requested", "calls": [held("c1"), held("c2")]}
    assert post(started, asked) == "awaiting_approval"
    now = timezone.now()
    Approval.objects.filter(run=run, tool_call_id="c1").update(status="approved", decided_at=now)
    assert post(result("c1")) == "awaiting_approval"  # c2 still waits for a person
    Approval.objects.filter(run=run, tool_call_id="c2").update(status="denied", decided_at=now)
    assert post(result("c2"), {"type": "step.finished", "model": "m",
                               "usage": {"inputTokens": 0, "outputTokens": 0,
                                         "costMinorUnits": 0}}) == "running"  # fmt: skip
