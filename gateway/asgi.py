"""`/mcp/{name}`: the MCP gateway's edge, mounted beside Django in console/asgi.py.

The official SDK speaks the protocol (its Streamable HTTP transport and low-level `Server`, in
its stateless mode: nothing of a session lives in this process). The gateway keeps the session
itself, in the database (gateway.models.McpSession): `initialize` opens one (and its Gavel
run) and its answer carries `Mcp-Session-Id`; a later request with that id continues it on
any server process; `DELETE` ends it. Before the SDK sees a request: the key (`mcp` scope,
401/403/429 as for the API), the server (404 outside the key's tenant), the session (404 when
unknown, ended, or another principal's).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http import check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request

from console.audit.log import audit_refused
from console.core import ratelimit
from console.core.errors import Forbidden, GavelError, NotFound, RateLimited
from console.directory import keycopies
from console.web.auth import PrincipalKeyAuth
from gateway import edge, flow, records, tasks, upstream
from gateway.access import server_for

log = logging.getLogger(__name__)
PREFIX = "/mcp/"
SESSION_HEADER = b"mcp-session-id"
SCOPE_KEY = "gavel.mcp"
_key_auth = PrincipalKeyAuth("mcp")


@dataclass
class Caller:
    """Who a gateway request is for, resolved at the edge (handed to the SDK's handlers in the
    ASGI scope)."""

    server: object
    key: object
    headers: dict
    session: object = None
    opened: list = field(default_factory=list)
    pass_checked: bool = False  # the edge found the call is to be held (_passed_call)

    async def the_session(self, protocol_version: str = ""):
        """The request's session: its `Mcp-Session-Id`'s; else the `X-Gavel-Run-Id` value's
        (one run per value); else a new one for this request."""
        if self.session is None:
            run_id = self.headers.get("x-gavel-run-id")
            public = None
            if run_id:
                public = (
                    "run-"
                    + records.canonical(
                        [self.server.tenant_id, self.server.pk, self.key.principal_id, run_id]
                    )[:40]
                )
            self.session = await flow.db(records.session_open)(
                server=self.server,
                key=self.key,
                agent_id=self.headers.get("x-gavel-agent") or self.key.name,
                conversation_id=self.headers.get("x-gavel-conversation") or None,
                protocol_version=protocol_version,
                run_id=run_id,
                public_id=public,
            )
        return self.session


def _caller(ctx) -> Caller:
    return ctx.request.scope[SCOPE_KEY]


# --- the SDK's handlers: pass through, except tools/call ---


async def _list_tools(ctx, params):
    caller = _caller(ctx)
    listed = await upstream.request(caller.server, lambda s: s.list_tools(params=params))
    if tasks.offered(ctx.protocol_version):  # any tool may be called as a task (the gateway's)
        execution = types.ToolExecution(task_support="optional")
        marked = [tool.model_copy(update={"execution": execution}) for tool in listed.tools]
        listed = listed.model_copy(update={"tools": marked})
    return listed


def _progress(ctx):
    """The request's progress notifications (None: the client asked for none), on its own
    stream (a stateless gateway has no standalone stream)."""
    meta = ctx.meta or {}
    token = meta.get("progress_token", meta.get("progressToken"))
    if token is None:
        return None

    async def progress(ticks: int, message: str) -> None:
        await ctx.session.send_progress_notification(
            token, float(ticks), None, message, related_request_id=ctx.request_id
        )

    return progress


async def _call_tool(ctx, params: types.CallToolRequestParams):
    caller = _caller(ctx)
    session = await caller.the_session(ctx.protocol_version)
    return await flow.call_tool(
        session=session,
        key=caller.key,
        tool=params.name,
        arguments=params.arguments,
        progress=_progress(ctx),
        request_id=_request_id(ctx.request_id),
        pass_checked=caller.pass_checked,
    )


async def _tasks_middleware(ctx, call_next):
    """MCP Tasks (gateway/tasks.py) where the SDK has only their types: `initialize` of a
    2025-11-25 session advertises them, and a `tools/call` asking for a task is answered with
    one (the SDK's own `tools/call` answer is a CallToolResult, never a task)."""
    if ctx.method == "tools/call" and tasks.offered(ctx.protocol_version):
        params = ctx.params or {}
        if isinstance(params, dict) and params.get("task") is not None:
            try:
                typed = types.CallToolRequestParams.model_validate(params, by_name=False)
            except ValidationError:
                raise MCPError(
                    code=types.INVALID_PARAMS, message="Invalid request parameters"
                ) from None
            return await tasks.create(
                caller=_caller(ctx),
                protocol_version=ctx.protocol_version,
                params=typed,
                request_id=_request_id(ctx.request_id),
            )
    result = await call_next(ctx)
    if (
        ctx.method == "initialize"
        and isinstance(result, dict)
        and tasks.offered(result.get("protocolVersion"))
    ):
        result["capabilities"] = {**result.get("capabilities", {}), "tasks": tasks.CAPABILITY}
    return result


async def _task_get(ctx, params: types.GetTaskRequestParams):
    return await tasks.get(
        caller=_caller(ctx), protocol_version=ctx.protocol_version, task_id=params.task_id
    )


async def _task_result(ctx, params: types.GetTaskPayloadRequestParams):
    return await tasks.result(
        caller=_caller(ctx),
        protocol_version=ctx.protocol_version,
        task_id=params.task_id,
        progress=_progress(ctx),
    )


async def _tasks_list(ctx, params: types.PaginatedRequestParams):
    return await tasks.list_page(
        caller=_caller(ctx), protocol_version=ctx.protocol_version, cursor=params.cursor
    )


async def _task_cancel(ctx, params: types.CancelTaskRequestParams):
    return await tasks.cancel(
        caller=_caller(ctx), protocol_version=ctx.protocol_version, task_id=params.task_id
    )


def _request_id(value) -> str:
    """A JSON-RPC id as the call stores it (a number and its string are one id here)."""
    return "" if value is None else str(value)[:100]


async def _list_resources(ctx, params):
    return await upstream.request(_caller(ctx).server, lambda s: s.list_resources(params=params))


async def _list_resource_templates(ctx, params):
    return await upstream.request(
        _caller(ctx).server, lambda s: s.list_resource_templates(params=params)
    )


async def _read_resource(ctx, params):
    return await upstream.request(_caller(ctx).server, lambda s: s.read_resource(params.uri))


async def _list_prompts(ctx, params):
    return await upstream.request(_caller(ctx).server, lambda s: s.list_prompts(params=params))


async def _get_prompt(ctx, params):
    return await upstream.request(
        _caller(ctx).server, lambda s: s.get_prompt(params.name, params.arguments)
    )


def _server() -> Server:
    server = Server(
        "gavel-mcp-gateway",
        version="1.2",
        instructions="Tool calls through this gateway may wait for a human reviewer.",
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
        on_list_resources=_list_resources,
        on_list_resource_templates=_list_resource_templates,
        on_read_resource=_read_resource,
        on_list_prompts=_list_prompts,
        on_get_prompt=_get_prompt,
    )
    server.middleware.append(_tasks_middleware)
    server.add_request_handler("tasks/get", types.GetTaskRequestParams, _task_get)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, _task_result)
    server.add_request_handler("tasks/list", types.PaginatedRequestParams, _tasks_list)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, _task_cancel)
    return server


