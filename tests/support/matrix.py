"""What the matrix tests walk, enumerated from the running code (never hand-listed): every API
operation of the served OpenAPI schema (with its ninja auth objects), every page URL pattern of
Django's resolver, every WebSocket route; tenant A's objects for their path parameters; a
minimal body for each operation; the capability each operation and page needs.

A new endpoint is covered the moment it is mounted. One this module cannot place (a path
parameter with no tenant-A object, an operation or page whose capability is neither on its
auth object nor in the tables below) fails the matrix test with a message saying what to add.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache

from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RoutePattern

from console.core.crypto import encrypt
from console.directory.services import api_key_create
from console.directory.services.roles import role_create
from console.models import CAPABILITIES, Team, TenantOidc
from console.web.auth import BrowserSession, KeyAuth
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory, TenantFactory

PASSWORD = "matrix-pass-123"  # every principal here signs in with it

# --- API operations ----------------------------------------------------------------------


@dataclass(frozen=True)
class Operation:
    method: str
    path: str  # the served wire path: /api/v1/runs/{runId}
    operation_id: str
    params: tuple[str, ...]  # wire names of its path parameters, in order
    body_schema: dict | None
    auths: tuple = ()

    def __str__(self):
        return f"{self.method} {self.path}"

    @property
    def key_scopes(self) -> set[str]:
        return {a.scope for a in self.auths if isinstance(a, KeyAuth)}

    @property
    def accepts_session(self) -> bool:
        return any(isinstance(a, BrowserSession) for a in self.auths)


@cache
def api_operations() -> tuple[Operation, ...]:
    """Every operation of the served schema, joined by operationId to ninja's operation (whose
    auth callbacks say the scope and, for PrincipalKeyAuth / CapableSession, the capability).
    Built once per test process (generating the schema takes seconds; it never changes)."""
    from console.api import api

    ninja_ops = {}
    for _prefix, router in api._routers:
        for path_view in router.path_operations.values():
            for op in path_view.operations:
                ninja_ops[op.operation_id or api.get_openapi_operation_id(op)] = op
    schema = api.get_openapi_schema(path_prefix="/api/v1")
    components = schema.get("components", {}).get("schemas", {})
    found = []
    for path, item in schema["paths"].items():
        for method, spec in item.items():
            body = spec.get("requestBody", {}).get("content", {}).get("application/json", {})
            body_schema = body.get("schema")
            if body_schema is not None:
                body_schema = {**body_schema, "_components": components}
            op = ninja_ops[spec["operationId"]]
            found.append(
                Operation(
                    method=method.upper(),
                    path=path,
                    operation_id=spec["operationId"],
                    params=tuple(re.findall(r"{(\w+)}", path)),
                    body_schema=body_schema,
                    auths=tuple(op.auth_callbacks),
                )
            )
    return tuple(found)


def minimal(schema: dict, components: dict):
    """A smallest value that validates against a JSON schema: only required properties, the
    first enum value, lengths and bounds at their minimum, one item in a list."""
    if "$ref" in schema:
        return minimal(components[schema["$ref"].rsplit("/", 1)[1]], components)
    for combo in ("anyOf", "oneOf"):
        if combo in schema:
            options = [s for s in schema[combo] if s.get("type") != "null"]
            return minimal(options[0], components)
    if "allOf" in schema:
        return minimal(schema["allOf"][0], components)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "default" in schema and schema.get("type") not in ("object",):
        return schema["default"]
    kind = schema.get("type", "object")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: minimal(props.get(k, {}), components) for k in schema.get("required", [])}
    if kind == "array":
        item = schema.get("items", {})
        # One item, not none: a required list is seldom valid empty (webhook events, scopes).
        count = max(1, schema.get("minItems", 0))
        if schema.get("maxItems") == 0:
            count = 0
        return [minimal(item, components) for _ in range(count)]
    if kind == "string":
        if schema.get("format") == "date-time":
            return (datetime.now(UTC) + timedelta(days=1)).isoformat()
        if schema.get("format") == "date":
            return datetime.now(UTC).date().isoformat()
        if schema.get("format") in ("uri", "url"):
            return "https://hooks.example.com/gavel"
        return "x" * max(1, schema.get("minLength", 1))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1)
        return max(1, low)
    if kind == "boolean":
        return False
    return None


def body_for(op: Operation, path_values=()):
    """A valid-looking body for the operation (None: it takes none); `path_values`: the values
    of its path parameters, in order (a body that must repeat one of them)."""
    if op.body_schema is None:
        return None
    schema = dict(op.body_schema)
    components = schema.pop("_components")
    extra = BODY_EXTRAS.get(str(op), lambda values: {})(
        dict(zip(op.params, path_values, strict=False))
    )
    return {**minimal(schema, components), **extra}


# What a schema cannot say for a body to pass validation, each with its reason.
BODY_EXTRAS = {
    # A RunState names its run: `id` must equal the path's runId (else 422).
    "PUT /api/v1/runs/{runId}/state": lambda values: {"id": values.get("runId", "x")},
    # A webhook's URL and events are plain strings to the schema; the service knows them.
    "POST /api/v1/webhooks": lambda values: {
        "url": "https://hooks.example.com/gavel",
        "events": ["approval.requested"],
    },
    # An upstream MCP server's URL: https:// to a public name (the service checks it).
    "POST /api/v1/mcp/servers": lambda values: {
        "name": "matrix-mcp",
        "url": "https://mcp.example.com/mcp",
    },
}


# --- pages -------------------------------------------------------------------------------

# Top-level URL prefixes that are not console pages of a tenant, each with its reason.
SKIPPED_PAGES = {
    "api/v1/": "the API: walked operation by operation from the OpenAPI schema instead",
    "django-admin/": "Django's admin: staff logins only, not a tenant's page (no principal)",
    "accounts/": "sign-in, sign-out, re-authentication, password reset and the tenant "
    "switcher: before or around a principal, no tenant object in the path "
    "(the switcher's refusal of a foreign tenant: tests/console/accounts/test_two_tenants.py)",
    "static/": "static files: no tenant data",
    "healthz": "the liveness probe: no session, no tenant data (tests/ops/test_health.py)",
    "readyz": "the readiness probe: no session, no tenant data (tests/ops/test_health.py)",
    "metrics": "process-wide metrics behind the operator's bearer token (tests/ops/test_health.py)",
    "integrations/": "Slack's signed callbacks: no session, the tenant's signing secret "
    "authenticates them (when they land)",
    "scim/": "SCIM 2.0: a `scim` key, not a session, and SCIM's own error shape (when it lands)",
}


@dataclass(frozen=True)
class Page:
    route: str  # Django's route with converters stripped: runs/<run_id>/
    params: tuple[str, ...]  # python names, in order

    def __str__(self):
        return "/" + self.route


def _walk(patterns, prefix=""):
    for entry in patterns:
        pattern = entry.pattern
        if any((prefix + str(pattern)).startswith(skip) for skip in SKIPPED_PAGES):
            continue
        if not isinstance(pattern, RoutePattern):
            raise AssertionError(
                f"{prefix}{pattern}: a regex URL pattern; the matrix walks path() routes only"
            )
        route = prefix + str(pattern._route)
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, route)
        elif isinstance(entry, URLPattern):
            yield route


def pages() -> list[Page]:
    found = []
    for route in _walk(get_resolver().url_patterns):
        plain = re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", route)
        found.append(Page(route=plain, params=tuple(re.findall(r"<(\w+)>", plain))))
    return found


# --- sockets -----------------------------------------------------------------------------


def sockets() -> list[Page]:
    from console.routing import websocket_urlpatterns

    return [
        Page(
            route=re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", str(p.pattern._route)),
            params=tuple(re.findall(r"<(?:\w+:)?(\w+)>", str(p.pattern._route))),
        )
        for p in websocket_urlpatterns
    ]


# --- tenant A's objects for path parameters ------------------------------------------------


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@dataclass
class World:
    """Tenant A with one object of every kind (names and ids that must never reach tenant B),
    and tenant B's admin with a key of every scope it needs."""

    tenant_a: object = None
    admin_a: object = None
    tenant_b: object = None
    admin_b: object = None
    key_b: str = ""
    objects: dict = field(default_factory=dict)  # kind → the object
    ids: dict = field(default_factory=dict)  # kind → its wire id (or name)
    secrets: list = field(default_factory=list)  # every string of A that B must never read

    def value(self, route: str, param: str):
        """The value for a path parameter of a route: looked up by the route, then by the
        literal segment before it (`roles/{name}`), then by its (camelCase) name alone."""
        wire = camel(param)
        whole = re.sub(r"<(\w+)>", lambda m: "{" + camel(m.group(1)) + "}", route)
        whole = whole.removeprefix("/").removeprefix("api/v1/")
        segments = re.split(r"[{<]", route)
        before = segments[-2].rstrip("/").rsplit("/", 1)[-1] if len(segments) > 1 else ""
        for key in (whole, f"{before}/{wire}", wire):
            if key in PARAMETERS:
                kind = PARAMETERS[key]
                return self.ids[kind] if kind in self.ids else kind(self)
        raise AssertionError(
            f"add a tenant-A object for path parameter {wire} (in {route}) to "
            "tests/support/matrix.py PARAMETERS"
        )

    def fill(self, route: str, params, *, python: bool) -> tuple[str, list[str]]:
        """The route with A's values for each parameter, and those values."""
        url, used = route, []
        for name in params:
            slot = "<" + name + ">" if python else "{" + name + "}"
            upto = route.split(slot, 1)[0]
            value = str(self.value(upto + "{" + camel(name) + "}", name))
            url = url.replace(slot, value, 1)
            used.append(value)
        return url, used

    def leaks(self, text: str, allowed=()) -> list[str]:
        """A's secrets found in `text` (the values in the requested URL excepted)."""
        for value in allowed:
            text = text.replace(value, "")
        return [s for s in self.secrets if s in text]


