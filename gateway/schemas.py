"""The management API's wire form of an upstream MCP server (contract v1.2, "MCP gateway")."""

from typing import Annotated, Literal

from ninja import Field
from pydantic import ConfigDict
from pydantic.alias_generators import to_camel

from console.core.wire import CamelSchema
from gateway.models import McpServer

NAME_PATTERN = r"^[a-z0-9-]{1,40}$"
MAX_HOLD_SECONDS = 3600


class _Strict(CamelSchema):
    """A misspelt field is a 422, never silently dropped."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class McpServerIn(_Strict):
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    transport: Literal["http", "stdio"] = "http"
    url: Annotated[str, Field(min_length=1, max_length=2000)]
    headers: dict[str, str] = Field(default_factory=dict)
    pass_read_only: bool = False
    hold_seconds: Annotated[int, Field(ge=1, le=MAX_HOLD_SECONDS)] = 240
    active: bool = True


class McpServerPatch(_Strict):
    url: Annotated[str, Field(min_length=1, max_length=2000)] | None = None
    headers: dict[str, str] | None = None
    pass_read_only: bool | None = None
    hold_seconds: Annotated[int, Field(ge=1, le=MAX_HOLD_SECONDS)] | None = None
    active: bool | None = None


class McpServerOut(CamelSchema):
    name: str
    transport: str
    url: str | None
    header_names: list[str]  # the headers themselves are write-only
    pass_read_only: bool
    hold_seconds: int
    active: bool


class McpServerListOut(CamelSchema):
    items: list[McpServerOut]
    next_cursor: str | None


class McpServerListQuery(CamelSchema):
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: Annotated[str, Field(max_length=64)] | None = None


def server_wire(server: McpServer) -> dict:
    return {
        "name": server.name,
        "transport": server.transport,
        "url": server.url or None,
        "headerNames": list(server.header_names),
        "passReadOnly": server.pass_read_only,
        "holdSeconds": server.hold_seconds,
        "active": server.active,
    }
