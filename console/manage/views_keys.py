"""/manage/keys/ and /manage/settings/ (admin; /manage/webhooks/ is approvals/views_webhooks.py).

Forms are validated by the API's own schemas (console/manage/forms_keys.py) and call the
services the API calls. Creating a key and changing the settings ask for the
password again when the last one is old (`require_recent_auth`, on the POST only: reading the
pages does not). A new key's secret is in the POST's answer and nowhere else.
"""

from zoneinfo import available_timezones

from django.http import HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import path

from console.core import links
from console.core.errors import Conflict, Invalid
from console.directory import access
from console.directory.services import key_rotation
from console.directory.services import keys as key_services
from console.directory.services import tenant as tenant_services
from console.manage.forms_keys import KeyForm, SettingsForm, settings_initial
from console.web.admin_pages import admin_view, manage_page
from console.web.reauth import require_recent_auth
from retention.policy import retention_settings

TIME_ZONES = sorted(available_timezones())  # the settings form's suggestions

# --- keys ---


def _keys_page(request, *, form=None, created=None, cursor=None, refused=None, status=200):
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
        "grace_choices": key_rotation.GRACE_CHOICES,
        "default_grace": key_rotation.DEFAULT_GRACE_SECONDS,
        "refused": refused,
        "scim_base_url": links.public_url("/scim/v2/"),
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


@require_recent_auth
def _key_rotate(request, key_id: str):
    viewer = request.viewer
    key = access.key_for(viewer=viewer, key_id=key_id)
    text = str(request.POST.get("grace_seconds", "")).strip()
    grace = int(text) if text.isdigit() else text  # anything else: the service's 422
    try:
        new, secret, old = key_rotation.api_key_rotate(viewer=viewer, key=key, grace_seconds=grace)
    except (Invalid, Conflict) as error:
        return _keys_page(request, refused=error.message, status=error.status)
    return _keys_page(request, created={"key": new, "secret": secret, "previous": old})


@admin_view
def key_rotate(request, key_id: str):
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    return _key_rotate(request, key_id)


# --- the tenant's settings ---


def _settings_page(request, *, form=None, saved=False, status=200):
    held = tenant_services.tenant_settings(request.viewer.tenant)
    context = {
        "form": form or SettingsForm(initial=settings_initial(held), held=held),
        "held": held,
        "saved": saved,
        "time_zones": TIME_ZONES,
        "retention": retention_settings(request.viewer.tenant),
        "scim_base_url": links.public_url("/scim/v2/"),
        "scim_keys": [
            k
            for k in access.keys_of(viewer=request.viewer).order_by("-pk")[:500]
            if k.has_scope("scim") and key_services.api_key_state(k) == "active"
        ][:20],
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
    path("manage/keys/<str:key_id>/rotate/", key_rotate, name="manage_key_rotate"),
    path("manage/settings/", settings, name="manage_settings"),
]