def _run_partial(world):
    from runs import selectors_pages as run_pages

    return next(iter(run_pages.PARTIALS))


def _budget_partial(world):
    from budgets import selectors_pages

    return next(iter(selectors_pages.DETAIL_PARTIALS))


# Operations whose BODY names an object of the tenant, looked up before the rest of the body
# (404 first): field → kind of tenant-A object.
BODY_OBJECTS = {
    "POST /api/v1/budgets/check": {"runId": "run"},
}

# Path parameter (camelCase; `segment/{name}` for generic names) → a kind of tenant-A object in
# World.ids, or a function of the world for values that are not objects.
PARAMETERS = {
    "runId": "run",
    "approvalId": "approval",
    "budgetId": "budget",
    "ruleId": "rule",
    "viewId": "saved_view",  # approvals/views/<view_id>/: a reviewer's saved view of the desk
    "notificationId": "notification",
    "principalId": "principal",
    "keyId": "key",
    "webhookId": "webhook",
    "webhooks/id": "webhook",
    "roles/name": "role",
    "teams/name": "team",
    "mcpServerName": "mcp_server",  # /api/v1/mcp/servers/{mcp_server_name}
    "mcp/name": "mcp_server",  # the /manage/mcp/<name>/ actions
    "roleName": "role",  # the /manage/roles/<role_name>/ pages
    "teamName": "team",
    "runs/{runId}/partials/{name}": _run_partial,
    "budgets/{budgetId}/partials/{name}": _budget_partial,
    "budgets/partials/{name}": lambda w: "budget-list",
    "step/number": lambda w: 1,  # runs/<run_id>/partials/step/<number>/
    "steps/step": lambda w: 1,  # approvals/runs/<run_id>/steps/<step>/decision/
}
# Parameters that are no object of A (they name a part of a page or a step number): a route
# whose parameters are all of these is a "list" route, checked the other way.
NOT_OBJECTS = {"partials/name", "step/number", "steps/step"}


