"""One `tools/call` through the gateway, from the client's request to its result:

1. a call no person needs to see first (read-only with `passReadOnly`, or a lasting rule
   approves it now: approvals' `rule_approving`, from the process's compiled rules) is written
   as its McpCall (one INSERT) and goes upstream at once; its step, its approval decided by the
   rule and its audit entry are written in one transaction right after it is answered (the
   write-behind below; a process that stops first leaves `recorded` false, and the sweep
   writes the record, marking the result as not recorded);
2. any other call is recorded (its step and held call, through runs' ingest and approvals'
   request service) before anything else;
3. a held call waits for its decision, woken through the channel layer by a decision made on
   any server process (the held decisions long-poll's wake-up, console/live/realtime.py), with a
   database re-read on a timer so a lost wake only delays; progress notifications meanwhile
   when the client asked for them;
4. approved: claimed (at most once) and sent upstream with the reviewer's arguments; denied or
   expired: `isError` with the message the model reads; not decided within `holdSeconds`:
   `isError` saying to call again with the same arguments (the same call attaches);
5. a forwarded call's result goes back to the client first and is recorded right after
   (`Recorder`: at most BACKLOG records pending per process, a new call waits for room; a
   stopping server writes them before it exits).

Database work runs in the executor's threads side by side (not the process's one sync thread)
except on SQLite, whose one writer it would only make wait.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import ClassVar

from django.conf import settings
from mcp_types import CallToolResult, TextContent

from approvals.models import ApprovalStatus
from approvals.services.delivery import recheck_seconds
from console.core.db import released
from console.live import realtime
from gateway import records, upstream
from gateway.models import CallState, McpServer, McpSession

log = logging.getLogger(__name__)
FINISH_WAIT_SECONDS = 0.25  # how often an attached caller re-reads a result another sends


def db(fn):
    """`fn` in a worker thread, its connection given back after (console.core.db.released);
    concurrent requests' work side by side, except on SQLite (one writer)."""
    sqlite = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")
    return released(fn, thread_sensitive=sqlite)


