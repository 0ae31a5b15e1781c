"""Slack Block Kit bodies for `--format slack` webhooks (a Slack incoming-webhook URL): the
same events as the gavel format, as `{"text", "blocks"}`. Pure: it reads the event's wire body
(and, for approvals, whom the run is for), never the database, so the webhook sender of any
floor may call it.

An approval's message shows the tool, the reason, a short argument summary, the run and whom
it is for, and buttons: with `slackDecisions: "link"` (the default) they open the card in the
console; with "decide", Approve and Deny decide from Slack. A decided call's message says who
decided and has no decision buttons.
"""

from __future__ import annotations

import json
import re

from console.core import links

ARGUMENTS_MAX = 300
HEADLINE = {
    "approval.requested": "A call waits for a decision",
    "approval.reminder": "Reminder: a call still waits for a decision",
    "approval.escalated": "Escalated: a call has waited too long",
    "approval.decided": "A call was decided",
}


# U+2060 WORD JOINER: invisible, and no part of any URL, domain or address Slack recognises.
JOINER = "\u2060"
# Where Slack would start or continue a link it finds in plain text: a scheme's "://", a dot
# between two parts of a host name ("evil.example", "www.x"), an address's "@".
_LINKABLE = re.compile(r"(:(?=/)|[.@](?=\w))")
# U+02CB MODIFIER LETTER GRAVE ACCENT: looks like a back-tick and closes no code span.
GRAVE = "\u02cb"


def _mrkdwn(text) -> str:
    """Slack's mrkdwn control characters, escaped as its docs ask."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _esc(text) -> str:
    """Text from the runtime (or any tenant data) as plain mrkdwn prose: the control
    characters escaped, and nothing Slack would turn into a link (a bare URL, domain or mail
    address gets an invisible word joiner after its "://", dots and "@"; the text reads the
    same). Every mrkdwn object is also sent `verbatim` (Slack's own switch for this)."""
    return _LINKABLE.sub(lambda m: m.group(1) + JOINER, _mrkdwn(text))


def _code(text) -> str:
    """Text shown inside a code span or block: escaped, and no back-tick (which would close
    the span and let the rest be formatted) nor line break (which ends an inline span)."""
    text = _mrkdwn(text).replace("`", GRAVE)
    return text.replace("\r", " ").replace("\n", " ")


def _summary(arguments) -> str:
    text = json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= ARGUMENTS_MAX else text[: ARGUMENTS_MAX - 1] + "…"


def _text(text: str) -> dict:
    """A mrkdwn text object: `verbatim`, so Slack does not link-ify URLs or channel names in
    it nor parse mentions (our own markup, bold and code, still applies)."""
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _outcome(approval: dict) -> str:
    who = approval.get("decidedBy")
    if approval.get("decidedByRule"):
        who = f"rule {approval['decidedByRule']}"
    by = f" by {who}" if who else ""
    return f"{approval.get('status', 'decided').capitalize()}{by}"


def approval_message(
    event: str, approval: dict, *, run_for: str | None, decide: bool = False
) -> dict:
    tool, run = approval.get("toolName", "?"), approval.get("runId", "?")
    card = links.public_url(f"/approvals/{approval.get('id')}/")
    pending = approval.get("status") == "pending"
    headline = HEADLINE.get(event, event)
    if not pending:
        headline = f"{_outcome(approval)}: {tool}"
    who = f" for {run_for}" if run_for else ""
    text = f"{headline}: {tool} (run {run}{who})" if pending else f"{headline} (run {run}{who})"
    fields = [f"*Tool*\n`{_code(tool)}`", f"*Run*\n{_esc(run)}", f"*For*\n{_esc(run_for or '—')}"]
    reason = approval.get("reason") or "(none given)"
    blocks = [
        {"type": "section", "text": _text(f"*{_esc(headline)}*")},
        {"type": "section", "fields": [_text(f) for f in fields]},
        {"type": "section", "text": _text(f"*Reason*\n{_esc(reason)}")},
        {
            "type": "context",
            "elements": [_text(f"```{_code(_summary(approval.get('arguments')))}```")],
        },
    ]
    if pending:
        blocks.append(
            {
                "type": "actions",
                "block_id": f"gavel:{approval.get('id')}",
                "elements": [
                    *(_decisions(approval["id"]) if decide else ()),
                    *(() if decide else (_link("Approve", card, "primary"),)),
                    *(() if decide else (_link("Deny", card, "danger"),)),
                    _link("Open in Gavel", card),
                ],
            }
        )
    else:
        blocks.append(_open(card))
    return {"text": _esc(text), "blocks": blocks}


def _link(label: str, url: str, style: str | None = None) -> dict:
    """A button that opens the card (deciding happens in the console: `slackDecisions:
    "link"`)."""
    button = {
        "type": "button",
        "text": {"type": "plain_text", "text": label},
        "url": url,
        "action_id": f"open_{label.lower().replace(' ', '_')}",
    }
    if style:
        button["style"] = style
    return button


def _decisions(approval_id: str) -> tuple[dict, dict]:
    """Buttons that decide in Slack (`slackDecisions: "decide"`): Slack posts the press to
    `/integrations/slack/actions` (notifications/slack_actions.py)."""
    return tuple(
        {
            "type": "button",
            "text": {"type": "plain_text", "text": label},
            "action_id": f"gavel_{label.lower()}",
            "value": approval_id,
            "style": style,
        }
        for label, style in (("Approve", "primary"), ("Deny", "danger"))
    )


def _open(url: str) -> dict:
    return {"type": "actions", "elements": [_link("Open in Gavel", url)]}


def budget_message(payload: dict) -> dict:
    budget = payload.get("budget") or {}
    url = links.public_url(f"/budgets/{budget.get('id')}/")
    headline = f"Budget '{budget.get('name', '?')}' reached {payload.get('threshold')}%"
    return {
        "text": _esc(headline),
        "blocks": [
            {"type": "section", "text": _text(f"*{_esc(headline)}*")},
            _open(url),
        ],
    }


def slack_message(payload: dict, *, run_for: str | None = None, decide: bool = False) -> dict:
    """The Slack body of one delivery's wire body (`{"event", "deliveryId", ...}`); `decide`:
    the tenant lets people decide from Slack (else every button opens the card)."""
    event = payload.get("event", "")
    if isinstance(payload.get("approval"), dict):
        return approval_message(event, payload["approval"], run_for=run_for, decide=decide)
    if event == "budget.threshold_crossed":
        return budget_message(payload)
    return {"text": _esc(f"Gavel: {event}"), "blocks": []}  # e.g. a test event
