"""The schema edge's bases: Python snake_case inside, camelCase on the wire."""

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any

from ninja import Schema
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
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


def own_transaction(handler):
    """Marks an API handler whose service is one transaction and whose answer comes from it
    or is read before it (nothing is read after the commit): console/api.py does not wrap it
    in another one, so the hot path spends no SAVEPOINT round trips on it and what the
    service hands to `on_commit` (a runtime's wake) goes out at its own commit."""
    handler.own_transaction = True
    return handler


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
