"""Notifications over the wire (`manage` scope, any capability): the key's own principal's
notifications, and marking one read. Handlers only translate."""

from datetime import datetime
from typing import Annotated

from ninja import Field, Query, Router

from console.auth import manage_auth
from console.schemas import CamelSchema, errors
from notifications.models import NotificationKind
from notifications.selectors import notification_resource, notifications_list
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
    cursor: str | None = None


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
