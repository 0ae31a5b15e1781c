"""A small real MCP server (the official SDK's MCPServer, formerly FastMCP) for the gateway's
tests and bench: over Streamable HTTP (`--http PORT`) or stdio (`--stdio`). Each run of
`write_file` appends a line to $UPSTREAM_COUNT_FILE, so a test can count how often the upstream
really ran a call."""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("files")


def _count(line: str) -> None:
    path = os.environ.get("UPSTREAM_COUNT_FILE")
    if path:
        with open(path, "a") as out:
            out.write(line + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_file(path: str) -> str:
    """Read a file (read-only)."""
    return f"contents of {path}"


@server.tool()
def write_file(path: str, content: str) -> str:
    """Write a file."""
    _count(f"write_file {path} {content}")
    return f"wrote {len(content)} bytes to {path}"


@server.tool()
def echo(text: str) -> str:
    """Echo the text (for the bench)."""
    return text


@server.resource("file:///readme")
def readme() -> str:
    return "the readme"


@server.prompt()
def review(topic: str) -> str:
    return f"Please review {topic}."


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        server.run(
            "streamable-http",
            host="127.0.0.1",
            port=int(sys.argv[2]),
            stateless_http=True,
            json_response=True,
        )
    else:
        server.run("stdio")
