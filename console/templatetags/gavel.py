"""Template helpers for the console pages: capability checks (the nav count and the bell are
approvals_nav's and notifications_nav's); the formatting
filters are the plain functions of console/formatting.py, registered here.

Everything that reaches HTML here goes through Django's autoescaping (no `mark_safe`); a filter
that writes a tag builds it with `format_html`, which escapes every piece of text it is given.
"""

import re

from django import template
from django.utils.html import format_html

from console.core import formatting
from console.directory import access

register = template.Library()
INLINE_CODE = re.compile(r"`([^`\n]+)`")


@register.filter
def inline_code(text) -> str:
    """A plain text a runtime wrote (a call's reason) with its `backticked` names shown as
    code, as models and gateways write them; everything else escaped as ever."""
    parts = INLINE_CODE.split(str(text))  # text, code, text, code, ..., text
    pieces = [
        format_html("<code>{}</code>", part) if odd else format_html("{}", part)
        for odd, part in ((i % 2 == 1, part) for i, part in enumerate(parts))
    ]
    return format_html("{}" * len(pieces), *pieces)


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
