"""`/notifications/`: everyone's own notifications, marking them read (one, or all); and
`/settings/`: everyone's own notification settings (the service the API calls).

After an htmx POST the view re-renders the item (or the list) instead of redirecting; a plain
form POST (no JavaScript) redirects back to the list. The bell's count follows over the nav
socket (the services publish on commit).
"""

from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET, require_POST

from console.core.errors import Conflict, Invalid
from console.web.pages import error_page, viewer_view
from notifications.forms import EMAIL_CHOICES, NotificationSettingsForm, initial
from notifications.preferences import notification_settings_update, slack_link_start
from notifications.selectors import (
    nav_unread_count_context,
    notification_item_context,
    notification_settings_read,
    notifications_page_context,
    slack_link_status,
)
from notifications.services import notification_mark_read, notifications_mark_all_read

PAGE = "notifications/list.html"


def _with_counts(request, template: str, context: dict, *, tab: bool = True) -> HttpResponse:
    """An htmx answer: the re-rendered unit, and the unread counts (the bell's, the tab's)
    swapped out of band (the socket brings the bell too; over plain HTTP the page is right
    without it)."""
    unread = nav_unread_count_context(viewer=request.viewer)
    counts = {"oob": True, "unread_count": unread["nav_unread_count"], **unread}
    html = render_to_string(template, context, request=request)
    html += render_to_string("base.html#nav-notification-count", counts)
    if tab:  # (a re-rendered list holds the tab's count already)
        html += render_to_string(f"{PAGE}#unread-count", counts)
    return HttpResponse(html)


def _back(request):
    show = request.POST.get("show", "")
    return redirect("/notifications/?show=unread" if show == "unread" else "/notifications/")


@require_GET
@viewer_view
def notifications_page(request):
    try:
        context = notifications_page_context(
            viewer=request.viewer,
            show=request.GET.get("show", "all"),
            cursor=request.GET.get("cursor", ""),
        )
    except Invalid as exc:
        return error_page(request, status=400, title="Invalid filter", message=exc.message)
    context["nav_active"] = "notifications"
    if request.htmx:
        return render(request, f"{PAGE}#notification-list", context)
    return render(request, PAGE, context)


@require_POST
@viewer_view
def notification_read(request, notification_id):
    notification = notification_mark_read(viewer=request.viewer, notification_id=notification_id)
    if request.htmx:
        context = notification_item_context(notification=notification)
        return _with_counts(request, f"{PAGE}#notification", context)
    return _back(request)


@require_POST
@viewer_view
def notifications_read_all(request):
    notifications_mark_all_read(viewer=request.viewer)
    if not request.htmx:
        return _back(request)
    show = "unread" if request.POST.get("show") == "unread" else "all"
    context = notifications_page_context(viewer=request.viewer, show=show)
    return _with_counts(request, f"{PAGE}#notification-list", context, tab=False)


SETTINGS_PAGE = "notifications/settings.html"


@viewer_view
def settings_page(request):
    """GET: the form; POST: validated by the API's schema, saved by the API's service. A
    saved form re-renders with a confirmation (an htmx POST: the form alone). A POST of the
    "Link my Slack account" button (`slack_link`) shows a new one-time code instead."""
    saved, link = False, None
    if request.method == "POST" and "slack_link" in request.POST:
        code, expires = slack_link_start(viewer=request.viewer)
        link = {"code": code, "expires_at": expires}
        form = NotificationSettingsForm(initial=_initial(request))
    elif request.method == "POST":
        form = NotificationSettingsForm(request.POST)
        if form.is_valid():
            try:
                notification_settings_update(viewer=request.viewer, fields=form.payload.changes())
                saved = True
            except Conflict as exc:
                form.refused(exc)
        if saved:
            form = NotificationSettingsForm(initial=_initial(request))
    elif request.method == "GET":
        form = NotificationSettingsForm(initial=_initial(request))
    else:
        return HttpResponse(status=405, headers={"Allow": "GET, POST"})
    context = {"form": form, "saved": saved, "email_choices": EMAIL_CHOICES, "slack_link": link}
    context.update(slack_link_status(viewer=request.viewer))
    context["nav_active"] = "settings"
    status = 422 if form.errors else 200
    if request.htmx:
        return render(request, f"{SETTINGS_PAGE}#settings-form", context, status=status)
    return render(request, SETTINGS_PAGE, context, status=status)


def _initial(request) -> dict:
    return initial(notification_settings_read(viewer=request.viewer))
