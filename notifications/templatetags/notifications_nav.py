"""The bell's unread count (`{% nav_unread_count viewer as n %}` in base.html)."""

from django import template

from notifications.selectors import nav_unread_count_context

register = template.Library()


@register.simple_tag
def nav_unread_count(viewer) -> int:
    """The bell's unread count (the partial `base.html#nav-notification-count`)."""
    return nav_unread_count_context(viewer=viewer)["nav_unread_count"]