class Recorder:
    """The results recorded after they are answered: this process's pending records. Passed
    calls' records are written in batches (records.calls_record_passed: one transaction, a
    run's calls in one ingest batch), once no record came for IDLE_SECONDS (the process is
    between its clients' calls), at the latest MAX_DELAY_SECONDS after the oldest, or at
    BATCH of them;
    other results (a held call's, its step written before) one by one, once its answer is
    on its way (ANSWER_FIRST_SECONDS). At most
    BACKLOG wait: a new call waits for room (back-pressure, never an unbounded queue)."""

    BACKLOG = 256
    BATCH = 200
    # Long enough that a client calling one tool after another (every 20-40 ms) fills a batch
    # instead of making one per call: a batch's statements cost the same for 1 call or 40
    # (tests/gateway/test_gateway_queries.py), ~8-10 ms of this process's CPU on a slow core.
    # bench/mcp.py, 5 pairs alternated (docs/benchmarks.md, 2026-12-07 morning): CPU per
    # sequential passed call 21.2 -> 12.7 ms, added p50 18.6 -> 12.8 ms with 0.02 -> 0.25.
    # A passed call's step shows on its run page at most MAX_DELAY_SECONDS after its answer.
    IDLE_SECONDS = 0.25
    MAX_DELAY_SECONDS = 1.0
    # A single record starts this long after its result is handed back: its ORM work, in a
    # thread, would take the GIL from the answer's own writing (a held call's upstream result
    # -> the client's answer, bench/mcp.py: 6.3-7.6 ms with the record at once, 3.8-4.4 after).
    ANSWER_FIRST_SECONDS = 0.02
    last_added: ClassVar[float] = 0.0
    queue: ClassVar[list] = []
    pending: ClassVar[set] = set()  # tasks: the flusher, and single records
    flushed: ClassVar[asyncio.Event | None] = None
    flusher: ClassVar[asyncio.Task | None] = None
    writing: ClassVar[tuple[frozenset, asyncio.Task] | None] = None  # sessions, the batch's write

    @classmethod
    async def later(cls, fn, **kwargs) -> None:
        if fn is not records.call_record_passed:
            cls._start(cls._write(fn, kwargs))
            return
        while len(cls.queue) >= cls.BACKLOG:
            cls.flushed = cls.flushed or asyncio.Event()
            await cls.flushed.wait()
        cls.queue.append((kwargs["call"], kwargs["result"], kwargs["key"]))
        cls.last_added = asyncio.get_running_loop().time()
        if cls.flusher is None or cls.flusher.done():
            cls.flusher = cls._start(cls._flush())

    @classmethod
    def _start(cls, coroutine) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        cls.pending.add(task)
        task.add_done_callback(cls.pending.discard)
        return task

    @classmethod
    async def _flush(cls) -> None:
        loop = asyncio.get_running_loop()
        while cls.queue:
            latest = loop.time() + cls.MAX_DELAY_SECONDS
            while len(cls.queue) < cls.BATCH and not Waiting.stopping:
                now = loop.time()
                quiet_at = cls.last_added + cls.IDLE_SECONDS
                if now >= quiet_at or now >= latest:
                    break
                await asyncio.sleep(min(quiet_at, latest) - now)
            batch, cls.queue[:] = cls.queue[: cls.BATCH], cls.queue[cls.BATCH :]
            sessions = frozenset(call.session_id for call, _, _ in batch)
            cls.writing = (sessions, cls._start(cls._record(batch)))
            await cls.writing[1]
            cls.writing = None
            cls._room()

    @classmethod
    async def _record(cls, batch: list) -> None:
        try:
            await db(records.calls_record_passed)(items=batch)
        except Exception:  # the rows say `recorded` false: the sweep writes them
            log.exception("recording %s MCP calls failed; the sweep records them", len(batch))

    @classmethod
    def _room(cls) -> None:
        if cls.flushed is not None:
            cls.flushed.set()
            cls.flushed = None

    @classmethod
    async def session_first(cls, session_id: int) -> None:
        """Before a held call of this session takes its step: the passed calls the session
        made before it, still waiting here to be recorded, are recorded now (or their batch's
        write, already under way, is waited for), so that the run's steps follow the order
        of its calls. (A passed call still on its way upstream, or waiting in another server
        process, is recorded after; calls a client sends at once have no order.)"""
        mine = [item for item in cls.queue if item[0].session_id == session_id]
        if mine:
            cls.queue[:] = [item for item in cls.queue if item[0].session_id != session_id]
            await cls._record(mine)
            cls._room()
        writing = cls.writing
        if writing is not None and session_id in writing[0] and not writing[1].done():
            await asyncio.shield(writing[1])

    @classmethod
    async def write_now(cls, fn, **kwargs) -> None:
        """One record written before its result is answered (after the session's queued ones,
        so that the run's steps keep the calls' order)."""
        await cls.session_first(kwargs["call"].session_id)
        await cls._write(fn, kwargs, at_once=True)

    @classmethod
    async def _write(cls, fn, kwargs, at_once=False) -> None:
        if not Waiting.stopping and not at_once:
            await asyncio.sleep(cls.ANSWER_FIRST_SECONDS)
        try:
            await db(fn)(**kwargs)
        except Exception:  # the row says `recorded` false: the sweep writes it
            log.exception("recording MCP call %s failed; the sweep records it", kwargs["call"].pk)

    @classmethod
    async def drain(cls, timeout: float) -> None:
        """Wait for what is pending (a stopping server: `Waiting.stopping` is set, the flusher
        writes without waiting for a batch to fill)."""
        if cls.pending:
            await asyncio.wait(set(cls.pending), timeout=timeout)


@dataclass
class Waiting:
    """How many calls this process holds (their timer re-reads share one budget); their
    wake-ups, so that a server stopping (SIGTERM) answers them at once."""

    held = 0
    stopping: ClassVar[bool] = False
    waiters: ClassVar[set] = set()


def stop_waiting() -> None:
    """The server stops: every held call answers now with the bounded hold's "call again with
    the same arguments" (its approval stays; the call again attaches on any server), and so
    does any call held from now on."""
    Waiting.stopping = True
    for waiter in list(Waiting.waiters):
        if waiter.event is not None:
            waiter.event.set()


