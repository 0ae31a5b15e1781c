"""Template helpers for the console pages: capability checks, money, durations, content parts.

Everything that reaches HTML here goes through Django's autoescaping (no `mark_safe`).
"""

import json
from datetime import datetime, timedelta

from django import template
from django.utils import timezone

from console import access

register = template.Library()


@register.filter
def can(viewer, capability: str) -> bool:
    """`{% if viewer|can:"decide" %}`: the same answer access.can gives the views."""
    return viewer is not None and access.can(viewer, capability)


@register.simple_tag
def nav_pending_count(viewer) -> int:
    """The navigation's pending count (the partial `base.html#nav-pending-count`)."""
    from runs.selectors_pages import nav_pending_count_context

    return nav_pending_count_context(viewer=viewer)["nav_pending_count"]


@register.filter
def money(minor_units, currency: str = "") -> str:
    """Minor units as a decimal amount: 1234 → "12.34" (with the currency code if given)."""
    if minor_units is None:
        return "—"
    sign = "-" if minor_units < 0 else ""
    units, cents = divmod(abs(int(minor_units)), 100)
    text = f"{sign}{units:,}.{cents:02d}"
    return f"{text} {currency}" if currency else text


@register.filter
def duration_ms(ms) -> str:
    """Milliseconds as a short human duration: 600000 → "10m"."""
    if ms is None:
        return "—"
    return short_duration(timedelta(milliseconds=int(ms)))


@register.filter
def age(moment: datetime | None) -> str:
    """How long ago: "3m", "2h", "5d"."""
    if moment is None:
        return "—"
    return short_duration(timezone.now() - moment)


def short_duration(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@register.filter
def pretty_json(value) -> str:
    """JSON, indented, for a <pre> (escaped by the template like any text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


@register.filter
def status_class(status: str) -> str:
    """A Bulma colour class for a run or approval status."""
    return {
        "running": "is-info",
        "awaiting_approval": "is-warning",
        "pending": "is-warning",
        "done": "is-success",
        "approved": "is-success",
        "aborted": "is-dark",
        "cancelled": "is-dark",
        "failed": "is-danger",
        "denied": "is-danger",
        "expired": "is-light",
    }.get(status, "is-light")


@register.filter
def humanize_status(status: str) -> str:
    return (status or "").replace("_", " ")
