"""Template helpers for the console pages: capability checks and the nav count; the formatting
filters are the plain functions of console/formatting.py, registered here.

Everything that reaches HTML here goes through Django's autoescaping (no `mark_safe`).
"""

from django import template

from approvals.selectors_desk import nav_pending_count_context
from console import access, formatting
from notifications.selectors import nav_unread_count_context

register = template.Library()


@register.filter
def can(viewer, capability: str) -> bool:
    """`{% if viewer|can:"decide" %}`: the same answer access.can gives the views."""
    return viewer is not None and access.can(viewer, capability)


@register.simple_tag
def nav_pending_count(viewer) -> int:
    """The navigation's pending count (the partial `base.html#nav-pending-count`)."""
    return nav_pending_count_context(viewer=viewer)["nav_pending_count"]


@register.simple_tag
def nav_unread_count(viewer) -> int:
    """The bell's unread count (the partial `base.html#nav-notification-count`)."""
    return nav_unread_count_context(viewer=viewer)["nav_unread_count"]


for _name in (
    "money",
    "duration_ms",
    "age",
    "pretty_json",
    "status_class",
    "humanize_status",
):
    register.filter(_name, getattr(formatting, _name))
