"""`POST /integrations/slack/actions`: a press of Approve/Deny in a Slack message, verified by
Slack's v0 signature (slack_sdk's verifier) and a timestamp under 5 minutes old, decides as
the principal whose `slackUserId` it is, under every v1 rule (roles, four-eyes, exactly once),
and answers with the outcome (the message replaced: who decided, no decision buttons), which
also goes to the press's `response_url` (a local HTTP server here) through an outbox; the
audit entry says the decision came from Slack."""

import json
import time
from urllib.parse import urlencode

import pytest
from django.utils import timezone
from slack_sdk.signature import SignatureVerifier

from approvals.models import ApprovalStatus
from console.core import outbox
from console.models import AuditEvent, Role
from notifications.models import NotificationSettings, SlackResponse, SlackResponseStatus
from notifications.slack import slack_message
from tests.support.factories import ApprovalFactory, PrincipalFactory, RunFactory

pytestmark = pytest.mark.django_db

URL = "/integrations/slack/actions"
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


@pytest.fixture
def held(tenant_a, reviewer_a):
    tenant_a.slack_signing_secret = SECRET
    tenant_a.slack_decisions = "decide"
    tenant_a.save()
    NotificationSettings.objects.create(
        tenant=tenant_a, principal=reviewer_a, slack_user_id="U0REV", slack_user_verified=True
    )
    alice = PrincipalFactory(tenant=tenant_a, external_id="alice@a.example")
    run = RunFactory(tenant=tenant_a, principal=alice, external_id="run_slack")
    return ApprovalFactory(run=run, tool_name="send_email")


def press(
    approval, action="gavel_approve", user="U0REV", response_url="https://hooks.slack.com/a/T/1/x"
):
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": "rita"},
        "actions": [{"action_id": action, "value": approval.public_id, "type": "button"}],
        "response_url": response_url,
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def post(client, body, *, secret=SECRET, age=0, signature=None):
    timestamp = str(int(time.time()) - age)
    signed = SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body)
    return client.post(
        URL,
        body,
        content_type="application/x-www-form-urlencoded",
        headers={
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": signature or signed,
        },
    )


def decided(approval):
    approval.refresh_from_db()
    return approval.status


def test_a_signed_press_approves_as_the_mapped_principal_and_replaces_the_message(
    client, held, reviewer_a
):
    response = post(client, press(held))
    assert response.status_code == 200
    answer = response.json()
    assert answer["replace_original"] is True
    assert answer["text"].replace("\u2060", "") == (  # (the joiners that stop links)
        "Approved by reviewer@a.example: send_email (run run_slack for alice@a.example)"
    )
    kinds = [e.get("action_id") for b in answer["blocks"] if b["type"] == "actions"
             for e in b["elements"]]  # fmt: skip
    assert kinds == ["open_open_in_gavel"]  # the decision buttons are gone
    held.refresh_from_db()
    assert held.status == ApprovalStatus.APPROVED and held.decided_by == reviewer_a
    entry = AuditEvent.objects.get(action="approval.decided")
    assert entry.actor_principal == reviewer_a and entry.data["via"] == "slack"  # from Slack


def test_a_decision_in_the_console_or_the_api_names_no_via(decide_a, held):
    response = decide_a.post(f"/api/v1/approvals/{held.public_id}/decision", {"decision": "deny"})
    assert response.status_code == 200
    assert "via" not in AuditEvent.objects.get(action="approval.decided").data


def test_a_replayed_press_changes_nothing(client, held):
    body = press(held)
    assert post(client, body).status_code == 200
    held.refresh_from_db()
    first_at = held.decided_at
    again = post(client, body)  # the same signed request, again (within 5 minutes)
    assert again.status_code == 200 and again.json()["text"].startswith("Approved by reviewer")
    held.refresh_from_db()
    assert held.decided_at == first_at
    assert AuditEvent.objects.filter(action="approval.decided").count() == 1
    deny = post(client, press(held, action="gavel_deny"))  # the other button, later: too late
    assert deny.json()["text"].startswith("Approved by reviewer") and decided(held) == "approved"


def test_deny_denies(client, held):
    assert post(client, press(held, action="gavel_deny")).status_code == 200
    assert decided(held) == ApprovalStatus.DENIED


@pytest.mark.parametrize(
    "how",
    ["wrong secret", "forged signature", "old timestamp"],
)
def test_a_bad_signature_or_an_old_timestamp_is_401_and_decides_nothing(client, held, how):
    body = press(held)
    if how == "wrong secret":
        response = post(client, body, secret="not-the-secret")
    elif how == "forged signature":
        response = post(client, body, signature="v0=" + "0" * 64)
    else:
        response = post(client, body, age=6 * 60)  # signed right, but over 5 minutes old
    assert response.status_code == 401
    assert decided(held) == ApprovalStatus.PENDING
    assert not AuditEvent.objects.exists()  # unauthenticated: nothing written (audit M3)


def test_an_unknown_approval_or_no_secret_is_401(client, held, tenant_a):
    body = urlencode({"payload": json.dumps({"actions": [
        {"action_id": "gavel_approve", "value": "apr_nope"}]})}).encode()  # fmt: skip
    assert post(client, body).status_code == 401
    assert post(client, b"payload=not-json").status_code == 400  # not a payload at all
    tenant_a.slack_signing_secret = ""
    tenant_a.save()
    assert post(client, press(held)).status_code == 401
    assert decided(held) == ApprovalStatus.PENDING


