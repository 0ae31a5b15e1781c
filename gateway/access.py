"""Which upstream MCP server a request may reach: always within its tenant (another tenant's
server, like no server, is a 404)."""

from approvals.models import Rule
from console.core.errors import NotFound
from console.models import Role
from gateway.models import McpServer


def servers_of(*, tenant_id: int):
    """The tenant's upstream MCP servers, by name."""
    return McpServer.objects.filter(tenant_id=tenant_id).order_by("name")


def deciders_of(*, tenant_id: int) -> tuple[list[Rule], list[Role]]:
    """The tenant's active rules and its roles that may decide (read once for a tools list)."""
    rules = list(Rule.objects.filter(tenant_id=tenant_id, active=True))
    roles = [
        r
        for r in Role.objects.filter(tenant_id=tenant_id)
        if "decide" in r.capabilities or "admin" in r.capabilities
    ]
    return rules, roles


def server_for(*, tenant_id: int, name: str, active_only: bool = False) -> McpServer:
    rows = McpServer.objects.filter(tenant_id=tenant_id, name=name)
    if active_only:
        rows = rows.filter(active=True)
    server = rows.first()
    if server is None:
        raise NotFound(f"no MCP server '{name}'", code="not_found")
    return server