class Gateway:
    """The ASGI app of `/mcp/{name}` (one per process; the SDK's manager started on first use:
    daphne runs no ASGI lifespan)."""

    def __init__(self):
        self._manager: StreamableHTTPSessionManager | None = None
        self._started: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    async def _ensure(self) -> StreamableHTTPSessionManager:
        if self._started is None:
            self._started = asyncio.Event()
            # Origin/Host are checked by ALLOWED_HOSTS-like rules at the edge: every request
            # carries a Bearer key (never ambient credentials), so DNS rebinding gains nothing.
            security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
            self._manager = StreamableHTTPSessionManager(
                _server(), stateless=True, security_settings=security
            )
            self._task = asyncio.get_running_loop().create_task(self._run(self._manager))
        await self._started.wait()
        return self._manager

    async def _run(self, manager) -> None:
        async with manager.run():
            self._started.set()
            await asyncio.Event().wait()  # for the life of the process

    async def __call__(self, scope, receive, send):
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        name = scope["path"][len(PREFIX) :].strip("/")
        session_id = headers.get("mcp-session-id")
        try:
            header = headers.get("authorization", "")
            known = await _from_copies(header, name, session_id)
            if known is None:
                known = await flow.db(_resolve)(header, name, session_id, scope)
            key, server, session = known
        except GavelError as exc:
            await _error(send, exc)
            return
        body = await _read_body(receive)
        message = _parsed(body)  # the JSON-RPC message, read once (None: not one)
        caller = Caller(server=server, key=key, headers=headers, session=session)
        if session_id:
            if scope["method"] == "DELETE":
                await flow.db(records.session_close)(session=session, reason="deleted")
                await _plain(send, 200, b"")
                return
            cancelled = _cancelled_request(message)
            if cancelled is not None:
                await flow.db(records.call_cancel)(session=session, request_id=cancelled, key=key)
        elif _is_initialize(message):
            version = _initialize_version(message)
            caller.session = await caller.the_session(version)
        if scope["method"] == "DELETE":
            await _plain(send, 200, b"")
            return
        if session_id and await _passed_call(scope, message, caller, send):
            return
        manager = await self._ensure()
        scope = dict(scope)
        scope[SCOPE_KEY] = caller
        await manager.handle_request(scope, _replay(body, receive), _with_session(send, caller))


