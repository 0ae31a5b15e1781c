"""The database round trips of one ungated (rule-approved) gateway call: recorded
(records.call_begin) and finished (records.call_finish), counted with Django's
CaptureQueriesContext. `-s` prints them. The bounds fail when a change adds trips."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import Approval, ApprovalStatus
from approvals.services.rules import rule_create
from console.models import ApiKey, AuditEvent
from gateway import records
from gateway.models import CallState, McpServer
from runs.models import RunEvent
from tests.support.factories import PrincipalFactory, TenantFactory, make_key

pytestmark = pytest.mark.django_db(transaction=True)
RECORD_BOUND = 32  # SQLite, BEGIN/SAVEPOINT/COMMIT counted; 33 before the run was passed on
FINISH_BOUND = 21  # 22 before


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
    rule_create(
        tenant=tenant,
        fields={"name": "echo", "effect": "approve", "toolPattern": "bench.echo"},
        principal=lea,
    )
    session = records.session_open(server=server, key=key, agent_id="claude", conversation_id=None)
    session = records.session_find(server=server, key=key, public_id=session.public_id)
    # a first call: what a process caches after its first call (rules, settings) is warm
    first = records.call_begin(session=session, tool="echo", arguments={"n": 0}, gated=True)
    records.call_finish(call=first.call, result={"content": []}, key=key, forwarded=True)
    return session, key


def _show(label, captured):
    print(f"\n{label}: {len(captured.captured_queries)} queries")
    for number, query in enumerate(captured.captured_queries, 1):
        print(f"  {number:2}. {query['sql'][:220]}")


def test_an_ungated_call_records_and_finishes_in_few_round_trips(ungated):
    session, key = ungated
    with CaptureQueriesContext(connection) as record:
        begun = records.call_begin(session=session, tool="echo", arguments={"n": 1}, gated=True)
    with CaptureQueriesContext(connection) as finish:
        records.call_finish(
            call=begun.call, result={"content": [{"type": "text", "text": "1"}]}, key=key,
            forwarded=True,
        )  # fmt: skip
    _show("record", record)
    _show("finish", finish)
    # nothing lost: the approval decided by the rule, the step's events, the call, the audit
    call = begun.call
    assert begun.claimed and call.state == CallState.FORWARDING
    approval = Approval.objects.get(pk=call.approval_id)
    assert approval.status == ApprovalStatus.APPROVED and approval.decided_by_rule_id
    types = list(
        RunEvent.objects.filter(run_id=session.run_id)
        .order_by("seq")
        .values_list("type", flat=True)
    )
    assert types[-5:] == [
        "step.started",
        "message",
        "approval.requested",
        "tool.result",
        "step.finished",
    ]
    assert AuditEvent.objects.filter(action="mcp.call.forwarded", object_id=call.tool_call_id)
    assert len(record.captured_queries) <= RECORD_BOUND
    assert len(finish.captured_queries) <= FINISH_BOUND
