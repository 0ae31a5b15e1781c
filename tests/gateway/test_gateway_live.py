"""The MCP gateway driven by the official `mcp` client (ClientSession over Streamable HTTP)
against a live daphne, in front of a real MCP server (the SDK's MCPServer) over http and stdio.
Each test uses its own tool arguments, so held calls of different tests never attach to each
other."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
import uuid

import httpx
import pytest

from tests.support.gateway_live import (
    Balancer,
    add_server,
    audit_actions,
    daphne,
    decide,
    expire_now,
    live_gateway,
    manage,
    mcp_client,
    mcp_url,
    pending_for,
    text_of,
)


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    with live_gateway(tmp_path_factory.mktemp("mcp")) as live:
        yield live


@pytest.mark.parametrize("server", ["files", "files-stdio"])
async def test_tools_resources_and_prompts_pass_through(console, server):
    async with mcp_client(mcp_url(console, server), console.keys["mcp"]) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"read_file", "write_file", "echo"}
        assert tools["read_file"].annotations.read_only_hint is True
        resources = (await session.list_resources()).resources
        assert [str(r.uri) for r in resources] == ["file:///readme"]
        read = await session.read_resource("file:///readme")
        assert read.contents[0].text == "the readme"
        prompts = (await session.list_prompts()).prompts
        assert [p.name for p in prompts] == ["review"]
        prompt = await session.get_prompt("review", {"topic": "the diff"})
        assert "the diff" in prompt.messages[0].content.text


@pytest.mark.parametrize("server", ["files", "files-stdio"])
async def test_a_held_call_approved_with_edits_runs_upstream_once_with_the_edits(console, server):
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "draft"}
    edited = {"path": f"/srv/{tag}-edited", "content": "final"}
    async with mcp_client(mcp_url(console, server), console.keys["mcp"]) as session:
        call = asyncio.create_task(session.call_tool("write_file", asked))
        approval = await pending_for(console, f"{server}.write_file", asked)
        assert approval["reason"] == f"`write_file` on `{server}` waits for a reviewer"
        assert not call.done()
        decided = await decide(console, approval["id"], "approve", arguments=edited)
        result = await asyncio.wait_for(call, 30)
    assert result.is_error is False
    assert text_of(result) == f"wrote 5 bytes to /srv/{tag}-edited"
    if server == "files":  # the http upstream counts into the file (stdio: its own env)
        assert [w for w in console.writes() if tag in w] == [f"write_file /srv/{tag}-edited final"]
    assert decided["status"] == "approved"
    assert audit_actions(console, decided["toolCallId"]) == ["mcp.call.forwarded"]


async def test_a_held_call_approved_as_asked(console):
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "abc"}
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        call = asyncio.create_task(session.call_tool("write_file", asked))
        approval = await pending_for(console, "files.write_file", asked)
        await decide(console, approval["id"], "approve")
        result = await asyncio.wait_for(call, 30)
        # its result recorded (right after the answer), the session's run is running again
        with console.api("ingest") as api:
            for _ in range(50):
                run = api.get(f"/api/v1/runs/{approval['runId']}").json()
                if run["status"] != "awaiting_approval":
                    break
                await asyncio.sleep(0.1)
    assert text_of(result) == f"wrote 3 bytes to /srv/{tag}"
    assert [w for w in console.writes() if tag in w] == [f"write_file /srv/{tag} abc"]
    assert run["status"] == "running", run


async def test_a_denied_call_answers_is_error_with_the_message_and_never_runs(console):
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/etc/{tag}", "content": "x"}
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        call = asyncio.create_task(session.call_tool("write_file", asked))
        approval = await pending_for(console, "files.write_file", asked)
        await decide(console, approval["id"], "deny", message="Not in /etc, use /srv.")
        result = await asyncio.wait_for(call, 30)
    assert result.is_error is True
    assert text_of(result) == "Not in /etc, use /srv."
    assert [w for w in console.writes() if tag in w] == []
    assert audit_actions(console, approval["toolCallId"]) == ["mcp.call.refused"]


async def test_an_expired_call_answers_is_error_and_never_runs(console):
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "late"}
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        call = asyncio.create_task(session.call_tool("write_file", asked))
        approval = await pending_for(console, "files.write_file", asked)
        expire_now(console, approval["id"])
        result = await asyncio.wait_for(call, 60)
    assert result.is_error is True
    assert (
        text_of(result)
        == "A reviewer did not allow `write_file` on `files`. Do not call it again unchanged."
    )
    assert [w for w in console.writes() if tag in w] == []
    with console.api("decide") as api:
        expired = api.get("/api/v1/approvals", params={"status": "expired"}).json()["items"]
    assert approval["id"] in [a["id"] for a in expired]


async def test_a_rule_decides_without_a_human(console):
    # made by a lead: a rule acts for its maker, who may not approve ann's own calls
    with console.api("rules") as api:
        rule = api.post(
            "/api/v1/rules",
            json={"name": "echo is fine", "effect": "approve", "toolPattern": "files.echo"},
        )
        assert rule.status_code == 201, rule.text
    try:
        async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
            result = await asyncio.wait_for(session.call_tool("echo", {"text": "hi"}), 30)
        assert result.is_error is False and text_of(result) == "hi"
        # recorded right after the answer (gateway/flow.py's Recorder: within ~1 s)
        mine = []
        with console.api("decide") as api:
            for _ in range(50):
                approvals = api.get("/api/v1/approvals", params={"status": "approved"}).json()
                mine = [a for a in approvals["items"] if a["toolName"] == "files.echo"]
                if mine:
                    break
                await asyncio.sleep(0.1)
        assert mine and mine[0]["decidedByRule"] == rule.json()["id"]
    finally:
        with console.api("rules") as api:
            api.delete(f"/api/v1/rules/{rule.json()['id']}")


async def test_pass_read_only_passes_read_only_tools_and_holds_the_rest(console):
    add_server(console, "files-ro", passReadOnly=True, holdSeconds=1)
    async with mcp_client(mcp_url(console, "files-ro"), console.keys["mcp"]) as session:
        read = await asyncio.wait_for(session.call_tool("read_file", {"path": "/ro"}), 30)
        assert read.is_error is False and text_of(read) == "contents of /ro"
        held = await asyncio.wait_for(
            session.call_tool("write_file", {"path": "/ro", "content": "no"}), 30
        )
        assert held.is_error is True and "call `write_file` again" in text_of(held).lower()
    with console.api("decide") as api:
        items = api.get("/api/v1/approvals", params={"status": "pending"}).json()["items"]
    assert not [a for a in items if a["toolName"] == "files-ro.read_file"]  # never asked
    assert audit_actions(console, "")[:0] == []  # the audit query accepts an empty filter


async def test_a_held_calls_step_follows_the_passed_calls_before_it(console):
    """Passed calls are recorded behind their answers, in batches; a held call of the same
    session takes its step only after theirs, so the run's steps follow the calls' order."""
    add_server(console, "files-order", passReadOnly=True)
    arguments = {"path": "/order", "content": "third"}
    async with mcp_client(mcp_url(console, "files-order"), console.keys["mcp"]) as session:
        for path in ("/order-1", "/order-2"):
            read = await asyncio.wait_for(session.call_tool("read_file", {"path": path}), 30)
            assert read.is_error is False
        waiting = asyncio.create_task(session.call_tool("write_file", arguments))
        pending = await pending_for(console, "files-order.write_file", arguments)
        assert pending["step"] == 3, pending  # after the two reads' steps 1 and 2
        await decide(console, pending["id"], "approve")
        done = await asyncio.wait_for(waiting, 30)
        assert done.is_error is False, text_of(done)


async def test_the_demo_assistant_calls_again_through_the_bounded_hold(console):
    """make run's coding assistant (demo_mcp_client.held_call) as a model would: told to call
    again, it does with the same arguments until the reviewer decides; approved, the call
    runs once; denied, it reads the denial and goes on."""
    from gateway.management.commands.demo_mcp_client import held_call

    add_server(console, "files-demo", holdSeconds=1)
    tag = uuid.uuid4().hex[:8]
    approved, denied = (
        {"path": f"/d/{tag}", "content": "yes"},
        {"path": f"/d/{tag}", "content": "no"},
    )
    async with mcp_client(mcp_url(console, "files-demo"), console.keys["mcp"]) as session:
        waiting = asyncio.create_task(held_call(session, "write_file", approved))
        pending = await pending_for(console, "files-demo.write_file", approved)
        await asyncio.sleep(2.5)  # past two bounded holds: it has called again
        assert not waiting.done()
        await decide(console, pending["id"], "approve")
        assert await asyncio.wait_for(waiting, 30) == ("done", f"wrote 3 bytes to /d/{tag}")
        waiting = asyncio.create_task(held_call(session, "write_file", denied))
        pending = await pending_for(console, "files-demo.write_file", denied)
        await decide(console, pending["id"], "deny", message="Not now.")
        outcome, text = await asyncio.wait_for(waiting, 30)
        assert (outcome, text) == ("refused", "Not now.")
    assert [w for w in console.writes() if tag in w] == [f"write_file /d/{tag} yes"]


async def test_the_bounded_hold_says_call_again_and_the_same_call_attaches(console):
    add_server(console, "files-short", holdSeconds=1)
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "once"}
    reordered = {"content": "once", "path": f"/srv/{tag}"}  # the same canonical arguments
    async with mcp_client(mcp_url(console, "files-short"), console.keys["mcp"]) as session:
        first = await asyncio.wait_for(session.call_tool("write_file", asked), 30)
        assert first.is_error is True
        approval = await pending_for(console, "files-short.write_file", asked)
        assert approval["id"] in text_of(first)
        assert "again with the same arguments" in text_of(first)
        second = await asyncio.wait_for(session.call_tool("write_file", reordered), 30)
        assert second.is_error is True and approval["id"] in text_of(second)
        await decide(console, approval["id"], "approve")
    # a new session (a client that restarted): the approved, unused call attaches
    async with mcp_client(mcp_url(console, "files-short"), console.keys["mcp"]) as session:
        third = await asyncio.wait_for(session.call_tool("write_file", asked), 30)
        assert third.is_error is False and text_of(third) == f"wrote 4 bytes to /srv/{tag}"
        # used now: the same call again is a new call, held again
        fourth = await asyncio.wait_for(session.call_tool("write_file", asked), 30)
        assert fourth.is_error is True and approval["id"] not in text_of(fourth)
    assert [w for w in console.writes() if tag in w] == [f"write_file /srv/{tag} once"]
    with console.api("decide") as api:
        items = api.get("/api/v1/approvals", params={"limit": 200}).json()["items"]
    assert len([a for a in items if a["toolName"] == "files-short.write_file"
                and a["arguments"] == asked]) == 2  # fmt: skip


async def test_progress_notifications_while_a_call_waits(console):
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "p"}
    seen: list[tuple] = []

    async def on_progress(progress, total, message):
        seen.append((progress, message))

    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        call = asyncio.create_task(
            session.call_tool("write_file", asked, progress_callback=on_progress)
        )
        approval = await pending_for(console, "files.write_file", asked)
        for _ in range(100):  # GAVEL_MCP_PROGRESS_SECONDS=1 in these tests
            if len(seen) >= 2:
                break
            await asyncio.sleep(0.1)
        await decide(console, approval["id"], "approve")
        result = await asyncio.wait_for(call, 30)
    assert result.is_error is False
    assert len(seen) >= 2 and seen[0][0] < seen[1][0]
    assert approval["id"] in seen[0][1]


async def test_a_client_cancelling_a_waiting_call_withdraws_it_and_it_never_runs(console):
    """The official client abandons a waiting `tools/call` (its task cancelled): it sends
    `notifications/cancelled`, the held call is withdrawn (its approval `cancelled`, the step's
    result says so, audited) and nothing reaches the upstream."""
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "never"}
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        call = asyncio.create_task(session.call_tool("write_file", asked))
        approval = await pending_for(console, "files.write_file", asked)
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        status = None
        with console.api("decide") as api:
            for _ in range(100):
                items = api.get("/api/v1/approvals", params={"status": "cancelled"}).json()
                if approval["id"] in [a["id"] for a in items["items"]]:
                    status = "cancelled"
                    break
                await asyncio.sleep(0.1)
        assert status == "cancelled"
        # the session goes on: another call on it still works (and is held as usual)
        other = {"path": f"/srv/{tag}-2", "content": "x"}
        again = asyncio.create_task(session.call_tool("write_file", other))
        second = await pending_for(console, "files.write_file", other)
        await decide(console, second["id"], "deny")
        assert (await asyncio.wait_for(again, 30)).is_error is True
    assert [w for w in console.writes() if tag in w] == []
    assert audit_actions(console, approval["toolCallId"]) == ["mcp.call.cancelled"]


def _post(url: str, key: str | None, session_id: str | None = None) -> httpx.Response:
    headers = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}  # fmt: skip
    if key:
        headers["Authorization"] = f"Bearer {key}"
    if session_id:
        headers["Mcp-Session-Id"] = session_id
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    return httpx.post(url, json=body, headers=headers, timeout=30)


def _rpc(url: str, key: str, body: dict, session_id: str | None = None, accept=None):
    headers = {"Accept": accept or "application/json, text/event-stream",
               "Content-Type": "application/json", "Authorization": f"Bearer {key}"}  # fmt: skip
    if session_id:
        headers["Mcp-Session-Id"] = session_id
    return httpx.post(url, json=body, headers=headers, timeout=30)


def test_a_passed_call_is_answered_at_the_edge_and_anything_else_by_the_sdk(console):
    """gateway/asgi.py `_passed_call`: a rule-passed `tools/call` on a session is answered
    as JSON without the SDK's per-request server, shaped for the session's protocol version
    as the SDK shapes it; a call to hold, a header the transport refuses, or a malformed call
    are the SDK's, exactly as before."""
    add_server(console, "files-edge", holdSeconds=1)
    with console.api("rules") as api:
        rule = api.post(
            "/api/v1/rules",
            json={"name": "edge echo", "effect": "approve", "toolPattern": "files-edge.echo"},
        )
        assert rule.status_code == 201, rule.text
    url, key = mcp_url(console, "files-edge"), console.keys["mcp"]
    hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "raw", "version": "1"}}}  # fmt: skip
    opened = _rpc(url, key, hello)
    assert opened.status_code == 200, opened.text
    session_id = opened.headers["mcp-session-id"]
    tag = uuid.uuid4().hex[:8]

    def call(tool, arguments, request_id=1, **kw):
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments}}  # fmt: skip
        return _rpc(url, key, body, session_id=session_id, **kw)

    passed = call("echo", {"text": tag}, request_id="a-1")
    assert passed.status_code == 200, passed.text
    assert passed.headers["content-type"] == "application/json"
    assert passed.headers["mcp-session-id"] == session_id
    answer = passed.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] == "a-1"
    assert answer["result"]["content"] == [{"type": "text", "text": tag}]
    assert answer["result"]["isError"] is False
    assert "resultType" not in answer["result"]  # 2025-06-18's surface, as the SDK shapes it
    # a call to hold: the SDK's stream, the bounded hold's "call again"
    held = call("write_file", {"path": f"/srv/{tag}", "content": "x"}, request_id=2)
    assert held.status_code == 200 and held.headers["content-type"].startswith("text/event-stream")
    assert "again with the same arguments" in held.text
    # headers the transport refuses, and a malformed call: the SDK answers them as before
    assert call("echo", {"text": tag}, accept="application/json").status_code == 406
    broken = _rpc(url, key, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                             "params": {"arguments": {}}}, session_id=session_id)  # fmt: skip
    assert broken.status_code in (200, 400) and "error" in broken.text.lower()
    with console.api("rules") as api:
        api.delete(f"/api/v1/rules/{rule.json()['id']}")
    # recorded like any passed call: its audit entry names the rule
    for _ in range(50):
        with console.api("manage") as api:
            page = api.get("/api/v1/audit", params={"action": "mcp.call.forwarded"}).json()
        mine = [e for e in page["items"] if e.get("data", {}).get("server") == "files-edge"]
        if mine:
            break
        time.sleep(0.1)
    assert mine and mine[0]["data"]["passedBy"] == rule.json()["id"]