async def _passed_call(scope, message, caller: Caller, send) -> bool:
    """A `tools/call` on a session that no person needs to see first (read-only under
    `passReadOnly`, or a lasting rule approves it), answered here: the SDK's types read the
    request and write the answer (`application/json`, which the Streamable HTTP transport
    lets a server choose, shaped for the request's protocol version as the SDK shapes it),
    without the SDK's per-request server, transport and task group (~2 ms of CPU a call,
    docs/benchmarks.md). False, having written nothing: anything else (another method, a
    batch, headers the transport would refuse, a call to hold) is the SDK's, as before; a
    call to hold is not asked again there (`pass_checked`). (A held call answered here too,
    as JSON when its client asked for no progress, measured no faster: 22.0 / 21.8 / 21.5 ms
    against 22.2 / 22.6 / 21.7 ms held p50, bench/mcp.py, 2026-12-07.)"""
    if scope["method"] != "POST":
        return False
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return False
    request = Request(scope)
    version = request.headers.get("mcp-protocol-version")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if (
        (version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS)
        or content_type != "application/json"
        or check_accept_headers(request) != (True, True)
    ):
        return False  # the SDK answers (406, 415, the version's rejection)
    try:
        rpc = types.JSONRPCRequest.model_validate(message)
        params = types.CallToolRequestParams.model_validate(rpc.params or {})
    except ValidationError:
        return False  # the SDK answers with its JSON-RPC error
    if params.task is not None and tasks.offered(version):
        return False  # a task is asked for: answered with one (the SDK's, _tasks_middleware)
    call = await flow.call_passing(
        session=caller.session,
        tool=params.name,
        arguments=params.arguments,
        request_id=_request_id(rpc.id),
    )
    if call is None:
        caller.pass_checked = True
        return False
    result = await flow.send_passed(call=call, key=caller.key, arguments=params.arguments)
    answer = _wire_answer(rpc, version, result)
    payload = answer.model_dump_json(by_alias=True, exclude_none=True).encode()
    await _plain(_with_session(send, caller), 200, payload, kind=b"application/json")
    return True


def _wire_answer(rpc, version: str | None, result: dict):
    """A `tools/call` result as the SDK's server writes it: shaped by the request's protocol
    version (its per-version surface: a field that version lacks, such as `resultType`
    before 2026, is left out); a result that version cannot carry is the SDK's internal
    error."""
    try:
        shaped = methods.serialize_server_result(
            "tools/call", version or types.DEFAULT_NEGOTIATED_VERSION, result
        )
    except ValidationError:
        log.warning("an MCP result does not fit protocol version %s", version)
        error = types.ErrorData(
            code=types.INTERNAL_ERROR, message="Handler returned an invalid result"
        )
        return types.JSONRPCError(jsonrpc="2.0", id=rpc.id, error=error)
    return types.JSONRPCResponse(jsonrpc="2.0", id=rpc.id, result=shaped)


def _resolve(header: str, name: str, session_id: str | None, scope):
    """Key, server and session (the contract's order: 401, 403, then 404 for the server and
    for the session), from this process's copies when it has them (gateway/edge.py; the key's
    rate limit is taken every time). A 403 is audited as for the API. A session idle past
    GAVEL_MCP_SESSION_IDLE_SECONDS is closed now and answers 404 (the client starts a new
    one, as the protocol says)."""
    known = edge.key_and_server(header, name)
    if known is not None:
        key, server, epoch = known
        wait, now = ratelimit.take_with_epoch(
            key.pk, per_minute=key.rate_per_minute, burst=key.rate_burst
        )
        if _stale(epoch, now):
            edge.drop_key(header, name)
            known = None  # read again below (which takes the key's token again: rare)
        else:
            _refuse_past_rate(wait)
    if known is None:
        epoch = keycopies.epoch_now()  # before the rows: a change committed later moves it
        key, server = _looked_up(header, name, scope)
        edge.keep_key_and_server(header, name, key, server, epoch)
    session = None
    if session_id:
        session = edge.session(
            server_id=server.pk, principal_id=key.principal_id, public_id=session_id
        ) or records.session_find(server=server, key=key, public_id=session_id)
        if session is None:
            raise NotFound("no such MCP session", code="session_not_found")
        if records.session_idle(session):  # this copy says so: the row decides
            session = records.session_find(server=server, key=key, public_id=session_id)
            if session is None or records.session_idle(session):
                if session is not None:
                    records.session_close(session=session, reason="idle")
                raise NotFound("the MCP session ended: it was idle", code="session_not_found")
        records.session_touch(session=session)
        edge.keep_session(session)
    return key, server, session


