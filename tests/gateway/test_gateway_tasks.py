"""MCP Tasks (protocol 2025-11-25) through the gateway, driven by the official `mcp` client
(ClientSession over Streamable HTTP; its `send_request` with the SDK's Tasks types, which its
session has no helpers for) against a live daphne in front of the test upstream.

A task-augmented `tools/call` answers a task at once; `tasks/get` moves it on; `tasks/result`
blocks until it ends and answers what the call would have; a task is its principal's alone."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from pathlib import Path

import httpx
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.support.gateway_live import (
    Balancer,
    add_server,
    audit_actions,
    daphne,
    decide,
    expire_now,
    live_gateway,
    mcp_client,
    mcp_url,
    pending_for,
)

NODE = Path(__file__).parent / "node"
TS_SDK = NODE / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
RELATED = "io.modelcontextprotocol/related-task"
IMMEDIATE = "io.modelcontextprotocol/model-immediate-response"


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    with live_gateway(tmp_path_factory.mktemp("mcp-tasks")) as live:
        yield live


async def call_as_task(session, tool: str, arguments: dict, ttl: int | None = 600_000):
    """`tools/call` with `task`, through the client session's own dispatcher: the SDK 2.3
    client checks a `tools/call` answer against CallToolResult, so its `send_request` would
    refuse the task (the SDK has the types of Tasks, not their flow)."""
    params = types.CallToolRequestParams(
        name=tool, arguments=arguments, task=types.TaskMetadata(ttl=ttl)
    ).model_dump(by_alias=True, mode="json", exclude_none=True)
    raw = await session._dispatcher.send_raw_request("tools/call", params, {})
    return types.CreateTaskResult.model_validate(raw, by_name=False)


async def task_get(session, task_id: str) -> types.GetTaskResult:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await session.send_request(request, types.GetTaskResult)


async def task_result(session, task_id: str) -> types.CallToolResult:
    params = types.GetTaskPayloadRequestParams(task_id=task_id)
    return await session.send_request(
        types.GetTaskPayloadRequest(params=params), types.CallToolResult
    )


async def task_cancel(session, task_id: str) -> types.CancelTaskResult:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await session.send_request(request, types.CancelTaskResult)


async def tasks_list(session, cursor: str | None = None) -> types.ListTasksResult:
    request = types.ListTasksRequest(params=types.PaginatedRequestParams(cursor=cursor))
    return await session.send_request(request, types.ListTasksResult)


async def until_status(session, task_id: str, wanted: str) -> types.GetTaskResult:
    for _ in range(100):
        task = await task_get(session, task_id)
        if task.status == wanted:
            return task
        await asyncio.sleep(0.1)
    raise AssertionError(f"task {task_id} never reached {wanted}: {task}")


def writes_of(console, tag: str) -> list[str]:
    return [w for w in console.writes() if tag in w]


async def test_the_gateway_offers_tasks_and_every_tool_may_be_called_as_one(console):
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        capabilities = session.server_capabilities
        assert capabilities.tasks is not None
        assert capabilities.tasks.requests.tools.call is not None
        assert capabilities.tasks.list is not None and capabilities.tasks.cancel is not None
        tools = (await session.list_tools()).tools
        assert {t.name: t.execution.task_support for t in tools} == {
            "read_file": "optional",
            "write_file": "optional",
            "echo": "optional",
        }


async def test_a_held_call_as_a_task_answers_at_once_and_completes_when_approved(console):
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "task"}
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        created = await asyncio.wait_for(call_as_task(session, "write_file", asked), 10)
        task = created.task
        assert task.status == "working" and task.task_id.startswith("mcp_")
        assert task.ttl == 600_000 and task.poll_interval == 2000
        assert task.status_message.startswith("waiting for a reviewer (approval apr_")
        assert "waits for a reviewer" not in created.meta[IMMEDIATE]  # the model's own words
        assert created.meta[IMMEDIATE].startswith("`write_file` on `files` is waiting")
        approval = await pending_for(console, "files.write_file", asked)
        assert approval["toolCallId"] == task.task_id
        assert (await task_get(session, task.task_id)).status == "working"
        assert writes_of(console, tag) == []  # nothing ran while it waits
        await decide(console, approval["id"], "approve")
        done = await until_status(session, task.task_id, "completed")
        assert done.poll_interval is None and done.ttl == 600_000
        result = await asyncio.wait_for(task_result(session, task.task_id), 10)
    assert result.is_error is False
    assert result.content[0].text == f"wrote 4 bytes to /srv/{tag}"
    assert result.meta[RELATED] == {"taskId": task.task_id}
    assert writes_of(console, tag) == [f"write_file /srv/{tag} task"]  # once
    assert audit_actions(console, task.task_id) == ["mcp.call.forwarded"]


async def test_task_result_blocks_until_the_decision_and_honours_edited_arguments(console):
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "draft"}
    edited = {"path": f"/srv/{tag}-ok", "content": "final"}
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        task = (await call_as_task(session, "write_file", asked)).task
        waiting = asyncio.create_task(task_result(session, task.task_id))
        approval = await pending_for(console, "files.write_file", asked)
        await asyncio.sleep(0.3)
        assert not waiting.done()  # it blocks while the task is working
        await decide(console, approval["id"], "approve", arguments=edited)
        result = await asyncio.wait_for(waiting, 30)
        assert (await task_get(session, task.task_id)).status == "completed"
    assert result.content[0].text == f"wrote 5 bytes to /srv/{tag}-ok"
    assert writes_of(console, tag) == [f"write_file /srv/{tag}-ok final"]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js for the TypeScript SDK")
async def test_the_official_typescript_client_calls_a_tool_as_a_task(console):
    """Interop with the other official client: @modelcontextprotocol/sdk's
    `client.experimental.tasks.callToolStream` (tests/gateway/node/tasks_client.mjs) creates the
    task, polls it while a person decides, and reads its result."""
    if not TS_SDK.exists():
        pytest.skip("needs the TypeScript SDK in tests/gateway/node: make gateway-deps")
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "from-ts"}
    client = await asyncio.create_subprocess_exec(
        "node", str(NODE / "tasks_client.mjs"), mcp_url(console, "files"),
        console.keys["mcp"], "write_file", json.dumps(asked),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    approval = await pending_for(console, "files.write_file", asked)
    await asyncio.sleep(2.5)  # it polls meanwhile (pollInterval 2 s)
    assert client.returncode is None  # still waiting for the decision
    await decide(console, approval["id"], "approve")
    out, err = await asyncio.wait_for(client.communicate(), 60)
    assert client.returncode == 0, err.decode()[-2000:]
    events = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    kinds = [event["type"] for event in events]
    assert kinds[:3] == ["connected", "tools", "taskCreated"], events
    assert events[0]["protocolVersion"] == "2025-11-25"
    assert events[0]["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    assert events[1]["taskSupport"]["write_file"] == "optional"
    task = events[2]["task"]
    assert task["taskId"] == approval["toolCallId"] and task["status"] == "working"
    assert "taskStatus" in kinds and kinds[-1] == "result", kinds
    assert events[-1]["result"]["content"] == [
        {"type": "text", "text": f"wrote 7 bytes to /srv/{tag}"}
    ]
    assert not events[-1]["result"].get("isError")
    assert writes_of(console, tag) == [f"write_file /srv/{tag} from-ts"]


async def test_a_denied_task_fails_with_the_message_the_model_reads(console):
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/etc/{tag}", "content": "x"}
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        task = (await call_as_task(session, "write_file", asked)).task
        approval = await pending_for(console, "files.write_file", asked)
        await decide(console, approval["id"], "deny", message="Not in /etc.")
        failed = await until_status(session, task.task_id, "failed")
        assert failed.status_message == "denied by a reviewer"
        result = await task_result(session, task.task_id)
    assert result.is_error is True and result.content[0].text == "Not in /etc."
    assert writes_of(console, tag) == []
    assert audit_actions(console, task.task_id) == ["mcp.call.refused"]


async def test_an_expired_task_fails_and_never_runs(console):
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "late"}
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        task = (await call_as_task(session, "write_file", asked)).task
        approval = await pending_for(console, "files.write_file", asked)
        waiting = asyncio.create_task(task_result(session, task.task_id))
        expire_now(console, approval["id"])
        result = await asyncio.wait_for(waiting, 60)  # its timer's re-read expires it
        failed = await task_get(session, task.task_id)
    assert result.is_error is True
    assert result.content[0].text == (
        "A reviewer did not allow `write_file` on `files`. Do not call it again unchanged."
    )
    assert failed.status == "failed"
    assert failed.status_message == "expired: no reviewer decided in time"
    assert writes_of(console, tag) == []


@pytest.mark.postgres
async def test_a_task_made_on_one_daphne_is_read_and_ended_on_another(console, tmp_path):
    """Nothing of a task lives in the process that made it: a second server process (behind a
    load balancer) reads it, sees the decision made there, and sends it upstream once."""
    if not console.env.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://... (and REDIS_URL)")
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "lb"}
    with daphne(console.env, tmp_path / "b.log") as url_b:
        balancer = Balancer(console.url, url_b, first=3)  # initialize, initialized, the call
        async with mcp_client(
            mcp_url(console, "files"), console.keys["mcp"], transport=balancer
        ) as session:
            task = (await call_as_task(session, "write_file", asked)).task
            approval = await pending_for(console, "files.write_file", asked, base=url_b)
            await decide(console, approval["id"], "approve", base=url_b)
            done = await until_status(session, task.task_id, "completed")
            result = await asyncio.wait_for(task_result(session, task.task_id), 10)
        ports = balancer.seen
    assert done.status == "completed" and result.is_error is False
    assert ports[:3] == [ports[0]] * 3 and set(ports[3:]) == {ports[-1]} != {ports[0]}
    assert writes_of(console, tag) == [f"write_file /srv/{tag} lb"]


async def test_a_passed_call_as_a_task_completes_without_a_person(console):
    add_server(console, "files-ro-tasks", passReadOnly=True)
    async with mcp_client(mcp_url(console, "files-ro-tasks"), console.keys["mcp"]) as session:
        task = (await call_as_task(session, "read_file", {"path": "/t"}, ttl=None)).task
        assert task.status == "working" and task.ttl is None
        result = await asyncio.wait_for(task_result(session, task.task_id), 10)
        assert result.is_error is False and result.content[0].text == "contents of /t"
        assert (await until_status(session, task.task_id, "completed")).ttl is None


async def test_a_task_is_its_principals_alone(console):
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "mine"}
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        task = (await call_as_task(session, "write_file", asked)).task
    # another principal's key of the same tenant: not found, exactly like a missing id
    async with mcp_client(mcp_url(console, "files"), console.keys["rev_mcp"]) as other:
        for ask in (task_get, task_result, task_cancel):
            with pytest.raises(MCPError) as refused:
                await asyncio.wait_for(ask(other, task.task_id), 10)
            assert refused.value.error.code == types.INVALID_PARAMS
            assert "no task" in refused.value.error.message
        assert task.task_id not in [t.task_id for t in (await tasks_list(other)).tasks]
    # the same principal in a new session reads it
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        assert (await task_get(session, task.task_id)).status == "working"
        assert task.task_id in [t.task_id for t in (await tasks_list(session)).tasks]
        with pytest.raises(MCPError) as unknown:
            await task_get(session, "mcp_0000000000000000")
        assert unknown.value.error.code == types.INVALID_PARAMS
        for cursor in ("not-a-cursor", "²", "0", "9" * 30):
            with pytest.raises(MCPError) as bad_cursor:
                await tasks_list(session, cursor=cursor)
            assert bad_cursor.value.error.code == types.INVALID_PARAMS, cursor
        await task_cancel(session, task.task_id)


async def test_cancelling_a_waiting_task_withdraws_it_and_an_ended_one_is_refused(console):
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "never"}
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        task = (await call_as_task(session, "write_file", asked)).task
        approval = await pending_for(console, "files.write_file", asked)
        cancelled = await task_cancel(session, task.task_id)
        assert cancelled.status == "cancelled"
        result = await task_result(session, task.task_id)
        assert result.is_error is True
        assert result.content[0].text == (
            "`write_file` on `files` was cancelled by the client; it did not run."
        )
        with pytest.raises(MCPError) as again:
            await task_cancel(session, task.task_id)
        assert again.value.error.code == types.INVALID_PARAMS
        assert "terminal status 'cancelled'" in again.value.error.message
    with console.api("decide") as api:
        page = api.get("/api/v1/approvals", params={"status": "cancelled"})
    assert approval["id"] in [a["id"] for a in page.json()["items"]], page.text
    assert writes_of(console, tag) == []
    assert audit_actions(console, task.task_id) == ["mcp.call.cancelled"]


async def test_tasks_list_pages_newest_first(console):
    add_server(console, "files-list-tasks")
    ids = []
    async with mcp_client(mcp_url(console, "files-list-tasks"), console.keys["mcp"]) as session:
        for n in range(3):
            ids.append(
                (
                    await call_as_task(session, "write_file", {"path": f"/l/{n}", "content": "l"})
                ).task.task_id
            )
        listed = await tasks_list(session)
        assert [t.task_id for t in listed.tasks] == list(reversed(ids))
        assert listed.next_cursor is None
        for task_id in ids:
            await task_cancel(session, task_id)


def test_without_tasks_in_the_protocol_a_task_field_is_ignored(console):
    """A session of 2025-06-18 (no Tasks in it) that sends `task` anyway gets the call's own
    answer, as the spec asks of a receiver that did not offer tasks; 2025-11-25's gets one."""
    add_server(console, "files-ro-old", passReadOnly=True)
    url, key = mcp_url(console, "files-ro-old"), console.keys["mcp"]
    for version, is_task in (("2025-06-18", False), ("2025-11-25", True)):
        opened = rpc(url, key, version, "initialize", {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}})  # fmt: skip
        assert opened.status_code == 200, opened.text
        assert ('"tasks"' in opened.text) is is_task
        session_id = opened.headers["mcp-session-id"]
        answer = rpc(url, key, version, "tools/call", {
            "name": "read_file", "arguments": {"path": "/old"}, "task": {"ttl": 1000}},
            session_id=session_id)  # fmt: skip
        assert answer.status_code == 200, answer.text
        result = answer.json()["result"] if answer.headers["content-type"].startswith(
            "application/json") else sse_result(answer.text)  # fmt: skip
        if is_task:
            assert result["task"]["status"] == "working" and "content" not in result
            assert result["task"]["ttl"] == 1000
        else:
            assert result["content"] == [{"type": "text", "text": "contents of /old"}]
            assert "task" not in result
        got = rpc(url, key, version, "tasks/get", {"taskId": "mcp_0"}, session_id=session_id)
        error = (got.json() if got.headers["content-type"].startswith("application/json")
                 else sse_result(got.text))["error"]  # fmt: skip
        assert error["code"] == (-32602 if is_task else -32601), error  # no task / no method


