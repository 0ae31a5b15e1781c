"""An MCP session's idle limit (GAVEL_MCP_SESSION_IDLE_SECONDS) and a client's
`notifications/cancelled` withdrawing a call that waits, at the records' level and at the
gateway's edge (gateway/asgi.py `_resolve`). The live client's cancellation is in
test_gateway_live.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from console.core.errors import NotFound
from console.models import ApiKey, AuditEvent
from gateway import asgi, edge, records
from gateway.models import CallState, McpCall, McpServer, McpSession
from runs.models import Run, RunEvent, ToolResult
from tests.support.factories import PrincipalFactory, TenantFactory, make_key

pytestmark = pytest.mark.django_db(transaction=True)
SCOPE = {"path": "/mcp/files", "method": "POST", "headers": [], "client": ("127.0.0.1", 1)}


@pytest.fixture
def opened(settings):
    settings.GAVEL_MCP_SESSION_IDLE_SECONDS = 600
    edge.forget()
    tenant = TenantFactory()
    ann = PrincipalFactory(tenant=tenant, external_id="ann", role="admin")
    raw = make_key(tenant, scopes=("mcp",), principal=ann, name="claude")
    key = ApiKey.objects.select_related("principal").get(tenant=tenant, name="claude")
    server = McpServer.objects.create(
        tenant=tenant, name="files", transport="http", url="http://127.0.0.1:9/mcp"
    )
    session = records.session_open(server=server, key=key, agent_id="claude", conversation_id=None)
    session = records.session_find(server=server, key=key, public_id=session.public_id)
    return session, key, f"Bearer {raw}"


def _idle(session, minutes=11):
    McpSession.objects.filter(pk=session.pk).update(
        last_used_at=timezone.now() - timedelta(minutes=minutes)
    )
    edge.forget()


def _run(session) -> Run:
    return Run.objects.get(pk=session.run_id)


def _held(session, n=1):
    return records.call_begin(
        session=session, tool="write", arguments={"n": n}, gated=True, request_id=str(n)
    ).call


def test_a_session_used_recently_continues(opened):
    session, key, header = opened
    _, _, found = asgi._resolve(header, "files", session.public_id, SCOPE)
    assert found.pk == session.pk and found.closed_at is None


def test_an_idle_session_is_closed_at_its_next_request_and_its_run_finished(opened):
    session, key, header = opened
    _idle(session)
    with pytest.raises(NotFound) as refused:
        asgi._resolve(header, "files", session.public_id, SCOPE)
    assert refused.value.code == "session_not_found"
    closed = McpSession.objects.get(pk=session.pk)
    assert closed.closed_at is not None and closed.close_reason == "idle"
    run = _run(session)
    assert run.status == "done"
    last = RunEvent.objects.filter(run=run).order_by("-seq").first()
    assert last.type == "run.finished" and last.data["finishReason"] == "mcp_session_idle"
    with pytest.raises(NotFound):  # and it stays ended
        asgi._resolve(header, "files", session.public_id, SCOPE)


def test_the_sweep_closes_idle_sessions_and_finishes_the_run_once_no_call_waits(opened):
    session, key, _ = opened
    call = _held(session)
    _idle(session)
    records.gateway_sweep()
    assert McpSession.objects.get(pk=session.pk).close_reason == "idle"
    assert _run(session).status != "done"  # a call still waits: a restarted client attaches
    Approval.objects.filter(pk=call.approval_id).update(status=ApprovalStatus.DENIED)
    records.gateway_sweep()
    assert _run(session).status == "done"


def test_a_session_not_idle_is_left_alone_by_the_sweep(opened):
    session, key, _ = opened
    records.gateway_sweep()
    assert McpSession.objects.get(pk=session.pk).closed_at is None


def test_cancelled_withdraws_the_waiting_call_with_a_clear_record(opened):
    session, key, _ = opened
    call = _held(session, n=7)
    withdrawn = records.call_cancel(session=session, request_id="7", key=key)
    assert withdrawn is not None and withdrawn.pk == call.pk
    call.refresh_from_db()
    assert call.state == CallState.REFUSED
    text = call.result["content"][0]["text"]
    assert call.result["isError"] and "cancelled by the client" in text
    assert Approval.objects.get(pk=call.approval_id).status == ApprovalStatus.CANCELLED
    assert ToolResult.objects.get(tool_call_id=call.tool_call_id).is_error
    entry = AuditEvent.objects.get(action="mcp.call.cancelled", object_id=call.tool_call_id)
    assert entry.data["decision"] == "cancelled"
    # once: a second notification finds nothing waiting
    assert records.call_cancel(session=session, request_id="7", key=key) is None


def test_cancelled_leaves_calls_it_does_not_name_or_that_are_on_their_way(opened):
    session, key, _ = opened
    waiting = _held(session, n=1)
    going = _held(session, n=2)
    Approval.objects.filter(pk=going.approval_id).update(status=ApprovalStatus.APPROVED)
    assert records.call_claim(call=going)
    assert records.call_cancel(session=session, request_id="99", key=key) is None
    assert records.call_cancel(session=session, request_id="2", key=key) is None
    assert McpCall.objects.get(pk=going.pk).state == CallState.FORWARDING
    assert Approval.objects.get(pk=waiting.approval_id).status == ApprovalStatus.PENDING


def test_another_sessions_cancel_does_not_reach_a_call(opened):
    session, key, _ = opened
    call = _held(session, n=5)
    other = records.session_open(
        server=session.server, key=key, agent_id="claude", conversation_id=None
    )
    assert records.call_cancel(session=other, request_id="5", key=key) is None
    assert Approval.objects.get(pk=call.approval_id).status == ApprovalStatus.PENDING


def test_a_session_deleted_before_its_passed_calls_are_recorded_finishes_after_them(opened):
    session, key, _ = opened
    call = records.call_pass(session=session, tool="read", arguments={}, read_only=True)
    records.session_close(session=session, reason="deleted")  # the client's DELETE came first
    assert _run(session).status != "done"
    assert records.call_record_passed(call=call, result={"content": []}, key=key)
    run = _run(session)
    assert run.status == "done"
    types = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types[-5:] == ["step.started", "message", "tool.result", "step.finished", "run.finished"]


def test_a_stale_copy_of_a_session_used_elsewhere_does_not_close_it(opened):
    session, key, header = opened
    edge.keep_session(session)
    session.last_used_at = timezone.now() - timedelta(hours=1)  # this process's copy is old
    # ...but another process used the session just now (its row says so)
    _, _, kept = asgi._resolve(header, "files", session.public_id, SCOPE)
    assert kept.closed_at is None
    assert McpSession.objects.get(pk=session.pk).closed_at is None


def test_the_sweep_looks_only_at_closed_sessions_whose_runs_wait(opened):
    session, key, _ = opened
    call = _held(session)
    records.session_close(session=session, reason="deleted")
    assert McpSession.objects.get(pk=session.pk).finishing  # a call waits: the run stays open
    records.gateway_sweep()
    assert McpSession.objects.get(pk=session.pk).finishing
    Approval.objects.filter(pk=call.approval_id).update(status=ApprovalStatus.EXPIRED)
    records.gateway_sweep()
    assert not McpSession.objects.get(pk=session.pk).finishing
    assert _run(session).status == "done"
