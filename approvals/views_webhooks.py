"""/manage/webhooks/ (admin): the tenant's webhooks, their recent deliveries, a test event.

The form is validated by the API's own schema (approvals/forms_webhooks.py) and calls the
services the API calls. Creating a webhook asks for the password again when the last one is
old (`require_recent_auth`, on the POST only). A new webhook's secret is in the POST's answer
and nowhere else. A /manage/ page like the directory's (console.web.admin_pages' gate and tabs),
served by the app that owns webhooks.
"""

from django.http import HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import path

from approvals import access as approvals_access
from approvals import selectors_webhooks
from approvals.forms_webhooks import WebhookForm
from approvals.services import webhooks as webhook_services
from console.core.errors import Invalid
from console.directory import access
from console.web.admin_pages import admin_view, manage_page
from console.web.reauth import require_recent_auth


def _webhooks_page(request, *, form=None, created=None, tested=None, status=200):
    viewer = request.viewer
    context = {
        "hooks": selectors_webhooks.webhooks_with_recent_deliveries(viewer=viewer),
        "form": form or WebhookForm(initial={"events": ["approval.requested"], "format": "gavel"}),
        "created": created,
        "tested": tested,
        "recent": selectors_webhooks.RECENT_DELIVERIES,
    }
    return manage_page(request, "manage/webhooks.html", context, tab="webhooks", status=status)


def _actor(request) -> dict:
    return {"principal": request.viewer, "key": None}


@require_recent_auth
def _webhook_create(request):
    form = WebhookForm(request.POST)
    if not form.is_valid() or form.payload is None:
        return _webhooks_page(request, form=form, status=422)
    access.require_capability(request.viewer, "admin")
    try:
        webhook, secret = webhook_services.webhook_create(
            tenant=request.viewer.tenant, **form.payload.model_dump(), **_actor(request)
        )
    except Invalid as error:
        form.refused(error)
        return _webhooks_page(request, form=form, status=422)
    return _webhooks_page(request, created={"webhook": webhook, "secret": secret})


@admin_view
def webhooks(request):
    if request.method == "POST":
        return _webhook_create(request)
    return _webhooks_page(request)


@admin_view
def webhook_delete(request, webhook_id: str):
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    webhook = approvals_access.webhook_for(viewer=request.viewer, webhook_id=webhook_id)
    webhook_services.webhook_delete(webhook=webhook, **_actor(request))
    return redirect("/manage/webhooks/")


@admin_view
def webhook_test(request, webhook_id: str):
    """ "Send test event": the page again, the new delivery marked under its webhook."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    webhook = approvals_access.webhook_for(viewer=request.viewer, webhook_id=webhook_id)
    delivery = webhook_services.webhook_test_send(webhook=webhook, **_actor(request))
    return _webhooks_page(request, tested=delivery)


urlpatterns = [
    path("manage/webhooks/", webhooks, name="manage_webhooks"),
    path("manage/webhooks/<str:webhook_id>/delete/", webhook_delete, name="manage_webhook_delete"),
    path("manage/webhooks/<str:webhook_id>/test/", webhook_test, name="manage_webhook_test"),
]
