"""`manage.py demo_setup`: the demo tenant for `make run`, idempotent.

Tenant `demo`; a lead, a reviewer, an admin and a viewer who sign in with passwords generated
once into var/demo-logins.json; an ingest key for the demo agent, its raw value kept only in
var/demo-agent.key (the database holds its hash); a daily budget of the SQL analyst agent,
led by the lead, sized to fill in about an hour (DEMO_HOUR_MINOR_UNITS): each run of this
command gives it another hour from today's spend, and the day renews it at midnight. Prints
the logins (`--no-banner`: not; `serve_demo` prints them once the server answers).

The MCP gateway's demo: the `workspace` server (gateway/demo/upstream.py over stdio, registered
as the operator registers one, passing read-only tools), a developer whose coding assistant
uses it, and that assistant's `mcp` key, its raw value kept only in var/demo-mcp.key (the
demo MCP client reads it).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

from django.conf import settings
from django.db import transaction

from budgets.services import budget_ensure
from console.core.commands import ProvisioningCommand
from console.directory.services import api_key_create, tenant_create
from console.directory.services.principals import principal_create
from console.models import ApiKey, Principal
from gateway.demo import key_file as mcp_key_file

TENANT = "demo"
PEOPLE = (
    ("lead@demo.example", "Lena Lead", "lead"),
    ("reviewer@demo.example", "Rey Reviewer", "reviewer"),
    ("admin@demo.example", "Ada Admin", "admin"),
    ("viewer@demo.example", "Vic Viewer", "viewer"),
)
LEAD = PEOPLE[0][0]
ADMIN = PEOPLE[2][0]
AGENT_KEY_NAME = "demo agent"
# The MCP gateway's demo: a developer (no login) whose coding assistant's tool calls on the
# `workspace` server wait in the inbox.
DEVELOPER = ("dev@demo.example", "Dee Developer", "viewer")
MCP_SERVER = "workspace"
MCP_KEY_NAME = "Dee's coding assistant"
MCP_HOLD_SECONDS = 60  # the bounded hold: the assistant calls again after a minute
# What the demo's SQL analyst spends in an hour of `make run` (measured: about 1 cent a
# minute while its calls are decided, less while they wait): its budget reaches 50 % after
# about half an hour, 80 % after ~50 minutes and asks its lead for overrides after an hour.
DEMO_HOUR_MINOR_UNITS = 60
# A daily budget of one demo agent that asks its lead once it is spent: `make run` shows it
# filling up, its alerts, and override requests in the lead's inbox.
DEMO_BUDGET = {
    "name": "SQL analyst, daily",
    "scope": {"type": "agent", "id": "sql-analyst"},
    "period": "day",
    "ceiling_minor_units": DEMO_HOUR_MINOR_UNITS,
    "thresholds": [50, 80, 100],
    "over_budget": "ask",
    "leads": [LEAD],
}


def logins_file() -> Path:
    return Path(settings.VAR_DIR) / "demo-logins.json"


def agent_key_file() -> Path:
    return Path(settings.VAR_DIR) / "demo-agent.key"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def read_logins() -> dict[str, str]:
    path = logins_file()
    return json.loads(path.read_text()) if path.exists() else {}


def login_url(base_url: str | None = None) -> str:
    if base_url is None:
        host = os.environ.get("HOST") or "127.0.0.1"
        base_url = f"http://{host}:{os.environ.get('PORT') or '8000'}"
    return f"{base_url.rstrip('/')}/accounts/login/"


def _ensure_person(tenant, external_id: str, name: str, role: str, password: str) -> bool:
    """True when the principal was created or its login (re)set."""
    existing = Principal.objects.filter(tenant=tenant, external_id=external_id).first()
    user = existing.user if existing else None
    if user is not None and user.check_password(password) and existing.roles.filter(name=role):
        return False
    principal_create(
        tenant=tenant, external_id=external_id, name=name, password=password, roles=[role]
    )
    return True


def _ensure_agent_key(tenant) -> bool:
    """True when a new key was made (none stored yet, or the stored one no longer works)."""
    path = agent_key_file()
    raw = path.read_text().strip() if path.exists() else ""
    key = ApiKey.objects.for_raw_key(raw) if raw else None
    if key is not None and key.tenant_id == tenant.pk and key.has_scope("ingest"):
        return False
    _, raw = api_key_create(tenant=tenant, name=AGENT_KEY_NAME, scopes=["ingest"])
    _write_private(path, raw + "\n")
    return True


def _ensure_mcp(tenant) -> bool:
    """The `workspace` server, the developer and their assistant's key; True when a new key
    was made. The server's command follows this checkout (set again only when it moved)."""
    from gateway.models import McpServer
    from gateway.services import server_upsert_operator

    command = [sys.executable, str(Path(settings.BASE_DIR) / "gateway" / "demo" / "upstream.py")]
    server = McpServer.objects.filter(tenant=tenant, name=MCP_SERVER).first()
    if server is None or server.command != command:
        server, created = server_upsert_operator(tenant=tenant, name=MCP_SERVER, command=command)
        if created:
            server.pass_read_only, server.hold_seconds = True, MCP_HOLD_SECONDS
            server.save(update_fields=["pass_read_only", "hold_seconds"])
    external_id, name, role = DEVELOPER
    developer = Principal.objects.filter(tenant=tenant, external_id=external_id).first()
    if developer is None:
        developer, _ = principal_create(
            tenant=tenant, external_id=external_id, name=name, roles=[role]
        )
    path = mcp_key_file()
    raw = path.read_text().strip() if path.exists() else ""
    key = ApiKey.objects.for_raw_key(raw) if raw else None
    if key is not None and key.tenant_id == tenant.pk and key.has_scope("mcp"):
        return False
    _, raw = api_key_create(tenant=tenant, name=MCP_KEY_NAME, scopes=["mcp"], principal=developer)
    _write_private(path, raw + "\n")
    return True