def test_a_slack_user_with_no_principal_gets_a_polite_reply_and_nothing_is_decided(client, held):
    response = post(client, press(held, user="U0STRANGER"))
    assert response.status_code == 200
    answer = response.json()
    assert answer["response_type"] == "ephemeral" and answer["replace_original"] is False
    assert "does not know who you are" in answer["text"]
    assert decided(held) == ApprovalStatus.PENDING


def test_link_mode_decides_nothing(client, held, tenant_a):
    tenant_a.slack_decisions = "link"
    tenant_a.save()
    answer = post(client, press(held)).json()
    assert "deciding from Slack is off" in answer["text"]
    assert decided(held) == ApprovalStatus.PENDING


def test_a_role_may_forbid_deciding_its_tools_from_slack(client, held, tenant_a):
    Role.objects.filter(tenant=tenant_a, name="reviewer").update(slack_decide=False)
    answer = post(client, press(held)).json()
    assert "do not allow deciding 'send_email' from Slack" in answer["text"]
    assert decided(held) == ApprovalStatus.PENDING


def test_no_one_decides_their_own_run_from_slack(client, held, tenant_a):
    alice = held.run.principal
    alice.roles.add(Role.objects.get(tenant=tenant_a, name="reviewer"))
    NotificationSettings.objects.create(
        tenant=tenant_a, principal=alice, slack_user_id="U0ALICE", slack_user_verified=True
    )
    answer = post(client, press(held, user="U0ALICE")).json()
    assert "for themselves" in answer["text"]
    assert decided(held) == ApprovalStatus.PENDING


def test_another_tenants_slack_user_id_is_not_this_tenants_principal(client, held, reviewer_b):
    NotificationSettings.objects.create(
        tenant=reviewer_b.tenant,
        principal=reviewer_b,
        slack_user_id="U0BEE",
        slack_user_verified=True,
    )
    answer = post(client, press(held, user="U0BEE")).json()
    assert "does not know who you are" in answer["text"]
    assert decided(held) == ApprovalStatus.PENDING


def test_decide_mode_messages_carry_buttons_that_post_to_the_endpoint():
    message = slack_message(
        {"event": "approval.requested", "approval": {"id": "apr_1", "status": "pending",
                                                     "toolName": "t", "runId": "r"}},
        decide=True,
    )  # fmt: skip
    [actions] = [b for b in message["blocks"] if b["type"] == "actions"]
    assert [(e.get("action_id"), e.get("value")) for e in actions["elements"]] == [
        ("gavel_approve", "apr_1"),
        ("gavel_deny", "apr_1"),
        ("open_open_in_gavel", None),
    ]


# --- the press's response_url ---


@pytest.fixture
def slack_host(endpoint, settings):
    """The local HTTP server stands in for Slack's host."""
    settings.GAVEL_SLACK_RESPONSE_URL_PREFIX = endpoint.url.rsplit("/hooks/", 1)[0] + "/"
    return endpoint


def test_the_decided_message_is_posted_to_the_response_url_after_commit(client, held, slack_host):
    response = post(client, press(held, response_url=slack_host.url))
    assert response.status_code == 200 and decided(held) == "approved"
    row = SlackResponse.objects.get()
    assert row.status == SlackResponseStatus.PENDING and not slack_host.requests  # queued
    assert outbox.run_due(in_server=True)["slack responses"] == 1  # what the server's thread runs
    sent = slack_host.json()
    assert sent == response.json() and sent["replace_original"] is True
    assert (
        sent["text"].replace("\u2060", "").startswith("Approved by reviewer@a.example: send_email")
    )
    row.refresh_from_db()
    assert row.status == SlackResponseStatus.DELIVERED and row.attempts == 1
    assert outbox.run_due(in_server=True)["slack responses"] == 0  # sent once


def test_a_press_on_a_decided_call_posts_who_decided(client, held, slack_host):
    post(client, press(held))
    late = post(client, press(held, action="gavel_deny", response_url=slack_host.url))
    assert late.json()["text"].startswith("Approved by reviewer")
    outbox.run_due(in_server=True)
    assert slack_host.json()["text"].startswith("Approved by reviewer")


def test_a_refused_press_posts_nothing(client, held, slack_host):
    post(client, press(held, user="U0NOBODY", response_url=slack_host.url))
    assert decided(held) == "pending" and not SlackResponse.objects.exists()


def test_a_response_url_off_slacks_host_is_never_posted_to(client, held, endpoint):
    assert post(client, press(held, response_url=endpoint.url)).status_code == 200
    assert decided(held) == "approved" and not SlackResponse.objects.exists()


def test_a_failed_post_is_retried_on_the_outbox_schedule(client, held, slack_host):
    slack_host.status = 500
    post(client, press(held, response_url=slack_host.url))
    now = timezone.now()
    assert outbox.run_due(now=now)["slack responses"] == 1
    row = SlackResponse.objects.get()
    assert row.status == SlackResponseStatus.PENDING and row.attempts == 1
    assert row.last_status_code == 500 and row.last_error == "HTTP 500"
    assert row.next_attempt_at == now + timezone.timedelta(seconds=outbox.BACKOFF_SECONDS[0])
    slack_host.status = 200
    later = now + timezone.timedelta(seconds=outbox.BACKOFF_SECONDS[0] + 1)
    assert outbox.run_due(now=later)["slack responses"] == 1
    row.refresh_from_db()
    assert row.status == SlackResponseStatus.DELIVERED and len(slack_host.requests) == 2
