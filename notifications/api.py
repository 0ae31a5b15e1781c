"""Notifications over the wire (`manage` scope, any capability): the key's own principal's
notifications, marking one read, and its notification settings (a signed-in browser session
may read and change its own settings too). Handlers only translate."""

from datetime import datetime
from typing import Annotated

from ninja import Field, Query, Router

from console.core.wire import CamelSchema, OptionalCursor, errors
from console.web.auth import browser_session, manage_auth
from notifications.models import NotificationKind
from notifications.preferences import notification_settings_update
from notifications.schemas import (
    NotificationSettingsOut,
    NotificationSettingsPatch,
    notification_settings_resource,
)
from notifications.selectors import (
    notification_resource,
    notification_settings_read,
    notifications_list,
)
from notifications.services import notification_mark_read

router = Router(tags=["notifications"])


class NotificationOut(CamelSchema):
    id: str
    kind: NotificationKind
    at: datetime
    title: str
    body: str
    url: str
    read: bool


class NotificationListOut(CamelSchema):
    items: list[NotificationOut]
    next_cursor: str | None


class NotificationListQuery(CamelSchema):
    unread: bool | None = None
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: OptionalCursor = None


@router.get(
    "/notifications",
    auth=manage_auth,
    response={200: NotificationListOut, **errors(422)},
    by_alias=True,
    summary="The key's principal's notifications, newest first (?unread=true|false)",
)
def notifications_index(request, filters: Query[NotificationListQuery]):
    return notifications_list(viewer=request.auth, **filters.model_dump())


@router.post(
    "/notifications/{notification_id}/read",
    auth=manage_auth,
    response={200: NotificationOut, **errors(404)},
    by_alias=True,
    summary="Mark one of the key's principal's notifications read",
)
def notifications_read(request, notification_id: str):
    notification = notification_mark_read(viewer=request.auth, notification_id=notification_id)
    return notification_resource(notification)


# The principal's own settings: a manage key acting as it, or its signed-in browser session.
OWN = [manage_auth, browser_session]


@router.get(
    "/me/notification-settings",
    auth=OWN,
    response={200: NotificationSettingsOut, **errors()},
    by_alias=True,
    summary="How the caller's principal hears of new calls it may decide",
)
def notification_settings_get(request):
    return notification_settings_read(viewer=request.auth)


@router.patch(
    "/me/notification-settings",
    auth=OWN,
    response={200: NotificationSettingsOut, **errors(409, 413, 422)},
    by_alias=True,
    summary="Change any of the caller's notification settings",
)
def notification_settings_patch(request, payload: NotificationSettingsPatch):
    row = notification_settings_update(viewer=request.auth, fields=payload.changes())
    return notification_settings_resource(row)
