"""The navigation's pending count (`{% nav_pending_count viewer as n %}` in base.html)."""

from django import template

from approvals.selectors_desk import nav_pending_count_context

register = template.Library()


@register.simple_tag
def nav_pending_count(viewer) -> int:
    """The navigation's pending count (the partial `base.html#nav-pending-count`)."""
    return nav_pending_count_context(viewer=viewer)["nav_pending_count"]
