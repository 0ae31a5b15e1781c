"""What every /manage/ page shares, whichever app serves it: the admin gate and the tabs of the
layout (`manage/base.html`)."""

from functools import wraps

from django.shortcuts import render

from console.directory import access
from console.web.pages import viewer_view

MANAGE_TABS = [
    ("principals", "Principals"),
    ("roles", "Roles"),
    ("teams", "Teams"),
    ("keys", "API keys"),
    ("webhooks", "Webhooks"),
    ("mcp", "MCP servers"),
    ("settings", "Settings"),
    ("audit", "Audit log"),
]


def admin_view(view):
    """`viewer_view` plus the `admin` capability (403 page otherwise)."""

    @viewer_view
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        access.require_capability(request.viewer, "admin")
        return view(request, *args, **kwargs)

    return wrapped


def manage_page(request, template: str, context: dict, *, tab: str, status: int = 200):
    """Render a /manage/ page (templates extend `manage/base.html`) with its tab marked."""
    layout = {"manage_tabs": MANAGE_TABS, "manage_tab": tab, "nav_active": "manage"}
    return render(request, template, {**context, **layout}, status=status)
