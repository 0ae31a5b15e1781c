"""/rules/ in the console: the list (hits, last hit, creator, expiry), the editor (prefilled
from a card, validated like the API, a live preview), deactivating, one-click suggestions, the
card's "Always approve calls like this", the rule named on decided cards and run pages, and the
decision analytics. One cross-tenant test and one role test per page."""

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, Rule
from approvals.selectors_stats import decision_stats
from approvals.services.rules import rule_create
from console.models import AuditEvent
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory

pytestmark = pytest.mark.django_db


def signed_in(client, principal):
    client.force_login(principal.user)
    return client


def make(tenant, by, **fields):
    fields = {"name": "internal mail", "effect": "approve", "tool_pattern": "email.*", **fields}
    return rule_create(tenant=tenant, fields=fields, principal=by)


FORM = {
    "name": "internal mail",
    "effect": "approve",
    "tool_pattern": "email.send",
    "agent_pattern": "*",
    "principal_pattern": "*",
    "cond_path": ["to", ""],
    "cond_op": ["endsWith", "equals"],
    "cond_value": ["@acme.com", ""],
}


def test_the_list_shows_hits_last_hit_creator_and_expiry(client, tenant_a, lead_a):
    rule = make(tenant_a, lead_a, expires_at=timezone.now() + timedelta(days=2))
    Rule.objects.filter(pk=rule.pk).update(hits=7, last_hit_at=timezone.now())
    make(tenant_a, lead_a, name="old one", active=False)
    html = signed_in(client, lead_a).get("/rules/").content.decode()
    assert f'id="rule-{rule.public_id}"' in html
    assert '<td class="rule-hits">7</td>' in html
    assert "0s ago" in html or "1s ago" in html
    assert lead_a.name in html
    assert rule.expires_at.strftime("%Y-%m-%d") in html
    assert ">inactive<" in html
    assert 'href="/rules/"' in html and ">Rules</a>" in html  # the navigation link


def test_rules_pages_need_manage_rules(client, tenant_a, reviewer_a, lead_a):
    rule = make(tenant_a, lead_a)
    signed_in(client, reviewer_a)
    for path in ("/rules/", "/rules/new/", f"/rules/{rule.public_id}/", "/approvals/stats/"):
        assert client.get(path).status_code == 403, path
    assert client.post("/rules/new/", FORM).status_code == 403
    assert client.post(f"/rules/{rule.public_id}/deactivate/").status_code == 403
    assert Rule.objects.count() == 1 and Rule.objects.get().active
    assert ">Rules</a>" not in client.get("/approvals/").content.decode()


