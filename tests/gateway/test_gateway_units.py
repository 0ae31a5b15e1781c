"""The gateway's pieces that need no live server: upstream URL and address policy (names
resolved through a stub: no test resolves a real name), secret headers at rest, canonical
arguments, the operator's command, the inbox's marker."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from django.core.management import CommandError, call_command

from console.core import outbound
from console.core.errors import Conflict, Invalid
from gateway import flow, records, services, tasks, upstream
from gateway.models import McpServer
from gateway.templatetags.mcp import mcp_server
from tests.support.factories import PrincipalFactory, TenantFactory

pytestmark = pytest.mark.django_db


def test_canonical_arguments_ignore_key_order_and_spacing():
    assert records.canonical({"b": 1, "a": [1, {"y": 2, "x": 1}]}) == records.canonical(
        {"a": [1, {"x": 1, "y": 2}], "b": 1}
    )
    assert records.canonical({"a": 1}) != records.canonical({"a": "1"})
    assert records.canonical(None) == records.canonical({})


@pytest.mark.parametrize(
    "url",
    [
        "http://mcp.example.com/mcp",  # http without GAVEL_MCP_ALLOW_HTTP
        "https://10.0.0.1/mcp",
        "https://169.254.169.254/latest",
        "https://user:pw@mcp.example.com/mcp",
        "https://localhost/mcp",
        "ftp://mcp.example.com/",
    ],
)
def test_urls_an_upstream_may_not_have(settings, url):
    settings.GAVEL_MCP_ALLOW_HTTP = False
    settings.GAVEL_OUTBOUND_ALLOW_LOOPBACK = False
    with pytest.raises(Invalid):
        services.check_url(url)


def test_the_development_flag_allows_http_and_loopback_only(settings):
    settings.GAVEL_MCP_ALLOW_HTTP = True
    services.check_url("http://127.0.0.1:8000/mcp")
    with pytest.raises(Invalid):
        services.check_url("http://192.168.1.5/mcp")


def test_a_name_resolving_to_an_internal_address_is_refused_before_connecting(
    settings, monkeypatch
):
    settings.GAVEL_MCP_ALLOW_HTTP = False
    settings.GAVEL_OUTBOUND_ALLOW_LOOPBACK = False
    asked = []

    def stub(host, port):
        asked.append((host, port))
        return {"rebind.example": ["10.1.2.3"], "mixed.example": ["93.184.216.34", "127.0.0.1"],
                "public.example": ["93.184.216.34"]}[host]  # fmt: skip

    monkeypatch.setattr(outbound, "resolve", stub)
    for host in ("rebind.example", "mixed.example"):
        with pytest.raises(upstream.UpstreamError) as refused:
            upstream._check_destination(f"https://{host}/mcp")
        assert str(refused.value) == outbound.REFUSED
    upstream._check_destination("https://public.example/mcp")  # allowed (nothing connects)
    assert asked == [("rebind.example", 443), ("mixed.example", 443), ("public.example", 443)]


def test_secret_headers_are_stored_encrypted_and_never_in_the_wire_form():
    tenant = TenantFactory()
    admin = PrincipalFactory(tenant=tenant)
    server = services.server_create(
        tenant=tenant,
        fields={
            "name": "crm",
            "url": "https://crm.example/mcp",
            "headers": {"Authorization": "Bearer very-secret"},
        },  # fmt: skip
        viewer=admin,
    )
    stored = McpServer.objects.get(pk=server.pk)
    assert "very-secret" not in stored.headers_encrypted
    assert services.headers_of(stored) == {"Authorization": "Bearer very-secret"}
    assert "very-secret" not in json.dumps(services.server_wire(stored))
    with pytest.raises(Conflict):
        services.server_create(
            tenant=tenant, fields={"name": "crm", "url": "https://x.example/"}, viewer=admin
        )
    with pytest.raises(Invalid):
        services.server_create(
            tenant=tenant,
            fields={
                "name": "bad-header",
                "url": "https://x.example/",
                "headers": {"X-A": "one\r\nInjected: two"},
            },  # fmt: skip
            viewer=admin,
        )
    with pytest.raises(Invalid) as twice:  # header names are case-insensitive
        services.server_create(
            tenant=tenant,
            fields={"name": "twice", "url": "https://x.example/",
                    "headers": {"X-Team": "a", "x-team": "b"}},
            viewer=admin,
        )  # fmt: skip
    assert twice.value.details[0]["path"] == "body.headers.x-team"
    assert not McpServer.objects.filter(name__in=["bad-header", "twice"]).exists()


def test_create_mcp_server_is_idempotent_and_refuses_bad_input():
    tenant = TenantFactory()
    call_command("create_mcp_server", "files", tenant=tenant.slug, stdio=True,
                 command=["python", "server.py"])  # fmt: skip
    call_command("create_mcp_server", "files", tenant=tenant.slug, stdio=True,
                 command=["python", "server.py", "--v2"])  # fmt: skip
    server = McpServer.objects.get(tenant=tenant, name="files")
    assert server.transport == "stdio" and server.command == ["python", "server.py", "--v2"]
    with pytest.raises(CommandError):
        call_command("create_mcp_server", "files", tenant=tenant.slug)  # neither
    with pytest.raises(CommandError):
        call_command("create_mcp_server", "Bad Name", tenant=tenant.slug, url="https://x.example/")
    assert McpServer.objects.filter(tenant=tenant).count() == 1


def test_the_inbox_marks_only_gateway_calls_with_their_server():
    gateway_call = SimpleNamespace(tool_call_id="mcp_0123456789abcdef", tool_name="files.write")
    runtime_call = SimpleNamespace(tool_call_id="call_1", tool_name="files.write")
    assert mcp_server(gateway_call) == "files"
    assert mcp_server(runtime_call) == ""


def test_a_single_record_starts_once_the_answer_is_on_its_way(monkeypatch):
    """flow.Recorder: a held call's result record (an ORM write in a thread) waits
    ANSWER_FIRST_SECONDS, so the answer handed back is written first; a stopping server
    writes it at once. Either way it is written, exactly once."""
    monkeypatch.setattr(flow, "db", lambda fn: _in_loop(fn))
    monkeypatch.setattr(flow.Recorder, "ANSWER_FIRST_SECONDS", 0.2)

    async def scenario(stopping: bool) -> tuple[list, list]:
        monkeypatch.setattr(flow.Waiting, "stopping", stopping)
        written, loop = [], asyncio.get_running_loop()
        started = loop.time()
        await flow.Recorder.later(lambda **kw: written.append(loop.time() - started), call=1)
        early = list(written)
        await asyncio.sleep(0.05)  # the answer's own writing, meanwhile
        during = list(written)
        await flow.Recorder.drain(timeout=5)
        return early + during, written

    before, written = asyncio.run(scenario(stopping=False))
    assert before == [] and len(written) == 1 and written[0] >= 0.2
    before, written = asyncio.run(scenario(stopping=True))
    assert len(written) == 1 and written[0] < 0.2


def _in_loop(fn):
    async def call(**kwargs):
        return fn(**kwargs)

    return call


def test_a_held_call_has_its_sessions_passed_calls_recorded_first(monkeypatch):
    """flow.Recorder.session_first: before a held call takes its step, the passed calls its
    session made before it and still waiting in this process are recorded (the others stay
    queued for their batch), and a batch already being written with one of them is waited
    for: the run's steps follow the order of the calls."""
    written = []
    monkeypatch.setattr(flow, "db", lambda fn: _in_loop(fn))
    monkeypatch.setattr(
        records,
        "calls_record_passed",
        lambda *, items: written.append([call.name for call, _, _ in items]),
    )

    def item(session_id: int, name: str):
        return (SimpleNamespace(session_id=session_id, name=name), {}, None)

    async def scenario() -> None:
        monkeypatch.setattr(flow.Recorder, "queue", [item(1, "a1"), item(2, "b1"), item(1, "a2")])
        await flow.Recorder.session_first(1)
        assert written == [["a1", "a2"]]
        assert [call.name for call, _, _ in flow.Recorder.queue] == ["b1"]
        await flow.Recorder.session_first(3)  # nothing of its own: nothing written
        assert written == [["a1", "a2"]]

        release = asyncio.Event()
        order = []

        async def batch_write():
            await release.wait()
            order.append("batch written")

        writing = asyncio.get_running_loop().create_task(batch_write())
        monkeypatch.setattr(flow.Recorder, "writing", (frozenset({2}), writing))
        first = asyncio.get_running_loop().create_task(flow.Recorder.session_first(2))
        await asyncio.sleep(0.05)
        assert not first.done()  # its session's batch is still being written
        release.set()
        await first
        order.append("held call's step")
        assert order == ["batch written", "held call's step"]

    asyncio.run(scenario())