def _demo_budget_fields(tenant) -> dict:
    """The demo budget with an hour of headroom from what the agent spent today (so a second
    `make run` the same day tells the story again instead of starting over budget)."""
    from budgets.models import Budget
    from budgets.spend import budget_current

    held = Budget.objects.filter(
        tenant=tenant, name=DEMO_BUDGET["name"], archived_at__isnull=True
    ).first()
    spent = budget_current(budget=held)["spent_minor_units"] if held else 0
    return {**DEMO_BUDGET, "ceiling_minor_units": spent + DEMO_HOUR_MINOR_UNITS}


class Command(ProvisioningCommand):
    help = "Set up the demo tenant, its logins and the demo agent's key (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-banner", action="store_true", help="do not print the logins (serve_demo does)"
        )

    def handle(self, *args, no_banner=False, **options):
        with transaction.atomic():
            tenant, created = tenant_create(slug=TENANT, name="Demo")
            logins = read_logins()
            fresh = {pid: logins.get(pid) or secrets.token_urlsafe(12) for pid, _, _ in PEOPLE}
            changed = [
                pid
                for pid, name, role in PEOPLE
                if _ensure_person(tenant, pid, name, role, fresh[pid])
            ]
            new_key = _ensure_agent_key(tenant)
            new_mcp_key = _ensure_mcp(tenant)
            _, budget_created = budget_ensure(tenant=tenant, fields=_demo_budget_fields(tenant))
        if fresh != logins:
            _write_private(logins_file(), json.dumps(fresh, indent=2) + "\n")
        self.stdout.write(
            f"demo tenant '{TENANT}' {'created' if created else 'already there'}; "
            f"logins {'set for ' + ', '.join(changed) if changed else 'unchanged'}; "
            f"demo agent key {'created' if new_key else 'unchanged'} ({agent_key_file()}); "
            f"budget '{DEMO_BUDGET['name']}' {'created' if budget_created else 'kept'}; "
            f"demo MCP key {'created' if new_mcp_key else 'unchanged'} ({mcp_key_file()})"
        )
        if not no_banner:
            self.stdout.write(login_banner(fresh))


def login_banner(logins: dict[str, str], *, base_url: str | None = None) -> str:
    lines = [f"Sign in at {login_url(base_url)}"]
    for pid, _, role in PEOPLE:
        if pid in logins:
            lines.append(f"  {role + ':':9} {pid:22} password: {logins[pid]}")
    lines.append(f"(passwords are kept in {logins_file()})")
    return "\n".join(lines)
