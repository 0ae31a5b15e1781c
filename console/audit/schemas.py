"""The audit log's wire schemas: the list's query (the API's and the /manage/audit/ page's
filters), its entries, checkpoints and the verification answer. (Moved from
console/core/wire.py: the plumbing floor holds no feature's schema.)"""

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    WithJsonSchema,
    field_validator,
)

from console.core.wire import CURSOR_DESCRIPTION, CamelSchema

# --- the audit log (console/api_audit.py, and the /manage/audit/ page's filters) ---

Filter = Annotated[str | None, Field(max_length=255)]


# What `from`/`to` take (the schema's pattern, and what the server checks): empty, a day, or
# an RFC 3339 date-time whose seconds and offset may be left out (no offset: UTC).
AUDIT_TIME_PATTERN = (
    r"^(\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}:\d{2})?)?)?$"
)
_AUDIT_TIME = re.compile(AUDIT_TIME_PATTERN)


def _when(value, *, end: bool):
    """An ISO 8601 time (no offset: UTC), or a day YYYY-MM-DD: its start for `from`, the
    start of the next day for `to` (so `to` a day includes that day)."""
    if value in (None, ""):
        return None
    if isinstance(value, str) and not _AUDIT_TIME.fullmatch(value):
        raise ValueError("must be a day YYYY-MM-DD or a date-time (ISO 8601)")
    if isinstance(value, str) and len(value) == 10:
        day = datetime.fromisoformat(value).replace(tzinfo=UTC)  # ValueError: a 422
        return day + timedelta(days=1) if end else day
    if isinstance(value, str):
        value = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


AUDIT_TIME = {
    "type": "string",
    "pattern": AUDIT_TIME_PATTERN,
    "description": "a day YYYY-MM-DD (format date; as `to`, that day included) or a "
    "date-time (format date-time, RFC 3339; seconds and offset may be left out, no offset "
    "meaning UTC); empty: no bound. A value of this shape that is no calendar day or time "
    "(2026-13-01) is a 422 validation_error",
}
AUDIT_CURSOR = Annotated[
    str | None,
    Field(pattern=r"^[A-Za-z0-9_-]*={0,2}$", max_length=200, description=CURSOR_DESCRIPTION),
]


class AuditQuery(CamelSchema):
    """`GET /audit`'s filters: entries with `from <= at < to`, newest first."""

    action: Filter = None
    actor_id: Filter = None  # a principal id, a key id (key_...) or a rule id (rul_...)
    object_type: Filter = None
    object_id: Filter = None
    # The schema says what the server reads (an ISO time, no offset meaning UTC, or a day;
    # empty: no bound); one that does not parse is a 422 naming it.
    date_from: Annotated[datetime | None, WithJsonSchema(AUDIT_TIME), Field(alias="from")] = None
    date_to: Annotated[datetime | None, WithJsonSchema(AUDIT_TIME), Field(alias="to")] = None
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: AUDIT_CURSOR = None  # empty: the first page
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


class AuditCheckpointOut(CamelSchema):
    """A signed checkpoint of the chain's head: `statement` is the exact JSON signed
    (Ed25519; `publicKey`: the raw public key, base64url) and `signature` its signature."""

    position: int
    hash: str | None
    entries: int
    at: datetime
    statement: str
    signature: str
    key_id: str
    public_key: str | None


AUDIT_VERIFY_REASONS = (
    "changed",
    "removed",
    "rewritten",
    "truncated",
    "inserted",
    "checkpoint_invalid",
    "checkpoint_missing",
)


class AuditVerifyOut(CamelSchema):
    ok: bool
    entries: int
    first_bad_id: str | None
    reason: Annotated[
        Literal[AUDIT_VERIFY_REASONS] | None,  # type: ignore[valid-type]
        Field(description="why the chain is not intact (null when it is): see docs/api.md"),
    ] = None
    checkpoint: Annotated[
        AuditCheckpointOut | None,
        Field(description="the checkpoint signed for this intact chain's head (null if not ok)"),
    ] = None