def test_anonymous_is_sent_to_sign_in(client):
    response = client.get("/rules/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_another_tenants_rule_and_approval_are_404(client, tenant_a, tenant_b, lead_a):
    lead_b = PrincipalFactory(tenant=tenant_b, external_id="lead@b.example", role="lead")
    theirs = make(tenant_b, lead_b)
    their_call = ApprovalFactory(run=RunFactory(tenant=tenant_b))
    signed_in(client, lead_a)
    assert client.get(f"/rules/{theirs.public_id}/").status_code == 404
    assert client.post(f"/rules/{theirs.public_id}/", FORM).status_code == 404
    assert client.post(f"/rules/{theirs.public_id}/deactivate/").status_code == 404
    assert client.get(f"/rules/new/?approval={their_call.public_id}").status_code == 404
    theirs.refresh_from_db()
    assert theirs.active and theirs.tool_pattern == "email.*"


def test_saving_the_editor_makes_the_rule_and_audits_it(client, tenant_a, lead_a):
    response = signed_in(client, lead_a).post("/rules/new/", FORM)
    assert response.status_code == 302
    rule = Rule.objects.get()
    assert response["Location"] == f"/rules/?saved={rule.public_id}"
    assert rule.conditions == [{"path": "to", "op": "endsWith", "value": "@acme.com"}]
    assert rule.created_by == lead_a and rule.tool_pattern == "email.send"
    assert AuditEvent.objects.get(object_type="rule").action == "rule.created"
    assert "Saved the rule" in client.get(response["Location"]).content.decode()


def test_values_are_json_when_they_parse_else_text(client, tenant_a, lead_a):
    form = {
        **FORM,
        "cond_path": ["amount", "dryRun", "to", "tags"],
        "cond_op": ["lt", "equals", "endsWith", "exists"],
        "cond_value": ["100", "true", "@acme.com", ""],
    }
    signed_in(client, lead_a).post("/rules/new/", form)
    assert Rule.objects.get().conditions == [
        {"path": "amount", "op": "lt", "value": 100},
        {"path": "dryRun", "op": "equals", "value": True},
        {"path": "to", "op": "endsWith", "value": "@acme.com"},
        {"path": "tags", "op": "exists"},
    ]


def test_a_bad_rule_is_shown_again_naming_the_condition_and_nothing_is_saved(
    client, tenant_a, lead_a
):
    form = {**FORM, "cond_path": ["amount"], "cond_op": ["lt"], "cond_value": ["lots"]}
    response = signed_in(client, lead_a).post("/rules/new/", form)
    assert response.status_code == 422
    html = response.content.decode()
    assert "conditions.0.value" in html and "needs a number value" in html
    assert 'value="amount"' in html  # what was typed stays
    assert not Rule.objects.exists()
    empty = signed_in(client, lead_a).post("/rules/new/", {**FORM, "name": ""})
    assert empty.status_code == 422 and "Name: 1 to 200 characters" in empty.content.decode()


def test_always_approve_calls_like_this_prefills_the_editor_from_the_card(
    client, tenant_a, lead_a, reviewer_a
):
    run = RunFactory(tenant=tenant_a, current_agent_id="support-bot")
    approval = ApprovalFactory(
        run=run, tool_name="email.send", arguments={"to": "bob@acme.com", "cc": ["x"], "n": 2}
    )
    card = signed_in(client, lead_a).get(f"/approvals/{approval.public_id}/").content.decode()
    link = f'href="/rules/new/?approval={approval.public_id}"'
    assert link in card and "Always approve calls like this" in card
    html = client.get(f"/rules/new/?approval={approval.public_id}").content.decode()
    assert 'value="Always approve email.send from support-bot"' in html
    assert 'name="tool_pattern" value="email.send"' in html
    assert 'name="agent_pattern" value="support-bot"' in html
    # Per argument: this value, any, or a condition like it; by default the suggestion (the
    # address's domain, at most this number), any for a list.
    assert 'name="arg_to" value="suggested" checked' in html and "any address at acme.com" in html
    assert 'name="arg_cc" value="any" checked' in html
    assert 'name="arg_n" value="suggested" checked' in html and "at most 2" in html
    assert 'name="cond_path" value="to"' not in html  # no exact copy of every argument
    assert "would have been approved by this rule" in html  # the preview, at once
    assert "waiting now that you may decide" in html
    reviewer_card = signed_in(client, reviewer_a).get(f"/approvals/{approval.public_id}/")
    assert "Always approve calls like this" not in reviewer_card.content.decode()


def test_the_live_preview_counts_the_last_30_days(client, tenant_a, lead_a):
    run = RunFactory(tenant=tenant_a)
    for to in ("a@acme.com", "b@acme.com", "c@evil.com"):
        ApprovalFactory(run=run, tool_name="email.send", arguments={"to": to})
    old = ApprovalFactory(run=run, tool_name="email.send", arguments={"to": "d@acme.com"})
    Approval.objects.filter(pk=old.pk).update(requested_at=timezone.now() - timedelta(days=31))
    response = signed_in(client, lead_a).post(
        "/rules/preview/", FORM, headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="rule-preview"')
    assert "<strong>2</strong> of the 3 calls" in html
    bad = client.post("/rules/preview/", {**FORM, "cond_op": ["lt", "equals"]})
    assert "conditions.0.value" in bad.content.decode()
    assert not Rule.objects.exists()


def test_editing_and_deactivating(client, tenant_a, lead_a):
    rule = make(tenant_a, lead_a)
    signed_in(client, lead_a)
    html = client.get(f"/rules/{rule.public_id}/").content.decode()
    assert 'value="internal mail"' in html and 'name="active" value="on" checked' in html
    form = {**FORM, "name": "renamed", "has_active": "1", "active": "on"}
    assert client.post(f"/rules/{rule.public_id}/", form).status_code == 302
    rule.refresh_from_db()
    assert rule.name == "renamed" and rule.active
    response = client.post(f"/rules/{rule.public_id}/deactivate/", headers={"HX-Request": "true"})
    assert response.content.decode().lstrip().startswith('<section id="rule-list"')
    rule.refresh_from_db()
    assert not rule.active
    assert [e.action for e in AuditEvent.objects.filter(object_type="rule").order_by("pk")] == [
        "rule.created",
        "rule.updated",
        "rule.deleted",
    ]


def test_a_suggestion_becomes_a_rule_in_one_click(client, tenant_a, lead_a, reviewer_a):
    run = RunFactory(tenant=tenant_a, current_agent_id="support-bot")
    calls = [ApprovalFactory(run=run, tool_name="email.send") for _ in range(10)]
    Approval.objects.filter(pk__in=[a.pk for a in calls]).update(
        status=ApprovalStatus.APPROVED, decided_by=reviewer_a, decided_at=timezone.now()
    )
    html = signed_in(client, lead_a).get("/rules/").content.decode()
    assert "approved 10 times" in html and "Make this a rule (approve)" in html
    form = {"tool_name": "email.send", "agent_id": "support-bot"}
    response = client.post("/rules/suggestions/", form)
    assert response.status_code == 302
    rule = Rule.objects.get()
    assert (rule.tool_pattern, rule.agent_pattern, rule.effect) == (
        "email.send",
        "support-bot",
        "approve",
    )
    assert "approved 10 times" not in client.get("/rules/").content.decode()
    assert client.post("/rules/suggestions/", form).status_code == 404  # no longer suggested


def test_a_card_decided_by_a_rule_names_the_rule_and_so_does_the_run_page(
    client, tenant_a, lead_a, reviewer_a
):
    rule = make(tenant_a, lead_a, name="mail to colleagues")
    run = RunFactory(tenant=tenant_a, external_id="run_named")
    approval = ApprovalFactory(run=run, tool_name="email.send")
    Approval.objects.filter(pk=approval.pk).update(
        status=ApprovalStatus.APPROVED, decided_by_rule=rule, decided_at=timezone.now()
    )
    signed_in(client, reviewer_a)
    for path in (f"/approvals/{approval.public_id}/", "/runs/run_named/"):
        html = client.get(path).content.decode()
        assert f'href="/rules/{rule.public_id}/"' in html, path
        assert "by the rule" in html and "mail to colleagues" in html
    assert approval.public_id not in client.get("/approvals/").content.decode()


def _decide(approvals, *, status, by=None, rule=None, after_seconds):
    for a in approvals:
        Approval.objects.filter(pk=a.pk).update(
            status=status,
            decided_by=by,
            decided_by_rule=rule,
            decided_at=a.requested_at + timedelta(seconds=after_seconds),
        )


def test_decision_analytics_per_tool_agent_and_reviewer(client, tenant_a, lead_a, reviewer_a):
    rule = make(tenant_a, lead_a, name="auto")
    mail = RunFactory(tenant=tenant_a, current_agent_id="support-bot")
    ops = RunFactory(tenant=tenant_a, current_agent_id="ops-bot")
    people = [ApprovalFactory(run=mail, tool_name="email.send") for _ in range(4)]
    for seconds, a in zip((10, 20, 30, 40), people, strict=True):
        _decide([a], status=ApprovalStatus.APPROVED, by=reviewer_a, after_seconds=seconds)
    by_rule = [ApprovalFactory(run=mail, tool_name="email.send") for _ in range(4)]
    _decide(by_rule, status=ApprovalStatus.APPROVED, rule=rule, after_seconds=0)
    denied = [ApprovalFactory(run=ops, tool_name="db.drop") for _ in range(2)]
    _decide(denied, status=ApprovalStatus.DENIED, by=lead_a, after_seconds=100)
    ApprovalFactory(run=ops, tool_name="db.drop")  # still pending
    stats = decision_stats(viewer=lead_a)
    tools = {r["tool"]: r for r in stats["by_tool"]}
    mail_row = tools["email.send"]
    assert (mail_row["calls"], mail_row["approved"], mail_row["by_rules"]) == (8, 8, 4)
    assert mail_row["approve_rate"] == 1.0 and mail_row["rule_share"] == 0.5
    assert mail_row["median"] == pytest.approx(25.0)  # people only: 10, 20, 30, 40
    assert mail_row["p90"] == pytest.approx(37.0)
    drop = tools["db.drop"]
    assert (drop["calls"], drop["denied"], drop["approve_rate"]) == (3, 2, 0.0)
    assert drop["median"] == pytest.approx(100.0)
    agents = {r["agent"]: r["calls"] for r in stats["by_agent"]}
    assert agents == {"support-bot": 8, "ops-bot": 3}
    reviewers = {(r["reviewer"], r["rule_id"]): r["decided"] for r in stats["by_reviewer"]}
    assert reviewers == {
        (reviewer_a.external_id, None): 4,
        (None, rule.public_id): 4,
        (lead_a.external_id, None): 2,
    }
    html = signed_in(client, lead_a).get("/approvals/stats/").content.decode()
    assert "Decision analytics" in html and "50%" in html and "25s" in html
    assert client.get("/approvals/stats/?days=0").status_code == 422


def test_decision_analytics_stay_in_the_tenant(tenant_a, tenant_b, lead_a, reviewer_b):
    theirs = [ApprovalFactory(run=RunFactory(tenant=tenant_b)) for _ in range(3)]
    _decide(theirs, status=ApprovalStatus.APPROVED, by=reviewer_b, after_seconds=5)
    stats = decision_stats(viewer=lead_a)
    assert stats["by_tool"] == [] and stats["by_reviewer"] == []


def test_a_rule_from_a_card_generalises_and_decides_the_waiting_calls_in_one_step(
    client, tenant_a, lead_a
):
    run = RunFactory(tenant=tenant_a, current_agent_id="support-bot")
    source = ApprovalFactory(
        run=run, tool_name="email.send", tool_call_id="c0", arguments={"to": "bob@acme.com", "n": 2}
    )
    like = [
        ApprovalFactory(
            run=RunFactory(tenant=tenant_a, current_agent_id="support-bot"),
            tool_name="email.send",
            arguments={"to": f"u{i}@acme.com", "n": 1},
        )
        for i in range(3)
    ]
    unlike = ApprovalFactory(
        run=RunFactory(tenant=tenant_a, current_agent_id="support-bot"),
        tool_name="email.send",
        arguments={"to": "x@evil.com", "n": 1},
    )
    form = {
        "from_approval": source.public_id,
        "name": "acme mail",
        "effect": "approve",
        "tool_pattern": "email.send",
        "agent_pattern": "support-bot",
        "principal_pattern": "*",
        "arg_to": "suggested",
        "arg_n": "any",
        "cond_path": [""],
        "cond_op": ["equals"],
        "cond_value": [""],
    }
    lead = signed_in(client, lead_a)
    preview = lead.post("/rules/preview/", form, headers={"HX-Request": "true"}).content.decode()
    assert "<strong>4</strong> calls waiting now" in preview  # the source and the 3 like it
    exact = {**form, "arg_to": "exact"}
    preview = lead.post("/rules/preview/", exact, headers={"HX-Request": "true"}).content.decode()
    assert "<strong>1</strong> call waiting now" in preview
    response = lead.post("/rules/new/", {**form, "decide_waiting": "on"})
    assert response.status_code == 302
    rule = Rule.objects.get(name="acme mail")
    assert rule.conditions == [{"path": "to", "op": "endsWith", "value": "@acme.com"}]
    assert response["Location"] == f"/rules/?saved={rule.public_id}&decided=4"
    statuses = dict(Approval.objects.values_list("public_id", "status"))
    assert {statuses[a.public_id] for a in [source, *like]} == {"approved"}
    assert statuses[unlike.public_id] == "pending"
    decided = Approval.objects.get(pk=like[0].pk)
    assert decided.decided_by_id == lead_a.pk  # a person's decision, audited as such
    page = lead.get(response["Location"]).content.decode()
    assert "You decided 4 waiting calls with it." in page


def test_no_rule_is_offered_or_made_from_an_over_budget_request(client, tenant_a, admin_a):
    run = RunFactory(tenant=tenant_a)
    override = ApprovalFactory(run=run, tool_name="budget.override", arguments={"budgetId": "b"})
    admin = signed_in(client, admin_a)
    card = admin.get(f"/approvals/{override.public_id}/").content.decode()
    assert "Always approve calls like this" not in card
    response = admin.get(f"/rules/new/?approval={override.public_id}")
    assert response.status_code == 422
    assert "rules never decide" in response.content.decode()
