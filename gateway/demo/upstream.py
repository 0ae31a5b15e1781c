"""`make run`'s demo MCP server: a small shared workspace of text files over stdio, started by
the gateway as the demo tenant's `workspace` upstream (demo_setup registers it as the
operator would, `create_mcp_server --stdio`). Built on the official SDK's MCPServer. Its
files live in this process's memory: each Gavel server process has its own copy, and a
restart starts again from the seed below. Reading and listing are annotated read-only (the
demo server passes them without a reviewer); writing and deleting are held."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("workspace")
FILES: dict[str, str] = {
    "README.md": "# Billing service\n\nHandles invoices and refunds.\n",
    "config/prod.env": "PAYMENTS_URL=https://payments.example.com\nRETRIES=3\n",
    "notes/outage.md": "Yesterday's outage: the payments provider timed out for 14 minutes.\n",
}
READ_ONLY = ToolAnnotations(read_only_hint=True)


@server.tool(annotations=READ_ONLY)
def list_files() -> list[str]:
    """The workspace's files, by path."""
    return sorted(FILES)


@server.tool(annotations=READ_ONLY)
def read_file(path: str) -> str:
    """A file's text."""
    if path not in FILES:
        raise ValueError(f"no such file: {path}")
    return FILES[path]


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def write_file(path: str, content: str) -> str:
    """Create or replace a file."""
    FILES[path] = content
    return f"wrote {len(content.encode())} bytes to {path}"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_file(path: str) -> str:
    """Delete a file."""
    if FILES.pop(path, None) is None:
        raise ValueError(f"no such file: {path}")
    return f"deleted {path}"


if __name__ == "__main__":
    server.run(transport="stdio")
