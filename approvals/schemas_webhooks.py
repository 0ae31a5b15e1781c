"""The wire shapes of webhooks and their deliveries (camelCase on the wire). The API validates
bodies with them, and so does /manage/webhooks/ (a page accepts what the API accepts)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from ninja import Field
from pydantic import AfterValidator, ConfigDict, StrictStr
from pydantic.alias_generators import to_camel

from console.core.wire import CamelSchema, OptionalCursor

URL_PATTERN = "^https?://[^\\u0000]*$"


def _url_scheme(value: str) -> str:
    """The schema's pattern, checked (the service checks the rest: which scheme, the host)."""
    if not re.match(URL_PATTERN, value):
        raise ValueError("a webhook URL must be https://host/...")
    return value


class WebhookIn(CamelSchema):
    """POST /webhooks. `format` omitted: `gavel`."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    url: Annotated[
        StrictStr,
        Field(
            min_length=1,
            description="https://host/... (http:// only with GAVEL_WEBHOOK_ALLOW_HTTP, for "
            "development); at most 500 characters",
            json_schema_extra={"format": "uri", "pattern": URL_PATTERN},
        ),
        AfterValidator(_url_scheme),
    ]
    events: Annotated[list[StrictStr], Field(max_length=20)]
    format: Literal["gavel", "slack"] = "gavel"


class WebhookOut(CamelSchema):
    id: str
    url: str
    events: list[str]
    format: str
    active: bool
    created_at: datetime


class WebhookCreatedOut(WebhookOut):
    secret: str  # the signing secret, shown this once


class WebhookListOut(CamelSchema):
    items: list[WebhookOut]
    next_cursor: str | None


class DeliveryOut(CamelSchema):
    id: str
    event: str
    state: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    next_attempt_at: datetime | None
    delivered_at: datetime | None


class DeliveryListOut(CamelSchema):
    items: list[DeliveryOut]
    next_cursor: str | None


class ListQuery(CamelSchema):
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: OptionalCursor = None