def text_result(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def _as_result(body: dict) -> CallToolResult:
    return CallToolResult.model_validate(body)


def held_text(*, approval_id: str, server: str, tool: str, hold: int) -> str:
    return (
        f"`{tool}` on `{server}` is waiting for a reviewer (approval {approval_id}); it was not "
        f"decided within {hold} s. Call `{tool}` again with the same arguments to wait for the "
        f"decision: the same call is not asked again."
    )


async def _read_only(server: McpServer, tool: str) -> bool:
    if not server.pass_read_only:
        return False
    try:
        tools = await upstream.tools_of(server)
    except upstream.UpstreamError:
        return False
    found = tools.get(tool)
    annotations = getattr(found, "annotations", None)
    return bool(annotations is not None and getattr(annotations, "read_only_hint", None) is True)


async def call_passing(*, session: McpSession, tool: str, arguments, request_id: str = ""):
    """The call's McpCall when no person needs to see it first (read-only under
    `passReadOnly`, or a lasting rule approves it now), written before it goes upstream;
    None (nothing written) when it is to be held."""
    read_only = await _read_only(session.server, tool)
    asked = {"tool": tool, "arguments": arguments, "read_only": read_only, "request_id": request_id}
    call = await records.call_pass_known(session=session, **asked)  # no thread hop (PostgreSQL)
    if call is not None:
        return call
    return await db(records.call_pass)(session=session, **asked)


async def call_hold(*, session: McpSession, tool: str, arguments, request_id: str = ""):
    """A call to hold, recorded (its step and held call, or attached to the same call) after
    the session's passed calls still queued here: `records.Begun`."""
    await Recorder.session_first(session.pk)
    return await db(records.call_begin)(
        session=session, tool=tool, arguments=arguments, gated=True, request_id=request_id
    )


async def call_tool(
    *,
    session: McpSession,
    key,
    tool: str,
    arguments,
    progress=None,
    request_id: str = "",
    pass_checked: bool = False,
) -> CallToolResult:
    """`pass_checked`: the edge asked `call_passing` already (the call is held)."""
    server = session.server
    if not pass_checked:
        passed = await call_passing(
            session=session, tool=tool, arguments=arguments, request_id=request_id
        )
        if passed is not None:
            return _as_result(await send_passed(call=passed, key=key, arguments=arguments))
    begun = await call_hold(session=session, tool=tool, arguments=arguments, request_id=request_id)
    call = begun.call
    if begun.claimed:
        approval = call.approval
        args = approval.decided_arguments if approval is not None else None
        return await _send(call=call, key=key, arguments=arguments if args is None else args)
    result, _final = await await_decision(
        call=call, key=key, server=server, tool=tool, progress=progress, fresh=not begun.attached
    )
    return result


async def await_decision(
    *, call, key, server, tool, progress, fresh, hold: float | None = None, record_first=False
) -> tuple[CallToolResult, bool]:
    """The held call's result once it is decided (and, approved, sent upstream), or within
    `hold` seconds (the server's `holdSeconds` by default) the bounded hold's "call again".
    (the result, whether it is the call's final one: False for the bounded hold's answers).
    `fresh`: the call was recorded just now (its approval as a rule left it): the first look
    needs no read. `record_first`: a result sent upstream is recorded before it is answered
    (a task's: its status says so by the time its result is read)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + (server.hold_seconds if hold is None else hold)
    every = settings.GAVEL_MCP_PROGRESS_SECONDS
    next_progress = started + every
    ticks = 0
    group = realtime.run_group(call.tenant_id, call.session.run.external_id)
    waiter = realtime.wait_for(group)
    Waiting.held += 1
    Waiting.waiters.add(waiter)
    try:
        async with waiter as woken:
            while True:
                claimed = False
                if not fresh:
                    # approved and still held: claimed from the event loop (PostgreSQL)
                    won, args = await records.call_claim_approved(call=call)
                    if won:
                        return await _send(
                            call=call,
                            key=key,
                            arguments=call.arguments if args is None else args,
                            record_first=record_first,
                        ), True
                    call, claimed = await db(records.call_look_and_claim)(call=call)
                fresh = False
                approval = call.approval
                if claimed:  # approved: this caller sends it (claimed with the look)
                    args = approval.decided_arguments
                    return await _send(
                        call=call,
                        key=key,
                        arguments=call.arguments if args is None else args,
                        record_first=record_first,
                    ), True
                if call.state in (CallState.DONE, CallState.REFUSED):
                    return _as_result(call.result), True
                if call.state == CallState.FORWARDING:
                    return await _result_of(call=call, deadline=deadline)
                if approval is None or approval.status == ApprovalStatus.CANCELLED:
                    return _as_result(text_result(cancelled_elsewhere(call))), True
                if approval.status == ApprovalStatus.APPROVED:
                    args = approval.decided_arguments
                    return await _forward(
                        call=call,
                        key=key,
                        arguments=call.arguments if args is None else args,
                        record_first=record_first,
                    )
                if approval.status in (ApprovalStatus.DENIED, ApprovalStatus.EXPIRED):
                    return _as_result(await refuse(call=call, key=key)), True
                now = loop.time()
                if now >= deadline or Waiting.stopping:
                    return _as_result(
                        text_result(
                            held_text(
                                approval_id=approval.public_id,
                                server=server.name,
                                tool=tool,
                                hold=server.hold_seconds,
                            )
                        )
                    ), False
                if progress is not None and now >= next_progress:
                    ticks += 1
                    await progress(ticks, f"waiting for a reviewer (approval {approval.public_id})")
                    next_progress = now + every
                until_expiry = (approval.expires_at.timestamp() - _wall()) + 0.01
                recheck = recheck_seconds(Waiting.held) * random.uniform(0.8, 1.0)  # noqa: S311
                timeout = min(
                    deadline - now,
                    next_progress - now if progress else recheck,
                    recheck,
                    max(0.0, until_expiry),
                )
                await woken.wait(max(0.0, timeout))
    finally:
        Waiting.held -= 1
        Waiting.waiters.discard(waiter)


def _wall() -> float:
    import time

    return time.time()


def cancelled_elsewhere(call) -> str:
    """What a held call whose approval was cancelled (not by its client) answers."""
    return f"`{call.tool}` on `{call.server.name}` was cancelled."


async def refuse(*, call, key) -> dict:
    """A denied or expired held call: its refusal (the message the model reads) recorded
    once, whoever looks first; the recorded result (the wire form)."""
    approval = call.approval
    body = text_result(
        approval.message or records.refusal_for(server=call.server.name, tool=call.tool)
    )
    await db(records.call_finish)(call=call, result=body, key=key, forwarded=False)
    fresh = await db(records.call_result)(call=call)
    return fresh.result or body


def in_background(coroutine) -> asyncio.Task:
    """Work a request started and does not wait for (a task's call sent upstream): kept with
    the process's pending records, so that a stopping server finishes it first."""
    return Recorder._start(coroutine)


async def _forward(*, call, key, arguments, record_first=False) -> tuple[CallToolResult, bool]:
    """Send the call upstream if this caller wins the claim; else wait for the winner's result."""
    claimed = await db(records.call_claim)(call=call)
    if not claimed:
        loop = asyncio.get_running_loop()
        return await _result_of(call=call, deadline=loop.time() + call.server.hold_seconds)
    return await _send(call=call, key=key, arguments=arguments, record_first=record_first), True


async def _send(*, call, key, arguments, record_first=False) -> CallToolResult:
    return _as_result(
        await send_passed(call=call, key=key, arguments=arguments, record_first=record_first)
    )


async def send_passed(*, call, key, arguments, record_first=False) -> dict:
    """The claimed call upstream; its result (the wire form: what the client receives)
    recorded right after it is answered, or with `record_first` before (a task's: its status
    says "completed" as soon as its result can be read)."""
    try:
        result = await upstream.call_tool(
            call.server, call.tool, arguments if arguments is not None else {}
        )
        body = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    except upstream.UpstreamError as exc:
        body = text_result(f"the MCP server `{call.server.name}` could not be reached: {exc}")
    except Exception as exc:  # the upstream's own JSON-RPC error
        message = getattr(getattr(exc, "error", None), "message", None) or type(exc).__name__
        body = text_result(f"`{call.tool}` on `{call.server.name}` failed: {message}")
    if call.passed_by and not call.step:
        fn, kwargs = records.call_record_passed, {}
    else:
        fn, kwargs = records.call_finish, {"forwarded": True}
    if record_first:
        await Recorder.write_now(fn, call=call, result=body, key=key, **kwargs)
    else:
        await Recorder.later(fn, call=call, result=body, key=key, **kwargs)
    return body


async def _result_of(*, call, deadline: float) -> tuple[CallToolResult, bool]:
    """Another caller sends this call upstream: its recorded result, once there (final), or
    at the deadline the bounded hold's answer (not final)."""
    loop = asyncio.get_running_loop()
    while True:
        fresh = await db(records.call_result)(call=call)
        if fresh.state in (CallState.DONE, CallState.REFUSED) and fresh.result is not None:
            return _as_result(fresh.result), True
        if loop.time() >= deadline:
            return _as_result(
                text_result(
                    f"`{call.tool}` on `{call.server.name}` is on its way to the server; call it "
                    f"again with the same arguments for its result."
                )
            ), False
        await asyncio.sleep(FINISH_WAIT_SECONDS)


__all__ = ["call_passing", "call_tool", "send_passed", "TextContent"]
