"""Template helpers for the console pages: capability checks (the nav count and the bell are
approvals_nav's and notifications_nav's); the formatting
filters are the plain functions of console/formatting.py, registered here.

Everything that reaches HTML here goes through Django's autoescaping (no `mark_safe`).
"""

from django import template

from console.core import formatting
from console.directory import access

register = template.Library()


@register.filter
def can(viewer, capability: str) -> bool:
    """`{% if viewer|can:"decide" %}`: the same answer access.can gives the views."""
    return viewer is not None and access.can(viewer, capability)


for _name in (
    "money",
    "duration_ms",
    "age",
    "pretty_json",
    "status_class",
    "humanize_status",
):
    register.filter(_name, getattr(formatting, _name))
