"""The one base of every page form that only translates (`SchemaForm`).

Its fields make the wire body a client would send (`body()`), the API's own schema validates
that body, so a page accepts and refuses exactly what the API does; the view then calls the
service the API calls, and the service's 422s (their `details` name wire paths) and 409s land
on the fields they name.
"""

from __future__ import annotations

from django import forms
from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_snake

from console.core.errors import GavelError


class SchemaForm(forms.Form):
    """`schema` validates `body()`; `field_of` maps a wire path's first segment to the form
    field that shows its errors (the same name in snake_case by default); `conflict_field`
    maps a refusal's code (a 409 without details) to its field. `payload` is the validated
    body, None while any field is invalid; `sent` is the body as it was made."""

    schema: type[BaseModel] | None = None
    field_of: dict[str, str] = {}
    conflict_field: dict[str, str] = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.payload = None
        self.sent: dict | None = None

    def body(self) -> dict:  # pragma: no cover - each form says
        raise NotImplementedError

    def field_for(self, path) -> str | None:
        """The form field a wire path (pydantic's `loc`, or a detail's dotted path) names."""
        parts = [str(p) for p in path if str(p) not in ("body", "payload")]
        wire = parts[0] if parts else ""
        field = self.field_of.get(wire, to_snake(wire) if wire else "")
        return field if field in self.fields else None

    def message_for(self, path, message: str) -> str:
        """The message shown for a problem at `path` (a form may say it in its own words)."""
        return message

    def clean(self):
        data = super().clean()
        self.sent = body = self.body()
        unreadable = set(self.errors)  # fields that could not become part of the body
        try:
            payload = self.schema.model_validate(body)
        except ValidationError as error:
            for problem in error.errors():
                path = tuple(problem.get("loc", ()))
                field = self.field_for(path)
                if field not in unreadable:  # already named: it could not be read at all
                    self.add_error(field, self.message_for(path, problem.get("msg", "invalid")))
            return data
        if not unreadable:
            self.payload = payload
        return data

    def fields_sent(self) -> dict:
        """What the services take (snake_case): a PATCH schema's changes, else every field."""
        if hasattr(self.payload, "changes"):
            return self.payload.changes()
        return self.payload.model_dump()

    def refused(self, error: GavelError) -> None:
        """A service's 422 on the fields its details name, or its 409 on the field its code
        names (else above the form)."""
        details = error.details if isinstance(error.details, list) else []
        for detail in details:
            path = str(detail.get("path", "")).split(".")
            message = str(detail.get("message") or "invalid")
            self.add_error(self.field_for(path), self.message_for(path, message))
        if not details:
            field = self.conflict_field.get(error.code)
            self.add_error(field if field in self.fields else None, error.message)


class PlainSchemaForm(SchemaForm):
    """A schema form that does not show pydantic's "Value error, " prefix (the keys, webhooks
    and settings pages)."""

    def message_for(self, path, message: str) -> str:
        return message.removeprefix("Value error, ")
