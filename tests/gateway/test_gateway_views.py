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
    assert "No MCP server yet" in page.content.decode()

    refused = admin.post(
        "/manage/mcp/",
        {"name": "Files!", "url": "http://mcp.example.com/mcp", "hold_seconds": "240"},
    )
    assert refused.status_code == 422
    html = refused.content.decode()
    assert "Nothing was saved" in html and 'value="Files!"' in html  # kept to correct
    # each problem on its field, in the page's words (not the schema's pattern)
    assert "A name is 1 to 40 of a-z, 0-9 and -" in _field(html, "mcp-name")
    assert 'aria-invalid="true"' in _field(html, "mcp-name")
    assert "must be https://" in _field(html, "mcp-url")
    assert "pattern" not in html
    assert not McpServer.objects.filter(tenant=tenant_a).exists()

    added = admin.post(
        "/manage/mcp/",
        {
            "name": "github",
            "url": "https://mcp.example.com/mcp",
            "headers": "Authorization: Bearer ghp_secret\n",
            "pass_read_only": "on",
            "hold_seconds": "90",
        },
    )
    assert added.status_code == 302 and added["Location"] == "/manage/mcp/github/"
    server = McpServer.objects.get(tenant=tenant_a, name="github")
    assert (server.url, server.pass_read_only, server.hold_seconds) == (
        "https://mcp.example.com/mcp",
        True,
        90,
    )
    assert AuditEvent.objects.filter(tenant=tenant_a, action="mcp.server.created").count() == 1
    html = admin.get(added["Location"]).content.decode()
    assert "MCP server github added." in html  # the notice, once
    assert "ghp_secret" not in html and "Authorization (encrypted)" in html
    # how to connect a client, at the address the console was reached at
    assert "claude mcp add --transport http gavel-github http://testserver/mcp/github" in html
    assert '"url": "http://testserver/mcp/github"' in html
    assert "MCP server github added." not in admin.get("/manage/mcp/github/").content.decode()
    index = admin.get("/manage/mcp/").content.decode()
    assert 'href="/manage/mcp/github/"' in index and "ghp_secret" not in index

    again = admin.post(
        "/manage/mcp/",
        {"name": "github", "url": "https://mcp.example.com/v2", "hold_seconds": "240"},
    )
    assert again.status_code == 409
    assert "already has an MCP server" in _field(again.content.decode(), "mcp-name")
    assert (
        McpServer.objects.get(tenant=tenant_a, name="github").url == "https://mcp.example.com/mcp"
    )


def _field(html: str, input_id: str) -> str:
    """The markup of one form field: its input and the help and errors after it."""
    at = html.index(f'id="{input_id}"')
    start = html.rindex('<div class="field', 0, at)
    return html[start : html.index("</div>", at)]


@pytest.mark.parametrize(
    ("fields", "input_id", "says"),
    [
        ({"name": "", "url": "https://a.example/m"}, "mcp-name", "Enter a name"),
        ({"name": "a", "url": ""}, "mcp-url", "Enter the address of the server"),
        ({"name": "a", "url": "https://a.example/m", "hold_seconds": ""}, "mcp-hold", "1 to 3600"),
        ({"name": "a", "url": "https://a.example/m", "hold_seconds": "0"}, "mcp-hold", "1 to 3600"),
        ({"name": "a", "url": "https://a.example/m", "hold_seconds": "x"}, "mcp-hold", "1 to 3600"),
        # an internal address is named as such, whatever its scheme
        ({"name": "a", "url": "http://10.0.0.1/mcp"}, "mcp-url", "internal"),
        ({"name": "a", "url": "https://10.0.0.1/mcp"}, "mcp-url", "internal"),
        ({"name": "a", "url": "https://u:p@a.example/m"}, "mcp-url", "user"),
        ({"name": "a", "url": "ftp://a.example/m"}, "mcp-url", "https://"),
        (
            {"name": "a", "url": "https://a.example/m", "headers": "Authorization Bearer x"},
            "mcp-headers",
            "Line 1 is not a header",
        ),
        (
            {"name": "a", "url": "https://a.example/m", "headers": "X-A: 1\nHost: evil"},
            "mcp-headers",
            "Host: not a header the gateway may send",
        ),
        (
            {"name": "a", "url": "https://a.example/m", "headers": "X-A: 1\nx-a: 2"},
            "mcp-headers",
            "Line 2 repeats the header x-a",
        ),
    ],
)
def test_each_refused_field_says_why_on_itself_and_nothing_is_saved(
    admin, tenant_a, fields, input_id, says
):
    page = admin.post("/manage/mcp/", {"hold_seconds": "240", **fields})
    assert page.status_code == 422
    field = _field(page.content.decode(), input_id)
    assert says in field and 'aria-invalid="true"' in field
    assert not McpServer.objects.filter(tenant=tenant_a).exists()
    assert not AuditEvent.objects.filter(tenant=tenant_a, action__startswith="mcp.").exists()