def test_a_client_calling_tools_one_after_another_fills_one_batch(monkeypatch):
    """flow.Recorder: passed calls answered every 30 ms (a client calling one tool after
    another) are recorded in one batch once none came for IDLE_SECONDS, not one batch per
    call: a batch's statements cost the same for 1 call or 40 (test_gateway_queries)."""
    batches = []
    monkeypatch.setattr(flow, "db", lambda fn: _in_loop(fn))
    monkeypatch.setattr(records, "calls_record_passed", lambda *, items: batches.append(len(items)))
    monkeypatch.setattr(flow.Recorder, "queue", [])
    monkeypatch.setattr(flow.Recorder, "flusher", None)

    async def scenario() -> None:
        for n in range(8):
            call = SimpleNamespace(session_id=1, pk=n)
            await flow.Recorder.later(records.call_record_passed, call=call, result={}, key=None)
            await asyncio.sleep(0.03)
        assert batches == []  # still calling: nothing written yet
        await flow.Recorder.drain(timeout=5)

    assert flow.Recorder.IDLE_SECONDS > 0.03 * 3  # a pause of a few calls' length
    asyncio.run(scenario())
    assert batches == [8]


def _task_call(state, approval_status=None, result=None, ttl=None):
    from datetime import UTC, datetime, timedelta

    created = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
    approval = None
    if approval_status is not None:
        decided = created + timedelta(seconds=30) if approval_status != "pending" else None
        approval = SimpleNamespace(status=approval_status, public_id="apr_1", decided_at=decided)
    return SimpleNamespace(
        state=state,
        approval=approval,
        result=result,
        tool_call_id="mcp_0123456789abcdef",
        task_ttl=ttl,
        created_at=created,
        forwarded_at=None,
        finished_at=created + timedelta(seconds=31) if state in ("done", "refused") else None,
    )


