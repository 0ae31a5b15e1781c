"""Slack's requests to `POST /integrations/slack/actions`: a press of Approve/Deny in a message
posted by a `--format slack` webhook whose tenant set `slackDecisions: "decide"` (form field
`payload`), and the slash command that links a Slack member to its principal (`/gavel link
CODE`: form fields `command`, `text`, `user_id`).

Every request is verified with its tenant's Slack signing secret by slack_sdk's
SignatureVerifier (v0 HMAC-SHA256 of `v0:{timestamp}:{body}`, the timestamp under 5 minutes
old). Slack's request names no Gavel tenant, so the tenant is found through what the request
carries: the approval the button names, or the link code. In order, and nothing is written
(no decision, no audit entry) for a request whose signature does not hold:
1. the headers: a timestamp that is not a whole number of seconds within 5 minutes of now, or
   a signature that is not `v0=` and 64 hex digits, is 401 before the body is read;
2. the body: not a form, no `payload` (nor a command), a payload that is not JSON (or nested
   too deep to read) is 400;
3. one read finds the tenant (and so its secret); no such approval or code, no secret, or a
   signature that does not hold is 401. Refusals are logged to the server log only: an
   unauthenticated request cannot write into a tenant's append-only audit log.
A press then maps the Slack user to a principal by its *verified* Slack id (notifications/
preferences.py: an id typed in is never used to attribute a decision); the decision goes
through the one decision service (roles, four-eyes, exactly once), audited as from Slack
(`via: "slack"`), and the outcome replaces the message, buttons removed: in the answer, and
POSTed to the press's `response_url` (how Slack applies a Block Kit button's outcome) through
an outbox (notifications/slack_responses.py).
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

from slack_sdk.signature import SignatureVerifier

from approvals import access as approvals_access
from approvals.models import Approval
from approvals.schemas import ApprovalOut, approval_resource
from approvals.services.decisions import approval_decide
from budgets.spend import run_costs
from console.core.errors import Conflict, Forbidden
from notifications.models import NotificationSettings
from notifications.preferences import (
    link_code_normalized,
    slack_link_complete,
    slack_link_pending,
)
from notifications.slack import approval_message
from notifications.slack_responses import slack_response_enqueue

log = logging.getLogger(__name__)

DECISIONS = {"gavel_approve": "approve", "gavel_deny": "deny"}
MAX_AGE_SECONDS = 5 * 60  # Slack's own advice, and slack_sdk's verifier's
MAX_FIELDS = 50  # a slash command sends about 15
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")


@dataclass
class SlackAnswer:
    status: int
    body: dict


def _error(status: int, code: str, message: str) -> SlackAnswer:
    return SlackAnswer(status, {"error": {"code": code, "message": message, "details": None}})


def _refused(why: str) -> SlackAnswer:
    log.info("Slack request refused: %s", why)
    return _error(401, "slack_signature_invalid", "the request's Slack signature does not hold")


class _Malformed(ValueError):
    pass


def _headers_refusal(timestamp: str | None, signature: str | None) -> str | None:
    """Why the signature headers cannot belong to a fresh Slack request (None: they may)."""
    if not timestamp or not _TIMESTAMP.fullmatch(timestamp):
        return "no timestamp, or not a whole number of seconds"
    if abs(time.time() - int(timestamp)) > MAX_AGE_SECONDS:
        return "a timestamp over 5 minutes away"
    if not signature or not _SIGNATURE.fullmatch(signature):
        return "no v0 signature"
    return None


def _form(body: bytes) -> dict[str, str]:
    """The request's form fields (the first value of each)."""
    try:
        fields = parse_qs(body.decode("utf-8"), max_num_fields=MAX_FIELDS)
    except (UnicodeDecodeError, ValueError):  # ValueError: more fields than any Slack request
        raise _Malformed("the body is not a form") from None
    return {name: values[0] for name, values in fields.items()}


def _payload(raw: str) -> dict:
    try:
        payload = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than can be read
        raise _Malformed("the payload is not JSON") from None
    if not isinstance(payload, dict):
        raise _Malformed("the payload is not a JSON object")
    return payload


def _action(payload: dict) -> dict | None:
    """The pressed Gavel button, or None."""
    actions = payload.get("actions")
    action = actions[0] if isinstance(actions, list) and actions else None
    if not isinstance(action, dict) or action.get("action_id") not in DECISIONS:
        return None
    return action


