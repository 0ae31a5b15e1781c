"""The schema edge's bases: Python snake_case inside, camelCase on the wire."""

import base64
import binascii
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
)
from pydantic import StrictBool as StrictBool  # re-exported: JSON true/false only
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

# --- Wire types: what is accepted is exactly what can be stored and answered ---
#
# Pydantic's lax mode would take `true` for 1, "3" for 3 and 0 for 1970-01-01: the API is
# strict instead (JSON integers only, 3.0 being one as JSON Schema says; JSON booleans only;
# date-times only as ISO 8601 strings). Integers are bounded by the column that stores them.

INT32_MAX = 2**31 - 1  # PostgreSQL integer (PositiveIntegerField)
INT64_MAX = 2**63 - 1  # PostgreSQL bigint


def _json_int(value):
    if isinstance(value, bool | str):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


def _iso_string(value):
    if not isinstance(value, str | datetime):
        raise PydanticCustomError("datetime_type", "Input should be an ISO 8601 date-time string")
    return value


def in_utc_range(value: datetime) -> datetime:
    """A date-time whose UTC instant is a date-time too (0001-01-01T00:00+01:00 is not)."""
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of the range of date-times") from None
    return value


_JSON_INT = BeforeValidator(_json_int)
WireInt = Annotated[int, _JSON_INT]


def wire_int(*, ge: int = 0, le: int) -> Any:
    """A JSON integer in [ge, le] (the bounds go in the OpenAPI schema as minimum/maximum)."""
    return Annotated[int, Field(ge=ge, le=le), _JSON_INT]


Int32 = wire_int(le=INT32_MAX)  # a count stored in an integer column
Int64 = wire_int(le=INT64_MAX)  # a count stored in a bigint column
WireDatetime = Annotated[AwareDatetime, BeforeValidator(_iso_string), AfterValidator(in_utc_range)]


CURSOR_DESCRIPTION = (
    "opaque: the nextCursor of an earlier answer, a cursor this server issued (base64url "
    "text); any other value, even one of this alphabet, is a 422 validation_error naming "
    "query.cursor"
)
CURSOR_PATTERN = r"^[A-Za-z0-9_-]+={0,2}$"
# A list's cursor: the server issues base64url text; one it did not issue is a 422.
Cursor = Annotated[
    str,
    Field(pattern=CURSOR_PATTERN, min_length=1, max_length=200, description=CURSOR_DESCRIPTION),
]
# ... as a list's query parameter (absent: the first page); the description also on the
# parameter itself, where OpenAPI readers look.
OptionalCursor = Annotated[Cursor | None, Field(description=CURSOR_DESCRIPTION)]


def cursor_pk(value: int) -> int:
    """A primary key read from a cursor, within what the column can hold."""
    if isinstance(value, bool) or not 0 <= value <= INT64_MAX:
        raise ValueError("not a key")
    return value


def keyset_encode(at: datetime, pk: int) -> str:
    """An opaque keyset cursor for a list ordered by (a timestamp, id)."""
    raw = json.dumps([at.isoformat(), pk]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def keyset_decode(cursor: str) -> tuple[datetime, int]:
    """(timestamp, id) of a `keyset_encode` cursor; ValueError for one this server never
    issued."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, pk = json.loads(raw)
        when = datetime.fromisoformat(at)
        if not isinstance(pk, int) or when.tzinfo is None:
            raise ValueError
        return when, cursor_pk(pk)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError, RecursionError):
        raise ValueError("not a cursor this server issued") from None


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
    column stores alike (PostgreSQL refuses them); here they are a ValueError. So is a value
    nested deeper than the parser's recursion allows (`[[[[…`), which Python raises as a
    RecursionError."""
    try:
        return json.loads(text, parse_constant=_not_json)
    except RecursionError:
        raise ValueError("nested too deeply") from None


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


# Escapes that may spell what PostgreSQL cannot store: U+0000, or a lone UTF-16 surrogate (a
# pair, which spells one character beyond U+FFFF, matches as 12 bytes; a lone one as 6). Only
# a body that holds one is walked, so the common body costs two substring searches.
_SURROGATE_ESCAPE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)


def _suspect(body: bytes) -> bool:
    if b"\\u0000" in body:
        return True
    if b"\\ud" not in body and b"\\uD" not in body:
        return False
    return any(len(m.group()) == 6 for m in _SURROGATE_ESCAPE.finditer(body))


def _unstorable(text: str) -> str | None:
    if "\x00" in text:
        return "U+0000 (NUL) is not allowed in a string"
    if any("\ud800" <= c <= "\udfff" for c in text):
        return "a lone UTF-16 surrogate is not valid text"
    return None


def unstorable_text(body: bytes, value) -> tuple[tuple, str] | None:
    """Where a parsed JSON body holds a string (or key) no text column can store, and why."""
    if not _suspect(body):
        return None
    return _unstorable_path(value, ())


def _unstorable_path(value, path: tuple) -> tuple[tuple, str] | None:
    if isinstance(value, str):
        problem = _unstorable(value)
        return (path, problem) if problem else None
    if not isinstance(value, dict | list):
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(key, str) and (problem := _unstorable(key)):
            return (*path, key.encode("unicode_escape").decode()), problem
        found = _unstorable_path(item, (*path, key))
        if found is not None:
            return found
    return None
