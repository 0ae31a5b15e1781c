"""L3: deeply nested JSON outside /api/v1 is a 400/422 in its own protocol's shape, never a 500:
SCIM (its error shape, also for any unforeseen failure under /scim/), the console's forms and
cursors, rule conditions (422 at validation, not a failure while auditing), and the audit log
itself (an entry is always written)."""

from __future__ import annotations

import base64
import json

import pytest
from django.test import Client

from console.models import AuditEvent
from tests.support.factories import ApprovalFactory, RunFactory, make_key

pytestmark = pytest.mark.django_db
SCIM_ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"


def nested(depth: int, kind: str = "list"):
    value = "x"
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


@pytest.fixture
def web():
    return Client(raise_request_exception=False)  # a 500 is an answer, as for a real client


def _scim(web, key, method, path, raw):
    return getattr(web, method)(
        f"/scim/v2{path}",
        raw,
        content_type="application/scim+json",
        headers={"Authorization": f"Bearer {key}"},
    )


@pytest.mark.parametrize(
    "raw",
    [
        "[" * 100_000,
        '{"a": ' * 5_000 + "1" + "}" * 5_000,
        json.dumps({"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "u"})[
            :-1
        ]
        + ', "name": '
        + "[" * 50_000
        + "}",
    ],
)
def test_l3_deep_json_to_scim_is_a_scim_400_not_a_500(web, tenant_a, raw):
    key = make_key(tenant_a, scopes=("scim",))
    for method, path in (("post", "/Users"), ("post", "/Groups"), ("post", "/.search")):
        response = _scim(web, key, method, path, raw)
        assert response.status_code == 400, response.content[:300]
        assert response["Content-Type"] == "application/scim+json"
        body = response.json()
        assert body["schemas"] == [SCIM_ERROR]
        assert body["scimType"] == "invalidSyntax"


def test_l3_an_unforeseen_failure_under_scim_answers_scims_json_not_html(
    web, tenant_a, monkeypatch
):
    monkeypatch.setattr("console.accounts.scim.selectors", _Broken())
    key = make_key(tenant_a, scopes=("scim",))
    response = web.get("/scim/v2/Users", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 500
    assert response["Content-Type"] == "application/scim+json"
    body = response.json()
    assert body["schemas"] == [SCIM_ERROR] and body["status"] == "500"
    assert response["X-Request-Id"] in body["detail"]
    missing = web.get("/scim/nothing-here", headers={"Authorization": f"Bearer {key}"})
    assert missing.status_code == 404
    assert missing.json()["schemas"] == [SCIM_ERROR]


class _Broken:
    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise RuntimeError("unforeseen")

        return fail


def test_l3_a_rule_condition_value_nested_deep_is_422_at_validation(rules_a):
    for depth in (33, 300):  # 300 parses; it failed while the new rule was being audited
        body = {
            "name": f"deep {depth}",
            "effect": "approve",
            "toolPattern": "t",
            "conditions": [{"path": "a", "op": "equals", "value": nested(depth)}],
        }
        response = rules_a.post("/api/v1/rules", body)
        assert response.status_code == 422, response.content[:300]
        assert response.json()["error"]["details"][0]["path"] == "conditions.0.value"
    examples = {"match": [{"a": nested(300, "object")}], "noMatch": []}
    body = {"name": "deep examples", "effect": "approve", "toolPattern": "t"}
    response = rules_a.post("/api/v1/rules", {**body, "examples": examples})
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == "examples.match.0"
    shallow = {"path": "a", "op": "equals", "value": nested(32)}
    assert rules_a.post("/api/v1/rules", {**body, "conditions": [shallow]}).status_code == 201


def test_l3_a_rule_condition_nested_900_deep_is_refused_by_the_service(tenant_a, lead_a):
    from approvals.services.rules import rule_create
    from console.core.errors import Invalid

    fields = {
        "name": "deep",
        "effect": "approve",
        "tool_pattern": "t",
        "conditions": [{"path": "a", "op": "in", "value": [nested(900)]}],
    }
    with pytest.raises(Invalid) as refused:
        rule_create(tenant=tenant_a, fields=fields, principal=lead_a)
    assert refused.value.status == 422
    assert refused.value.details[0]["path"] == "conditions.0.value"


def test_l3_an_audit_entry_nested_thousands_deep_is_written_cut_and_sealed(tenant_a):
    from console.audit.log import CUT, audit_verify
    from console.directory.services import audit

    entry = audit(
        tenant=tenant_a,
        action="rule.created",
        object_type="rule",
        object_id="rul_deep",
        after={"value": nested(5_000)},
    )
    stored = AuditEvent.objects.get(pk=entry.pk).after
    depth = 0
    value = stored["value"]
    while isinstance(value, list):
        value, depth = value[0], depth + 1
    assert value == CUT and depth < 64
    assert audit_verify(tenant=tenant_a)["ok"] is True


def test_l3_deep_json_in_the_consoles_forms_and_cursors_is_a_400_page(web, tenant_a, reviewer_a):
    run = RunFactory(tenant=tenant_a, principal=None)
    approval = ApprovalFactory(run=run, tool_call_id="c1", tool_name="t")
    web.force_login(reviewer_a.user)
    response = web.post(
        f"/approvals/{approval.public_id}/decision/",
        {"decision": "approve", "arguments": "[" * 100_000},
    )
    assert response.status_code in (400, 422), response.status_code
    cursor = base64.urlsafe_b64encode(b"[" * 12_000).decode().rstrip("=")
    response = web.get("/notifications/", {"cursor": cursor})
    assert response.status_code == 400
