"""A live gateway for the tests and the bench: a migrated console (its own database), daphne
processes, and a real upstream MCP server (tests/gateway/upstream_server.py) over http."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.support.live_console import DAPHNE, ROOT, last_line, live_env, manage

UPSTREAM = str(Path(__file__).resolve().parents[1] / "gateway" / "upstream_server.py")
TENANT, OTHER = "acme", "globex"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(proc, port: int, log: Path, what: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start: {log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)


@contextlib.contextmanager
def process(args: list[str], env: dict, log: Path, port: int, what: str):
    with log.open("ab") as out:
        proc = subprocess.Popen(  # noqa: S603 - our own programs
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        _wait_port(proc, port, log, what)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def daphne(env: dict, log: Path):
    port = free_port()
    args = [DAPHNE, "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"]
    with process(args, env, log, port, "daphne"):
        yield f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def upstream_http(env: dict, log: Path):
    port = free_port()
    with process([sys.executable, UPSTREAM, "--http", str(port)], env, log, port, "upstream"):
        yield f"http://127.0.0.1:{port}/mcp"


@dataclass
class Console:
    env: dict
    keys: dict = field(default_factory=dict)
    urls: list = field(default_factory=list)
    upstream_url: str = ""
    count_file: Path | None = None

    @property
    def url(self) -> str:
        return self.urls[0]

    def writes(self) -> list[str]:
        """The upstream's `write_file` runs (each appends a line)."""
        if not self.count_file.exists():
            return []
        return self.count_file.read_text().splitlines()

    def api(self, key: str, base: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=base or self.url,
            headers={"Authorization": f"Bearer {self.keys[key]}"},
            timeout=30,
        )


def env_for(tmp: Path, *, redis: bool) -> dict:
    env = live_env(tmp, "mcp")
    env.update(GAVEL_MCP_ALLOW_HTTP="1", GAVEL_MCP_PROGRESS_SECONDS="1")
    env["UPSTREAM_COUNT_FILE"] = str(tmp / "upstream-writes.txt")
    if redis and os.environ.get("REDIS_URL"):
        env["REDIS_URL"] = os.environ["REDIS_URL"]
        env["REDIS_PREFIX"] = f"mcp-test-{uuid.uuid4().hex[:8]}"
    return env


PROVISION = """
import io, json
from django.core.management import call_command

def run(*args, **options):
    out = io.StringIO()
    call_command(*args, stdout=out, **options)
    return out.getvalue().strip().splitlines()[-1].strip()

call_command("migrate", verbosity=0)
for tenant in ("{tenant}", "{other}"):
    run("create_tenant", tenant)
run("create_principal", "ann", tenant="{tenant}", role=["admin"])
run("create_principal", "rev", tenant="{tenant}", role=["reviewer"])
run("create_principal", "lea", tenant="{tenant}", role=["lead"])
run("create_principal", "gus", tenant="{other}", role=["admin"])
keys = dict(
    mcp=run("create_api_key", tenant="{tenant}", name="claude-desktop", scope="mcp",
            principal="ann"),
    decide=run("create_api_key", tenant="{tenant}", name="rev", scope="decide", principal="rev"),
    manage=run("create_api_key", tenant="{tenant}", name="ann-admin", scope="manage",
               principal="ann"),
    rules=run("create_api_key", tenant="{tenant}", name="lea-rules", scope="manage",
              principal="lea"),
    ingest=run("create_api_key", tenant="{tenant}", name="runtime", scope="ingest"),
    other_mcp=run("create_api_key", tenant="{other}", name="gus-mcp", scope="mcp",
                  principal="gus"),
    rev_mcp=run("create_api_key", tenant="{tenant}", name="rev-mcp", scope="mcp",
                principal="rev"),
)
run("create_mcp_server", "files-stdio", tenant="{tenant}", stdio=True, command={stdio!r})
print(json.dumps(keys))
"""


def provision(console: Console) -> None:
    """Migrate and provision in one process (each manage.py start costs seconds)."""
    script = PROVISION.format(
        tenant=TENANT, other=OTHER, stdio=[sys.executable, UPSTREAM, "--stdio"]
    )
    out = manage(console.env, "shell", "-c", script)
    console.keys.update(json.loads(last_line(out)))