def names_an_object(route: str, params) -> bool:
    for param in params:
        upto = re.split(r"[{<]" + param + r"[}>]", route, maxsplit=1)[0]
        before = upto.rstrip("/").rsplit("/", 1)[-1]
        if f"{before}/{camel(param)}" not in NOT_OBJECTS:
            return True
    return False


def build_world() -> World:
    """Tenant A full of objects whose names and ids are secrets; tenant B's admin."""
    from approvals.services.rules import rule_create
    from approvals.services.saved_views import saved_view_create
    from approvals.services.webhooks import webhook_create
    from budgets.services import budget_create
    from notifications.models import Notification

    w = World()
    w.tenant_a = TenantFactory(slug="acme-secret", name="Acme Secretcorp")
    w.admin_a = PrincipalFactory(
        tenant=w.tenant_a, external_id="boss-secret@acme.example", role="admin", password=PASSWORD
    )
    alice = PrincipalFactory(
        tenant=w.tenant_a, external_id="alice-secret@acme.example", name="Alice Hiddenname"
    )
    role = role_create(
        tenant=w.tenant_a, name="acme-secret-role", capabilities=["view_runs"], decide_tools=[]
    )[0]
    alice.roles.add(role)
    team = Team.objects.create(tenant=w.tenant_a, name="acme-secret-team")
    alice.teams.add(team)
    run = RunFactory(
        tenant=w.tenant_a,
        external_id="run_acme_secret",
        principal=alice,
        agent__external_id="agent-acme-secret",
    )
    approval = ApprovalFactory(run=run, tool_name="acme_secret_tool", tool_call_id="call_acme")
    budget = budget_create(
        tenant=w.tenant_a,
        fields={
            "name": "acme secret budget",
            "scope": {"type": "tenant", "id": None},
            "period": "month",
            "ceiling_minor_units": 777,
        },
    )
    rule = rule_create(
        tenant=w.tenant_a,
        fields={"name": "acme secret rule", "effect": "approve", "tool_pattern": "acme.*"},
        principal=w.admin_a,
    )
    saved_view = saved_view_create(
        viewer=w.admin_a, name="acme secret view", filters={"tool": "acme_secret_tool"}
    )
    notification = Notification.objects.create(
        tenant=w.tenant_a,
        principal=w.admin_a,
        kind="budget.threshold_crossed",
        title="acme secret notification",
        url="https://gavel.example/budgets/",
    )
    webhook, _ = webhook_create(tenant=w.tenant_a, url="https://hooks.acme-secret.example/in")
    key, _ = api_key_create(
        tenant=w.tenant_a, name="acme secret key", scopes=["manage"], principal=w.admin_a
    )
    # Single sign-on, made directly (saving it through the service reads the issuer's
    # discovery document): PATCH /tenant/oidc's minimal body then changes nothing.
    TenantOidc.objects.create(
        tenant=w.tenant_a,
        issuer="https://sso.acme-secret.example",
        client_id="acme-secret-client",
        client_secret_encrypted=encrypt("acme-secret-client-secret"),
        email_domains=["acme-secret.example"],
    )
    from gateway.models import McpServer

    mcp_server = McpServer.objects.create(
        tenant=w.tenant_a, name="acme-secret-mcp", url="https://mcp.acme-secret.example/mcp"
    )
    w.objects = dict(
        mcp_server=mcp_server,
        run=run,
        approval=approval,
        budget=budget,
        rule=rule,
        saved_view=saved_view,
        notification=notification,
        webhook=webhook,
        key=key,
        principal=alice,
        role=role,
        team=team,
    )
    w.ids = dict(
        mcp_server=mcp_server.name,
        run=run.external_id,
        approval=approval.public_id,
        budget=budget.public_id,
        rule=rule.public_id,
        saved_view=saved_view.public_id,
        notification=notification.public_id,
        webhook=webhook.public_id,
        key=key.public_id,
        principal=alice.external_id,
        role=role.name,
        team=team.name,
    )
    w.secrets = [
        *w.ids.values(),
        "Acme",
        "acme-secret",
        "Secretcorp",
        "Hiddenname",
        "boss-secret",
        "agent-acme-secret",
        "acme_secret_tool",
        "acme secret",
        "call_acme",
        key.key_prefix,
    ]
    w.tenant_b = TenantFactory(slug="tenant-b", name="Tenant B")
    w.admin_b = PrincipalFactory(
        tenant=w.tenant_b, external_id="admin@b.example", role="admin", password=PASSWORD
    )
    RunFactory(tenant=w.tenant_b, external_id="run_of_b")
    w.key_b = api_key_create(
        tenant=w.tenant_b,
        name="b admin",
        scopes=["ingest", "decide", "manage"],
        principal=w.admin_b,
    )[1]
    return w


