"""/manage/keys/, /manage/webhooks/, /manage/settings/ (admin).

Forms are validated by the API's own schemas (console/manage/forms_keys.py) and call the
services the API calls. Creating a key or a webhook and changing the settings ask for the
password again when the last one is old (`require_recent_auth`, on the POST only: reading the
pages does not). A new key's or webhook's secret is in the POST's answer and nowhere else.
"""

from zoneinfo import available_timezones

from django.http import HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import path

from approvals import access as approvals_access
from approvals import selectors_webhooks
from approvals.services import webhooks as webhook_services
from console.accounts.views import require_recent_auth
from console.core.errors import Invalid
from console.directory import access
from console.directory.services import keys as key_services
from console.directory.services import tenant as tenant_services
from console.manage.common import admin_view, manage_page
from console.manage.forms_keys import KeyForm, SettingsForm, WebhookForm, settings_initial

TIME_ZONES = sorted(available_timezones())  # the settings form's suggestions

# --- keys ---


def _keys_page(request, *, form=None, created=None, cursor=None, status=200):
    viewer = request.viewer
    page = key_services.api_keys_page(viewer=viewer, limit=50, cursor=cursor)
    rows = [{"key": k, "state": key_services.api_key_state(k)} for k in page["items"]]
    principals = viewer.tenant.principals.order_by("external_id").values_list(
        "external_id", flat=True
    )
    context = {
        "rows": rows,
        "next_cursor": page["next_cursor"],
        "form": form or KeyForm(initial={"scopes": ["ingest"]}),
        "created": created,
        "principals": list(principals[:500]),
        "time_zone": viewer.tenant.time_zone,
    }
    return manage_page(request, "manage/keys.html", context, tab="keys", status=status)


@require_recent_auth
def _key_create(request):
    viewer = request.viewer
    form = KeyForm(request.POST, time_zone=viewer.tenant.time_zone)
    if not form.is_valid() or form.payload is None:
        return _keys_page(request, form=form, status=422)
    try:
        key, secret = key_services.api_key_issue(viewer=viewer, **form.payload.model_dump())
    except Invalid as error:
        form.refused(error)
        return _keys_page(request, form=form, status=422)
    return _keys_page(request, created={"key": key, "secret": secret})


@admin_view
def keys(request):
    if request.method == "POST":
        return _key_create(request)
    try:
        return _keys_page(request, cursor=request.GET.get("cursor") or None)
    except Invalid:
        return redirect("/manage/keys/")


@admin_view
def key_revoke(request, key_id: str):
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    key = access.key_for(viewer=request.viewer, key_id=key_id)
    key_services.api_key_revoke(key=key, viewer=request.viewer)
    return redirect(f"/manage/keys/#key-{key.public_id}")


# --- webhooks ---


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


# --- the tenant's settings ---


def _settings_page(request, *, form=None, saved=False, status=200):
    held = tenant_services.tenant_settings(request.viewer.tenant)
    context = {
        "form": form or SettingsForm(initial=settings_initial(held), held=held),
        "held": held,
        "saved": saved,
        "time_zones": TIME_ZONES,
    }
    return manage_page(request, "manage/settings.html", context, tab="settings", status=status)


@require_recent_auth
def _settings_save(request):
    held = tenant_services.tenant_settings(request.viewer.tenant)
    form = SettingsForm(request.POST, held=held)
    if not form.is_valid() or form.payload is None:
        return _settings_page(request, form=form, status=422)
    tenant = tenant_services.tenant_update(viewer=request.viewer, fields=form.payload.changes())
    request.viewer.tenant = tenant
    return _settings_page(request, saved=True)


@admin_view
def settings(request):
    if request.method == "POST":
        return _settings_save(request)
    return _settings_page(request)


urlpatterns = [
    path("manage/keys/", keys, name="manage_keys"),
    path("manage/keys/<str:key_id>/revoke/", key_revoke, name="manage_key_revoke"),
    path("manage/webhooks/", webhooks, name="manage_webhooks"),
    path("manage/webhooks/<str:webhook_id>/delete/", webhook_delete, name="manage_webhook_delete"),
    path("manage/webhooks/<str:webhook_id>/test/", webhook_test, name="manage_webhook_test"),
    path("manage/settings/", settings, name="manage_settings"),
]
