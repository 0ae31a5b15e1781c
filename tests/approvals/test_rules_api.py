"""The rules API (contract v1.1): create, list (keyset), get, patch, delete = deactivate, the
422s naming the condition or the example, 404 for another tenant's rule, 403 without
`manage_rules` (before the 404 and the 422), every change audited with before and after,
explain, previews and suggestions."""

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, Rule, RuleVersion
from console.models import AuditEvent
from tests.support.api import ApiClient
from tests.support.factories import (
    AgentFactory,
    ApprovalFactory,
    ConversationFactory,
    PrincipalFactory,
    RunFactory,
    make_key,
)

pytestmark = pytest.mark.django_db

RULES = "/api/v1/rules"
INTERNAL = {
    "name": "internal mail is fine",
    "effect": "approve",
    "toolPattern": "email.*",
    "conditions": [{"path": "to", "op": "endsWith", "value": "@acme.com"}],
}


def create(api, body=None, **extra):
    response = api.post(RULES, {**(body or INTERNAL), **extra})
    assert response.status_code == 201, response.content
    return response.json()


def test_a_rule_is_created_with_the_contracts_shape(rules_a):
    body = create(rules_a)
    assert body["id"].startswith("rul_")
    assert body == {
        **body,
        "name": "internal mail is fine",
        "effect": "approve",
        "toolPattern": "email.*",
        "agentPattern": "*",
        "principalPattern": "*",
        "conversationId": None,
        "runId": None,
        "conditions": [{"path": "to", "op": "endsWith", "value": "@acme.com"}],
        "message": None,
        "expiresAt": None,
        "active": True,
        "createdBy": "lead@a.example",
        "hits": 0,
        "lastHitAt": None,
        "examples": {"match": [], "noMatch": []},
    }
    assert rules_a.get(f"{RULES}/{body['id']}").json() == body


def test_every_change_is_audited_with_before_and_after_and_the_key(rules_a, lead_a):
    rule = create(rules_a)
    patched = rules_a.patch(f"{RULES}/{rule['id']}", {"name": "renamed", "message": "m"})
    assert patched.status_code == 200, patched.content
    assert patched.json()["name"] == "renamed"
    assert rules_a.delete(f"{RULES}/{rule['id']}").status_code == 204
    events = list(AuditEvent.objects.filter(object_type="rule").order_by("pk"))
    assert [e.action for e in events] == ["rule.created", "rule.updated", "rule.deleted"]
    assert all(e.actor_principal_id == lead_a.pk and e.actor_key_id for e in events)
    assert events[0].before is None and events[0].after["name"] == INTERNAL["name"]
    assert events[1].before["name"] == INTERNAL["name"]
    assert events[1].after["name"] == "renamed"
    assert events[2].before["active"] is True and events[2].after["active"] is False
    # a PATCH that changes nothing, and a second DELETE, write nothing
    rules_a.patch(f"{RULES}/{rule['id']}", {"name": "renamed"})
    assert rules_a.delete(f"{RULES}/{rule['id']}").status_code == 204
    assert AuditEvent.objects.filter(object_type="rule").count() == 3


def test_delete_deactivates_and_the_rule_stays_listed(rules_a):
    rule = create(rules_a)
    assert rules_a.delete(f"{RULES}/{rule['id']}").status_code == 204
    listed = rules_a.get(RULES).json()["items"]
    assert [(r["id"], r["active"]) for r in listed] == [(rule["id"], False)]
    again = rules_a.patch(f"{RULES}/{rule['id']}", {"active": True}).json()
    assert again["active"] is True


def test_every_rule_write_bumps_the_tenants_rules_version(rules_a, tenant_a):
    def version():
        return RuleVersion.objects.filter(tenant=tenant_a).values_list("version", flat=True).first()

    assert version() is None
    rule = create(rules_a)
    assert version() == 1
    rules_a.patch(f"{RULES}/{rule['id']}", {"name": "x"})
    assert version() == 2
    rules_a.delete(f"{RULES}/{rule['id']}")
    assert version() == 3
    rules_a.patch(f"{RULES}/{rule['id']}", {"name": "x"})  # no change: no bump
    assert version() == 3


