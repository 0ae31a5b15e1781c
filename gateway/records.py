"""The gateway's durable records, written BEFORE anything goes upstream or back to a client:
the MCP session's run (admitted through runs' ingest, like any runtime's), each call's step and
held call (runs' event ingest: `approval.requested` goes through approvals' own request
service, so rules, roles, budgets, notifications and webhooks apply unchanged), the claim that
lets an approval go upstream at most once, and the call's result."""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus
from approvals.services.expiry import approvals_expire_due
from console.audit.log import audit
from gateway.models import CallState, McpCall, McpServer, McpSession
from runs import access
from runs import schemas as s
from runs.services.ingest import run_admit, run_events_apply

MODEL = "mcp"  # the step's model: a gateway call has no model of its own


def canonical(arguments) -> str:
    """The call's identity for re-attachment: its arguments with sorted keys, no spaces."""
    text = json.dumps(arguments or {}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def reason_for(*, server: str, tool: str) -> str:
    return f"`{tool}` on `{server}` waits for a reviewer"


def refusal_for(*, server: str, tool: str) -> str:
    return f"A reviewer did not allow `{tool}` on `{server}`. Do not call it again unchanged."


@transaction.atomic
def session_open(
    *,
    server: McpServer,
    key,
    agent_id: str,
    conversation_id: str | None,
    protocol_version: str = "",
    run_id: str | None = None,
    public_id: str | None = None,
) -> McpSession:
    """A new MCP session and its run (or, for a `X-Gavel-Run-Id` value seen before, that one)."""
    if public_id:
        held = (
            McpSession.objects.filter(public_id=public_id).select_related("run", "server").first()
        )
        if held is not None:
            return held
    public_id = public_id or secrets.token_hex(16)
    body = s.NewRunIn(
        id=run_id or f"mcp-{public_id}",
        agent_id=agent_id,
        agent_version=1,
        principal_id=key.principal.external_id,
        conversation_id=conversation_id,
        input={"mcpServer": server.name},
    )
    run, _ = run_admit(tenant=server.tenant, body=body)
    return McpSession.objects.create(
        tenant_id=server.tenant_id,
        server=server,
        public_id=public_id,
        run=run,
        principal=key.principal,
        key=key,
        protocol_version=protocol_version or "",
    )


def session_find(*, server: McpServer, key, public_id: str) -> McpSession | None:
    """The session with this id, only for the same server and principal (else as unknown)."""
    return (
        McpSession.objects.filter(
            public_id=public_id, server=server, principal_id=key.principal_id, closed_at=None
        )
        .select_related("run", "server")
        .first()
    )


@transaction.atomic
def session_close(*, session: McpSession) -> None:
    """The client ended the session (HTTP DELETE): it is closed and its run finished
    (`run.finished`, status done, through runs' ingest like any runtime's end of run), unless
    one of its calls still waits for a decision (finishing would cancel it, and a client that
    restarts calls again from a new session to attach to it)."""
    closed = McpSession.objects.filter(pk=session.pk, closed_at=None).update(
        closed_at=timezone.now()
    )
    if not closed:
        return
    waiting = McpCall.objects.filter(
        session=session, state=CallState.HELD, approval__status=ApprovalStatus.PENDING
    )
    if waiting.exists():  # finishing would cancel them: a client that restarts re-attaches
        return
    run = access.run_in_tenant(
        tenant_id=session.tenant_id, run_id=session.run.external_id, for_update=True
    )
    if run.is_finished:
        return
    finished = {
        "type": "run.finished",
        "seq": run.last_seq + 1,
        "status": "done",
        "finishReason": "mcp_session_deleted",
    }
    run_events_apply(
        tenant_id=session.tenant_id,
        run_id=run.external_id,
        events=s.EVENTS.validate_python([finished]),
        locked=run,
    )


@dataclass
class Begun:
    call: McpCall
    attached: bool
    claimed: bool = False  # this caller sends it upstream (an ungated call, claimed at once)


@transaction.atomic
def call_begin(*, session: McpSession, tool: str, arguments, gated: bool) -> Begun:
    """Record the call (its step, and its held call when `gated`) before anything else
    happens; or attach to the same call (principal, server, tool, canonical arguments) whose
    approval is pending or approved and not yet used."""
    server = session.server
    digest = canonical(arguments)
    if gated:
        held = (
            McpCall.objects.select_for_update()
            .filter(
                server=server,
                principal_id=session.principal_id,
                tool=tool,
                canonical=digest,
                state=CallState.HELD,
                approval__status__in=[ApprovalStatus.PENDING, ApprovalStatus.APPROVED],
            )
            .select_related("approval", "session__run", "session__server", "server")
            .order_by("pk")
            .first()
        )
        if held is not None:
            return Begun(call=held, attached=True)
    run = access.run_in_tenant(
        tenant_id=session.tenant_id, run_id=session.run.external_id, for_update=True
    )
    step = run.steps + 1
    tool_call_id = f"mcp_{secrets.token_hex(8)}"
    name = f"{server.name}.{tool}"
    seq = run.last_seq
    events = [
        {
            "type": "step.started",
            "seq": seq + 1,
            "step": step,
            "agentId": run.current_agent_id,
            "model": MODEL,
        },
        {
            "type": "message",
            "seq": seq + 2,
            "step": step,
            "message": {
                "role": "assistant",
                "content": "",
                "toolCalls": [{"id": tool_call_id, "name": name, "arguments": arguments}],
            },
        },
    ]
    if gated:
        events.append(
            {
                "type": "approval.requested",
                "seq": seq + 3,
                "step": step,
                "calls": [
                    {
                        "toolCallId": tool_call_id,
                        "toolName": name,
                        "arguments": arguments,
                        "reason": reason_for(server=server.name, tool=tool),
                        "rejectionMessage": refusal_for(server=server.name, tool=tool),
                    }
                ],
            }
        )
    run_events_apply(
        tenant_id=session.tenant_id,
        run_id=run.external_id,
        events=s.EVENTS.validate_python(events),
        locked=run,
    )
    approval = (
        Approval.objects.filter(run=run, tool_call_id=tool_call_id).first() if gated else None
    )
    # Ungated (read-only pass, or a rule approved it in this transaction): claimed with the
    # record itself, one write fewer on the way upstream.
    claimed = approval is None or approval.status == ApprovalStatus.APPROVED
    now = timezone.now()
    call = McpCall.objects.create(
        state=CallState.FORWARDING if claimed else CallState.HELD,
        forwarded_at=now if claimed else None,
        tenant_id=session.tenant_id,
        session=session,
        server=server,
        principal_id=session.principal_id,
        tool=tool,
        canonical=digest,
        arguments=arguments,
        step=step,
        tool_call_id=tool_call_id,
        approval=approval,
    )
    call.session = session
    return Begun(call=call, attached=False, claimed=claimed)


def call_look(*, call: McpCall) -> McpCall:
    """The call and its approval as they stand now (a pending approval past its expiry is
    expired first, through approvals' own expiry)."""
    fresh = McpCall.objects.select_related("approval", "session__run", "server").get(pk=call.pk)
    approval = fresh.approval
    if (
        approval is not None
        and approval.status == ApprovalStatus.PENDING
        and approval.expires_at <= timezone.now()
    ):
        approvals_expire_due(run=fresh.session.run, approval_ids=[approval.pk])
        fresh = McpCall.objects.select_related("approval", "session__run", "server").get(pk=call.pk)
    return fresh


def call_claim(*, call: McpCall) -> bool:
    """This process sends the call upstream: exactly one claim wins."""
    return bool(
        McpCall.objects.filter(pk=call.pk, state=CallState.HELD).update(
            state=CallState.FORWARDING, forwarded_at=timezone.now()
        )
    )


@transaction.atomic
def call_finish(*, call: McpCall, result: dict, key, forwarded: bool) -> bool:
    """Record the result (the upstream's, or the refusal) on the call and its run's step, and
    audit it. Only the first finish of a call writes (False: it was already finished)."""
    state = CallState.DONE if forwarded else CallState.REFUSED
    from_state = CallState.FORWARDING if forwarded else CallState.HELD
    won = McpCall.objects.filter(pk=call.pk, state=from_state).update(
        state=state, result=result, finished_at=timezone.now()
    )
    if not won:
        return False
    session = call.session
    run = access.run_in_tenant(
        tenant_id=session.tenant_id, run_id=session.run.external_id, for_update=True
    )
    seq = run.last_seq
    name = f"{call.server.name}.{call.tool}"
    events = [
        {
            "type": "tool.result",
            "seq": seq + 1,
            "step": call.step,
            "toolCallId": call.tool_call_id,
            "toolName": name,
            "result": result,
            "isError": bool(result.get("isError")),
        },
        {
            "type": "step.finished",
            "seq": seq + 2,
            "step": call.step,
            "model": MODEL,
            "usage": {"inputTokens": 0, "outputTokens": 0, "costMinorUnits": 0},
        },
    ]
    if not run.is_finished:
        run_events_apply(
            tenant_id=session.tenant_id,
            run_id=run.external_id,
            events=s.EVENTS.validate_python(events),
            locked=run,
        )
    approval = call.approval
    audit(
        tenant=call.server.tenant,
        action="mcp.call.forwarded" if forwarded else "mcp.call.refused",
        object_type="mcp_call",
        object_id=call.tool_call_id,
        data={
            "server": call.server.name,
            "tool": call.tool,
            "run": session.run.external_id,
            "approval": approval.public_id if approval else None,
            "decision": approval.status if approval else "passed",
            "isError": bool(result.get("isError")),
        },
        principal=session.principal if key is None else key.principal,
        key=key,
    )
    return True


def call_result(*, call: McpCall) -> McpCall:
    return McpCall.objects.get(pk=call.pk)
