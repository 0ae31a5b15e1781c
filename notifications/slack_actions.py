"""Deciding from Slack: `POST /integrations/slack/actions` (Slack's interactive requests, form
field `payload`), for a message posted by a `--format slack` webhook whose tenant set
`slackDecisions: "decide"`.

The request is verified with the tenant's Slack signing secret by slack_sdk's
SignatureVerifier (v0 HMAC-SHA256 of `v0:{timestamp}:{body}`, the timestamp under 5 minutes
old); which tenant's secret is found through the approval the button names (nothing is read or
done before the signature holds: a bad or old one is 401, audited `slack.refused` on that
tenant when the approval exists). The Slack user maps to a principal by its own setting
`slackUserId`; the decision then goes through the one decision service (roles, four-eyes,
exactly once), audited as from Slack (`via: "slack"`), and the outcome replaces the message,
buttons removed: in the answer, and POSTed to the press's `response_url` (how Slack applies a
Block Kit button's outcome) through an outbox (notifications/slack_responses.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import parse_qs

from slack_sdk.signature import SignatureVerifier

from approvals.models import Approval
from approvals.schemas import ApprovalOut, approval_resource
from approvals.services.decisions import approval_decide
from budgets.spend import run_costs
from console import access
from console.errors import Conflict, Forbidden
from console.services import audit
from notifications.models import NotificationSettings
from notifications.slack import approval_message
from notifications.slack_responses import slack_response_enqueue

DECISIONS = {"gavel_approve": "approve", "gavel_deny": "deny"}


@dataclass
class SlackAnswer:
    status: int
    body: dict


def _action(body: bytes) -> tuple[dict, dict] | None:
    """(payload, the pressed button) of a Gavel button press, or None."""
    try:
        payload = json.loads(parse_qs(body.decode())["payload"][0])
        action = payload["actions"][0]
    except (KeyError, IndexError, ValueError, TypeError, UnicodeDecodeError):
        return None
    if not isinstance(action, dict) or action.get("action_id") not in DECISIONS:
        return None
    return payload, action


def _ephemeral(text: str) -> SlackAnswer:
    """A reply only the presser sees; the message stays as it is."""
    return SlackAnswer(200, {"response_type": "ephemeral", "replace_original": False, "text": text})


def _outcome(approval: Approval, run_for, payload: dict) -> SlackAnswer:
    """The decided message: the answer, and the same body for the press's `response_url`."""
    approval.refresh_from_db()
    resource = approval_resource(approval, costs=run_costs(runs=[approval.run]))
    wire = ApprovalOut.model_validate(resource).model_dump(by_alias=True, mode="json")
    body = {"replace_original": True, **approval_message("approval.decided", wire, run_for=run_for)}
    slack_response_enqueue(tenant_id=approval.tenant_id, url=payload.get("response_url"), body=body)
    return SlackAnswer(200, body)


def slack_action(*, body: bytes, timestamp: str | None, signature: str | None) -> SlackAnswer:
    refused = SlackAnswer(401, {"error": "the request's Slack signature does not hold"})
    pressed = _action(body)
    approval_id = pressed[1].get("value") if pressed else None
    approval = (
        Approval.objects.select_related("run", "run__tenant", "run__principal")
        .filter(public_id=str(approval_id))
        .first()
    )
    tenant = approval.run.tenant if approval else None
    if tenant is None or not tenant.slack_signing_secret:
        return refused
    verifier = SignatureVerifier(tenant.slack_signing_secret)
    if not verifier.is_valid(body=body, timestamp=timestamp, signature=signature):
        audit(
            tenant=tenant,
            action="slack.refused",
            object_type="approval",
            object_id=approval.public_id,
            data={"reason": "bad signature or a timestamp over 5 minutes old"},
        )
        return refused
    payload, action = pressed
    return _decide(approval, payload, DECISIONS[action["action_id"]])


def _decide(approval: Approval, payload: dict, decision: str) -> SlackAnswer:
    slack_user = (payload.get("user") or {}).get("id")
    settings = (
        NotificationSettings.objects.filter(
            tenant_id=approval.tenant_id, slack_user_id=slack_user, principal__is_active=True
        )
        .select_related("principal__tenant")
        .first()
        if slack_user
        else None
    )
    if settings is None:
        return _ephemeral(
            "Sorry, Gavel does not know who you are: add your Slack member id on your Gavel "
            "settings page (/settings/), or decide in the console."
        )
    principal = settings.principal
    run_for = approval.run.principal.external_id if approval.run.principal_id else None
    refusal = access.slack_decide_refusal(principal, approval)
    if refusal:
        return _ephemeral(f"Not decided: {refusal}.")
    try:
        approval_decide(approval=approval, viewer=principal, decision=decision, via="slack")
    except Conflict:
        return _outcome(approval, run_for, payload)  # decided already: the message says by whom
    except Forbidden as exc:
        return _ephemeral(f"Not decided: {exc.message}.")
    return _outcome(approval, run_for, payload)
