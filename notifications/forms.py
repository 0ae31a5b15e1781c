"""The form of `/settings/`: it only translates. Its fields become the API's PATCH body, which
the API's own schema (`NotificationSettingsPatch`) validates, so the page accepts and refuses
exactly what `PATCH /api/v1/me/notification-settings` does; the view then calls the service
the API calls, and its 409 (a Slack id another principal holds) lands on its field."""

from __future__ import annotations

from django import forms

from console.web.forms import SchemaForm
from notifications.schemas import NotificationSettingsPatch

EMAIL_CHOICES = (
    ("now", "Right away: one mail for each batch of new calls"),
    ("digest", "A digest: one mail every few minutes with what is still waiting"),
    ("off", "No mail"),
)
FIELD_OF = {
    "email": "email",
    "digestMinutes": "digest_minutes",
    "slackUserId": "slack_user_id",
    "browser": "browser",
}


class NotificationSettingsForm(SchemaForm):
    """Text fields: what a value may be is the API schema's to say."""

    schema = NotificationSettingsPatch
    field_of = FIELD_OF
    conflict_field = {"slack_user_taken": "slack_user_id"}

    email = forms.CharField(required=False, label="Email")
    digest_minutes = forms.CharField(required=False, label="Digest every (minutes)")
    slack_user_id = forms.CharField(required=False, label="Slack user id")
    browser = forms.BooleanField(required=False, label="Browser notifications")

    def body(self) -> dict:
        data = self.cleaned_data
        body = {
            "email": data["email"],
            "slackUserId": data["slack_user_id"].strip() or None,
            "browser": data["browser"],
        }
        text = data["digest_minutes"].strip()
        if text:
            try:
                body["digestMinutes"] = int(text)
            except ValueError:
                self.add_error("digest_minutes", f"'{text}' is not a whole number of minutes")
        return body


def initial(resource: dict) -> dict:
    """The form's values from the settings' wire form (snake_case)."""
    return {
        "email": resource["email"],
        "digest_minutes": str(resource["digest_minutes"]),
        "slack_user_id": resource["slack_user_id"] or "",
        "browser": resource["browser"],
    }
