"""Upstream MCP servers of a tenant: create, change, remove (audited; headers encrypted at rest
like the OIDC client secret, console/core/crypto.py)."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from console.audit.log import audit
from console.core import crypto, outbound
from console.core.errors import Conflict, Invalid
from console.directory.access import acting_principal
from console.models import ApiKey
from gateway.models import McpServer, Transport
from gateway.schemas import NAME_PATTERN, server_wire

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "mcp-session-id"}


def _invalid(path: str, message: str) -> Invalid:
    return Invalid(message, code="validation_error", details=[{"path": path, "message": message}])


def check_url(url: str) -> None:
    """No user info, no internal address (console/core/outbound.py's policy; loopback only
    with the development flag), then https:// (http:// only with GAVEL_MCP_ALLOW_HTTP): an
    address that is refused whatever the scheme is named first."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number is a ValueError here
    except ValueError:
        raise _invalid("body.url", "the URL is not a URL") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise _invalid("body.url", "the URL must be an https:// address of the server")
    refusal = outbound.url_refusal(
        url, allow_loopback=outbound.loopback_allowed(settings.GAVEL_MCP_ALLOW_HTTP)
    )
    if refusal:
        raise _invalid("body.url", f"the URL {refusal}")
    if parts.scheme == "http" and not settings.GAVEL_MCP_ALLOW_HTTP:
        raise _invalid(
            "body.url",
            "the URL must be https://: calls and the server's headers would cross the network "
            "unencrypted (the operator allows http:// for development with "
            "GAVEL_MCP_ALLOW_HTTP=1)",
        )


def _origin(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def check_headers(headers: dict) -> None:
    seen: set[str] = set()
    for name, value in headers.items():
        if not HEADER_NAME.match(name) or name.lower() in HOP_HEADERS:
            raise _invalid(f"body.headers.{name}", "not a header the gateway may send")
        if name.lower() in seen:  # header names are case-insensitive
            raise _invalid(f"body.headers.{name}", "the header is given twice")
        seen.add(name.lower())
        if any(c in value for c in "\r\n\0") or len(value) > 8192:
            raise _invalid(f"body.headers.{name}", "a header value is one line of at most 8 KiB")


def headers_of(server: McpServer) -> dict[str, str]:
    """The upstream's secret headers, decrypted (never logged, never on the wire back)."""
    if not server.headers_encrypted:
        return {}
    plain = crypto.decrypt(server.headers_encrypted)
    return json.loads(plain) if plain else {}


def _set_headers(server: McpServer, headers: dict) -> None:
    server.headers_encrypted = crypto.encrypt(json.dumps(headers)) if headers else ""
    server.header_names = sorted(headers)


def _audited(*, server, action, before, viewer, data=None) -> None:
    audit(
        tenant=server.tenant,
        action=action,
        object_type="mcp_server",
        object_id=server.name,
        before=before,
        after=server_wire(server) if action != "mcp.server.deleted" else None,
        data=data,
        principal=acting_principal(viewer) if viewer is not None else None,
        key=viewer if isinstance(viewer, ApiKey) else None,
    )


@transaction.atomic
def server_create(*, tenant, fields: dict, viewer) -> McpServer:
    """A tenant's http upstream (stdio upstreams are the operator's: server_upsert_operator)."""
    if fields.get("transport", "http") != Transport.HTTP:
        raise _invalid(
            "body.transport",
            "stdio servers are started by the operator (manage.py create_mcp_server --stdio)",
        )
    if not re.match(NAME_PATTERN, fields["name"]):
        raise _invalid("body.name", "a name is 1 to 40 of a-z, 0-9 and -")
    check_url(fields["url"])
    check_headers(fields.get("headers") or {})
    server = McpServer(
        tenant=tenant,
        name=fields["name"],
        transport=Transport.HTTP,
        url=fields["url"],
        pass_read_only=fields.get("pass_read_only", False),
        hold_seconds=fields.get("hold_seconds", 240),
        active=fields.get("active", True),
    )
    _set_headers(server, fields.get("headers") or {})
    try:
        with transaction.atomic():
            server.save()
    except IntegrityError:
        raise Conflict(
            f"the tenant already has an MCP server '{server.name}'", code="mcp_server_exists"
        ) from None
    _audited(
        server=server,
        action="mcp.server.created",
        before=None,
        viewer=viewer,
        data={"headersSet": bool(fields.get("headers"))},
    )
    return server


@transaction.atomic
def server_update(*, server: McpServer, fields: dict, viewer) -> McpServer:
    before = server_wire(server)
    if fields.get("url") is not None:
        if server.transport != Transport.HTTP:
            raise _invalid("body.url", "a stdio server has no URL")
        check_url(fields["url"])
        if (
            server.header_names
            and fields.get("headers") is None
            and _origin(fields["url"]) != _origin(server.url)
        ):  # secret headers are never sent to a host they were not given for
            raise _invalid(
                "body.headers",
                f"the stored headers were given for {urlsplit(server.url).netloc}: with a URL "
                "on another host, give the headers again or remove them",
            )
        server.url = fields["url"]
    if fields.get("headers") is not None:
        check_headers(fields["headers"])
        _set_headers(server, fields["headers"])
    for name in ("pass_read_only", "hold_seconds", "active"):
        if fields.get(name) is not None:
            setattr(server, name, fields[name])
    server.updated_at = timezone.now()
    server.save()
    _audited(
        server=server,
        action="mcp.server.updated",
        before=before,
        viewer=viewer,
        data={"headersChanged": fields.get("headers") is not None},
    )
    return server


@transaction.atomic
def server_delete(*, server: McpServer, viewer) -> None:
    before = server_wire(server)
    _audited(server=server, action="mcp.server.deleted", before=before, viewer=viewer)
    server.delete()


@transaction.atomic
def server_upsert_operator(
    *,
    tenant,
    name: str,
    command: list[str] | None = None,
    url: str | None = None,
    headers: dict | None = None,
) -> tuple[McpServer, bool]:
    """The operator's `create_mcp_server` (idempotent by name): a stdio command, or an http URL."""
    if not re.match(NAME_PATTERN, name):
        raise Invalid("a name is 1 to 40 of a-z, 0-9 and -")
    if url is not None:
        check_url(url)
    check_headers(headers or {})
    server = McpServer.objects.select_for_update().filter(tenant=tenant, name=name).first()
    created = server is None
    before = None if created else server_wire(server)
    server = server or McpServer(tenant=tenant, name=name)
    if command:
        server.transport, server.command, server.url = Transport.STDIO, list(command), ""
    else:
        server.transport, server.command, server.url = Transport.HTTP, [], url
    _set_headers(server, headers or {})
    server.updated_at = timezone.now()
    server.save()
    action = "mcp.server.created" if created else "mcp.server.updated"
    _audited(server=server, action=action, before=before, viewer=None, data={"by": "operator"})
    return server, created