# --- capabilities --------------------------------------------------------------------------

ANY = frozenset()  # needs no capability


# Operations whose capability is checked inside the handler (not on an auth object); the value
# is the set of capabilities any ONE of which lets the caller through, and the 403's code.
HANDLER_CAPABILITIES = {
    # access.may_decide: the key's principal needs a role that may decide (the tool).
    "POST /api/v1/approvals/{approvalId}/decision": (frozenset({"decide"}), "may_not_decide"),
    # access.approvals_visible_to: viewing approvals needs view_runs or decide.
    "GET /api/v1/approvals": (frozenset({"view_runs", "decide"}), "forbidden"),
    # access.notifications_of: a principal's own notifications, whatever its capabilities.
    "GET /api/v1/notifications": (ANY, None),
    "POST /api/v1/notifications/{notificationId}/read": (ANY, None),
    # The contract: a principal's own notification settings, `manage` scope, any capability.
    "GET /api/v1/me/notification-settings": (ANY, None),
    "PATCH /api/v1/me/notification-settings": (ANY, None),
    # approvals_decide_many: each call is checked by access.may_decide and refused in the
    # answer one by one (`may_not_decide`), never a 403 for the whole batch
    # (tests/approvals/test_desk.py).
    "POST /api/v1/approvals/decisions": (ANY, None),
}