def test_the_list_pages_by_keyset_newest_first(rules_a):
    ids = [create(rules_a, name=f"rule {i}")["id"] for i in range(5)]
    first = rules_a.get(RULES, limit=2).json()
    assert [r["id"] for r in first["items"]] == ids[::-1][:2]
    second = rules_a.get(RULES, limit=2, cursor=first["nextCursor"]).json()
    third = rules_a.get(RULES, limit=2, cursor=second["nextCursor"]).json()
    seen = [r["id"] for page in (first, second, third) for r in page["items"]]
    assert seen == ids[::-1] and third["nextCursor"] is None
    bad = rules_a.get(RULES, cursor="not-a-cursor")
    assert bad.status_code == 422
    assert bad.json()["error"]["details"][0]["path"] == "query.cursor"
    assert rules_a.get(RULES, limit=0).status_code == 422
    assert rules_a.get(RULES, limit=201).status_code == 422


@pytest.mark.parametrize(
    ("condition", "path"),
    [
        ({"path": "to", "op": "regex", "value": ".*@acme"}, "conditions.1.op"),
        ({"path": "amount", "op": "lt", "value": "100"}, "conditions.1.value"),
        ({"path": "to", "op": "in", "value": "a@x"}, "conditions.1.value"),
        ({"path": "to..x", "op": "exists"}, "conditions.1.path"),
        ({"path": "to", "op": "glob"}, "conditions.1.value"),
    ],
)
def test_a_bad_condition_is_a_422_naming_it_and_saves_nothing(rules_a, condition, path):
    good = {"path": "to", "op": "exists"}
    response = rules_a.post(RULES, {**INTERNAL, "conditions": [good, condition]})
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"][0]["path"] == path
    assert path in error["message"]
    assert not Rule.objects.exists() and not AuditEvent.objects.filter(object_type="rule").exists()


def test_more_than_twenty_conditions_is_a_422(rules_a):
    conditions = [{"path": f"a{i}", "op": "exists"} for i in range(21)]
    response = rules_a.post(RULES, {**INTERNAL, "conditions": conditions})
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == "conditions.20"
    rule = create(rules_a)
    patched = rules_a.patch(f"{RULES}/{rule['id']}", {"conditions": conditions})
    assert patched.status_code == 422
    assert Rule.objects.get().conditions == INTERNAL["conditions"]


def test_bad_bodies_are_422(rules_a):
    for body in (
        {**INTERNAL, "effect": "allow"},
        {**INTERNAL, "name": ""},
        {**INTERNAL, "toolPatern": "x"},  # a misspelt field
        {**INTERNAL, "expiresAt": "2030-01-01T00:00:00"},  # no offset
        {k: v for k, v in INTERNAL.items() if k != "effect"},
    ):
        assert rules_a.post(RULES, body).status_code == 422, body
    rule = create(rules_a)
    assert rules_a.patch(f"{RULES}/{rule['id']}", {"name": None}).status_code == 422
    assert rules_a.patch(f"{RULES}/{rule['id']}", {"effect": None}).status_code == 422
    assert rules_a.patch(f"{RULES}/{rule['id']}", {"message": None}).status_code == 200


def test_examples_are_checked_on_every_save(rules_a):
    examples = {"match": [{"to": "a@acme.com"}], "noMatch": [{"to": "a@evil.com"}]}
    rule = create(rules_a, examples=examples)
    assert rule["examples"] == examples
    bad = rules_a.post(RULES, {**INTERNAL, "examples": {"match": [{"to": "eve@evil.com"}]}})
    assert bad.status_code == 422
    detail = bad.json()["error"]["details"][0]
    assert detail["path"] == "examples.match.0"
    assert "does not end with '@acme.com'" in detail["message"]
    # a later change the saved examples disagree with is refused too
    widened = rules_a.patch(f"{RULES}/{rule['id']}", {"conditions": []})
    assert widened.status_code == 422
    assert widened.json()["error"]["details"][0]["path"] == "examples.noMatch.0"
    assert Rule.objects.get().conditions == INTERNAL["conditions"]


