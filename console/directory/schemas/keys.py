"""The wire shapes of API keys and the tenant's settings (camelCase on the wire). The API
validates bodies with them, and so do the /manage/ forms (console/manage/forms_keys.py): a
page accepts and refuses exactly what the API does."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from zoneinfo import available_timezones

from babel.numbers import list_currencies
from ninja import Field
from pydantic import AfterValidator, ConfigDict, StrictBool, StrictInt, StrictStr, WithJsonSchema
from pydantic.alias_generators import to_camel

from console.core.wire import CamelSchema, OptionalCursor
from console.models import SCOPES

_FORBID = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

RATE_MAX = 1_000_000  # per minute, and burst: far above any real client, below overflow
SECONDS_MIN = 60  # approval TTL, reminder and escalation delays: a minute ...
SECONDS_MAX = 30 * 24 * 3600  # ... to 30 days
RETENTION_MIN_DAYS = 1
RETENTION_MAX_DAYS = 3650  # ten years; null keeps the audit log forever

Name = Annotated[StrictStr, Field(min_length=1, max_length=200)]
Rate = Annotated[StrictInt, Field(ge=1, le=RATE_MAX)]
Seconds = Annotated[StrictInt, Field(ge=SECONDS_MIN, le=SECONDS_MAX)]
RetentionDays = Annotated[StrictInt, Field(ge=RETENTION_MIN_DAYS, le=RETENTION_MAX_DAYS)]


def _currency(value: str) -> str:
    if len(value) != 3 or value != value.upper() or value not in list_currencies():
        raise ValueError(f"'{value}' is not an ISO 4217 currency code (e.g. USD, EUR)")
    return value


def _time_zone(value: str) -> str:
    if value not in available_timezones():
        raise ValueError(f"'{value}' is not an IANA time zone (e.g. UTC, Europe/Paris)")
    return value


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("must carry a time zone offset (e.g. 2027-01-31T00:00:00Z)")
    return value


Currency = Annotated[
    StrictStr,
    AfterValidator(_currency),
    WithJsonSchema(
        {
            "type": "string",
            "enum": sorted(list_currencies()),
            "description": "an ISO 4217 currency code (e.g. USD, EUR)",
        }
    ),
]
TimeZone = Annotated[StrictStr, AfterValidator(_time_zone)]


# --- keys ---


class KeyIn(CamelSchema):
    """POST /keys. `decide` and `manage` keys need `principalId` (the principal they act as)."""

    model_config = _FORBID

    name: Name
    scopes: Annotated[list[Literal[SCOPES]], Field(min_length=1, max_length=len(SCOPES))]
    principal_id: Annotated[StrictStr, Field(min_length=1, max_length=255)] | None = None
    expires_at: Annotated[
        Annotated[datetime, AfterValidator(_aware)] | None,
        Field(description="a date-time with an offset, in the future (a past one is a 422)"),
    ] = None
    rate_per_minute: Rate | None = None
    rate_burst: Rate | None = None


class KeyOut(CamelSchema):
    id: str
    name: str
    prefix: str
    scopes: list[str]
    principal_id: str | None
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None
    rate_per_minute: int | None
    rate_burst: int | None


class KeyCreatedOut(CamelSchema):
    key: KeyOut
    secret: str  # shown this once; only its SHA-256 is stored


class KeyListOut(CamelSchema):
    items: list[KeyOut]
    next_cursor: str | None


class ListQuery(CamelSchema):
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: OptionalCursor = None


# --- the tenant's settings ---


class TenantOut(CamelSchema):
    slug: str
    name: str
    allow_self_approval: bool
    approval_ttl_seconds: int
    reminder_after_seconds: int | None
    escalate_after_seconds: int | None
    currency: str
    time_zone: str
    slack_signing_secret_set: bool
    slack_decisions: Literal["link", "decide"]
    audit_retention_days: int | None


class TenantPatch(CamelSchema):
    """PATCH /tenant: any of the fields. `null` clears the nullable ones (reminder, escalation,
    retention: none / forever; `slackSigningSecret` null or "" removes the secret) and is a 422
    for the others. `slug` cannot change."""

    model_config = _FORBID

    name: Name = None
    allow_self_approval: StrictBool = None
    approval_ttl_seconds: Seconds = None
    reminder_after_seconds: Seconds | None = None
    escalate_after_seconds: Seconds | None = None
    currency: Currency = None
    time_zone: TimeZone = None
    slack_signing_secret: Annotated[StrictStr, Field(max_length=200)] | None = None
    slack_decisions: Literal["link", "decide"] = None
    audit_retention_days: RetentionDays | None = None

    def changes(self) -> dict:
        """The fields the body set (snake_case), as the service takes them."""
        dumped = self.model_dump()
        return {name: dumped[name] for name in self.model_fields_set}