def test_wrong_keys_scopes_tenants_and_sessions_are_refused(console):
    url = mcp_url(console, "files")
    assert _post(url, None).status_code == 401
    assert _post(url, "gvl_not-a-key").status_code == 401
    assert _post(url, console.keys["ingest"]).status_code == 403  # no `mcp` scope
    assert _post(url, console.keys["manage"]).status_code == 403
    assert _post(url, console.keys["other_mcp"]).status_code == 404  # another tenant's server
    assert _post(mcp_url(console, "nope"), console.keys["mcp"]).status_code == 404
    assert _post(url, console.keys["mcp"], session_id="0" * 32).status_code == 404
    assert _post(url, console.keys["mcp"]).status_code == 200
    with console.api("manage") as api:
        refused = api.get("/api/v1/audit", params={"action": "authz.refused"}).json()["items"]
    assert any(e["objectId"] == "/mcp/files" or "/mcp/files" in str(e) for e in refused)


def test_the_management_api(console):
    with console.api("manage") as api:
        made = api.post(
            "/api/v1/mcp/servers",
            json={
                "name": "crm",
                "url": "https://crm.example/mcp",
                "headers": {"Authorization": "x"},
            },
        )
        assert made.status_code == 201, made.text
        body = made.json()
        assert body["headerNames"] == ["Authorization"] and "headers" not in body
        assert body["passReadOnly"] is False and body["holdSeconds"] == 240
        assert (
            api.post(
                "/api/v1/mcp/servers", json={"name": "crm", "url": "https://crm.example/mcp"}
            ).status_code
            == 409
        )
        for bad in (
            {"name": "Bad Name", "url": "https://x.example/"},
            {"name": "intra", "url": "https://10.0.0.1/mcp"},
            {"name": "local", "url": "stdio", "transport": "stdio"},
            {"name": "typo", "url": "https://x.example/", "passReadonly": True},
        ):
            assert api.post("/api/v1/mcp/servers", json=bad).status_code == 422, bad
        patched = api.patch("/api/v1/mcp/servers/crm", json={"active": False, "holdSeconds": 30})
        assert patched.status_code == 200 and patched.json()["active"] is False
        names = [s["name"] for s in api.get("/api/v1/mcp/servers").json()["items"]]
        assert "crm" in names and "files-stdio" in names
        assert api.delete("/api/v1/mcp/servers/crm").status_code == 204
        assert api.get("/api/v1/mcp/servers/crm").status_code == 404
    with console.api("mcp") as api:
        assert api.get("/api/v1/mcp/servers").status_code == 403
    with console.api("other_mcp") as api:
        assert api.get("/api/v1/mcp/servers/files").status_code == 403


