"""The forms of /manage/mcp/: their fields become the management API's body (POST and PATCH
/api/v1/mcp/servers), validated by the API's own schemas, so a page accepts and refuses exactly
what the API does; the views call the services the API calls. The fields' own checks only say
the same refusals in the page's words, on the field they are about."""

from __future__ import annotations

from django import forms
from django.core.validators import RegexValidator

from console.core.errors import Invalid
from console.web.forms import PlainSchemaForm
from gateway import services
from gateway.schemas import MAX_HOLD_SECONDS, NAME_PATTERN, McpServerIn, McpServerPatch

HOLD_MESSAGE = f"Hold a call for a whole number of seconds, from 1 to {MAX_HOLD_SECONDS}."
HOLD_ERRORS = {
    "required": HOLD_MESSAGE,
    "invalid": HOLD_MESSAGE,
    "min_value": HOLD_MESSAGE,
    "max_value": HOLD_MESSAGE,
}
URL_REQUIRED = "Enter the address of the server: its Streamable HTTP URL, https://…"


def header_lines(text: str) -> dict[str, str]:
    """`Name: value` lines (blank lines skipped) as a dict; a line that is not one is named."""
    headers: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise forms.ValidationError(
                f"Line {number} is not a header: write one `Name: value` a line.",
                code="header_line",
            )
        if name.strip().lower() in {given.lower() for given in headers}:  # case-insensitive
            raise forms.ValidationError(
                f"Line {number} repeats the header {name.strip()}.", code="header_twice"
            )
        headers[name.strip()] = value.strip()
    return headers


class _ServerFields(PlainSchemaForm):
    """What adding and changing a server share. A header the service refuses is shown with
    its name (the wire path `headers.<name>`)."""

    field_of = {"passReadOnly": "pass_read_only", "holdSeconds": "hold_seconds"}

    headers = forms.CharField(required=False, strip=False, label="Headers sent to the server")
    pass_read_only = forms.BooleanField(required=False, label="Pass read-only tools")
    hold_seconds = forms.IntegerField(
        min_value=1, max_value=MAX_HOLD_SECONDS, label="Hold a call for", error_messages=HOLD_ERRORS
    )

    def clean_headers(self) -> dict[str, str]:
        return header_lines(self.cleaned_data.get("headers") or "")

    def clean(self):
        """The schema's checks (SchemaForm), and the service's own checks of the URL and the
        headers at once, so that every refused field is named in one answer (the service
        checks them again when it saves)."""
        data = super().clean()
        for field, check in (("url", services.check_url), ("headers", services.check_headers)):
            value = (self.sent or {}).get(field)
            if value and field in self.fields and field not in self.errors:
                try:
                    check(value)
                except Invalid as error:
                    self.refused(error)
                    self.payload = None
        return data

    def message_for(self, path, message: str) -> str:
        parts = [str(p) for p in path if str(p) not in ("body", "payload")]
        message = super().message_for(path, message)
        if len(parts) > 1 and parts[0] == "headers":
            return f"{parts[1]}: {message}"
        return message


class McpServerForm(_ServerFields):
    """Add an http upstream (POST /api/v1/mcp/servers)."""

    schema = McpServerIn
    conflict_field = {"mcp_server_exists": "name"}

    name = forms.CharField(
        label="Name",
        error_messages={"required": "Enter a name: tools are held as name.tool."},
        validators=[
            RegexValidator(
                NAME_PATTERN, "A name is 1 to 40 of a-z, 0-9 and - (tools are held as name.tool)."
            )
        ],
    )
    url = forms.CharField(label="URL", max_length=2000, error_messages={"required": URL_REQUIRED})

    def body(self) -> dict:
        data = self.cleaned_data
        return {
            "name": data.get("name", ""),
            "url": data.get("url", ""),
            "headers": data.get("headers") or {},
            "passReadOnly": bool(data.get("pass_read_only")),
            "holdSeconds": data.get("hold_seconds", 240),
        }


class McpServerEditForm(_ServerFields):
    """Change a server (PATCH /api/v1/mcp/servers/{name}): its URL (http only), its headers
    (replaced when some are given or `clear_headers` is ticked; else kept), read-only passing
    and the hold."""

    schema = McpServerPatch

    url = forms.CharField(required=False, label="URL", max_length=2000)
    clear_headers = forms.BooleanField(required=False, label="Remove the stored headers")

    def __init__(self, *args, server, **kwargs):
        self.server = server
        super().__init__(*args, **kwargs)
        if server.transport != "http":  # a stdio server's command is the operator's
            for name in ("url", "headers", "clear_headers"):
                del self.fields[name]

    def body(self) -> dict:
        data = self.cleaned_data
        body: dict = {
            "passReadOnly": bool(data.get("pass_read_only")),
            "holdSeconds": data.get("hold_seconds", self.server.hold_seconds),
        }
        if "url" in self.fields:
            url = data.get("url", "")
            if not url:
                self.add_error("url", URL_REQUIRED)
            body["url"] = url or self.server.url
            headers = data.get("headers") or {}
            if headers and data.get("clear_headers"):
                self.add_error("headers", "Give new headers or remove the stored ones, not both.")
            elif headers or data.get("clear_headers"):
                body["headers"] = {} if data.get("clear_headers") else headers
        return body

    def fields_sent(self) -> dict:
        return self.payload.model_dump(exclude_unset=True)
