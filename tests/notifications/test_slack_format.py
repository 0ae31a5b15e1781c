"""`--format slack` webhooks post Slack Block Kit (`{"text", "blocks"}`) to the endpoint: an
approval's tool, reason, argument summary, run and whom it is for, with buttons that open the
card (slackDecisions "link"); a decided call names who decided and has no buttons; a budget
alert links to its budget. The same durable outbox as the gavel format."""

from io import StringIO

import pytest
from django.core.management import call_command

from approvals.models import Approval, Webhook
from approvals.services import webhooks
from tests.support.factories import PrincipalFactory
from tests.support.mail import budget_alert

pytestmark = pytest.mark.django_db

RUNS = "/api/v1/runs"


def hold(api):
    body = {"id": "run_sl", "agentId": "bot", "agentVersion": 1, "principalId": "alice@a.example"}
    assert api.post(RUNS, body).status_code == 201
    call = {"toolCallId": "c1", "toolName": "email.send", "reason": "mail <Bob> & co",
            "arguments": {"to": "bob@acme.com"}, "rejectionMessage": "no"}  # fmt: skip
    event = {"seq": 1, "type": "approval.requested", "step": 1, "calls": [call]}
    assert api.post(f"{RUNS}/run_sl/events", {"events": [event]}).status_code == 200
    return Approval.objects.get()


def texts(blocks) -> str:
    """Every text of the blocks, flattened (what a reader of the message sees)."""
    found = []
    for block in blocks:
        for key in ("text",):
            if isinstance(block.get(key), dict):
                found.append(block[key]["text"])
        found += [f["text"] for f in block.get("fields", [])]
        found += [e["text"] if isinstance(e["text"], str) else e["text"]["text"]
                  for e in block.get("elements", [])]  # fmt: skip
    return "\n".join(found).replace("\u2060", "")  # the invisible joiners that stop links


def seen(text: str) -> str:
    """The text as a reader sees it (without the invisible joiners that stop Slack's links)."""
    return text.replace("\u2060", "")


def buttons(blocks) -> list[tuple[str, str]]:
    return [
        (e["text"]["text"], e["url"])
        for b in blocks
        if b["type"] == "actions"
        for e in b["elements"]
    ]


def test_a_held_call_posts_block_kit_with_buttons_that_open_its_card(tenant_a, ingest_a, endpoint):
    PrincipalFactory(tenant=tenant_a, external_id="alice@a.example")
    webhooks.webhook_create(tenant=tenant_a, url=endpoint.url, format="slack")
    approval = hold(ingest_a)
    assert webhooks.webhook_deliveries_run_due() == 1
    body = endpoint.json()
    assert set(body) == {"text", "blocks"}
    assert (
        seen(body["text"])
        == "A call waits for a decision: email.send (run run_sl for alice@a.example)"
    )
    shown = texts(body["blocks"])
    assert "`email.send`" in shown and "alice@a.example" in shown and "run_sl" in shown
    assert "mail &lt;Bob&gt; &amp; co" in shown  # Slack's control characters escaped
    assert '{"to": "bob@acme.com"}' in shown
    card = f"https://gavel.example.com/approvals/{approval.public_id}/"
    assert buttons(body["blocks"]) == [("Approve", card), ("Deny", card), ("Open in Gavel", card)]


def test_a_decided_call_says_who_decided_and_has_no_decision_buttons(
    tenant_a, ingest_a, decide_a, endpoint
):
    PrincipalFactory(tenant=tenant_a, external_id="alice@a.example")
    webhooks.webhook_create(
        tenant=tenant_a, url=endpoint.url, format="slack", events=["approval.decided"]
    )
    approval = hold(ingest_a)
    url = f"/api/v1/approvals/{approval.public_id}/decision"
    assert decide_a.post(url, {"decision": "approve"}).status_code == 200
    webhooks.webhook_deliveries_run_due()
    body = endpoint.json()
    assert (
        seen(body["text"])
        == "Approved by reviewer@a.example: email.send (run run_sl for alice@a.example)"
    )
    card = f"https://gavel.example.com/approvals/{approval.public_id}/"
    assert buttons(body["blocks"]) == [("Open in Gavel", card)]


def test_a_budget_alert_links_to_its_budget(tenant_a, lead_a, endpoint):
    webhooks.webhook_create(tenant=tenant_a, url=endpoint.url, format="slack")
    budget_alert(tenant=tenant_a, recipients=[lead_a])
    webhooks.webhook_deliveries_run_due()
    body = endpoint.json()
    assert body["text"] == "Budget 'support' reached 80%"
    assert buttons(body["blocks"]) == [
        ("Open in Gavel", "https://gavel.example.com/budgets/bud_1/")
    ]


def test_the_gavel_format_is_unchanged(tenant_a, ingest_a, endpoint):
    PrincipalFactory(tenant=tenant_a, external_id="alice@a.example")
    webhooks.webhook_create(tenant=tenant_a, url=endpoint.url)
    hold(ingest_a)
    webhooks.webhook_deliveries_run_due()
    body = endpoint.json()
    assert body["event"] == "approval.requested" and body["approval"]["toolName"] == "email.send"


def test_create_webhook_takes_format_slack(tenant_a, settings):
    out = StringIO()
    call_command(
        "create_webhook", "--tenant", tenant_a.slug, "--url", "https://hooks.slack.com/services/T/B/x",
        "--format", "slack", stdout=out,
    )  # fmt: skip
    assert Webhook.objects.get().format == "slack"
    assert out.getvalue().strip().splitlines()[-1].startswith("whsec_")