def test_another_tenants_rule_is_404(rules_a, tenant_b, client):
    lead_b = PrincipalFactory(tenant=tenant_b, external_id="lead@b.example", role="lead")
    rules_b = ApiClient(client, make_key(tenant_b, scopes=("manage",), principal=lead_b))
    theirs = create(rules_b)
    for response in (
        rules_a.get(f"{RULES}/{theirs['id']}"),
        rules_a.patch(f"{RULES}/{theirs['id']}", {"name": "mine now"}),
        rules_a.patch(f"{RULES}/{theirs['id']}", {"name": ""}),  # 404 before 422
        rules_a.delete(f"{RULES}/{theirs['id']}"),
        rules_a.get(f"{RULES}/{theirs['id']}/preview"),
        rules_a.get(f"{RULES}/{theirs['id']}/preview", days="0"),
        rules_a.get(f"{RULES}/rul_nope"),
    ):
        assert response.status_code == 404, response.content
        assert response.json()["error"]["code"] == "rule_not_found"
    assert rules_a.get(RULES).json()["items"] == []
    assert Rule.objects.get().active and Rule.objects.get().name == INTERNAL["name"]


def test_without_manage_rules_403_and_without_the_manage_scope_403(
    client, tenant_a, reviewer_a, rules_a, ingest_a
):
    rule = create(rules_a)
    reviewer = ApiClient(client, make_key(tenant_a, scopes=("manage",), principal=reviewer_a))
    for response in (
        reviewer.get(RULES),
        reviewer.post(RULES, INTERNAL),
        reviewer.post(RULES, {"effect": "nope"}),  # 403 before 422
        reviewer.get(f"{RULES}/{rule['id']}"),
        reviewer.get(f"{RULES}/rul_missing"),  # 403 before 404: the capability is the key's
        reviewer.patch(f"{RULES}/{rule['id']}", {"name": "x"}),
        reviewer.delete(f"{RULES}/{rule['id']}"),
        reviewer.get(f"{RULES}/suggestions"),
        reviewer.post(f"{RULES}/explain", {"toolName": "email.send"}),
    ):
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "forbidden"
    scoped = ingest_a.get(RULES)
    assert scoped.status_code == 403 and scoped.json()["error"]["code"] == "missing_scope"
    assert ApiClient(client, None).get(RULES).status_code == 401
    assert Rule.objects.get().name == INTERNAL["name"]


def test_explain_says_which_rule_decides_and_why_each_other_does_not(rules_a):
    approve = create(rules_a)
    deny = create(
        rules_a,
        name="never to competitors",
        effect="deny",
        toolPattern="email.send",
        conditions=[{"path": "to", "op": "endsWith", "value": "@rival.com"}],
    )
    create(rules_a, name="files", toolPattern="files.*", conditions=[])
    body = rules_a.post(
        f"{RULES}/explain", {"toolName": "email.send", "arguments": {"to": "eve@evil.com"}}
    ).json()
    assert body == {
        "decision": "ask",
        "ruleId": None,
        "rules": [
            {
                "id": approve["id"],
                "name": "internal mail is fine",
                "effect": "approve",
                "matched": False,
                "failed": "conditions.0: 'to' does not end with '@acme.com'",
            },
            {
                "id": deny["id"],
                "name": "never to competitors",
                "effect": "deny",
                "matched": False,
                "failed": "conditions.0: 'to' does not end with '@rival.com'",
            },
        ],
    }
    ok = rules_a.post(
        f"{RULES}/explain", {"toolName": "email.send", "arguments": {"to": "a@acme.com"}}
    )
    assert ok.json()["decision"] == "approve" and ok.json()["ruleId"] == approve["id"]
    assert not Approval.objects.exists()  # explain decides nothing


def test_explain_reads_the_runs_agent_principal_and_conversation(rules_a, tenant_a):
    run = RunFactory(
        tenant=tenant_a,
        external_id="run_x",
        agent=AgentFactory(tenant=tenant_a, external_id="sales-bot"),
        conversation=ConversationFactory(tenant=tenant_a, external_id="conv_1"),
    )
    rule = create(rules_a, agentPattern="support-*", conditions=[])
    body = rules_a.post(f"{RULES}/explain", {"toolName": "email.send", "runId": "run_x"}).json()
    assert body["decision"] == "ask"
    assert body["rules"][0]["failed"] == "agentPattern: 'sales-bot' does not match 'support-*'"
    narrowed = create(rules_a, name="this conversation", conversationId="conv_1", conditions=[])
    body = rules_a.post(f"{RULES}/explain", {"toolName": "email.send", "runId": "run_x"}).json()
    assert body["ruleId"] == narrowed["id"]
    assert run.principal is not None
    missing = rules_a.post(f"{RULES}/explain", {"toolName": "email.send", "runId": "run_nope"})
    assert missing.status_code == 404
    assert rule["id"]


