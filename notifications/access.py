"""Notifications' scoping: a principal reads its own notifications only (a key: its bound
principal's). Another principal's or tenant's is NotFound (404). The viewer is
console.directory.access's; this module applies that one rule to notifications."""

from django.db.models import QuerySet

from console.core.errors import Forbidden, NotFound
from console.directory.access import Viewer, acting_principal
from notifications.models import Notification


def notifications_of(*, viewer: Viewer) -> QuerySet:
    """A principal's own notifications (a key: its bound principal's). Nobody reads another's;
    a runtime's key, bound to no one, has none to read."""
    principal = acting_principal(viewer)
    if principal is None or not principal.is_active:
        raise Forbidden("notifications are a principal's: this key is bound to no active one")
    return Notification.objects.filter(tenant_id=principal.tenant_id, principal=principal)


def notification_for(*, viewer: Viewer, notification_id: str):
    """One of the viewer's own notifications: another principal's or tenant's is NotFound."""
    notification = notifications_of(viewer=viewer).filter(public_id=notification_id).first()
    if notification is None:
        raise NotFound(f"no notification '{notification_id}'", code="notification_not_found")
    return notification