@contextlib.asynccontextmanager
async def mcp_client(url: str, key: str, *, headers: dict | None = None, transport=None):
    """The official client: ClientSession over Streamable HTTP, initialized."""
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}", **(headers or {})},
            timeout=60,
            transport=transport,
        ) as http,
        streamable_http_client(url, http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


class Balancer(httpx2.AsyncBaseTransport):
    """A load balancer in the client: the first `first` requests to one daphne, the rest to
    another (a session opened on A continues on B)."""

    def __init__(self, a: str, b: str, first: int = 2):
        self._inner = httpx2.AsyncHTTPTransport()
        self.ports = [httpx2.URL(a).port, httpx2.URL(b).port]
        self.first = first
        self.sent = 0
        self.seen: list[int] = []

    async def handle_async_request(self, request):
        port = self.ports[0] if self.sent < self.first else self.ports[1]
        self.sent += 1
        self.seen.append(port)
        request.url = request.url.copy_with(port=port)
        return await self._inner.handle_async_request(request)

    async def aclose(self):
        await self._inner.aclose()


@contextlib.contextmanager
def live_gateway(tmp: Path):
    """A console (with Redis) before the test upstream over http, and the tenant's `files`
    server on it (secret header `X-Upstream-Token`)."""
    env = env_for(tmp, redis=True)
    live = Console(env=env, count_file=tmp / "upstream-writes.txt")
    provision(live)
    with upstream_http(env, tmp / "upstream.log") as upstream, daphne(env, tmp / "a.log") as url:
        live.upstream_url, live.urls = upstream, [url]
        with live.api("manage") as api:
            made = api.post(
                "/api/v1/mcp/servers",
                json={"name": "files", "url": upstream, "headers": {"X-Upstream-Token": "s3"}},
            )
            assert made.status_code == 201, made.text
        yield live


def add_server(console: Console, name: str, **fields) -> None:
    """An http server of the tenant in front of the test upstream (the management API)."""
    with console.api("manage") as api:
        made = api.post(
            "/api/v1/mcp/servers", json={"name": name, "url": console.upstream_url, **fields}
        )
        assert made.status_code == 201, made.text


def mcp_url(console: Console, name: str, base: str | None = None) -> str:
    return f"{base or console.url}/mcp/{name}"


async def pending_for(console: Console, tool: str, arguments: dict, base=None) -> dict:
    """The pending approval of this call, once the gateway has recorded it."""
    async with httpx.AsyncClient(
        base_url=base or console.url,
        headers={"Authorization": f"Bearer {console.keys['decide']}"},
        timeout=30,
    ) as client:
        for _ in range(300):
            page = (await client.get("/api/v1/approvals", params={"status": "pending"})).json()
            for item in page["items"]:
                if item["toolName"] == tool and item["arguments"] == arguments:
                    return item
            await asyncio.sleep(0.1)
    raise AssertionError(f"no pending approval for {tool} {arguments}")


async def decide(console, approval_id, decision, base=None, **body) -> dict:
    async with httpx.AsyncClient(
        base_url=base or console.url,
        headers={"Authorization": f"Bearer {console.keys['decide']}"},
        timeout=30,
    ) as client:
        answer = await client.post(
            f"/api/v1/approvals/{approval_id}/decision", json={"decision": decision, **body}
        )
        assert answer.status_code == 200, answer.text
        return answer.json()


def text_of(result) -> str:
    return result.content[0].text


def audit_actions(console: Console, object_id: str) -> list[str]:
    with console.api("manage") as api:
        page = api.get("/api/v1/audit", params={"objectType": "mcp_call", "objectId": object_id})
        assert page.status_code == 200, page.text
        return [entry["action"] for entry in page.json()["items"]]


def expire_now(console: Console, approval_id: str) -> None:
    """Time passes: the approval's expiry is now (the gateway's next re-read expires it)."""
    manage(console.env, "shell", "-c",
           "from approvals.models import Approval; from django.utils import timezone; "
           f"Approval.objects.filter(public_id='{approval_id}')"
           ".update(expires_at=timezone.now())")  # fmt: skip
