"""Which upstream MCP server a request may reach: always within its tenant (another tenant's
server, like no server, is a 404)."""

from console.core.errors import NotFound
from gateway.models import McpServer


def server_for(*, tenant_id: int, name: str, active_only: bool = False) -> McpServer:
    rows = McpServer.objects.filter(tenant_id=tenant_id, name=name)
    if active_only:
        rows = rows.filter(active=True)
    server = rows.first()
    if server is None:
        raise NotFound(f"no MCP server '{name}'", code="not_found")
    return server