def test_a_task_ttl_is_checked_and_a_long_one_shortened(console):
    add_server(console, "files-ro-ttl", passReadOnly=True)
    url, key, version = mcp_url(console, "files-ro-ttl"), console.keys["mcp"], "2025-11-25"
    opened = rpc(url, key, version, "initialize", {
        "protocolVersion": version, "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}})  # fmt: skip
    session_id = opened.headers["mcp-session-id"]

    def ask(ttl):
        answer = rpc(url, key, version, "tools/call", {
            "name": "read_file", "arguments": {"path": "/ttl"}, "task": {"ttl": ttl}},
            session_id=session_id)  # fmt: skip
        return answer.json() if answer.headers["content-type"].startswith(
            "application/json") else sse_result(answer.text)  # fmt: skip

    for bad in (-1, "soon", 1.5):
        refused = ask(bad)
        assert refused["error"]["code"] == -32602, (bad, refused)
    assert ask(10**12)["task"]["ttl"] == 30 * 24 * 3600 * 1000  # the longest granted
    await_recorded = 0
    with console.api("ingest") as api:
        while True:  # the passed call's step is written right after it ran
            run = api.get(f"/api/v1/runs/mcp-{session_id}")
            assert run.status_code == 200, run.text
            if run.json()["steps"] or await_recorded > 50:
                break
            await_recorded += 1
            time.sleep(0.1)
    assert run.json()["steps"] == 1, run.text  # the refused asks recorded nothing


def rpc(url, key, version, method, params, session_id=None) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": version,
    }
    if session_id:
        headers["Mcp-Session-Id"] = session_id
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return httpx.post(url, json=body, headers=headers, timeout=30)


def sse_result(text: str) -> dict:
    for line in text.splitlines():
        if line.startswith("data:"):
            message = json.loads(line[5:])
            if "result" in message or "error" in message:
                return message.get("result") or message
    raise AssertionError(f"no result in {text!r}")