async def _from_copies(header: str, name: str, session_id: str | None):
    """`_resolve` from this process's copies alone, on the event loop (no thread hop, no
    query; the key's rate limit taken as ever): key, server and session; None — ask
    `_resolve` — when one is not remembered, or the session is idle by its copy, or its idle
    time is due to be written again."""
    known = edge.key_and_server(header, name)
    if known is None:
        return None
    key, server, epoch = known
    session = None
    if session_id:
        session = edge.session(
            server_id=server.pk, principal_id=key.principal_id, public_id=session_id
        )
        if session is None or records.session_idle(session) or records.session_touch_due(session):
            return None
    wait, now = await ratelimit.take_async_with_epoch(
        key.pk, per_minute=key.rate_per_minute, burst=key.rate_burst
    )
    if _stale(epoch, now):
        edge.drop_key(header, name)
        return None  # a key, principal or tenant changed somewhere: `_resolve` reads again
    _refuse_past_rate(wait)
    return key, server, session


def _stale(epoch: int | None, now: int | None) -> bool:
    """Is a key copy read at keys epoch `epoch` stale now? A copy read without Redis (None)
    keeps GAVEL_MCP_CACHE_SECONDS as its only bound; one read with it is stale as soon as the
    epoch moved, or while no epoch can be read (Redis unreachable: read the key each time)."""
    return epoch is not None and now != epoch


def _refuse_past_rate(wait: float) -> None:
    if wait:
        raise RateLimited("rate limit exceeded for this key", retry_after=math.ceil(wait))


def _looked_up(header: str, name: str, scope):
    request = SimpleNamespace()
    try:
        key = _authenticate(header, request)
    except Forbidden as exc:
        client = scope.get("client") or (None,)
        agent = dict(scope["headers"]).get(b"user-agent", b"").decode("latin-1") or None
        audit_refused(
            actor=getattr(request, "gavel_actor", None),
            path=scope["path"],
            method=scope["method"],
            reason=exc.message,
            code=exc.code,
            ip=client[0],
            user_agent=agent,
        )
        raise
    return key, server_for(tenant_id=key.tenant_id, name=name, active_only=True)


def _authenticate(header: str, request):
    scheme, _, token = header.partition(" ")
    key = None
    if scheme.lower() == "bearer" and token.strip():
        key = _key_auth.authenticate(request, token.strip())
    if key is None:
        raise _Unauthorized()
    return key


class _Unauthorized(GavelError):
    status = 401

    def __init__(self):
        super().__init__("a valid API key of the `mcp` scope is required", code="unauthorized")


def _status(exc: GavelError) -> int:
    if isinstance(exc, _Unauthorized):
        return 401
    if isinstance(exc, Forbidden):
        return 403
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, RateLimited):
        return 429
    return 400


async def _error(send, exc: GavelError) -> None:
    status = _status(exc)
    body = json.dumps({"error": {"code": exc.code, "message": exc.message}}).encode()
    extra = []
    if status == 401:
        extra.append((b"www-authenticate", b"Bearer"))
    if isinstance(exc, RateLimited):
        extra.append((b"retry-after", str(math.ceil(exc.retry_after)).encode()))
    await _plain(send, status, body, extra, kind=b"application/json")


async def _plain(send, status, body: bytes, extra=(), kind=b"text/plain") -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _read_body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive_more):
    """The body already read, then the connection's own messages (its disconnect)."""
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive_more()

    return receive


def _parsed(body: bytes):
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


def _is_initialize(message) -> bool:
    return isinstance(message, dict) and message.get("method") == "initialize"


def _cancelled_request(message) -> str | None:
    """The request id a `notifications/cancelled` names (None for any other message)."""
    if not isinstance(message, dict) or message.get("method") != "notifications/cancelled":
        return None
    request_id = (message.get("params") or {}).get("requestId")
    return None if request_id is None else _request_id(request_id)


def _initialize_version(message) -> str:
    params = (message or {}).get("params") or {}
    version = params.get("protocolVersion")
    return version if isinstance(version, str) else ""


def _with_session(send, caller: Caller):
    """The answer carries the session's id (the gateway's, not the SDK's: it is stateless)."""

    async def wrapped(message):
        if message["type"] == "http.response.start" and caller.session is not None:
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != SESSION_HEADER]
            headers.append((SESSION_HEADER, caller.session.public_id.encode()))
            message = {**message, "headers": headers}
        await send(message)

    return wrapped


gateway = Gateway()


def mount(django_app):
    """HTTP under /mcp/ to the gateway, the rest to Django."""

    async def app(scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(PREFIX):
            await gateway(scope, receive, send)
            return
        await django_app(scope, receive, send)

    return app
