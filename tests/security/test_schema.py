"""Issue 24's acceptance point (report §1, schemathesis ST202): the server rules a
schema-valid request could break are said in the served OpenAPI schema, as a constraint
where OpenAPI can say it and in words where it cannot; and the server accepts what the
schema now says is valid (digestMinutes 372.0) and refuses what it says is not."""

import re

import pytest

from tests.support.api import ApiClient
from tests.support.factories import make_key

pytestmark = pytest.mark.django_db

LISTS = (
    "/api/v1/runs",
    "/api/v1/approvals",
    "/api/v1/budgets",
    "/api/v1/keys",
    "/api/v1/notifications",
    "/api/v1/principals",
    "/api/v1/roles",
    "/api/v1/rules",
    "/api/v1/teams",
    "/api/v1/webhooks",
    "/api/v1/webhooks/{webhookId}/deliveries",
    "/api/v1/audit",
)


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    from django.test import Client

    with django_db_blocker.unblock():
        response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json()


def parameter(schema, path, name, method="get") -> dict:
    params = schema["paths"][path][method]["parameters"]
    return next(p for p in params if p["name"] == name)


def strings(node) -> list[dict]:
    """The string schemas of a parameter or property (through anyOf / null)."""
    node = node.get("schema", node)
    return [n for n in node.get("anyOf", [node]) if n.get("type") == "string"]


def body(schema, name) -> dict:
    return schema["components"]["schemas"][name]["properties"]


@pytest.mark.parametrize("path", LISTS)
def test_st202_every_lists_cursor_says_it_must_be_one_this_server_issued(schema, path):
    cursor = parameter(schema, path, "cursor")
    assert "issued" in cursor["description"]
    (text,) = strings(cursor)
    assert re.fullmatch(text["pattern"], "YjEyMw")  # the codec's alphabet (base64url)
    assert not re.search(text["pattern"], "x y") and not re.search(text["pattern"], "¡")
    if path != "/api/v1/audit":  # the audit page's form sends an empty cursor: no cursor
        assert text["minLength"] == 1


def test_st202_date_parameters_say_their_format(schema):
    for name in ("from", "to"):
        usage = parameter(schema, "/api/v1/usage", name)
        assert [s["format"] for s in strings(usage)] == ["date"]
        assert "366 days" in usage["description"]
        audit = parameter(schema, "/api/v1/audit", name)
        (text,) = strings(audit)
        for good in ("", "2026-12-01", "2026-12-01T10:00:00Z", "2026-12-01T10:00"):
            assert re.fullmatch(text["pattern"], good)
        for bad in ("¡", "yesterday", "20261201", "2026-W01"):
            assert not re.search(text["pattern"], bad)
        assert "format date" in audit["description"]


def test_st202_body_rules_are_in_the_schema(schema):
    calls = schema["components"]["schemas"]["ApprovalRequested"]["properties"]["calls"]
    assert "toolCallId distinct" in calls["description"]
    assert body(schema, "NotificationSettingsPatch")["digestMinutes"]["type"] == "integer"
    for model, field in (
        ("PrincipalIn", "teams"),
        ("PrincipalPatch", "teams"),
        ("TeamIn", "leads"),
        ("TeamPatch", "leads"),
        ("TeamIn", "members"),
        ("BudgetIn", "leads"),
    ):
        assert "(unknown: a 422)" in body(schema, model)[field]["description"], (model, field)
    condition = body(schema, "RulePatchIn")["conditions"]["items"]
    assert condition["type"] == "object" and condition["required"] == ["path", "op"]
    assert set(condition["properties"]) == {"path", "op", "value"}
    assert (
        condition["additionalProperties"] is False
        and "equals" in condition["properties"]["op"]["enum"]
    )
    currency = body(schema, "TenantPatch")["currency"]
    assert "USD" in currency["enum"] and "" not in currency["enum"]
    issuer = body(schema, "OidcPatch")["issuer"]
    assert issuer["format"] == "uri" and issuer["pattern"].startswith("^https://")
    scope = schema["components"]["schemas"]["ScopeIn"]
    assert "names its" in scope["description"] or "required" in scope["description"]
    assert "future" in body(schema, "KeyIn")["expiresAt"]["description"]
    password = strings(body(schema, "PrincipalIn")["password"])[0]
    assert "8 characters" in password["description"]
    url = body(schema, "WebhookIn")["url"]
    assert url["format"] == "uri" and url["pattern"].startswith("^https?://")


@pytest.fixture
def manage(client, tenant_a, admin_a):
    return ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=admin_a))


def test_st202_a_schema_valid_integer_is_accepted_as_one(client, admin_a):
    """372.0 is an integer in JSON Schema (the report: a 422)."""
    client.force_login(admin_a.user)
    api = ApiClient(client, None)
    response = api.patch("/api/v1/me/notification-settings", raw='{"digestMinutes": 372.0}')
    assert response.status_code == 200, response.content
    assert response.json()["digestMinutes"] == 372
    for bad in ('{"digestMinutes": 372.5}', '{"digestMinutes": "372"}', '{"digestMinutes": true}'):
        assert api.patch("/api/v1/me/notification-settings", raw=bad).status_code == 422


def test_st202_what_the_schema_refuses_the_server_refuses(manage):
    for path, query, where in (
        ("/api/v1/audit", {"from": "¡"}, "query.from"),  # the report's value
        ("/api/v1/audit", {"to": "20261201"}, "query.to"),  # outside the schema's pattern
        ("/api/v1/audit", {"from": "2026-W01"}, "query.from"),
        ("/api/v1/keys", {"cursor": "x y"}, "query.cursor"),
        ("/api/v1/principals", {"cursor": ""}, "query.cursor"),
    ):
        response = manage.get(path, **query)
        assert response.status_code == 422, (path, query)
        assert where in [d["path"] for d in response.json()["error"]["details"]]


def test_st202_a_webhook_url_outside_the_schemas_pattern_is_refused(manage):
    for url in ("HTTPS://hooks.example/x", " https://hooks.example/x", "0"):
        response = manage.post("/api/v1/webhooks", {"url": url, "events": ["approval.decided"]})
        assert response.status_code == 422, url
        assert "url" in [d["path"] for d in response.json()["error"]["details"]]


def test_st101_an_issuer_that_is_no_url_is_a_422_not_a_500(manage):
    """The schema's `^https://` made the fuzzer send issuers like this one (found by
    `make fuzz`): httpx refuses to build the URL (InvalidURL, before any connection)."""
    response = manage.patch(
        "/api/v1/tenant/oidc",
        {"issuer": "https://\u00f9\u00f5\u0013\u0081", "clientId": "0", "clientSecret": "x"},
    )
    assert response.status_code == 422, response.content
    assert response.json()["error"]["details"][0]["path"] == "issuer"