def _files_with_a_secret(tenant) -> McpServer:
    """`files` at https://mcp.example.com/m with a stored `Authorization: Bearer one`."""
    from gateway.services import server_create

    fields = {"name": "files", "url": "https://mcp.example.com/m",
              "headers": {"Authorization": "Bearer one"}}  # fmt: skip
    return server_create(tenant=tenant, fields=fields, viewer=None)


def test_an_admin_changes_a_server_and_its_headers_are_kept_unless_replaced(admin, tenant_a):
    from gateway.services import headers_of

    server = _files_with_a_secret(tenant_a)
    page = admin.get("/manage/mcp/files/")
    assert page.status_code == 200 and 'value="https://mcp.example.com/m"' in page.content.decode()

    kept = admin.post(
        "/manage/mcp/files/",
        {"url": "https://mcp.example.com/v2", "hold_seconds": "60", "pass_read_only": "on"},
    )
    assert kept.status_code == 302 and kept["Location"] == "/manage/mcp/files/"
    server.refresh_from_db()
    assert (server.url, server.hold_seconds, server.pass_read_only) == (
        "https://mcp.example.com/v2", 60, True,
    )  # fmt: skip
    assert headers_of(server) == {"Authorization": "Bearer one"}
    assert "MCP server files saved." in admin.get("/manage/mcp/files/").content.decode()

    admin.post("/manage/mcp/files/", {"url": server.url, "hold_seconds": "60",
                                      "headers": "X-Team: a"})  # fmt: skip
    server.refresh_from_db()
    assert headers_of(server) == {"X-Team": "a"} and server.pass_read_only is False

    both_ways = {"headers": "X-B: b", "clear_headers": "on"}
    both = admin.post("/manage/mcp/files/", {"url": server.url, "hold_seconds": "60", **both_ways})
    assert both.status_code == 422 and "not both" in _field(both.content.decode(), "edit-headers")
    admin.post("/manage/mcp/files/", {"url": server.url, "hold_seconds": "60",
                                      "clear_headers": "on"})  # fmt: skip
    server.refresh_from_db()
    assert headers_of(server) == {} and server.header_names == []

    before = (server.url, server.hold_seconds, server.updated_at)
    for bad, input_id, says in (
        ({"url": "https://169.254.169.254/m", "hold_seconds": "60"}, "edit-url", "internal"),
        ({"url": "", "hold_seconds": "60"}, "edit-url", "Enter the address of the server"),
        ({"url": server.url, "hold_seconds": "99999"}, "edit-hold", "1 to 3600"),
    ):
        page = admin.post("/manage/mcp/files/", bad)
        assert page.status_code == 422, bad
        assert says in _field(page.content.decode(), input_id)
        server.refresh_from_db()
        assert (server.url, server.hold_seconds, server.updated_at) == before
    assert AuditEvent.objects.filter(tenant=tenant_a, action="mcp.server.updated").count() == 3