@pytest.mark.postgres
async def test_a_session_continues_on_a_second_daphne_and_a_decision_there_wakes_it(
    console, tmp_path
):
    if not console.env.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://... (and REDIS_URL)")
    if not console.env.get("REDIS_URL"):
        pytest.skip("needs Redis for the channel layer: set REDIS_URL")
    tag = uuid.uuid4().hex[:8]
    asked = {"path": f"/srv/{tag}", "content": "lb"}
    with daphne(console.env, tmp_path / "b.log") as url_b:
        balancer = Balancer(console.url, url_b, first=2)  # initialize (+ initialized) on A
        async with mcp_client(
            mcp_url(console, "files"), console.keys["mcp"], transport=balancer
        ) as session:
            call = asyncio.create_task(session.call_tool("write_file", asked))
            approval = await pending_for(console, "files.write_file", asked, base=url_b)
            await decide(console, approval["id"], "approve")  # through A
            result = await asyncio.wait_for(call, 30)
        ports = balancer.seen
    assert result.is_error is False
    assert ports[0] != ports[-1] and len(set(ports)) == 2
    assert [w for w in console.writes() if tag in w] == [f"write_file /srv/{tag} lb"]


@pytest.mark.postgres
def test_a_key_revoked_on_one_daphne_is_401_at_its_next_request_on_another(console, tmp_path):
    """Both daphnes keep copies of the keys they authenticate (the edge's and the API's); a
    revoke committed on A moves the keys epoch in Redis, which B reads with the key's rate
    limit: B answers 401 at once, not when its copy runs out (GAVEL_MCP_CACHE_SECONDS)."""
    if not console.env.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://... (and REDIS_URL)")
    if not console.env.get("REDIS_URL"):
        pytest.skip("needs Redis for the keys epoch: set REDIS_URL")
    with console.api("manage") as api:
        made = {
            scope: api.post(
                "/api/v1/keys",
                json={"name": f"short-lived {scope}", "scopes": [scope], "principalId": "ann"},
            ).json()
            for scope in ("mcp", "decide")
        }
    with daphne(console.env, tmp_path / "b.log") as url_b:
        on_b = mcp_url(console, "files", base=url_b)

        def decide_on_b() -> int:
            headers = {"Authorization": f"Bearer {made['decide']['secret']}"}
            return httpx.get(f"{url_b}/api/v1/approvals", headers=headers, timeout=30).status_code

        for _ in range(2):  # B reads both keys, then answers from its copies
            assert _post(on_b, made["mcp"]["secret"]).status_code == 200
            assert decide_on_b() == 200
        with console.api("manage") as api:  # revoked through A
            for key in made.values():
                assert api.delete(f"/api/v1/keys/{key['key']['id']}").status_code == 204
        assert _post(on_b, made["mcp"]["secret"]).status_code == 401
        assert decide_on_b() == 401


