"""/manage/mcp/ over HTTP (issue 28's console): an admin adds a server through the
management API's own schema and service (a refused form writes nothing and says why),
disables and enables it, asks it for its tools now (each under its held-call name, with the
rules and roles that cover it; a server that cannot be asked says so), and reads how to
connect a client to each active server at the address the console was reached at. Another
tenant's server is a 404; a reviewer gets the 403 page."""

import sys
from pathlib import Path

import pytest
from django.test import Client

from approvals.models import Rule
from console.models import AuditEvent
from gateway.models import McpServer
from gateway.services import server_upsert_operator
from tests.support.factories import TenantFactory

pytestmark = pytest.mark.django_db(transaction=True)
DEMO_UPSTREAM = str(Path(__file__).resolve().parents[2] / "gateway" / "demo" / "upstream.py")


@pytest.fixture(autouse=True)
def _fast_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def admin(admin_a) -> Client:
    client = Client()
    client.force_login(admin_a.user)
    return client


def test_an_admin_adds_a_server_and_a_refused_form_writes_nothing(admin, tenant_a):
    page = admin.get("/manage/mcp/")
    assert page.status_code == 200
    assert (
        "No MCP server yet" in page.content.decode() and "mcp-connect" not in page.content.decode()
    )

    refused = admin.post(
        "/manage/mcp/add/",
        {"name": "Files!", "url": "http://mcp.example.com/mcp", "hold_seconds": "240"},
    )
    assert refused.status_code == 422
    html = refused.content.decode()
    assert "Nothing was saved" in html and 'value="Files!"' in html  # kept to correct
    assert not McpServer.objects.filter(tenant=tenant_a).exists()

    added = admin.post(
        "/manage/mcp/add/",
        {
            "name": "github",
            "url": "https://mcp.example.com/mcp",
            "headers": "Authorization: Bearer ghp_secret\n",
            "pass_read_only": "on",
            "hold_seconds": "90",
        },
    )
    assert added.status_code == 302 and added["Location"] == "/manage/mcp/"
    server = McpServer.objects.get(tenant=tenant_a, name="github")
    assert (server.url, server.pass_read_only, server.hold_seconds) == (
        "https://mcp.example.com/mcp",
        True,
        90,
    )
    assert AuditEvent.objects.filter(tenant=tenant_a, action="mcp.server.created").count() == 1
    html = admin.get("/manage/mcp/").content.decode()
    assert "ghp_secret" not in html and "Authorization (encrypted)" in html
    # how to connect a client, at the address the console was reached at
    assert "claude mcp add --transport http gavel-github http://testserver/mcp/github" in html
    assert '"url": "http://testserver/mcp/github"' in html

    again = admin.post(
        "/manage/mcp/add/",
        {"name": "github", "url": "https://mcp.example.com/v2", "hold_seconds": "240"},
    )
    assert again.status_code == 409 and "Nothing was saved" in again.content.decode()
    assert (
        McpServer.objects.get(tenant=tenant_a, name="github").url == "https://mcp.example.com/mcp"
    )


def test_disable_and_enable_and_another_tenants_server_is_404(admin, tenant_a):
    server = McpServer.objects.create(
        tenant=tenant_a, name="files", url="https://mcp.example.com/m"
    )
    other = McpServer.objects.create(
        tenant=TenantFactory(), name="secret", url="https://mcp.example.org/m"
    )
    assert admin.post("/manage/mcp/files/toggle/").status_code == 302
    server.refresh_from_db()
    assert server.active is False
    html = admin.get("/manage/mcp/").content.decode()
    assert "disabled" in html and "gavel-files" not in html  # no client to connect to it
    assert admin.post("/manage/mcp/files/toggle/").status_code == 302
    server.refresh_from_db()
    assert server.active is True
    assert admin.post(f"/manage/mcp/{other.name}/toggle/").status_code == 404
    assert admin.post(f"/manage/mcp/{other.name}/tools/").status_code == 404
    other.refresh_from_db()
    assert other.active is True


def test_a_reviewer_gets_the_403_page(reviewer_a):
    client = Client()
    client.force_login(reviewer_a.user)
    assert client.get("/manage/mcp/").status_code == 403
    assert (
        client.post("/manage/mcp/add/", {"name": "x", "url": "https://a.example/m"}).status_code
        == 403
    )


def test_list_tools_now_shows_each_tool_with_its_rules_and_roles(admin, tenant_a, admin_a):
    server, _ = server_upsert_operator(
        tenant=tenant_a, name="workspace", command=[sys.executable, DEMO_UPSTREAM]
    )
    server.pass_read_only = True
    server.save(update_fields=["pass_read_only"])
    Rule.objects.create(
        tenant=tenant_a, name="no deletes", effect="deny", tool_pattern="workspace.delete_*",
        created_by=admin_a,
    )  # fmt: skip
    page = admin.post("/manage/mcp/workspace/tools/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Tools of workspace" in html
    for held in ("workspace.list_files", "workspace.read_file", "workspace.write_file"):
        assert held in html
    row = html[html.index("workspace.delete_file") :].split("</tr>")[0]
    assert "deny: no deletes" in row and "admin" in row  # its rule, and a role that may decide
    read = html[html.index("workspace.read_file") :].split("</tr>")[0]
    assert "read-only" in read and "passes (read-only)" in read


def test_a_server_that_cannot_be_asked_says_so(admin, tenant_a, settings):
    settings.GAVEL_MCP_UPSTREAM_DEADLINE_SECONDS = 5
    server_upsert_operator(
        tenant=tenant_a, name="broken", command=[sys.executable, "-c", "raise SystemExit(3)"]
    )
    page = admin.post("/manage/mcp/broken/tools/")
    assert page.status_code == 502
    assert "The server could not be asked" in page.content.decode()