@pytest.mark.parametrize(
    ("state", "approval", "result", "status", "message"),
    [
        ("held", "pending", None, "working", "waiting for a reviewer (approval apr_1)"),
        ("held", "approved", None, "working", "approved; on its way to the server"),
        ("forwarding", None, None, "working", "approved; on its way to the server"),
        ("held", "denied", None, "working", "decided; its answer is being written"),
        ("done", "approved", {"content": [], "isError": False}, "completed", "the tool answered"),
        (
            "done",
            None,
            {"content": [], "isError": True},
            "failed",
            "the tool answered with an error",
        ),
        ("refused", "denied", {"isError": True}, "failed", "denied by a reviewer"),
        ("refused", "expired", {"isError": True}, "failed", "expired: no reviewer decided in time"),
        ("refused", "cancelled", {"isError": True}, "cancelled", "cancelled by the client"),
        ("refused", "approved", {"isError": True}, "cancelled", "cancelled by the client"),
        ("held", "cancelled", None, "cancelled", "cancelled"),
    ],
)
def test_a_calls_task_status(state, approval, result, status, message):
    assert tasks.status_of(_task_call(state, approval, result)) == (status, message)


def test_a_task_on_the_wire_always_says_its_ttl_and_polls_only_while_working():
    working = tasks.task_of(_task_call("held", "pending"))
    assert working == {
        "taskId": "mcp_0123456789abcdef",
        "status": "working",
        "statusMessage": "waiting for a reviewer (approval apr_1)",
        "createdAt": "2026-12-06T10:00:00Z",
        "lastUpdatedAt": "2026-12-06T10:00:00Z",
        "ttl": None,  # unlimited: present as null, as the spec asks
        "pollInterval": tasks.POLL_MS,
    }
    done = tasks.task_of(_task_call("done", "approved", {"content": []}, ttl=60_000))
    assert done["status"] == "completed" and done["ttl"] == 60_000
    assert done["lastUpdatedAt"] == "2026-12-06T10:00:31Z" and "pollInterval" not in done
    assert tasks.offered("2025-11-25") and not tasks.offered("2025-06-18")
    assert not tasks.offered(None) and not tasks.offered("2026-07-28")
