"""The form of /manage/webhooks/: its fields become POST /api/v1/webhooks' body, validated by
the API's own schema (`WebhookIn`), so the page accepts and refuses exactly what the API does;
the view calls the service the API calls."""

from __future__ import annotations

from django import forms

from approvals.models import WebhookEvent
from approvals.schemas_webhooks import WebhookIn
from console.web.forms import PlainSchemaForm

EVENT_CHOICES = tuple((e.value, e.value) for e in WebhookEvent)


class WebhookForm(PlainSchemaForm):
    schema = WebhookIn
    field_of = {"url": "url", "events": "events", "format": "format"}

    url = forms.CharField(required=False, label="URL")
    events = forms.MultipleChoiceField(required=False, choices=EVENT_CHOICES, label="Events")
    format = forms.CharField(required=False, label="Format")

    def body(self) -> dict:
        data = self.cleaned_data
        return {
            "url": data["url"].strip(),
            "events": data["events"],
            "format": data["format"] or "gavel",
        }
