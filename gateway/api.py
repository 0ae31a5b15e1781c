"""Upstream MCP servers over the wire (contract v1.2: `admin`, a `manage` key acting as its
principal or a signed-in admin's browser session). Handlers only translate."""

from ninja import Query, Router

from console.core.wire import errors
from console.web.auth import CapableSession, PrincipalKeyAuth
from gateway import services
from gateway.access import server_for
from gateway.models import McpServer
from gateway.schemas import (
    McpServerIn,
    McpServerListOut,
    McpServerListQuery,
    McpServerOut,
    McpServerPatch,
    server_wire,
)

router = Router(tags=["mcp gateway"])

ADMIN = [PrincipalKeyAuth("manage", "admin"), CapableSession("admin")]


@router.get(
    "/mcp/servers",
    auth=ADMIN,
    response={200: McpServerListOut, **errors(422)},
    by_alias=True,
    summary="The tenant's upstream MCP servers, by name (keyset pagination)",
)
def servers_index(request, query: Query[McpServerListQuery]):
    rows = McpServer.objects.filter(tenant=request.auth.tenant).order_by("name")
    if query.cursor:
        rows = rows.filter(name__gt=query.cursor)
    page = list(rows[: query.limit + 1])
    more = len(page) > query.limit
    page = page[: query.limit]
    return {
        "items": [server_wire(s) for s in page],
        "nextCursor": page[-1].name if more else None,
    }


@router.post(
    "/mcp/servers",
    auth=ADMIN,
    response={201: McpServerOut, **errors(409, 413, 422)},
    by_alias=True,
    summary="Add an upstream MCP server (http; stdio servers are the operator's)",
)
def servers_create(request, payload: McpServerIn):
    server = services.server_create(
        tenant=request.auth.tenant, fields=payload.model_dump(), viewer=request.auth
    )
    return 201, server_wire(server)


@router.get(
    "/mcp/servers/{mcp_server_name}",
    auth=ADMIN,
    response={200: McpServerOut, **errors(404)},
    by_alias=True,
    summary="One upstream MCP server",
)
def servers_show(request, mcp_server_name: str):
    return server_wire(server_for(tenant_id=request.auth.tenant.pk, name=mcp_server_name))


@router.patch(
    "/mcp/servers/{mcp_server_name}",
    auth=ADMIN,
    response={200: McpServerOut, **errors(404, 413, 422)},
    by_alias=True,
    summary="Change an upstream MCP server (headers replace the stored ones)",
)
def servers_update(request, mcp_server_name: str, payload: McpServerPatch):
    server = server_for(tenant_id=request.auth.tenant.pk, name=mcp_server_name)
    fields = payload.model_dump(exclude_unset=True)
    server = services.server_update(server=server, fields=fields, viewer=request.auth)
    return server_wire(server)


@router.delete(
    "/mcp/servers/{mcp_server_name}",
    auth=ADMIN,
    response={204: None, **errors(404)},
    summary="Remove an upstream MCP server",
)
def servers_delete(request, mcp_server_name: str):
    server = server_for(tenant_id=request.auth.tenant.pk, name=mcp_server_name)
    services.server_delete(server=server, viewer=request.auth)
    return 204, None