def test_disable_enable_remove_and_another_tenants_server_is_404(admin, tenant_a):
    server = McpServer.objects.create(
        tenant=tenant_a, name="files", url="https://mcp.example.com/m"
    )
    other = McpServer.objects.create(
        tenant=TenantFactory(), name="secret", url="https://mcp.example.org/m"
    )
    page = admin.get("/manage/mcp/files/").content.decode()
    assert "Yes, disable it" in page  # asked before it is done
    done = admin.post("/manage/mcp/files/toggle/")
    assert done.status_code == 302 and done["Location"] == "/manage/mcp/files/"
    server.refresh_from_db()
    assert server.active is False
    html = admin.get("/manage/mcp/files/").content.decode()
    assert "files disabled: its clients get 404" in html
    assert "gavel-files" not in html  # no client to connect to it
    assert admin.post("/manage/mcp/files/toggle/").status_code == 302
    server.refresh_from_db()
    assert server.active is True
    # a GET of an action's address goes to the page it acts on, and acts on nothing
    for action in ("toggle", "tools", "delete"):
        got = admin.get(f"/manage/mcp/files/{action}/")
        assert got.status_code == 302 and got["Location"] == "/manage/mcp/files/"
    server.refresh_from_db()
    assert server.active is True
    # another tenant's server: 404 for its page and every action, and nothing changes
    assert admin.get(f"/manage/mcp/{other.name}/").status_code == 404
    for action in ("", "toggle/", "tools/", "delete/"):
        assert (
            admin.post(f"/manage/mcp/{other.name}/{action}", {"hold_seconds": "1"}).status_code
            == 404
        )
    other.refresh_from_db()
    assert other.active is True and other.hold_seconds == 240

    removed = admin.post("/manage/mcp/files/delete/")
    assert removed.status_code == 302 and removed["Location"] == "/manage/mcp/"
    assert not McpServer.objects.filter(pk=server.pk).exists()
    assert "MCP server files removed." in admin.get("/manage/mcp/").content.decode()
    assert AuditEvent.objects.filter(tenant=tenant_a, action="mcp.server.deleted").count() == 1
    assert McpServer.objects.filter(pk=other.pk).exists()


def test_a_reviewer_gets_the_403_page(reviewer_a, tenant_a):
    server = McpServer.objects.create(tenant=tenant_a, name="files", url="https://a.example/m")
    client = Client()
    client.force_login(reviewer_a.user)
    assert client.get("/manage/mcp/").status_code == 403
    assert client.get("/manage/mcp/files/").status_code == 403
    assert (
        client.post("/manage/mcp/", {"name": "x", "url": "https://a.example/m"}).status_code == 403
    )
    for action in ("", "toggle/", "delete/", "tools/"):
        assert client.post(f"/manage/mcp/files/{action}", {"hold_seconds": "1"}).status_code == 403
    server.refresh_from_db()
    assert server.active is True and server.hold_seconds == 240
    assert not McpServer.objects.filter(name="x").exists()


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
    assert "List tools now" in html and "The server lists no tools" not in html
    for held in ("workspace.list_files", "workspace.read_file", "workspace.write_file"):
        assert held in html
    row = html[html.index("workspace.delete_file") :].split("</tr>")[0]
    assert "deny: no deletes" in row and "admin" in row  # its rule, and a role that may decide
    read = html[html.index("workspace.read_file") :].split("</tr>")[0]
    assert "read-only" in read and "passes: read-only" in read and "none needed" in read
    write = html[html.index("workspace.write_file") :].split("</tr>")[0]
    assert "no: held" in write and "none needed" not in write


def test_a_server_that_cannot_be_asked_says_so(admin, tenant_a, settings):
    settings.GAVEL_MCP_UPSTREAM_DEADLINE_SECONDS = 5
    server_upsert_operator(
        tenant=tenant_a, name="broken", command=[sys.executable, "-c", "raise SystemExit(3)"]
    )
    page = admin.post("/manage/mcp/broken/tools/")
    assert page.status_code == 502
    assert "The server could not be asked" in page.content.decode()
    assert "output (stderr) is in the Gavel server" in page.content.decode()  # where to look


