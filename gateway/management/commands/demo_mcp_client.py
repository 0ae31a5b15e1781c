"""`manage.py demo_mcp_client [--sessions N] [--url URL] [--pause SECONDS]`: `make run`'s
simulated coding assistant, an MCP client as any other (the official SDK's `ClientSession`
over Streamable HTTP, no Gavel SDK) in front of the demo's `workspace` server through the
gateway at `/mcp/workspace`, with the key `demo_setup` keeps in var/demo-mcp.key.

Each session lists the tools, reads (read-only: the demo server passes them, so they return
at once and are recorded), then asks to change a file, and now and then to delete one: those
wait in the inbox as `workspace.write_file` / `workspace.delete_file` until a reviewer
decides. Told to call again (the gateway's bounded hold), it calls again with the same
arguments, as a model would, and the same call attaches. Then it ends the session (its run
finishes) and pauses. `--sessions 0` runs forever.
"""

from __future__ import annotations

import asyncio
import logging
import random

import httpx2
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from gateway.demo import key_file

SERVER = "workspace"
CHANGES = (
    ("config/prod.env", "PAYMENTS_URL=https://payments.example.com\nRETRIES=5\n"),
    ("notes/outage.md", "Outage: the payments provider timed out; retries raised to 5.\n"),
    ("README.md", "# Billing service\n\nHandles invoices, refunds and retries.\n"),
)
DELETIONS = ("notes/outage.md", "config/prod.env")
MAX_CALLS_AGAIN = 20  # a call the bounded hold answered "call again": at most this many times


def _text(result) -> str:
    return " ".join(getattr(part, "text", "") for part in result.content)


def _outcome(tool: str, result) -> tuple[str, str, str]:
    return tool, "refused" if result.is_error else "done", _text(result)


async def held_call(session: ClientSession, tool: str, arguments: dict) -> tuple[str, str]:
    """(outcome, text): 'done' or 'refused' (denied, expired, failed), after calling again while
    the gateway says the call still waits."""
    for _ in range(MAX_CALLS_AGAIN):
        _, outcome, text = _outcome(tool, await session.call_tool(tool, arguments))
        if outcome == "refused" and "again with the same arguments" in text:
            continue  # the bounded hold: the same call attaches to the same approval
        return outcome, text
    return "refused", "gave up waiting"


async def one_session(url: str, key: str, rng: random.Random) -> list[tuple[str, str, str]]:
    """One assistant session; what each call came to, as (tool, outcome, text)."""
    headers = {"Authorization": f"Bearer {key}"}
    # Longer than the server's hold, so the gateway's own "call again" is what ends a wait.
    timeout = httpx2.Timeout(30.0, read=settings.GAVEL_MCP_UPSTREAM_DEADLINE_SECONDS + 600)
    done: list[tuple[str, str, str]] = []
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(f"{url}/mcp/{SERVER}", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        tools = {tool.name for tool in (await session.list_tools()).tools}
        missing = {"list_files", "read_file", "write_file"} - tools
        if missing:
            raise CommandError(f"the {SERVER} server lacks {', '.join(sorted(missing))}")
        done.append(_outcome("list_files", await session.call_tool("list_files", {})))
        path, content = rng.choice(CHANGES)
        done.append(_outcome("read_file", await session.call_tool("read_file", {"path": path})))
        done.append(
            (
                "write_file",
                *await held_call(session, "write_file", {"path": path, "content": content}),
            )
        )
        if "delete_file" in tools and rng.random() < 0.3:
            target = {"path": rng.choice(DELETIONS)}
            done.append(("delete_file", *await held_call(session, "delete_file", target)))
    return done


class Command(BaseCommand):
    help = "A simulated coding assistant whose MCP tool calls go through the gateway (make run)."
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--sessions", type=int, default=0, help="0: forever")
        parser.add_argument(
            "--pause", type=float, default=45.0, help="seconds between sessions (about)"
        )
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args, url, sessions, pause, seed, **options):
        path = key_file()
        key = path.read_text().strip() if path.exists() else ""
        if not key:
            raise CommandError(f"no demo MCP key in {path}: run `manage.py demo_setup`")
        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("mcp").setLevel(logging.WARNING)
        asyncio.run(self._loop(url.rstrip("/"), key, sessions, pause, random.Random(seed)))

    async def _loop(self, url: str, key: str, sessions: int, pause: float, rng) -> None:
        count = failures = 0
        while sessions == 0 or count < sessions:
            try:
                calls = await one_session(url, key, rng)
            except CommandError:
                raise
            except Exception as exc:  # the console not up yet, restarting, or a dropped stream
                failures += 1
                if sessions and failures >= 30:
                    raise CommandError(f"the gateway at {url} did not answer: {exc!r}") from None
                await asyncio.sleep(min(5.0, 0.2 * failures))
                continue
            failures = 0
            count += 1
            said = ", ".join(f"{tool} {outcome}" for tool, outcome, _ in calls)
            self.stdout.write(f"  MCP session ({SERVER}): {said}")
            self.stdout.flush()
            if sessions == 0 or count < sessions:
                await asyncio.sleep(pause * rng.uniform(0.5, 1.5))
