"""The wire form of a principal's notification settings (`/api/v1/me/notification-settings`);
the `/settings/` page's form is validated by the same schema."""

from __future__ import annotations

from typing import Annotated, Literal

from ninja import Field
from pydantic import ConfigDict, StrictBool, StrictStr
from pydantic.alias_generators import to_camel

from console.core.wire import CamelSchema, wire_int
from notifications.models import DIGEST_MINUTES_MAX, DIGEST_MINUTES_MIN

_FORBID = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

# A Slack member id (`U024BE7LH`; `W…` on Enterprise Grid), as Slack's own API spells it.
SLACK_USER_ID_PATTERN = r"^[UW][A-Z0-9]{2,30}$"
SlackUserId = Annotated[StrictStr, Field(pattern=SLACK_USER_ID_PATTERN)]
# A JSON integer (372.0 is one, as JSON Schema says; 372.5, "372" and true are not).
DigestMinutes = wire_int(ge=DIGEST_MINUTES_MIN, le=DIGEST_MINUTES_MAX)


class NotificationSettingsOut(CamelSchema):
    email: Literal["now", "digest", "off"]
    digest_minutes: int
    slack_user_id: str | None
    browser: bool


class NotificationSettingsPatch(CamelSchema):
    """Any of the fields; `slackUserId: null` removes the Slack id, null for any other field
    is a 422 (its type does not take it)."""

    model_config = _FORBID

    email: Literal["now", "digest", "off"] = None
    digest_minutes: DigestMinutes = None
    slack_user_id: SlackUserId | None = None
    browser: StrictBool = None

    def changes(self) -> dict:
        return {name: self.model_dump()[name] for name in self.model_fields_set}


def notification_settings_resource(row) -> dict:
    """A NotificationSettings row in the wire's fields (snake_case; the schemas map them)."""
    return {
        "email": row.email,
        "digest_minutes": row.digest_minutes,
        "slack_user_id": row.slack_user_id,
        "browser": row.browser,
    }
