"""The keyset cursor's codec, one for every list: a cursor is URL-safe base64 (no padding) of a
short text that names the last row of a page: `<kind>:<pk>` (keys, rules, webhooks),
`<tag><pk>` (principals, roles, teams, budgets, the audit log's wire id) or a JSON pair (runs and
notifications: a time and a pk). Each list keeps its own payload and its own error body (the
wire messages are the contract's); what they share is here. Every decoder raises ValueError
(binascii.Error and UnicodeDecodeError are ValueErrors) on a cursor this server did not issue;
`read` turns that into the list's 422 at `query.cursor`, and `newest_first` cuts one page."""

from __future__ import annotations

import base64
import json
from datetime import datetime

from console.core.errors import Invalid
from console.core.wire import cursor_pk


def encode(text: str) -> str:
    """The cursor for `text`."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_bytes(cursor: str) -> bytes:
    """The bytes a cursor carries (JSON payloads are read from bytes)."""
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))


def decode(cursor: str) -> str:
    """The text a cursor carries."""
    return decode_bytes(cursor).decode()


def encode_pk(kind: str, pk: int) -> str:
    """`<kind>:<pk>`."""
    return encode(f"{kind}:{pk}")


def decode_pk(kind: str, cursor: str) -> int:
    """The pk of a `<kind>:<pk>` cursor."""
    raw = decode(cursor)
    got, _, pk = raw.partition(":")
    if got != kind or not pk.isdigit():
        raise ValueError(raw)
    return int(pk)


def decode_tagged(tag: str, cursor: str) -> int:
    """The pk of a `<tag><pk>` cursor."""
    text = decode(cursor)
    if not text.startswith(tag) or not text[len(tag) :].isdigit():
        raise ValueError(text)
    return int(text[len(tag) :])


def encode_time_pk(at: datetime, pk: int) -> str:
    """The cursor of a list ordered by (a timestamp, id): a JSON pair."""
    return encode(json.dumps([at.isoformat(), pk]))


def decode_time_pk(cursor: str) -> tuple[datetime, int]:
    """(timestamp, id) of an `encode_time_pk` cursor; ValueError for one this server never
    issued."""
    try:
        at, pk = json.loads(decode_bytes(cursor))
        when = datetime.fromisoformat(at)
        if not isinstance(pk, int) or when.tzinfo is None:
            raise ValueError
        return when, cursor_pk(pk)
    except (ValueError, TypeError, RecursionError):  # binascii.Error, UnicodeDecodeError too
        raise ValueError("not a cursor this server issued") from None


NOT_ISSUED = "not a cursor this server issued"


def read(decode, cursor: str, *, message: str = f"cursor: {NOT_ISSUED}",
         detail: str = NOT_ISSUED, path: str = "query.cursor"):  # fmt: skip
    """`decode(cursor)`, or the list's 422 `validation_error` naming `path` for a cursor
    this server never issued (each list keeps the words of its contract)."""
    try:
        return decode(cursor)
    except ValueError:
        raise Invalid(
            message, code="validation_error", details=[{"path": path, "message": detail}]
        ) from None


def newest_first(
    qs, *, kind: str, limit: int, cursor: str | None, **words
) -> tuple[list, str | None]:
    """One page of `qs` newest first by pk, after a `<kind>:<pk>` cursor: the rows and the
    next page's cursor (None on the last page). `words`: `read`'s message and detail."""
    if cursor:
        qs = qs.filter(pk__lt=read(lambda c: cursor_pk(decode_pk(kind, c)), cursor, **words))
    rows = list(qs.order_by("-pk")[: limit + 1])
    more, rows = len(rows) > limit, rows[:limit]
    return rows, encode_pk(kind, rows[-1].pk) if more else None
