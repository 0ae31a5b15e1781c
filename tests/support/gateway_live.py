"""A live gateway for the tests and the bench: a migrated console (its own database), daphne
processes, and a real upstream MCP server (tests/gateway/upstream_server.py) over http."""

from __future__ import annotations

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
