"""The schema edge's base: Python snake_case inside, camelCase on the wire."""

from ninja import Schema
from pydantic import ConfigDict
from pydantic.alias_generators import to_camel


class CamelSchema(Schema):
    """Fields are snake_case in Python and camelCase on the wire (in and out, and in OpenAPI).

    Operations that return one must be declared with `by_alias=True`.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)
