"""MCP Tasks (protocol 2025-11-25, where the spec calls them experimental): a client that asks
for a task — `tools/call` with `params.task` on a session of that version — gets one at once,
in `working`, instead of waiting for the decision, and is never told to call again.

- `tools/call` with `task`: the call is decided as any other (read-only under `passReadOnly`, a
  lasting rule, else held for a person), recorded before it answers; the answer is the task
  (`CreateTaskResult`, its id the call's tool call id `mcp_…`, and
  `_meta["io.modelcontextprotocol/model-immediate-response"]` saying what the model may read
  meanwhile). A call that passes goes upstream in the background right after.
- `tasks/get`: the task as it stands, moved on by the look itself where it can be (approved and
  still held: claimed and sent upstream, in the background; denied or expired: its refusal
  recorded) — a task needs no process to wait for it, whichever process the client asks.
- `tasks/result`: blocks until the task ends (the approval's expiry ends it at the latest) and
  answers exactly what the `tools/call` would have (`isError` with the message the model reads
  when denied or expired), with `_meta["io.modelcontextprotocol/related-task"]`.
- `tasks/list`: the principal's tasks on this server, newest first, `PAGE` a page.
- `tasks/cancel`: a task not yet on its way upstream is withdrawn (`cancelled`); one on its way
  or ended is refused with -32602 (the spec's error for an ended one; one on its way can no
  longer be stopped, so it is not cancelled either).

A task is bound to who made it: the key's principal on this server (any of its sessions, so a
client that lost its session still reads its tasks); anyone else's task id is "not found"
(-32602), exactly like a missing one. Statuses: `working` while it waits for a reviewer or is
on its way; `completed` with the upstream's result; `failed` when denied, expired, or the
tool's result is `isError` (the spec's rule for tool calls); `cancelled` when withdrawn.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, CreateTaskResult, Task

from approvals.models import ApprovalStatus
from gateway import flow, records
from gateway.models import CallState

VERSION = "2025-11-25"  # the protocol version that has Tasks in its core
POLL_MS = 2000  # the `pollInterval` suggested to clients
PAGE = 50  # tasks in a `tasks/list` page
MAX_TTL_MS = 30 * 24 * 3600 * 1000  # the longest `ttl` granted (a longer one is shortened)
RELATED = "io.modelcontextprotocol/related-task"
IMMEDIATE = "io.modelcontextprotocol/model-immediate-response"
CURSOR = re.compile(r"[0-9]{1,18}")  # a page's cursor: the last call id it listed
CAPABILITY = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


def offered(protocol_version: str | None) -> bool:
    """Does a session of this protocol version speak Tasks?"""
    return protocol_version == VERSION


def _refused(approval) -> bool:
    return approval is not None and approval.status in (
        ApprovalStatus.DENIED,
        ApprovalStatus.EXPIRED,
    )


def status_of(call) -> tuple[str, str]:
    """The task status of a call as it stands, and its status message."""
    approval = call.approval
    if call.state == CallState.DONE:
        if (call.result or {}).get("isError"):
            return "failed", "the tool answered with an error"
        return "completed", "the tool answered"
    if call.state == CallState.REFUSED:
        if approval is not None and approval.status == ApprovalStatus.DENIED:
            return "failed", "denied by a reviewer"
        if approval is not None and approval.status == ApprovalStatus.EXPIRED:
            return "failed", "expired: no reviewer decided in time"
        return "cancelled", "cancelled by the client"
    if approval is not None and approval.status == ApprovalStatus.CANCELLED:
        return "cancelled", "cancelled"
    if call.state == CallState.FORWARDING or (
        approval is not None and approval.status == ApprovalStatus.APPROVED
    ):
        return "working", "approved; on its way to the server"
    if _refused(approval):
        return "working", "decided; its answer is being written"
    public = approval.public_id if approval is not None else "?"
    return "working", f"waiting for a reviewer (approval {public})"


def _iso(moment) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def task_of(call, status: tuple[str, str] | None = None) -> dict:
    """The wire `Task` of a call (built and checked by the SDK's type; `ttl` is always there,
    null when unlimited, as the spec asks)."""
    state, message = status or status_of(call)
    approval = call.approval
    moments = [call.created_at, call.forwarded_at, call.finished_at]
    if approval is not None:
        moments.append(approval.decided_at)
    task = Task(
        task_id=call.tool_call_id,
        status=state,
        status_message=message,
        created_at=_iso(call.created_at),
        last_updated_at=_iso(max(m for m in moments if m is not None)),
        ttl=call.task_ttl,
        poll_interval=None if state in ("completed", "failed", "cancelled") else POLL_MS,
    )
    wire = task.model_dump(by_alias=True, mode="json", exclude_none=True)
    wire["ttl"] = call.task_ttl
    return wire


def _ended(status: str) -> bool:
    return status in ("completed", "failed", "cancelled")


def _not_found(task_id: str) -> MCPError:
    shown = task_id if len(task_id) <= 64 else task_id[:64] + "…"
    return MCPError(code=INVALID_PARAMS, message=f"Failed to retrieve task: no task '{shown}'")


def _require(protocol_version: str | None) -> None:
    if not offered(protocol_version):
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found")


async def create(*, caller, protocol_version: str, params, request_id: str) -> dict:
    """`tools/call` with `task`: the call recorded (and, passing, sent upstream in the
    background), answered with its task (the wire `CreateTaskResult`)."""
    ttl = params.task.ttl
    if ttl is not None and ttl < 0:
        raise MCPError(code=INVALID_PARAMS, message="task.ttl must be 0 or more milliseconds")
    ttl = None if ttl is None else min(ttl, MAX_TTL_MS)  # a receiver may shorten it (the spec)
    session = await caller.the_session(protocol_version)
    passed = await flow.call_passing(
        session=session, tool=params.name, arguments=params.arguments, request_id=request_id
    )
    if passed is not None:
        call = passed
        await flow.db(records.call_make_task)(call=call, ttl=ttl)
        flow.in_background(
            flow.send_passed(
                call=call, key=caller.key, arguments=params.arguments, record_first=True
            )
        )
    else:
        begun = await flow.call_hold(
            session=session, tool=params.name, arguments=params.arguments, request_id=request_id
        )
        call = begun.call
        await flow.db(records.call_make_task)(call=call, ttl=ttl)
        if begun.claimed:
            args = call.approval.decided_arguments if call.approval is not None else None
            arguments = params.arguments if args is None else args
            flow.in_background(
                flow.send_passed(call=call, key=caller.key, arguments=arguments, record_first=True)
            )
    call.server = caller.server
    waiting = passed is None and not begun.claimed
    status = ("working", status_of(call)[1] if waiting else "on its way to the server")
    answer = CreateTaskResult.model_validate({"task": task_of(call, status)}).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    answer["task"]["ttl"] = call.task_ttl
    reviewing = waiting and status[1].startswith("waiting for a reviewer")  # not a rule's refusal
    answer["_meta"] = {IMMEDIATE: _immediate(call, reviewing=reviewing)}
    return answer


def _immediate(call, *, reviewing: bool) -> str:
    name = f"`{call.tool}` on `{call.server.name}`"
    if reviewing:
        return (
            f"{name} is waiting for a reviewer (task {call.tool_call_id}); its result comes "
            f"when they decide."
        )
    return f"{name} is running (task {call.tool_call_id}); its result comes when it is done."


async def _find(caller, task_id: str):
    call = await flow.db(records.task_find)(
        server=caller.server, principal_id=caller.key.principal_id, task_id=task_id
    )
    if call is None:
        raise _not_found(task_id)
    return call


async def _advance(call, key):
    """One look at a task's call, moving it on where the look allows (approved and still held:
    claimed now and sent upstream in the background; denied or expired: its refusal
    recorded); the call as it then stands."""
    call, claimed = await flow.db(records.call_look_and_claim)(call=call)
    approval = call.approval
    if claimed:
        args = approval.decided_arguments
        arguments = call.arguments if args is None else args
        flow.in_background(
            flow.send_passed(call=call, key=key, arguments=arguments, record_first=True)
        )
        call.state = CallState.FORWARDING
    elif call.state == CallState.HELD and _refused(approval):
        await flow.refuse(call=call, key=key)
        call = await flow.db(records.call_look)(call=call)
    return call


async def get(*, caller, protocol_version: str, task_id: str) -> dict:
    _require(protocol_version)
    call = await _advance(await _find(caller, task_id), caller.key)
    return task_of(call)


async def result(*, caller, protocol_version: str, task_id: str, progress=None) -> dict:
    """Blocks until the task ends; what its `tools/call` would have answered."""
    _require(protocol_version)
    call = await _find(caller, task_id)
    while True:
        call = await _advance(call, caller.key)
        status, _ = status_of(call)
        if _ended(status) and call.result is not None:
            body = dict(call.result)
        elif status == "cancelled":
            body = flow.text_result(flow.cancelled_elsewhere(call))
        else:
            answer, final = await flow.await_decision(
                call=call,
                key=caller.key,
                server=call.server,
                tool=call.tool,
                progress=progress,
                fresh=False,
                record_first=True,
            )
            if not final:
                if flow.Waiting.stopping:
                    raise MCPError(
                        code=INTERNAL_ERROR,
                        message="the gateway is restarting: ask for the task's result again",
                    )
                await asyncio.sleep(0)
                continue
            body = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        meta = dict(body.get("_meta") or {})
        meta[RELATED] = {"taskId": call.tool_call_id}
        body["_meta"] = meta
        return body


async def list_page(*, caller, protocol_version: str, cursor: str | None) -> dict:
    _require(protocol_version)
    before = None
    if cursor is not None:
        if not CURSOR.fullmatch(cursor) or int(cursor) <= 0:
            raise MCPError(code=INVALID_PARAMS, message="Invalid cursor")
        before = int(cursor)
    calls = await flow.db(records.tasks_page)(
        server=caller.server, principal_id=caller.key.principal_id, before=before, size=PAGE
    )
    page = {"tasks": [task_of(call) for call in calls[:PAGE]]}
    if len(calls) > PAGE:
        page["nextCursor"] = str(calls[PAGE - 1].pk)
    return page


async def cancel(*, caller, protocol_version: str, task_id: str) -> dict:
    _require(protocol_version)
    call = await _find(caller, task_id)
    withdrawn = await flow.db(records.task_cancel)(call=call, key=caller.key)
    if withdrawn is None:
        call = await _advance(call, caller.key)
        status, _ = status_of(call)
        if _ended(status):
            refusal = f"Cannot cancel task: already in terminal status '{status}'"
        else:
            refusal = "Cannot cancel task: the call is on its way to the server, past stopping"
        raise MCPError(code=INVALID_PARAMS, message=refusal)
    return task_of(await flow.db(records.call_look)(call=withdrawn))
