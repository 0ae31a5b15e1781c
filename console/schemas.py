"""The schema edge's bases: Python snake_case inside, camelCase on the wire."""

import json
from typing import Any

from ninja import Schema
from pydantic import BaseModel, ConfigDict
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
