"""The database round trips of one ungated gateway call, counted with Django's
CaptureQueriesContext (`-s` prints them): the fast path's one write before the call goes
upstream (records.call_pass) and its record after it is answered (records.call_record_passed),
and the recorded-first path a held call takes (records.call_begin, records.call_finish). The
bounds fail when a change adds trips; the record's contents are checked too (nothing lost)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services.rules import rule_create
from console.models import ApiKey, AuditEvent
from gateway import records
from gateway.models import CallState, McpCall, McpServer
from runs.models import RunEvent, ToolResult
from tests.support.factories import ApprovalFactory, PrincipalFactory, TenantFactory, make_key

pytestmark = pytest.mark.django_db(transaction=True)
PASS_BOUND = 2  # before upstream: the rules version, the INSERT (the authors' roles: edge.py)
RECORD_BOUND = 33  # recorded-first path (SQLite, BEGIN/SAVEPOINT/COMMIT counted)
FINISH_BOUND = 22  # + whether a call of the run still waits (its status back to running)
STEP = ["step.started", "message", "approval.requested", "tool.result", "step.finished"]


@pytest.fixture
def ungated():
    tenant = TenantFactory()
    ann = PrincipalFactory(tenant=tenant, external_id="ann", role="admin")
    lea = PrincipalFactory(tenant=tenant, external_id="lea", role="lead")
    make_key(tenant, scopes=("mcp",), principal=ann, name="claude")
    key = ApiKey.objects.select_related("principal").get(tenant=tenant, name="claude")
    server = McpServer.objects.create(
        tenant=tenant, name="bench", transport="http", url="http://127.0.0.1:9/mcp"
    )
    rule = rule_create(
        tenant=tenant,
        fields={"name": "echo", "effect": "approve", "tool_pattern": "bench.echo"},
        principal=lea,
    )
    session = records.session_open(server=server, key=key, agent_id="claude", conversation_id=None)
    session = records.session_find(server=server, key=key, public_id=session.public_id)
    # a first call: what a process caches after its first call (rules, settings) is warm
    first = records.call_pass(session=session, tool="echo", arguments={"n": 0}, read_only=False)
    records.call_record_passed(call=first, result={"content": []}, key=key)
    return session, key, rule


def _show(label, captured):
    print(f"\n{label}: {len(captured.captured_queries)} queries")
    for number, query in enumerate(captured.captured_queries, 1):
        print(f"  {number:2}. {query['sql'][:220]}")


def _types(session) -> list[str]:
    rows = RunEvent.objects.filter(run_id=session.run_id).order_by("seq")
    return list(rows.values_list("type", flat=True))


def test_a_rule_passed_call_costs_two_queries_before_upstream_and_its_record_is_whole(ungated):
    session, key, rule = ungated
    with CaptureQueriesContext(connection) as before:
        call = records.call_pass(session=session, tool="echo", arguments={"n": 1}, read_only=False)
    with CaptureQueriesContext(connection) as after:
        records.call_record_passed(
            call=call, result={"content": [{"type": "text", "text": "1"}]}, key=key
        )
    _show("before upstream", before)
    _show("recorded after the answer", after)
    assert len(before.captured_queries) <= PASS_BOUND
    # nothing lost: the step with the call and its result, the approval decided by the rule,
    # the call done, the audit entry naming the rule
    assert _types(session)[-5:] == STEP
    call.refresh_from_db()
    assert call.state == CallState.DONE and call.recorded and call.step
    approval = Approval.objects.get(pk=call.approval_id)
    assert approval.status == ApprovalStatus.APPROVED and approval.decided_by_rule_id == rule.pk
    stored = ToolResult.objects.get(tool_call_id=call.tool_call_id)
    assert stored.result["content"][0]["text"] == "1"
    entry = AuditEvent.objects.get(action="mcp.call.forwarded", object_id=call.tool_call_id)
    assert entry.data["passedBy"] == rule.public_id and entry.data["decision"] == "approved"
    # recorded once: a second record (the sweep racing the write-behind) writes nothing
    assert records.call_record_passed(call=call, result={"content": []}, key=key) is False


def test_a_call_no_rule_approves_takes_the_recorded_first_path(ungated):
    session, key, _ = ungated
    assert (
        records.call_pass(session=session, tool="write", arguments={"n": 1}, read_only=False)
        is None
    )
    with CaptureQueriesContext(connection) as record:
        begun = records.call_begin(session=session, tool="write", arguments={"n": 1}, gated=True)
    _show("recorded first", record)
    assert len(record.captured_queries) <= RECORD_BOUND
    assert begun.call.state == CallState.HELD and begun.call.approval.status == "pending"
    assert _types(session)[-3:] == STEP[:3]


def test_a_read_only_pass_records_a_step_without_an_approval(ungated):
    session, key, _ = ungated
    call = records.call_pass(session=session, tool="read", arguments={"p": "/"}, read_only=True)
    assert call.passed_by == records.READ_ONLY
    records.call_record_passed(call=call, result={"content": []}, key=key)
    call.refresh_from_db()
    assert call.approval_id is None and call.state == CallState.DONE
    assert _types(session)[-4:] == ["step.started", "message", "tool.result", "step.finished"]


def test_the_recorded_first_path_finishes_in_few_round_trips(ungated):
    session, key, _ = ungated
    begun = records.call_begin(session=session, tool="write", arguments={"n": 2}, gated=True)
    Approval.objects.filter(pk=begun.call.approval_id).update(status=ApprovalStatus.APPROVED)
    assert records.call_claim(call=begun.call)
    with CaptureQueriesContext(connection) as finish:
        records.call_finish(call=begun.call, result={"content": []}, key=key, forwarded=True)
    _show("finish", finish)
    assert len(finish.captured_queries) <= FINISH_BOUND
    assert McpCall.objects.get(pk=begun.call.pk).recorded


def test_the_sweep_records_a_passed_call_a_stopped_process_left(ungated):
    session, key, rule = ungated
    call = records.call_pass(session=session, tool="echo", arguments={"n": 3}, read_only=False)
    # the process stopped after sending it upstream: nothing but the McpCall was written
    McpCall.objects.filter(pk=call.pk).update(created_at=timezone.now() - timedelta(hours=1))
    assert records.gateway_sweep() >= 1
    call.refresh_from_db()
    assert call.recorded and call.state == CallState.DONE
    assert call.result["content"][0]["text"] == records.NOT_RECORDED
    assert _types(session)[-5:] == STEP
    entry = AuditEvent.objects.get(action="mcp.call.forwarded", object_id=call.tool_call_id)
    assert entry.data["resultRecorded"] is False and entry.data["passedBy"] == rule.public_id


def test_passed_calls_of_one_run_are_recorded_in_one_batch(ungated):
    session, key, rule = ungated
    calls = [
        records.call_pass(session=session, tool="echo", arguments={"n": 10}, read_only=False),
        records.call_pass(session=session, tool="read", arguments={"n": 11}, read_only=True),
        records.call_pass(session=session, tool="echo", arguments={"n": 12}, read_only=False),
    ]
    items = [(c, {"content": [{"type": "text", "text": str(i)}]}, key) for i, c in enumerate(calls)]
    with CaptureQueriesContext(connection) as batch:
        assert records.calls_record_passed(items=items) == 3
    _show("three passed calls recorded in one batch", batch)
    steps = [McpCall.objects.get(pk=c.pk).step for c in calls]
    assert steps == [steps[0], steps[0] + 1, steps[0] + 2]
    assert _types(session)[-14:] == STEP + STEP[:2] + STEP[3:] + STEP
    seqs = list(RunEvent.objects.filter(run_id=session.run_id).values_list("seq", flat=True))
    assert sorted(seqs) == list(range(1, len(seqs) + 1))  # contiguous
    approved = Approval.objects.filter(tool_call_id__in=[c.tool_call_id for c in calls])
    assert [a.status for a in approved] == [ApprovalStatus.APPROVED] * 2
    assert AuditEvent.objects.filter(action="mcp.call.forwarded").count() == 4  # + the first
    assert records.calls_record_passed(items=items) == 0  # once


def test_a_batch_of_passed_calls_costs_the_statements_of_a_few(ungated):
    """The records of many rule-passed calls of a run: one ingest batch whose held calls are
    requested together, born decided, with one INSERT of their audit entries (approvals,
    runs, console/audit): the statements of 3 calls and of 40 are the same."""
    session, key, rule = ungated
    counts = []
    for n in (3, 40):
        calls = [
            records.call_pass(session=session, tool="echo", arguments={"n": i}, read_only=False)
            for i in range(n)
        ]
        items = [(c, {"content": [{"type": "text", "text": "ok"}]}, key) for c in calls]
        with CaptureQueriesContext(connection) as batch:
            assert records.calls_record_passed(items=items) == n
        counts.append(len(batch.captured_queries))
        assert Approval.objects.filter(
            tool_call_id__in=[c.tool_call_id for c in calls], status=ApprovalStatus.APPROVED,
            decided_by_rule=rule,
        ).count() == n  # fmt: skip
        forwarded = AuditEvent.objects.filter(
            action="mcp.call.forwarded", object_id__in=[c.tool_call_id for c in calls]
        )
        assert forwarded.count() == n
    _show("40 passed calls recorded", batch)
    # the same (SQLite splits a bulk INSERT at its 999 parameters: one more chunk or two)
    assert counts[0] <= counts[1] <= counts[0] + (0 if connection.vendor == "postgresql" else 2)


@pytest.mark.postgres
def test_a_call_the_compiled_rules_pass_is_one_insert_from_the_event_loop(ungated, settings):
    """records.call_pass_known: no thread hop and no ORM query, one INSERT that holds only
    while the rules version the process compiled is the tenant's; anything else writes
    nothing and leaves the call to call_pass."""
    settings.GAVEL_MCP_CACHE_SECONDS = 600  # the fixture's authority copy stays fresh
    session, key, rule = ungated

    def known(tool="echo", read_only=False, **arguments):
        return asyncio.run(
            records.call_pass_known(
                session=session, tool=tool, arguments=arguments, read_only=read_only
            )
        )

    with CaptureQueriesContext(connection) as orm:
        call = known(n=1)
    assert len(orm.captured_queries) == 0  # not through Django's connection
    row = McpCall.objects.get(pk=call.pk)
    assert (row.state, row.passed_by, row.recorded) == (CallState.FORWARDING, rule.public_id, False)
    assert (row.tool, row.arguments, row.session_id) == ("echo", {"n": 1}, session.pk)
    assert row.canonical == records.canonical({"n": 1}) and row.tool_call_id.startswith("mcp_")
    records.call_record_passed(call=call, result={"content": []}, key=key)  # recorded as ever
    assert _types(session)[-5:] == STEP

    assert known(tool="write_file", path="/x") is None  # no rule approves it: call_pass decides
    ro = known(tool="write_file", read_only=True, path="/x")  # passReadOnly: no rule needed
    assert McpCall.objects.get(pk=ro.pk).passed_by == records.READ_ONLY

    lea = rule.created_by
    rule_create(  # the rules move: what this process compiled no longer holds
        tenant=session.tenant,
        fields={"name": "other", "effect": "deny", "tool_pattern": "bench.other"},
        principal=lea,
    )
    count = McpCall.objects.count()
    assert known(n=2) is None
    assert McpCall.objects.count() == count  # nothing written
    again = records.call_pass(session=session, tool="echo", arguments={"n": 2}, read_only=False)
    assert again is not None  # call_pass compiles the new rules...
    assert known(n=3) is not None  # ...and the event loop's path holds again


@pytest.mark.postgres
def test_a_woken_approved_call_is_claimed_once_from_the_event_loop(ungated):
    """records.call_claim_approved: one conditional UPDATE joined to the approval, with the
    reviewer's arguments; anything but approved-and-held leaves the call to
    call_look_and_claim, unchanged."""
    session, key, _ = ungated
    begun = records.call_begin(session=session, tool="write", arguments={"n": 4}, gated=True)
    call = begun.call

    def claim():
        return asyncio.run(records.call_claim_approved(call=call))

    assert claim() == (False, None)  # pending: nothing written
    assert McpCall.objects.get(pk=call.pk).state == CallState.HELD
    edited = {"n": 40, "note": "reviewer's"}
    Approval.objects.filter(pk=call.approval_id).update(
        status=ApprovalStatus.APPROVED, decided_arguments=edited
    )
    with CaptureQueriesContext(connection) as orm:
        assert claim() == (True, edited)
    assert len(orm.captured_queries) == 0
    row = McpCall.objects.get(pk=call.pk)
    assert (row.state, row.recorded) == (CallState.FORWARDING, False) and row.forwarded_at
    assert claim() == (False, None)  # claimed once: another caller gets nothing
    # its record reads the approval as decided (not the pending copy the call carried)
    records.call_finish(call=call, result={"content": []}, key=key, forwarded=True)
    entry = AuditEvent.objects.get(action="mcp.call.forwarded", object_id=call.tool_call_id)
    assert entry.data["decision"] == ApprovalStatus.APPROVED


def test_record_many_writes_each_calls_fields_in_one_statement_and_nothing_else(ungated):
    """The write-behind's one UPDATE (McpCallQuerySet.record_many, SQL from a VALUES list):
    each call's own step, approval (or none) and result, the batch's state, time and flag;
    a call not in the batch is left as it was."""
    session, key, rule = ungated
    gated = records.call_pass(session=session, tool="echo", arguments={"n": 1}, read_only=False)
    plain = records.call_pass(session=session, tool="read", arguments={"n": 2}, read_only=True)
    other = records.call_pass(session=session, tool="echo", arguments={"n": 3}, read_only=False)
    approval = ApprovalFactory(run=session.run, tool_call_id="call_record_many")
    gated.step, gated.approval_id = 41, approval.pk
    gated.result = {"content": [{"type": "text", "text": 'é "quoted" ✓'}], "isError": False}
    plain.step, plain.approval_id, plain.result = 42, None, {"content": [], "meta": {"n": [1, 2]}}
    done_at = timezone.now() - timedelta(seconds=5)
    with CaptureQueriesContext(connection) as written:
        count = McpCall.objects.record_many(
            [gated, plain], state=CallState.DONE, finished_at=done_at, recorded=True
        )
    assert count == 2 and len(written.captured_queries) == 1
    for call in (gated, plain):
        stored = McpCall.objects.get(pk=call.pk)
        assert (stored.step, stored.approval_id, stored.result) == (
            call.step,
            call.approval_id,
            call.result,
        )
        assert stored.state == CallState.DONE and stored.recorded and stored.finished_at == done_at
    untouched = McpCall.objects.get(pk=other.pk)
    assert not untouched.recorded and untouched.result is None and untouched.finished_at is None
    none = McpCall.objects.record_many([], state=CallState.DONE, finished_at=done_at, recorded=True)
    assert none == 0


def test_tasks_list_pages_newest_first_by_cursor_and_never_shows_a_plain_call(ungated, monkeypatch):
    from types import SimpleNamespace

    from gateway import tasks

    session, key, _ = ungated
    made = []
    for n in range(5):
        begun = records.call_begin(
            session=session, tool="write", arguments={"n": 100 + n}, gated=True
        )
        records.call_make_task(call=begun.call, ttl=None)
        made.append(begun.call.tool_call_id)
    records.call_begin(session=session, tool="write", arguments={"n": 200}, gated=True)  # no task
    monkeypatch.setattr(tasks, "PAGE", 2)
    caller = SimpleNamespace(server=session.server, key=key)
    pages, cursor = [], None
    while True:
        page = asyncio.run(
            tasks.list_page(caller=caller, protocol_version=tasks.VERSION, cursor=cursor)
        )
        pages.append([task["taskId"] for task in page["tasks"]])
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    newest_first = made[::-1]
    assert pages == [newest_first[0:2], newest_first[2:4], newest_first[4:]]
