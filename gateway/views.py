"""/manage/mcp/: a tenant's upstream MCP servers (admin): list, add, "list tools now" (each tool
with the rules and the roles that cover its held-call name), disable and enable. Forms only
translate: the add form's fields are the management API's body, validated by its own schema
(gateway.schemas.McpServerIn) and saved by the service the API calls."""

from __future__ import annotations

from fnmatch import fnmatchcase

from asgiref.sync import async_to_sync
from django.http import Http404
from django.shortcuts import redirect
from django.urls import path
from django.views.decorators.http import require_POST
from pydantic import ValidationError

from approvals.models import Rule
from console.core.errors import Conflict, Invalid
from console.models import Role
from console.web.admin_pages import admin_view, manage_page
from gateway import services, upstream
from gateway.asgi import PREFIX
from gateway.models import McpServer
from gateway.schemas import McpServerIn

TEMPLATE = "manage/mcp.html"


def _servers(tenant):
    return list(McpServer.objects.filter(tenant=tenant).order_by("name"))


def _page(request, *, status=200, **extra):
    tenant = request.viewer.tenant
    # The address clients connect to, as this request reached the console (its scheme and
    # host: behind a proxy, as SECURE_PROXY_SSL_HEADER and ALLOWED_HOSTS read them).
    context = {"servers": _servers(tenant), "gateway_url": request.build_absolute_uri(PREFIX)}
    return manage_page(request, TEMPLATE, {**context, **extra}, tab="mcp", status=status)


@admin_view
def mcp_index(request):
    return _page(request, form={"hold_seconds": 240})


def _headers(text: str) -> dict:
    headers = {}
    for line in text.splitlines():
        if line.strip():
            name, _, value = line.partition(":")
            headers[name.strip()] = value.strip()
    return headers


@require_POST
@admin_view
def mcp_add(request):
    data = request.POST
    form = {
        "name": data.get("name", "").strip(),
        "url": data.get("url", "").strip(),
        "headers": data.get("headers", ""),
        "pass_read_only": data.get("pass_read_only") == "on",
        "hold_seconds": data.get("hold_seconds", "240").strip(),
    }
    try:
        body = McpServerIn.model_validate(
            {
                "name": form["name"],
                "url": form["url"],
                "headers": _headers(form["headers"]),
                "passReadOnly": form["pass_read_only"],
                "holdSeconds": form["hold_seconds"],
            }
        )
        services.server_create(
            tenant=request.viewer.tenant, fields=body.model_dump(), viewer=request.viewer
        )
    except ValidationError as exc:
        errors = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        return _page(request, status=422, form=form, errors=errors)
    except (Invalid, Conflict) as exc:
        return _page(
            request,
            status=422 if isinstance(exc, Invalid) else 409,
            form=form,
            errors=[exc.message],
        )
    return redirect("manage_mcp")


def _server(request, name: str) -> McpServer:
    server = McpServer.objects.filter(tenant=request.viewer.tenant, name=name).first()
    if server is None:
        raise Http404("no such MCP server")
    return server


@require_POST
@admin_view
def mcp_toggle(request, name: str):
    server = _server(request, name)
    services.server_update(
        server=server, fields={"active": not server.active}, viewer=request.viewer
    )
    return redirect("manage_mcp")


def _coverage(tenant, held_name: str) -> dict:
    rules = [
        r
        for r in Rule.objects.filter(tenant=tenant, active=True)
        if fnmatchcase(held_name, r.tool_pattern)
    ]
    roles = [
        r
        for r in Role.objects.filter(tenant=tenant)
        if ("decide" in r.capabilities or "admin" in r.capabilities)
        and any(fnmatchcase(held_name, glob) for glob in r.decide_tools)
    ]
    return {"rules": rules, "roles": roles}


@require_POST
@admin_view
def mcp_tools(request, name: str):
    server = _server(request, name)
    try:
        tools = async_to_sync(upstream.tools_of)(server, fresh=True)
    except upstream.UpstreamError as exc:
        return _page(request, status=502, listed=server, tools_error=str(exc))
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
                **_coverage(server.tenant, held_name),
            }
        )
    return _page(request, listed=server, tools=rows)


urlpatterns = [
    path("manage/mcp/", mcp_index, name="manage_mcp"),
    path("manage/mcp/add/", mcp_add, name="manage_mcp_add"),
    path("manage/mcp/<str:name>/toggle/", mcp_toggle, name="manage_mcp_toggle"),
    path("manage/mcp/<str:name>/tools/", mcp_tools, name="manage_mcp_tools"),
]
