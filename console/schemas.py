"""The schema edge's bases: Python snake_case inside, camelCase on the wire."""

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel


class CamelSchema(Schema):
    """Fields are snake_case in Python and camelCase on the wire (in and out, and in OpenAPI).

    Operations that return one must be declared with `by_alias=True`.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class CamelModel(BaseModel):
    """The same edge as plain pydantic, for hot paths (ingest batches of 500 events).

    ninja's Schema wraps every nested model's validation in a Python-level root validator
    (to read Django objects); plain dicts and JSON bodies do not need it, and skipping it
    made a 500-event batch validate several times faster.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class ErrorBody(Schema):
    code: str
    message: str
    details: Any = None


class ErrorOut(Schema):
    """The contract's error body (every 4xx/5xx)."""

    error: ErrorBody


def errors(*codes: int) -> dict:
    """The error body for each status an operation may answer with (for OpenAPI)."""
    return {code: ErrorOut for code in (401, 403, 429, 503, *codes)}


def _not_json(constant: str):
    raise ValueError(f"{constant} is not JSON")


def strict_json(text: bytes | str):
    """JSON as RFC 8259 defines it: Python's parser also takes NaN and Infinity, which no JSON
    column stores alike (PostgreSQL refuses them); here they are a ValueError."""
    return json.loads(text, parse_constant=_not_json)


# --- the audit log (console/api_audit.py, and the /manage/audit/ page's filters) ---

Filter = Annotated[str | None, Field(max_length=255)]


def _when(value, *, end: bool):
    """An ISO 8601 time (no offset: UTC), or a day YYYY-MM-DD: its start for `from`, the
    start of the next day for `to` (so `to` a day includes that day)."""
    if value in (None, ""):
        return None
    if isinstance(value, str) and len(value) == 10:
        day = datetime.fromisoformat(value).replace(tzinfo=UTC)  # ValueError: a 422
        return day + timedelta(days=1) if end else day
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


class AuditQuery(CamelSchema):
    """`GET /audit`'s filters: entries with `from <= at < to`, newest first."""

    action: Filter = None
    actor_id: Filter = None  # a principal id, a key id (key_...) or a rule id (rul_...)
    object_type: Filter = None
    object_id: Filter = None
    date_from: Annotated[datetime | None, Field(alias="from")] = None
    date_to: Annotated[datetime | None, Field(alias="to")] = None
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: Filter = None
    format: Literal["json", "csv", "jsonl"] = "json"

    @field_validator("action", "actor_id", "object_type", "object_id", "cursor", mode="before")
    @classmethod
    def _blank_is_none(cls, value):
        return None if value == "" else value

    @field_validator("date_from", mode="before")
    @classmethod
    def _from(cls, value):
        return _when(value, end=False)

    @field_validator("date_to", mode="before")
    @classmethod
    def _to(cls, value):
        return _when(value, end=True)

    @field_validator("format", mode="before")
    @classmethod
    def _format_default(cls, value):
        return "json" if value in (None, "") else value


class AuditActorOut(CamelSchema):
    principal_id: str | None
    key_id: str | None
    rule_id: str | None


class AuditEntryOut(CamelSchema):
    id: str
    at: datetime
    action: str
    actor: AuditActorOut
    object_type: str
    object_id: str
    before: Any = None
    after: Any = None
    data: dict
    ip: str | None
    user_agent: str | None


class AuditListOut(CamelSchema):
    items: list[AuditEntryOut]
    next_cursor: str | None


class AuditVerifyOut(CamelSchema):
    ok: bool
    entries: int
    first_bad_id: str | None