def operation_needs(op: Operation) -> tuple[frozenset, str | None]:
    """(capabilities any one of which the operation needs, the 403 code without them)."""
    if str(op) in HANDLER_CAPABILITIES:
        return HANDLER_CAPABILITIES[str(op)]
    caps = {a.capability for a in op.auths if getattr(a, "capability", None)}
    if caps:
        assert len(caps) == 1, f"{op}: its auth objects ask for different capabilities {caps}"
        return frozenset(caps), "forbidden"
    if op.auths and all(
        type(a).__name__ in ("KeyAuth", "HeldKeyAuth") and a.scope == "ingest" for a in op.auths
    ):
        return ANY, None  # a runtime's `ingest` key acts as no principal: scope only
    raise AssertionError(
        f"{op}: needs which capability? Put it on its auth object (PrincipalKeyAuth / "
        "CapableSession) or add a row to tests/support/matrix.py HANDLER_CAPABILITIES"
    )


# Pages: route (or prefix ending in '*') → (capabilities any one of which it needs). Checked in
# the views through access.*; first match wins.
PAGE_CAPABILITIES = [
    ("manage/*", frozenset({"admin"})),  # console/web/admin_pages.admin_view, views.manage
    ("", frozenset({"view_runs", "decide"})),  # home: the inbox or the runs, else 403
    ("runs/*", frozenset({"view_runs"})),  # access.runs_visible_to / run_for
    ("approvals/", frozenset({"view_runs", "decide"})),  # access.approvals_visible_to
    ("approvals/stats/", frozenset({"manage_rules"})),  # selectors_stats
    ("approvals/views/*", frozenset({"view_runs", "decide"})),  # access.saved_views_of
    ("approvals/<approval_id>/", frozenset({"view_runs", "decide"})),  # access.approval_for
    ("approvals/<approval_id>/decision/", frozenset({"decide"})),  # access.may_decide
    ("approvals/<approval_id>/extend/", frozenset({"decide"})),  # approval_extend: may_decide
    ("approvals/runs/<run_id>/steps/<step>/decision/", frozenset({"decide"})),
    ("rules/*", frozenset({"manage_rules"})),  # access.rules_of / rule_for
    ("notifications/*", ANY),  # a principal's own notifications
    ("settings/*", ANY),  # the contract: everyone's own notification settings and password
    ("budgets/new/", frozenset({"manage_budgets"})),
    ("budgets/<budget_id>/edit/", frozenset({"manage_budgets"})),
    ("budgets/<budget_id>/delete/", frozenset({"manage_budgets"})),
    ("budgets/*", frozenset({"view_budgets"})),  # access.budgets_visible_to / budget_for
]


def page_needs(page: Page) -> frozenset:
    for route, caps in PAGE_CAPABILITIES:
        if route.endswith("*") and page.route.startswith(route[:-1]) or page.route == route:
            return caps
    raise AssertionError(
        f"{page}: needs which capability? Add a row to tests/support/matrix.py PAGE_CAPABILITIES"
    )


def lacking(tenant, caps: frozenset):
    """A principal of `tenant` whose one role has every capability but `caps` (and never
    `admin`, which implies them all), deciding every tool."""
    name = "without-" + "-".join(sorted(caps))
    others = [c for c in CAPABILITIES if c not in caps and c != "admin"]
    role = role_create(tenant=tenant, name=name, capabilities=others, decide_tools=["*"])[0]
    principal = PrincipalFactory(tenant=tenant, external_id=f"{name}@a.example", password=PASSWORD)
    principal.roles.add(role)
    return principal


def holding(tenant, caps: frozenset):
    """The control: a principal with every capability but admin, plus `caps`."""
    name = "with-" + "-".join(sorted(caps))
    mine = [c for c in CAPABILITIES if c != "admin" or "admin" in caps]
    role = role_create(tenant=tenant, name=name, capabilities=mine, decide_tools=["*"])[0]
    principal = PrincipalFactory(tenant=tenant, external_id=f"{name}@a.example", password=PASSWORD)
    principal.roles.add(role)
    return principal