def test_explain_knows_the_rules_own_creator(rules_a, lead_a):
    rule = create(rules_a, conditions=[])
    body = rules_a.post(
        f"{RULES}/explain", {"toolName": "email.send", "principalId": "lead@a.example"}
    ).json()
    assert body["decision"] == "ask"
    assert body["rules"][0]["failed"].startswith("createdBy: the run is for 'lead@a.example'")
    assert rule["createdBy"] == lead_a.external_id


def _history(tenant, n, *, tool="email.send", agent="support-bot", to="bob@acme.com", **kw):
    agent_row = AgentFactory(tenant=tenant, external_id=agent + f"-{tool}-{to}-{n}")
    run = RunFactory(tenant=tenant, agent=agent_row, current_agent_id=agent)
    return [
        ApprovalFactory(run=run, tool_name=tool, arguments={"to": to, "n": i}, **kw)
        for i in range(n)
    ]


def test_preview_counts_the_calls_a_rule_would_have_decided(rules_a, tenant_a):
    _history(tenant_a, 3, to="a@acme.com")
    _history(tenant_a, 2, to="a@evil.com")
    old = _history(tenant_a, 2, to="old@acme.com")
    Approval.objects.filter(pk__in=[a.pk for a in old]).update(
        requested_at=timezone.now() - timedelta(days=40)
    )
    rule = create(rules_a)
    saved = rules_a.get(f"{RULES}/{rule['id']}/preview").json()
    assert saved["days"] == 30 and saved["decision"] == "approve"
    assert saved["count"] == 3 and len(saved["calls"]) == 3 and saved["scanned"] == 5
    assert {c["arguments"]["to"] for c in saved["calls"]} == {"a@acme.com"}
    assert set(saved["calls"][0]) == {
        "approvalId", "runId", "toolName", "agentId", "principalId", "arguments", "status",
        "requestedAt",
    }  # fmt: skip
    assert rules_a.get(f"{RULES}/{rule['id']}/preview", days=60).json()["count"] == 5
    unsaved = rules_a.post(f"{RULES}/preview", {**INTERNAL, "conditions": []}).json()
    assert unsaved["count"] == 5
    for days in ("0", "91", "x"):
        response = rules_a.get(f"{RULES}/{rule['id']}/preview", days=days)
        assert response.status_code == 422
    bad = rules_a.post(f"{RULES}/preview", {**INTERNAL, "conditions": [{"path": "", "op": "x"}]})
    assert bad.status_code == 422
    assert not AuditEvent.objects.filter(action__startswith="rule.", object_id="").exists()


def test_preview_shows_at_most_twenty_newest_first(rules_a, tenant_a):
    _history(tenant_a, 25, to="a@acme.com")
    body = rules_a.post(f"{RULES}/preview", INTERNAL).json()
    assert body["count"] == 25 and len(body["calls"]) == 20
    times = [c["requestedAt"] for c in body["calls"]]
    assert times == sorted(times, reverse=True)


def _decided(approvals, *, status, by):
    now = timezone.now()
    Approval.objects.filter(pk__in=[a.pk for a in approvals]).update(
        status=status, decided_by=by, decided_at=now
    )


