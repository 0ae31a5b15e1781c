"""/manage/mcp/: a tenant's upstream MCP servers (admin). The index lists them and adds one (a
POST); each server's page (`/manage/mcp/<name>/`) changes it, asks it for its tools now (each tool
with the rules and the roles that cover its held-call name), disables, enables or removes it.
Forms only translate: their fields are the management API's body, validated by its own
schemas (gateway/forms.py) and saved by the services the API calls. Every action is a POST
that answers with a redirect (a reload sends nothing again); a GET of an action's address
goes to the page it acts on. Adding, changing and removing a server ask for the password
again when the last one is old (like a webhook's creation: a server gets the tenant's calls and
its secret headers)."""

from __future__ import annotations

from fnmatch import fnmatchcase
from functools import wraps

from asgiref.sync import async_to_sync
from django.contrib import messages
from django.shortcuts import redirect
from django.urls import path, reverse

from console.core.errors import Conflict, Invalid
from console.web.admin_pages import admin_view, manage_page
from console.web.reauth import require_recent_auth
from gateway import services, upstream
from gateway.access import deciders_of, server_for, servers_of
from gateway.asgi import PREFIX
from gateway.forms import McpServerEditForm, McpServerForm
from gateway.models import McpServer

INDEX = "manage/mcp.html"
SERVER = "manage/mcp_server.html"


def _context(request) -> dict:
    # The address clients connect to, as this request reached the console (its scheme and
    # host: behind a proxy, as SECURE_PROXY_SSL_HEADER and ALLOWED_HOSTS read them).
    return {"gateway_url": request.build_absolute_uri(PREFIX)}


def _index(request, *, form=None, status=200):
    servers = list(servers_of(tenant_id=request.viewer.tenant.pk))
    context = {
        **_context(request),
        "servers": servers,
        "form": form or McpServerForm(initial={"hold_seconds": 240}),
    }
    return manage_page(request, INDEX, context, tab="mcp", status=status)


def _server(request, name: str) -> McpServer:
    return server_for(tenant_id=request.viewer.tenant.pk, name=name)  # another tenant's: 404


def _server_page(request, server, *, form=None, status=200, **extra):
    context = {
        **_context(request),
        "server": server,
        "form": form or McpServerEditForm(server=server, initial=_initial(server)),
        **extra,
    }
    return manage_page(request, SERVER, context, tab="mcp", status=status)


def _initial(server: McpServer) -> dict:
    return {
        "url": server.url,
        "pass_read_only": server.pass_read_only,
        "hold_seconds": server.hold_seconds,
    }


def _to_server(name: str):
    return redirect(reverse("manage_mcp_server", args=[name]))


@admin_view
def mcp_index(request):
    """The list; a POST adds a server (POST /api/v1/mcp/servers' body)."""
    if request.method == "POST":
        return _add(request)
    return _index(request)


@require_recent_auth
def _add(request):
    form = McpServerForm(request.POST)
    if not form.is_valid() or form.payload is None:
        return _index(request, form=form, status=422)
    try:
        server = services.server_create(
            tenant=request.viewer.tenant, fields=form.fields_sent(), viewer=request.viewer
        )
    except (Invalid, Conflict) as error:
        form.refused(error)
        return _index(request, form=form, status=409 if isinstance(error, Conflict) else 422)
    messages.success(request, f"MCP server {server.name} added.")
    return _to_server(server.name)


@admin_view
def mcp_server(request, name: str):
    """The server's page; a POST changes it (PATCH's body)."""
    server = _server(request, name)
    if request.method != "POST":
        return _server_page(request, server)
    return _change(request, server)


@require_recent_auth
def _change(request, server):
    form = McpServerEditForm(request.POST, server=server)
    if not form.is_valid() or form.payload is None:
        return _server_page(request, server, form=form, status=422)
    try:
        services.server_update(server=server, fields=form.fields_sent(), viewer=request.viewer)
    except Invalid as error:
        server.refresh_from_db()
        form.refused(error)
        return _server_page(request, server, form=form, status=422)
    messages.success(request, f"MCP server {server.name} saved.")
    return _to_server(server.name)


def _action(view):
    """An action on one server (admin): a POST acts; any other method goes to the server's
    page and acts on nothing."""

    @admin_view
    @wraps(view)
    def wrapped(request, name: str):
        server = _server(request, name)
        if request.method != "POST":
            return _to_server(server.name)
        return view(request, server)

    return wrapped


@_action
def mcp_toggle(request, server):
    server = services.server_update(
        server=server, fields={"active": not server.active}, viewer=request.viewer
    )
    if server.active:
        messages.success(request, f"MCP server {server.name} enabled: clients may call it again.")
    else:
        messages.success(
            request,
            f"MCP server {server.name} disabled: its clients get 404 until it is enabled.",
        )
    return _to_server(server.name)


@_action
@require_recent_auth
def mcp_delete(request, server):
    services.server_delete(server=server, viewer=request.viewer)
    messages.success(request, f"MCP server {server.name} removed.")
    return redirect("manage_mcp")


def _coverage(rules, roles, held_name: str) -> dict:
    """The rules and the roles (gateway.access.deciders_of) that cover a held-call name."""
    return {
        "rules": [r for r in rules if fnmatchcase(held_name, r.tool_pattern)],
        "roles": [r for r in roles if any(fnmatchcase(held_name, g) for g in r.decide_tools)],
    }


@_action
def mcp_tools(request, server):
    """ "List tools now": the server's page with its tools, asked of it at once (a POST: it
    opens a connection to the server)."""
    try:
        tools = async_to_sync(upstream.tools_of)(server, fresh=True)
    except upstream.UpstreamError as exc:
        return _server_page(request, server, status=502, tools_error=str(exc))
    rules, roles = deciders_of(tenant_id=server.tenant_id)
    rows = []
    for tool in tools.values():
        held_name = f"{server.name}.{tool.name}"
        read_only = bool(tool.annotations and tool.annotations.read_only_hint)
        rows.append(
            {
                "name": tool.name,
                "held_name": held_name,
                "description": tool.description or "",
                "read_only": read_only,
                "passes": read_only and server.pass_read_only,
                **_coverage(rules, roles, held_name),
            }
        )
    return _server_page(request, server, tools=rows)


urlpatterns = [
    path("manage/mcp/", mcp_index, name="manage_mcp"),
    path("manage/mcp/<str:name>/", mcp_server, name="manage_mcp_server"),
    path("manage/mcp/<str:name>/toggle/", mcp_toggle, name="manage_mcp_toggle"),
    path("manage/mcp/<str:name>/delete/", mcp_delete, name="manage_mcp_delete"),
    path("manage/mcp/<str:name>/tools/", mcp_tools, name="manage_mcp_tools"),
]
