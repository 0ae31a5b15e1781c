"""`make run`'s MCP demo: the `workspace` server (upstream.py) and where its assistant's key is
kept (demo_setup writes it, demo_mcp_client reads it)."""

from pathlib import Path

from django.conf import settings


def key_file() -> Path:
    return Path(settings.VAR_DIR) / "demo-mcp.key"
