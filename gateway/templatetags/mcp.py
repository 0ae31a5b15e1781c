"""`{{ approval|mcp_server }}`: the MCP server a held call came through the gateway from ("" for
a runtime's call). The gateway names its calls' ids `mcp_<16 hex>` (gateway/records.py), and
their tool `<server>.<tool>`: no query per card."""

import re

from django import template

register = template.Library()
GATEWAY_CALL_ID = re.compile(r"^mcp_[0-9a-f]{16}$")


@register.filter
def mcp_server(approval) -> str:
    if not GATEWAY_CALL_ID.match(getattr(approval, "tool_call_id", "") or ""):
        return ""
    return (approval.tool_name or "").partition(".")[0]


@register.filter
def mcp_address(server) -> str:
    """Where an upstream is: its URL, or the operator's command (stdio)."""
    if server.transport == "stdio":
        return " ".join(server.command or ())
    return server.url or ""


@register.filter
def truncate_start(text: str, length: int) -> str:
    """The end of `text` when it is longer than `length` (a command's script, a URL's path
    matter more than their start)."""
    text = str(text)
    return text if len(text) <= length else "…" + text[-(length - 1) :]