def test_suggestions_appear_after_ten_identical_decisions_and_vanish_once_a_rule_covers_them(
    rules_a, tenant_a, reviewer_a
):
    nine = _history(tenant_a, 9)
    _decided(nine, status=ApprovalStatus.APPROVED, by=reviewer_a)
    assert rules_a.get(f"{RULES}/suggestions").json() == {"items": []}
    tenth = _history(tenant_a, 1)
    _decided(tenth, status=ApprovalStatus.APPROVED, by=reviewer_a)
    mixed = _history(tenant_a, 12, tool="refund")  # decided both ways: no suggestion
    _decided(mixed[:6], status=ApprovalStatus.APPROVED, by=reviewer_a)
    _decided(mixed[6:], status=ApprovalStatus.DENIED, by=reviewer_a)
    denied = _history(tenant_a, 11, tool="db.drop", agent="ops-bot")
    _decided(denied, status=ApprovalStatus.DENIED, by=reviewer_a)
    items = rules_a.get(f"{RULES}/suggestions").json()["items"]
    assert [(i["toolName"], i["agentId"], i["approved"], i["denied"]) for i in items] == [
        ("db.drop", "ops-bot", 0, 11),
        ("email.send", "support-bot", 10, 0),
    ]
    suggestion = items[1]
    assert suggestion["rule"] == {
        "name": "Always approve email.send from support-bot",
        "effect": "approve",
        "toolPattern": "email.send",
        "agentPattern": "support-bot",
        "principalPattern": "*",
        "conditions": [],
    }
    assert suggestion["lastDecidedAt"]
    create(rules_a, suggestion["rule"])  # ready to POST as it is
    items = rules_a.get(f"{RULES}/suggestions").json()["items"]
    assert [i["toolName"] for i in items] == ["db.drop"]


def test_suggestions_count_only_peoples_recent_decisions(rules_a, tenant_a, reviewer_a):
    by_rule = _history(tenant_a, 12)
    rule = create(rules_a)
    _decided(by_rule, status=ApprovalStatus.APPROVED, by=None)
    Approval.objects.filter(pk__in=[a.pk for a in by_rule]).update(
        decided_by_rule=Rule.objects.get(public_id=rule["id"])
    )
    old = _history(tenant_a, 12, tool="old.tool")
    _decided(old, status=ApprovalStatus.APPROVED, by=reviewer_a)
    Approval.objects.filter(pk__in=[a.pk for a in old]).update(
        decided_at=timezone.now() - timedelta(days=31)
    )
    expired = _history(tenant_a, 12, tool="slow.tool")
    _decided(expired, status=ApprovalStatus.EXPIRED, by=None)
    assert rules_a.get(f"{RULES}/suggestions").json() == {"items": []}


def test_the_openapi_schema_describes_the_rules_endpoints(client):
    schema = client.get("/api/v1/openapi.json").json()
    paths = schema["paths"]
    assert {
        "/api/v1/rules",
        "/api/v1/rules/{ruleId}",
        "/api/v1/rules/{ruleId}/preview",
        "/api/v1/rules/preview",
        "/api/v1/rules/explain",
        "/api/v1/rules/suggestions",
    } <= set(paths)
    rule = schema["components"]["schemas"]["RuleOut"]["properties"]
    assert {"toolPattern", "conditions", "createdBy", "hits", "lastHitAt"} <= set(rule)
    approval = schema["components"]["schemas"]["ApprovalOut"]["properties"]
    assert "decidedByRule" in approval


def test_a_key_of_a_deactivated_principal_is_401(rules_a, lead_a):
    rule = create(rules_a)
    lead_a.is_active = False
    lead_a.save()
    assert rules_a.get(RULES).status_code == 401
    assert rules_a.patch(f"{RULES}/{rule['id']}", {"name": "x"}).status_code == 401
    assert Rule.objects.get().name == INTERNAL["name"]


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"active": 1}, "active"),
        ({"active": "true"}, "active"),
        ({"expiresAt": 0}, "expiresAt"),
        ({"name": "nul \x00"}, "name"),
    ],
)
def test_a_rule_body_of_the_wrong_json_type_is_a_422_and_saves_nothing(rules_a, fields, path):
    """Strict types (issue 18): no number for a boolean or a date-time, no NUL in text."""
    response = rules_a.post(RULES, {**INTERNAL, **fields})
    assert response.status_code == 422, response.content
    assert path in [d["path"] for d in response.json()["error"]["details"]]
    assert not Rule.objects.exists()


@pytest.mark.parametrize("field", ["name", "effect", "toolPattern", "conditions", "active"])
def test_patching_a_non_nullable_field_with_null_is_a_422_and_changes_nothing(rules_a, field):
    """The schema says these fields take no null (it once said they did, and then refused it)."""
    rule = create(rules_a)
    response = rules_a.patch(f"{RULES}/{rule['id']}", {field: None})
    assert response.status_code == 422, response.content
    assert field in [d["path"] for d in response.json()["error"]["details"]]
    assert rules_a.get(f"{RULES}/{rule['id']}").json() == rule
