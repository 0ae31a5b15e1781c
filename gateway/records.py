"""The gateway's durable records, written BEFORE anything goes upstream or back to a client:
the MCP session's run (admitted through runs' ingest, like any runtime's), each call's step and
held call (runs' event ingest: `approval.requested` goes through approvals' own request
service, so rules, roles, budgets, notifications and webhooks apply unchanged), the claim that
lets an approval go upstream at most once, and the call's result."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, Rule, RuleVersion
from approvals.services.expiry import approvals_expire_due
from approvals.services.requests import approvals_cancel
from approvals.services.rules import rule_approving, rule_approving_known
from approvals.services.settle import approval_settle
from console.audit.log import audit, audit_many
from console.core import adb
from gateway import edge
from gateway.models import CallState, McpCall, McpServer, McpSession
from runs import access
from runs import schemas as s
from runs.services.ingest import run_admit, run_events_apply

log = logging.getLogger(__name__)
# LOCKS: every transaction here takes the run's row before the session's, an approval's or a
# call's other than by its own pk (as approvals' decision takes the run before the approval),
# so two of them, or one and a decision, never wait on each other in a circle.
MODEL = "mcp"  # the step's model: a gateway call has no model of its own
READ_ONLY = "read_only"  # McpCall.passed_by of a call passed by its tool's readOnlyHint
NOT_RECORDED = (
    "the gateway stopped before it recorded this call's result (the call went to the server)"
)


def _error_result(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}], "isError": True}


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


def session_touch(*, session: McpSession) -> None:
    """A request of the session: its idle time starts again (written at most once per tenth
    of the idle limit, and with each call's record)."""
    if session_touch_due(session):
        now = timezone.now()
        McpSession.objects.filter(pk=session.pk).update(last_used_at=now)
        session.last_used_at = now


def session_touch_due(session: McpSession) -> bool:
    """Is the session's idle time due to be written again (session_touch would write)?"""
    every = timedelta(seconds=min(60, settings.GAVEL_MCP_SESSION_IDLE_SECONDS / 10))
    return timezone.now() - session.last_used_at >= every


def session_idle(session: McpSession) -> bool:
    idle = timedelta(seconds=settings.GAVEL_MCP_SESSION_IDLE_SECONDS)
    return timezone.now() - session.last_used_at >= idle


@transaction.atomic
def session_close(*, session: McpSession, reason: str = "deleted") -> None:
    """The client ended the session (HTTP DELETE), or it was idle past the limit
    (GAVEL_MCP_SESSION_IDLE_SECONDS): it is closed and its run finished (`run.finished`,
    status done, finish reason `mcp_session_<reason>`, through runs' ingest like any
    runtime's end of run), unless one of its calls still waits for a decision (finishing
    would cancel it, and a client that restarts calls again from a new session to attach to
    it; the sweep finishes the run once none waits)."""
    _locked_run(session)  # the run before the session (LOCKS)
    closed = McpSession.objects.filter(pk=session.pk, closed_at=None).update(
        closed_at=timezone.now(), close_reason=reason
    )
    transaction.on_commit(edge.forget)
    if closed:
        _run_finish(session=session, reason=reason)


def _run_finish(*, session: McpSession, reason: str) -> bool:
    """Finish the closed session's run unless a call of it still waits for a decision or is
    still to be recorded; the session stays marked `finishing` for the sweep until then.
    True when the run is finished (now, or already)."""
    run = _locked_run(session)  # the run before the session (LOCKS)
    waiting = McpCall.objects.filter(
        session=session, state=CallState.HELD, approval__status=ApprovalStatus.PENDING
    )
    # finishing would cancel a waiting call (a client that restarts re-attaches to it); an
    # answered call whose step is still to be written: finished after it
    later = waiting.exists() or McpCall.objects.filter(session=session, recorded=False).exists()
    McpSession.objects.filter(pk=session.pk).update(finishing=later)
    if later:
        return False
    if run.is_finished:
        return True
    finished = {
        "type": "run.finished",
        "seq": run.last_seq + 1,
        "status": "done",
        "finishReason": f"mcp_session_{reason}",
    }
    run_events_apply(
        tenant_id=session.tenant_id,
        run_id=run.external_id,
        events=s.EVENTS.validate_python([finished]),
        locked=run,
    )
    return True


@dataclass
class Begun:
    call: McpCall
    attached: bool
    claimed: bool = False  # this caller sends it upstream (an ungated call, claimed at once)


def _name(server: McpServer, tool: str) -> str:
    return f"{server.name}.{tool}"


def _call_events(*, run, seq: int, step: int, server, tool, tool_call_id, arguments, held):
    """A call's step as runs' events: started, the assistant's tool call, and (`held`) the
    held call approvals' request service turns into an Approval (rules decide it there)."""
    name = _name(server, tool)
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
    if held:
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
    return events


def _result_events(*, seq: int, call: McpCall, result: dict):
    """A call's result on its step, and the step's end."""
    return [
        {
            "type": "tool.result",
            "seq": seq + 1,
            "step": call.step,
            "toolCallId": call.tool_call_id,
            "toolName": _name(call.server, call.tool),
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


def _apply(*, session: McpSession, run, events: list) -> None:
    run_events_apply(
        tenant_id=session.tenant_id,
        run_id=run.external_id,
        events=s.EVENTS.validate_python(events),
        locked=run,
    )


def _locked_run(session: McpSession):
    return access.run_in_tenant(
        tenant_id=session.tenant_id, run_id=session.run.external_id, for_update=True
    )


@transaction.atomic
def call_begin(
    *, session: McpSession, tool: str, arguments, gated: bool, request_id: str = ""
) -> Begun:
    """Record the call (its step, and its held call when `gated`) before anything else
    happens; or attach to the same call (principal, server, tool, canonical arguments) whose
    approval is pending or approved and not yet used."""
    server = session.server
    digest = canonical(arguments)
    if gated:
        held = (
            McpCall.objects.select_for_update(of=("self",))  # the call's row only: see LOCKS
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
            if request_id and held.session_id == session.pk:
                McpCall.objects.filter(pk=held.pk).update(request_id=request_id)
            return Begun(call=held, attached=True)
    run = _locked_run(session)
    step = run.steps + 1
    tool_call_id = f"mcp_{secrets.token_hex(8)}"
    events = _call_events(
        run=run,
        seq=run.last_seq,
        step=step,
        server=server,
        tool=tool,
        tool_call_id=tool_call_id,
        arguments=arguments,
        held=gated,
    )
    _apply(session=session, run=run, events=events)
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
        request_id=request_id,
        recorded=not claimed,  # a claimed call's result is recorded after it is answered
    )
    McpSession.objects.filter(pk=session.pk).update(last_used_at=now)
    call.session = session
    return Begun(call=call, attached=False, claimed=claimed)


def call_pass(
    *, session: McpSession, tool: str, arguments, read_only: bool, request_id: str = ""
) -> McpCall | None:
    """The fast path of a call no person needs to see first (its tool is read-only under
    `passReadOnly`, or a lasting rule approves it now): the one write before it goes upstream,
    its McpCall (`passed_by` says why it passed; `recorded` false: its step, approval and
    audit entry are written after it is answered, by call_record_passed, or by the sweep if
    this process stops first). None: the call takes the recorded-first path (call_begin).
    On PostgreSQL, `call_pass_known` answers most such calls first, from the event loop."""
    server = session.server
    passed_by = READ_ONLY if read_only else None
    if passed_by is None:
        spec = rule_approving(
            run=session.run,
            tool_name=_name(server, tool),
            arguments=arguments,
            authority_of=edge.authority,  # its authors' roles kept for the edge's window
        )
        if spec is None:
            return None
        passed_by = spec.id
    call = _passed_row(session, tool, arguments, passed_by, request_id)
    call.save(force_insert=True)
    return call


def _passed_row(session, tool, arguments, passed_by: str, request_id: str) -> McpCall:
    now = timezone.now()
    call = McpCall(
        state=CallState.FORWARDING,
        created_at=now,
        forwarded_at=now,
        tenant_id=session.tenant_id,
        session=session,
        server=session.server,
        principal_id=session.principal_id,
        tool=tool,
        canonical=canonical(arguments),
        arguments=arguments,
        step=0,  # numbered when its step is written
        tool_call_id=f"mcp_{secrets.token_hex(8)}",
        request_id=request_id,
        passed_by=passed_by,
        recorded=False,
    )
    call.session = session
    return call


async def call_pass_known(
    *, session: McpSession, tool: str, arguments, read_only: bool, request_id: str = ""
) -> McpCall | None:
    """`call_pass` with no thread hop and no query of its own, on PostgreSQL: what passes it
    is known in this process (read-only under `passReadOnly`, or a rule of the rule set it
    compiled last: approvals' `rule_approving_known`), and the McpCall is one INSERT from the
    event loop (console/adb.py, a durable commit) that writes only while the tenant's rules
    version is still the one that rule was compiled at. None, having written nothing: not
    known here, or the rules moved, or the database path is not usable — ask `call_pass`."""
    if not adb.usable():
        return None
    version = None
    if read_only:
        passed_by = READ_ONLY
    else:
        known = rule_approving_known(
            run=session.run,
            tool_name=_name(session.server, tool),
            arguments=arguments,
            authority_of=edge.authority,
        )
        if known is None:
            return None
        passed_by, version = known[0].id, known[1]
    call = _passed_row(session, tool, arguments, passed_by, request_id)
    sql, params = _insert_sql(call, rules_version=version)
    try:
        rows = await adb.fetch(sql, params, durable=True)
    except Exception as exc:
        if not adb.unreachable(exc):
            raise
        return None  # the ORM path answers (a 503 if the database is down)
    if not rows:
        return None  # the rules moved since they were compiled here
    call.pk = rows[0][0]
    call._state.adding, call._state.db = False, "default"
    return call


def _insert_sql(call: McpCall, *, rules_version: int | None) -> tuple[str, list]:
    """The McpCall's INSERT ... RETURNING id (`_insert_text`), values prepared as the ORM
    prepares them; with `rules_version`, written only while the tenant's rules version is
    that one."""
    conn = connections["default"]
    params = [f.get_db_prep_save(f.pre_save(call, True), conn) for f in _inserted_fields()]
    if rules_version is not None:
        params += [call.tenant_id, rules_version]
    return _insert_text("default", rules_version is not None), params


@functools.cache
def _inserted_fields() -> tuple:
    return tuple(f for f in McpCall._meta.concrete_fields if not f.primary_key)


@functools.cache
def _insert_text(alias: str, versioned: bool) -> str:
    """`_insert_sql`'s text, made once per database and kind (it was built again for each
    passed call). Identifiers come from the models; every value is a parameter."""
    quote = connections[alias].ops.quote_name
    fields = _inserted_fields()
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {quote(McpCall._meta.db_table)} ({columns}) SELECT {marks}"  # noqa: S608
    if versioned:
        meta = RuleVersion._meta
        table, tenant = quote(meta.db_table), quote(meta.pk.column)
        version = quote(meta.get_field("version").column)
        sql += f" WHERE EXISTS (SELECT 1 FROM {table} WHERE {tenant} = %s AND {version} = %s)"  # noqa: S608
    return sql + f" RETURNING {quote(McpCall._meta.pk.column)}"


def call_record_passed(*, call: McpCall, result: dict | None, key) -> bool:
    """One passed call's record (calls_record_passed). False: it was recorded already."""
    return bool(calls_record_passed(items=[(call, result, key)]))


@transaction.atomic
def calls_record_passed(*, items: list) -> int:
    """Passed calls' records, `items` (call, result, key) in the order they were answered, in
    one transaction, a run's calls in one batch of runs' ingest: each call's step (started,
    the tool call, for a rule's pass its held call decided by that rule, the result,
    finished), the McpCall's result, and its `mcp.call.forwarded` audit entry. A result None:
    the process that sent it stopped before it recorded it (the sweep). Only the first record
    of a call writes (one recorded already is skipped); a run whose batch fails is left
    unrecorded for the sweep, the others are written. Returns how many it recorded."""
    by_session: dict[int, list] = {}
    for item in items:
        by_session.setdefault(item[0].session_id, []).append(item)
    recorded = 0
    for group in by_session.values():
        try:
            with transaction.atomic():
                recorded += _record_run(group)
        except Exception:  # noqa: BLE001 - the rows stay `recorded` false: the sweep retries
            log.exception("recording MCP calls of session %s failed", group[0][0].session_id)
    return recorded


def _record_run(items: list) -> int:
    mine = set(
        McpCall.objects.select_for_update(skip_locked=True)
        .filter(pk__in=[c.pk for c, _, _ in items], recorded=False)
        .values_list("pk", flat=True)
    )
    items = [item for item in items if item[0].pk in mine]
    if not items:
        return 0
    session = items[0][0].session
    run = _locked_run(session)
    events, done = [], []
    for call, result, key in items:
        lost = result is None
        if lost:
            result = _error_result(NOT_RECORDED)
        done.append((call, result, key, lost))
        if run.is_finished:
            continue
        call.step = run.steps + 1 + len(events) // 5  # each passed call: one step of its own
        seq = run.last_seq + len(events)
        step_events = _call_events(
            run=run,
            seq=seq,
            step=call.step,
            server=call.server,
            tool=call.tool,
            tool_call_id=call.tool_call_id,
            arguments=call.arguments,
            held=True,
        )
        if call.passed_by == READ_ONLY:  # no held call (the events are numbered again below)
            step_events[2] = {**step_events[2], "type": "_none"}
        events += step_events + _result_events(seq=seq + 3, call=call, result=result)
    events = _renumbered([e for e in events if e["type"] != "_none"], first=run.last_seq + 1)
    if events:
        _apply(session=session, run=run, events=events)
    now = timezone.now()
    gated = [c for c, _, _, _ in done if c.passed_by != READ_ONLY and not run.is_finished]
    approvals = _approvals_of(run=run, calls=gated)  # one read for the batch
    gated_pks = {call.pk for call in gated}
    for call, result, _key, _lost in done:
        approval = None
        if call.pk in gated_pks:
            approval = _approved_by(run=run, call=call, approval=approvals.get(call.tool_call_id))
        call.approval = approval
        call.state, call.result, call.finished_at, call.recorded = CallState.DONE, result, now, True
    McpCall.objects.record_many(  # one statement for the batch
        [call for call, _, _, _ in done], state=CallState.DONE, finished_at=now, recorded=True
    )
    audit_many(  # one INSERT for the batch
        [
            _finish_entry(call=call, result=result, key=key, forwarded=True, lost=lost)
            for call, result, key, lost in done
        ]
    )
    closed = McpSession.objects.filter(pk=session.pk, closed_at__isnull=False)
    reason = closed.values_list("close_reason", flat=True).first()
    if reason is not None and not run.is_finished:  # ended while these were being written
        _run_finish(session=session, reason=reason or "deleted")
    return len(done)


def _renumbered(events: list, *, first: int) -> list:
    return [{**event, "seq": first + i} for i, event in enumerate(events)]


def _approvals_of(*, run, calls: list) -> dict:
    """The approvals of these calls' steps, by tool call id."""
    if not calls:
        return {}
    ids = [call.tool_call_id for call in calls]
    return {a.tool_call_id: a for a in Approval.objects.filter(run=run, tool_call_id__in=ids)}


def _approved_by(*, run, call: McpCall, approval):
    """The passed call's approval, as the rule that passed it decided it. The rules decided
    it again in the request (the same rule, unless a rule changed in the milliseconds
    between): one left pending is settled by the rule that passed it; the audit entry of
    the call names that rule either way."""
    if approval is None or approval.status != ApprovalStatus.PENDING:
        return approval
    rule = Rule.objects.filter(tenant_id=call.tenant_id, public_id=call.passed_by).first()
    if rule is not None:
        approval_settle(
            approval=approval,
            status=ApprovalStatus.APPROVED,
            message=rule.message or "",
            arguments=approval.arguments,
            rule=rule,
            action="approval.decided",
        )
        approval.refresh_from_db()
    return approval


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


def call_look_and_claim(*, call: McpCall) -> tuple[McpCall, bool]:
    """`call_look`, and when the call is approved and still held, `call_claim` in the same
    trip to the database (a woken call's next step either way: one thread hop, not two).
    (the call as it stands, whether this caller claimed it)."""
    fresh = call_look(call=call)
    approval = fresh.approval
    if (
        fresh.state == CallState.HELD
        and approval is not None
        and approval.status == ApprovalStatus.APPROVED
    ):
        return fresh, call_claim(call=fresh)
    return fresh, False


async def call_claim_approved(*, call: McpCall) -> tuple[bool, object]:
    """`call_look_and_claim`'s commonest answer — approved, still held, claimed now — from the
    event loop on PostgreSQL (console/adb.py, a durable commit): one conditional UPDATE of the
    call joined to its approved approval, no thread hop, no ORM. (True, the reviewer's
    arguments or None for the requested ones) when this caller claimed it; (False, None) —
    ask `call_look_and_claim` — for anything else (not approved yet, denied, expired, claimed
    elsewhere, or the async path not usable)."""
    if not adb.usable():
        return False, None
    conn = connections["default"]
    quote = conn.ops.quote_name
    calls, approvals = McpCall._meta, Approval._meta

    def column(meta, name: str) -> str:
        return quote(meta.get_field(name).column)

    # Identifiers come from the models; every value is a parameter.
    sql = (
        f"UPDATE {quote(calls.db_table)} AS c SET {column(calls, 'state')} = %s, "  # noqa: S608
        f"{column(calls, 'forwarded_at')} = %s, {column(calls, 'recorded')} = false "
        f"FROM {quote(approvals.db_table)} AS a WHERE c.{quote(calls.pk.column)} = %s "
        f"AND c.{column(calls, 'state')} = %s "
        f"AND a.{quote(approvals.pk.column)} = c.{column(calls, 'approval')} "
        f"AND a.{column(approvals, 'status')} = %s "
        f"RETURNING a.{column(approvals, 'decided_arguments')}"
    )
    params = [CallState.FORWARDING, timezone.now(), call.pk, CallState.HELD]
    params.append(ApprovalStatus.APPROVED)
    try:
        rows = await adb.fetch(sql, params, durable=True)
    except Exception as exc:
        if not adb.unreachable(exc):
            raise
        return False, None  # the ORM path answers
    if not rows:
        return False, None
    call.state = CallState.FORWARDING
    McpCall.approval.field.delete_cached_value(call)  # as decided: read again by its record
    field = approvals.get_field("decided_arguments")  # the jsonb as the ORM reads it
    return True, field.from_db_value(rows[0][0], None, conn)


def call_claim(*, call: McpCall) -> bool:
    """This process sends the call upstream: exactly one claim wins. Its result is recorded
    after it is answered (`recorded` false until then: the sweep's mark if the process
    stops first)."""
    return bool(
        McpCall.objects.filter(pk=call.pk, state=CallState.HELD).update(
            state=CallState.FORWARDING, forwarded_at=timezone.now(), recorded=False
        )
    )


@transaction.atomic
def call_finish(*, call: McpCall, result: dict | None, key, forwarded: bool) -> bool:
    """Record the result (the upstream's, or the refusal; None: the process that sent it
    stopped before recording it) on the call and its run's step, and audit it. Only the
    first finish of a call writes (False: it was already finished)."""
    state = CallState.DONE if forwarded else CallState.REFUSED
    from_state = CallState.FORWARDING if forwarded else CallState.HELD
    lost = result is None
    if lost:
        result = _error_result(NOT_RECORDED)
    session = call.session
    run = _locked_run(session)  # the run before the call's row (LOCKS)
    won = McpCall.objects.filter(pk=call.pk, state=from_state).update(
        state=state, result=result, finished_at=timezone.now(), recorded=True
    )
    if not won:
        return False
    if not run.is_finished:
        _apply(
            session=session,
            run=run,
            events=_result_events(seq=run.last_seq, call=call, result=result),
        )
    _audit_finish(call=call, result=result, key=key, forwarded=forwarded, lost=lost)
    return True


def _audit_finish(*, call: McpCall, result: dict, key, forwarded: bool, lost=False, action=None):
    entry = _finish_entry(
        call=call, result=result, key=key, forwarded=forwarded, lost=lost, action=action
    )
    audit(**entry)


def _finish_entry(*, call: McpCall, result: dict, key, forwarded: bool, lost=False, action=None):
    """The audit entry of a call's end (`audit`'s arguments)."""
    session = call.session
    approval = call.approval
    data = {
        "server": call.server.name,
        "tool": call.tool,
        "run": session.run.external_id,
        "approval": approval.public_id if approval else None,
        "decision": approval.status if approval else "passed",
        "isError": bool(result.get("isError")),
    }
    if call.passed_by:
        data["passedBy"] = call.passed_by
    if lost:
        data["resultRecorded"] = False
    return {
        "tenant": call.server.tenant,
        "action": action or ("mcp.call.forwarded" if forwarded else "mcp.call.refused"),
        "object_type": "mcp_call",
        "object_id": call.tool_call_id,
        "data": data,
        "principal": session.principal if key is None else key.principal,
        "key": key,
    }


def call_result(*, call: McpCall) -> McpCall:
    return McpCall.objects.get(pk=call.pk)


# --- MCP Tasks (gateway/tasks.py): a task is a call marked `task`, its id its tool_call_id ---


def call_make_task(*, call: McpCall, ttl: int | None) -> None:
    McpCall.objects.filter(pk=call.pk).update(task=True, task_ttl=ttl)
    call.task, call.task_ttl = True, ttl


def task_find(*, server: McpServer, principal_id: int, task_id: str) -> McpCall | None:
    """The task of this id that this principal made on this server (None for anyone else's:
    a task is bound to who made it)."""
    return (
        McpCall.objects.filter(
            server=server, principal_id=principal_id, tool_call_id=task_id, task=True
        )
        .select_related("approval", "server", "session__run", "session__principal")
        .first()
    )


def tasks_page(*, server: McpServer, principal_id: int, before: int | None, size: int) -> list:
    """This principal's tasks on this server, newest first, `size` + 1 of them (the extra one
    says there is a next page) from before the call id `before`."""
    found = McpCall.objects.filter(server=server, principal_id=principal_id, task=True)
    if before is not None:
        found = found.filter(pk__lt=before)
    return list(found.select_related("approval", "server").order_by("-pk")[: size + 1])


def cancelled_text(*, server: str, tool: str) -> str:
    return f"`{tool}` on `{server}` was cancelled by the client; it did not run."


@transaction.atomic
def call_cancel(*, session: McpSession, request_id: str, key) -> McpCall | None:
    """The client's `notifications/cancelled` for its `tools/call` `request_id`: a call of
    the session still waiting for its decision is withdrawn (its approval cancelled, the
    step's result says so, audited `mcp.call.cancelled`); it never goes upstream. A call
    already on its way upstream, decided, or unknown is left as it is (None)."""
    run = _locked_run(session)  # the run before the approval, as a decision does (LOCKS)
    call = (
        McpCall.objects.select_for_update(of=("self",))
        .filter(session=session, request_id=request_id, state=CallState.HELD)
        .select_related("approval", "server", "session__run", "session__principal")
        .order_by("-pk")
        .first()
    )
    if call is None or call.approval is None:
        return None
    if call.approval.status != ApprovalStatus.PENDING:
        return None
    return _withdraw(run=run, call=call, key=key)


@transaction.atomic
def task_cancel(*, call: McpCall, key) -> McpCall | None:
    """`tasks/cancel`: a task's call not yet on its way upstream — its approval pending, or
    approved and not yet claimed — is withdrawn as `call_cancel` withdraws one (an approved
    one keeps its approval: the reviewer's decision stands, the client took the call back).
    None: it is on its way upstream, or finished."""
    run = _locked_run(call.session)  # the run before the approval, as a decision does (LOCKS)
    held = (
        McpCall.objects.select_for_update(of=("self",))
        .filter(pk=call.pk, state=CallState.HELD)
        .select_related("approval", "server", "session__run", "session__principal")
        .first()
    )
    if held is None or held.approval is None:
        return None
    if held.approval.status not in (ApprovalStatus.PENDING, ApprovalStatus.APPROVED):
        return None
    return _withdraw(run=run, call=held, key=key)


def _withdraw(*, run, call: McpCall, key) -> McpCall:
    """A held call (its row and its run locked) withdrawn by its client: its pending approval
    cancelled, its result the cancellation, its step's result and audit entry written."""
    if call.approval.status == ApprovalStatus.PENDING:
        approvals_cancel(approvals=[call.approval])
        call.approval.refresh_from_db()
    body = _error_result(cancelled_text(server=call.server.name, tool=call.tool))
    McpCall.objects.filter(pk=call.pk).update(
        state=CallState.REFUSED, result=body, finished_at=timezone.now(), recorded=True
    )
    if not run.is_finished:
        _apply(
            session=call.session,
            run=run,
            events=_result_events(seq=run.last_seq, call=call, result=body),
        )
    _audit_finish(call=call, result=body, key=key, forwarded=False, action="mcp.call.cancelled")
    return call


# --- the sweep (manage.py expire_approvals --loop, through console.outbox) ---

SWEEP_BATCH = 200


def gateway_sweep(*, now=None) -> int:
    """Record the passed calls a stopped process left unrecorded (older than the upstream
    deadline and a minute: none can still be on its way), close sessions idle past
    GAVEL_MCP_SESSION_IDLE_SECONDS, and finish the runs of closed sessions none of whose
    calls waits any more. Returns how many things it did."""
    now = now or timezone.now()
    done = 0
    stale = now - timedelta(seconds=settings.GAVEL_MCP_UPSTREAM_DEADLINE_SECONDS + 60)
    left = (
        McpCall.objects.filter(recorded=False, created_at__lt=stale)
        .select_related("server__tenant", "session__run", "session__principal", "approval")
        .order_by("pk")[:SWEEP_BATCH]
    )
    for call in left:
        if call.passed_by and not call.step:
            done += call_record_passed(call=call, result=None, key=None)
        else:
            done += call_finish(call=call, result=None, key=None, forwarded=True)
    idle = now - timedelta(seconds=settings.GAVEL_MCP_SESSION_IDLE_SECONDS)
    for session in McpSession.objects.filter(closed_at=None, last_used_at__lt=idle).select_related(
        "run", "server"
    )[:SWEEP_BATCH]:
        session_close(session=session, reason="idle")
        done += 1
    for session in McpSession.objects.filter(finishing=True).select_related("run")[:SWEEP_BATCH]:
        with transaction.atomic():
            done += _run_finish(session=session, reason=session.close_reason or "deleted")
    return done