def test_an_old_sign_in_gives_its_password_again_to_add_change_or_remove(admin, tenant_a):
    from console.accounts.views import REAUTH_FIELD
    from console.directory import signin

    def stale():
        session = admin.session
        session[signin.AUTH_AT_SESSION_KEY] = 0
        session.save()

    server = McpServer.objects.create(tenant=tenant_a, name="files", url="https://a.example/m")
    add = {"name": "late", "url": "https://late.example/mcp", "hold_seconds": "240"}
    for page, body in (
        ("/manage/mcp/", add),
        ("/manage/mcp/files/", {"url": "https://b.example/m", "hold_seconds": "30"}),
        ("/manage/mcp/files/delete/", {}),
    ):
        stale()
        assert admin.get("/manage/mcp/files/").status_code == 200  # reading does not ask
        prompt = admin.post(page, body)
        assert prompt.status_code == 200 and REAUTH_FIELD in prompt.content.decode(), page
        assert not McpServer.objects.filter(name="late").exists()
        server.refresh_from_db()
        assert (server.url, server.hold_seconds) == ("https://a.example/m", 240)
    done = admin.post("/manage/mcp/", {**add, REAUTH_FIELD: "admin-pass-123"})
    assert done.status_code == 302 and McpServer.objects.filter(name="late").exists()


def test_the_desk_marks_a_gateway_call_with_its_server(tenant_a, reviewer_a):
    from tests.support.factories import ApprovalFactory, RunFactory

    gateway = ApprovalFactory(
        run=RunFactory(tenant=tenant_a),
        tool_name="workspace.write_file",
        tool_call_id="mcp_0123456789abcdef",
    )
    runtime = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name="send_email")
    client = Client()
    client.force_login(reviewer_a.user)
    html = client.get("/approvals/").content.decode()

    def row(approval) -> str:
        start = html.index(f'id="desk-row-{approval.public_id}"')
        return html[start : html.index("</li>", start)]

    marks = row(gateway).split('class="desk-cell desk-marks"')[1]
    assert 'class="desk-mark is-mcp"' in marks and "from its server workspace" in marks
    assert '<span class="is-sr-only"> · workspace</span>' in marks  # read out in full
    assert "MCP ·" not in row(runtime)


def test_stored_headers_never_follow_a_url_to_another_host(admin, tenant_a, admin_a):
    """A URL moved to another host (or scheme or port) with secret headers stored is refused
    unless the headers are given again or removed: the page and the API (PATCH) alike."""
    from gateway.services import headers_of

    server = _files_with_a_secret(tenant_a)
    moved = admin.post(
        "/manage/mcp/files/", {"url": "https://evil.example/m", "hold_seconds": "240"}
    )
    assert moved.status_code == 422
    assert "given for mcp.example.com" in _field(moved.content.decode(), "edit-headers")
    api = admin.patch(
        "/api/v1/mcp/servers/files",
        data={"url": "https://mcp.example.com:8443/m"},
        content_type="application/json",
        headers={"origin": "http://testserver"},
    )
    assert api.status_code == 422, api.content
    assert api.json()["error"]["details"][0]["path"] == "body.headers"
    server.refresh_from_db()
    assert server.url == "https://mcp.example.com/m"
    assert headers_of(server) == {"Authorization": "Bearer one"}

    # the same host, another path: the headers stay
    assert (
        admin.post(
            "/manage/mcp/files/", {"url": "https://MCP.example.com:443/v2", "hold_seconds": "240"}
        ).status_code
        == 302
    )
    # another host with its headers given again, or removed
    assert (
        admin.post(
            "/manage/mcp/files/",
            {
                "url": "https://other.example/m",
                "hold_seconds": "240",
                "headers": "Authorization: two",
            },
        ).status_code
        == 302
    )
    server.refresh_from_db()
    assert (server.url, headers_of(server)) == ("https://other.example/m", {"Authorization": "two"})
    assert (
        admin.post(
            "/manage/mcp/files/",
            {"url": "https://third.example/m", "hold_seconds": "240", "clear_headers": "on"},
        ).status_code
        == 302
    )
    server.refresh_from_db()
    assert (server.url, headers_of(server)) == ("https://third.example/m", {})