@pytest.mark.skipif(shutil.which("npx") is None, reason="needs npx (Node.js) for the npm server")
async def test_the_reference_server_everything_from_npm_over_stdio(console):
    """A real server from the npm registry (@modelcontextprotocol/server-everything), started
    by the gateway as the operator's stdio upstream."""
    manage(console.env, "create_mcp_server", "--tenant", "acme", "everything", "--stdio",
           "--", "npx", "-y", "@modelcontextprotocol/server-everything@2026.8.31")  # fmt: skip
    tag = uuid.uuid4().hex[:8]
    async with mcp_client(mcp_url(console, "everything"), console.keys["mcp"]) as session:
        tools = {t.name for t in (await asyncio.wait_for(session.list_tools(), 120)).tools}
        assert "echo" in tools
        call = asyncio.create_task(session.call_tool("echo", {"message": tag}))
        approval = await pending_for(console, "everything.echo", {"message": tag})
        await decide(console, approval["id"], "approve", arguments={"message": f"{tag}!"})
        result = await asyncio.wait_for(call, 60)
    assert result.is_error is not True
    assert text_of(result) == f"Echo: {tag}!"


async def test_sigterm_answers_a_waiting_call_with_call_again_at_once(console, tmp_path):
    """A real daphne stopped by SIGTERM: the call it holds answers "call again with the same
    arguments" (not a dropped connection), the server exits, and the call again on another
    server attaches to the same approval."""
    import signal
    import time

    from tests.support.gateway_live import DAPHNE, free_port, process

    port = free_port()
    args = [DAPHNE, "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"]
    asked = {"path": f"/srv/{uuid.uuid4().hex[:8]}", "content": "stop"}
    with process(args, console.env, tmp_path / "stopping.log", port, "daphne") as proc:
        base = f"http://127.0.0.1:{port}"
        async with mcp_client(mcp_url(console, "files", base), console.keys["mcp"]) as session:
            waiting = asyncio.create_task(session.call_tool("write_file", asked))
            approval = await pending_for(console, "files.write_file", asked)
            await asyncio.sleep(0.5)
            assert not waiting.done()  # held (the server's hold is 240 s)
            stopped_at = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            answer = await asyncio.wait_for(waiting, 10)
        assert answer.is_error is True
        assert "again with the same arguments" in text_of(answer)
        assert approval["id"] in text_of(answer)
        proc.wait(10)  # and the server stopped
        assert time.monotonic() - stopped_at < 10
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"]) as session:
        again = asyncio.create_task(session.call_tool("write_file", asked))
        await decide(console, approval["id"], "approve")
        result = await asyncio.wait_for(again, 30)
    assert (
        result.is_error is False
        and text_of(result) == "wrote 4 bytes to /srv/" + asked["path"].rsplit("/", 1)[1]
    )


