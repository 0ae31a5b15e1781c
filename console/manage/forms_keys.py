"""The forms of /manage/keys/ and /manage/settings/ (/manage/webhooks/'s is approvals').

They only translate: form fields become the API's body, validated by the API's own schemas
(console.directory.schemas.keys), so a page accepts and refuses exactly what
the API does; the views then call the services the API calls, whose 422s land on the field
their `details` name.
"""

from __future__ import annotations

from datetime import datetime, time
from zoneinfo import ZoneInfo

from django import forms

from console.directory.schemas.keys import KeyIn, TenantPatch
from console.web.forms import PlainSchemaForm

SCOPE_CHOICES = (
    ("ingest", "ingest: write runs, read decisions (agent runtimes)"),
    ("decide", "decide: decide approvals as its principal"),
    ("manage", "manage: the management API, as its principal"),
    ("scim", "scim: user provisioning from your identity provider (SCIM 2.0; acts as no one)"),
    ("mcp", "mcp: an MCP client's tool calls through the gateway, as its principal"),
)


def _number(text: str):
    """A whole number typed in a box, else the text itself (the schema then says what is
    wrong, as it would for a client sending it)."""
    text = text.strip().replace(",", "").replace(" ", "")
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        return text


# --- keys ---


class KeyForm(PlainSchemaForm):
    schema = KeyIn
    field_of = {
        "name": "name",
        "scopes": "scopes",
        "principalId": "principal_id",
        "expiresAt": "expires_on",
        "ratePerMinute": "rate_per_minute",
        "rateBurst": "rate_burst",
    }

    name = forms.CharField(required=False, label="Name")
    scopes = forms.MultipleChoiceField(required=False, choices=SCOPE_CHOICES, label="Scopes")
    principal_id = forms.CharField(required=False, label="Acts as principal")
    expires_on = forms.CharField(required=False, label="Expires on")
    rate_per_minute = forms.CharField(required=False, label="Requests per minute")
    rate_burst = forms.CharField(required=False, label="Burst")

    def __init__(self, *args, time_zone: str = "UTC", **kwargs):
        super().__init__(*args, **kwargs)
        self.time_zone = time_zone

    def _expires(self, text: str):
        """A day (the key stops working at the start of that day, tenant time) or nothing."""
        text = text.strip()
        if not text:
            return None
        try:
            day = datetime.strptime(text, "%Y-%m-%d").date()  # noqa: DTZ007 - a day, zoned below
        except ValueError:
            self.add_error("expires_on", f"'{text}' is not a day (YYYY-MM-DD)")
            return None
        return datetime.combine(day, time(0), tzinfo=ZoneInfo(self.time_zone)).isoformat()

    def body(self) -> dict:
        data = self.cleaned_data
        body = {"name": data["name"].strip(), "scopes": data["scopes"]}
        if data["principal_id"].strip():
            body["principalId"] = data["principal_id"].strip()
        expires = self._expires(data["expires_on"])
        if expires:
            body["expiresAt"] = expires
        for field, wire in (("rate_per_minute", "ratePerMinute"), ("rate_burst", "rateBurst")):
            value = _number(data[field])
            if value is not None:
                body[wire] = value
        return body


# --- the tenant's settings ---


class SettingsForm(PlainSchemaForm):
    """The whole settings form; only what differs from the tenant's settings is sent (a
    PATCH), and the Slack signing secret only when typed (or removed with its box)."""

    schema = TenantPatch
    field_of = {
        "name": "name",
        "allowSelfApproval": "allow_self_approval",
        "approvalTtlSeconds": "approval_ttl_minutes",
        "reminderAfterSeconds": "reminder_after_minutes",
        "escalateAfterSeconds": "escalate_after_minutes",
        "currency": "currency",
        "timeZone": "time_zone",
        "slackSigningSecret": "slack_signing_secret",
        "slackDecisions": "slack_decisions",
        "auditRetentionDays": "audit_retention_days",
    }
    MINUTES = {
        "approval_ttl_minutes": "approvalTtlSeconds",
        "reminder_after_minutes": "reminderAfterSeconds",
        "escalate_after_minutes": "escalateAfterSeconds",
    }

    name = forms.CharField(required=False, label="Name")
    allow_self_approval = forms.BooleanField(required=False, label="Allow self-approval")
    approval_ttl_minutes = forms.CharField(required=False, label="A call waits at most")
    reminder_after_minutes = forms.CharField(required=False, label="Remind after")
    escalate_after_minutes = forms.CharField(required=False, label="Escalate after")
    currency = forms.CharField(required=False, label="Currency")
    time_zone = forms.CharField(required=False, label="Time zone")
    slack_signing_secret = forms.CharField(required=False, label="Slack signing secret")
    remove_slack_signing_secret = forms.BooleanField(required=False)
    slack_decisions = forms.CharField(required=False, label="Deciding from Slack")
    audit_retention_days = forms.CharField(required=False, label="Keep audit entries for")

    def __init__(self, *args, held: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.held = held  # the tenant's settings now (wire form)

    def _seconds(self, field: str, wire: str):
        text = self.cleaned_data[field].strip()
        if text == _minutes(self.held.get(wire)):  # untouched: keep the exact seconds held
            return self.held.get(wire)
        value = _number(text)
        return value * 60 if isinstance(value, int) else value

    def body(self) -> dict:
        data = self.cleaned_data
        wanted = {
            "name": data["name"].strip(),
            "allowSelfApproval": data["allow_self_approval"],
            "currency": data["currency"].strip(),
            "timeZone": data["time_zone"].strip(),
            "slackDecisions": data["slack_decisions"] or "link",
            "auditRetentionDays": _number(data["audit_retention_days"]),
        }
        for field, wire in self.MINUTES.items():
            wanted[wire] = self._seconds(field, wire)
        body = {k: v for k, v in wanted.items() if self.held.get(k) != v}
        if data["remove_slack_signing_secret"]:
            body["slackSigningSecret"] = None
        elif data["slack_signing_secret"]:
            body["slackSigningSecret"] = data["slack_signing_secret"]
        return body


def _minutes(seconds) -> str:
    return "" if seconds is None else str(seconds // 60)


def settings_initial(held: dict) -> dict:
    """The settings form's values from the tenant's settings (wire form); delays in minutes."""
    minutes = _minutes
    return {
        "name": held["name"],
        "allow_self_approval": held["allowSelfApproval"],
        "approval_ttl_minutes": minutes(held["approvalTtlSeconds"]),
        "reminder_after_minutes": minutes(held["reminderAfterSeconds"]),
        "escalate_after_minutes": minutes(held["escalateAfterSeconds"]),
        "currency": held["currency"],
        "time_zone": held["timeZone"],
        "slack_decisions": held["slackDecisions"],
        "audit_retention_days": ""
        if held["auditRetentionDays"] is None
        else str(held["auditRetentionDays"]),
    }