def _verified(secret: str, body: bytes, timestamp: str, signature: str) -> bool:
    return bool(secret) and SignatureVerifier(secret).is_valid(
        body=body, timestamp=timestamp, signature=signature
    )


def slack_action(*, body: bytes, timestamp: str | None, signature: str | None) -> SlackAnswer:
    why = _headers_refusal(timestamp, signature)
    if why:
        return _refused(why)
    try:
        form = _form(body)
        if "payload" not in form:
            if "command" in form:
                return _command(form, body, timestamp, signature)
            raise _Malformed("no payload")
        payload = _payload(form["payload"])
    except _Malformed as exc:
        return _error(400, "invalid_payload", str(exc))
    action = _action(payload)
    if action is None:
        return _refused("not a Gavel button press")
    approval = (
        Approval.objects.with_run()
        .select_related("run__principal")
        .filter(public_id=str(action.get("value")))
        .first()
    )
    if approval is None:
        return _refused("no such approval")
    if not _verified(approval.run.tenant.slack_signing_secret, body, timestamp, signature):
        return _refused(f"bad signature (approval {approval.public_id})")
    return _decide(approval, payload, DECISIONS[action["action_id"]])


def _ephemeral(text: str) -> SlackAnswer:
    """A reply only the presser sees; the message stays as it is."""
    return SlackAnswer(200, {"response_type": "ephemeral", "replace_original": False, "text": text})


def _outcome(approval: Approval, run_for, payload: dict) -> SlackAnswer:
    """The decided message: the answer, and the same body for the press's `response_url`."""
    # The call as stored now (decided here, or by someone else first); its run as read with
    # it (a decision changes no run field the message shows: no second read of the run).
    run = approval.run
    approval.refresh_from_db()
    approval.run = run
    resource = approval_resource(approval, costs=run_costs(runs=[approval.run]))
    wire = ApprovalOut.model_validate(resource).model_dump(by_alias=True, mode="json")
    body = {"replace_original": True, **approval_message("approval.decided", wire, run_for=run_for)}
    slack_response_enqueue(tenant_id=approval.tenant_id, url=payload.get("response_url"), body=body)
    return SlackAnswer(200, body)


def _decide(approval: Approval, payload: dict, decision: str) -> SlackAnswer:
    user = payload.get("user")
    slack_user = user.get("id") if isinstance(user, dict) else None
    settings = (
        NotificationSettings.objects.filter(
            tenant_id=approval.tenant_id,
            slack_user_id=str(slack_user),
            slack_user_verified=True,  # Slack vouched for it; a typed-in id never decides
            principal__is_active=True,
        )
        .select_related("principal__tenant")
        .first()
        if slack_user
        else None
    )
    if settings is None:
        return _ephemeral(
            "Sorry, Gavel does not know who you are: link your Slack account from your Gavel "
            "settings page (/settings/: it gives you a code to send here with /gavel link "
            "CODE), or decide in the console."
        )
    principal = settings.principal
    run_for = approval.run.principal.external_id if approval.run.principal_id else None
    refusal = approvals_access.slack_decide_refusal(principal, approval)
    if refusal:
        return _ephemeral(f"Not decided: {refusal}.")
    try:
        approval_decide(approval=approval, viewer=principal, decision=decision, via="slack")
    except Conflict:
        return _outcome(approval, run_for, payload)  # decided already: the message says by whom
    except Forbidden as exc:
        return _ephemeral(f"Not decided: {exc.message}.")
    return _outcome(approval, run_for, payload)


def _command(form: dict, body: bytes, timestamp: str, signature: str) -> SlackAnswer:
    """`/gavel link CODE` (any slash command pointed here; `link` may be left out): the member
    who sends it becomes the verified Slack id of the principal the code was given to."""
    words = form.get("text", "").split()
    if words and words[0].lower() == "link":
        words = words[1:]
    code = link_code_normalized("".join(words))
    pending = slack_link_pending(code=code) if code else None
    if pending is None:
        return _refused("no live link code")
    if not _verified(pending.tenant.slack_signing_secret, body, timestamp, signature):
        return _refused(f"bad signature (a link code of tenant {pending.tenant.slug})")
    linked = slack_link_complete(code=code, slack_user_id=form.get("user_id", ""))
    if linked is None:
        return _ephemeral("That code is used up or expired: get a new one on /settings/.")
    return _ephemeral(
        f"Done: Gavel now knows you as {linked.principal.external_id} "
        f"({linked.tenant.name}). Your presses in Slack are decided as them."
    )