async def test_sigterm_writes_the_passed_calls_answered_but_not_yet_recorded(console, tmp_path):
    """Rule-passed calls are answered first and recorded right after (gateway/flow.py's
    Recorder): a server stopped by SIGTERM at once writes every one before it exits."""
    import signal

    from tests.support.gateway_live import DAPHNE, free_port, process

    with console.api("rules") as api:
        rule = api.post(
            "/api/v1/rules",
            json={"name": "echo passes", "effect": "approve", "toolPattern": "files.echo"},
        )
        assert rule.status_code == 201, rule.text
    tag = uuid.uuid4().hex[:8]
    port = free_port()
    args = [DAPHNE, "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"]
    try:
        with process(args, console.env, tmp_path / "recording.log", port, "daphne") as proc:
            base = f"http://127.0.0.1:{port}"
            async with mcp_client(mcp_url(console, "files", base), console.keys["mcp"]) as s:
                for i in range(5):
                    answer = await s.call_tool("echo", {"text": f"{tag}-{i}"})
                    assert answer.is_error is False
                proc.send_signal(signal.SIGTERM)  # at once: records may still be pending
            proc.wait(15)
        with console.api("decide") as api:
            items = api.get("/api/v1/approvals", params={"status": "approved", "limit": 200})
        mine = [a for a in items.json()["items"] if tag in str(a["arguments"])]
        assert sorted(a["arguments"]["text"] for a in mine) == [f"{tag}-{i}" for i in range(5)]
        assert {a["decidedByRule"] for a in mine} == {rule.json()["id"]}
        for approval in mine:
            assert audit_actions(console, approval["toolCallId"]) == ["mcp.call.forwarded"]
    finally:
        with console.api("rules") as api:
            api.delete(f"/api/v1/rules/{rule.json()['id']}")


async def test_deleting_the_session_finishes_its_run(console):
    run_id = f"mcp-delete-{uuid.uuid4().hex[:8]}"
    headers = {"X-Gavel-Run-Id": run_id}
    async with mcp_client(mcp_url(console, "files"), console.keys["mcp"], headers=headers) as s:
        assert (await s.list_tools()).tools
        with console.api("ingest") as api:
            assert api.get(f"/api/v1/runs/{run_id}").json()["status"] != "done"
    # the client left its context: it sent DELETE with its Mcp-Session-Id
    with console.api("ingest") as api:
        run = api.get(f"/api/v1/runs/{run_id}")
    assert run.status_code == 200, run.text
    assert run.json()["status"] == "done"
