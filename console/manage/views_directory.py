"""/manage/principals/, /manage/roles/, /manage/teams/ (admin).

Views only translate: the reads are console.selectors_directory's, the forms validate through
the API's schemas (console/manage/forms_directory.py) and call the services the API calls.
Sensitive actions (a principal's roles or password, deactivation and reactivation, any change
of a role) ask for the password again when the sign-in is older than 15 minutes.
"""

from __future__ import annotations

from django.http import QueryDict
from django.shortcuts import redirect, render
from django.urls import path

from console.core.errors import Conflict, Invalid
from console.directory import access, selectors
from console.directory.services import principals, roles, teams
from console.manage import forms_directory as f
from console.models import CAPABILITIES
from console.web.admin_pages import admin_view, manage_page
from console.web.reauth import require_recent_auth

PRINCIPALS = "manage/principals.html"
PRINCIPAL = "manage/principal.html"
ROLES = "manage/roles.html"
ROLE = "manage/role_form.html"
TEAMS = "manage/teams.html"
TEAM = "manage/team_form.html"


def _flag(raw: str | None) -> bool | None:
    return {"yes": True, "no": False}.get(raw or "")


def _filters(params: QueryDict) -> dict:
    return {
        "q": params.get("q", "").strip() or None,
        "team": params.get("team") or None,
        "role": params.get("role") or None,
        "active": _flag(params.get("active")),
        "reviewed": _flag(params.get("reviewed")),
    }


def _queue(viewer) -> dict:
    return selectors.principals_list(viewer=viewer, reviewed=False, limit=20)


# --- principals ---


@admin_view
def principals_index(request):
    viewer = request.viewer
    filters = _filters(request.GET)
    page = selectors.principals_list(
        viewer=viewer, limit=50, cursor=request.GET.get("cursor") or None, **filters
    )
    context = {
        "page": page,
        "queue": _queue(viewer),
        "typed": request.GET,
        "choices": selectors.directory_choices(viewer=viewer, principals=False),
        "more": _more_url(request, page["next_cursor"]),
    }
    return manage_page(request, PRINCIPALS, context, tab="principals")


def _more_url(request, cursor: str | None) -> str | None:
    if cursor is None:
        return None
    params = request.GET.copy()
    params["cursor"] = cursor
    return "?" + params.urlencode()


@admin_view
def principal_reviewed(request, principal_id: str):
    """One click from the "not yet reviewed" queue (htmx: the queue re-rendered)."""
    viewer = request.viewer
    principal = access.directory_for(viewer=viewer, kind="principal", name=principal_id)
    if request.method == "POST":
        principals.principal_update(principal=principal, fields={"reviewed": True}, viewer=viewer)
    if request.htmx:
        return render(request, f"{PRINCIPALS}#review-queue", {"queue": _queue(viewer)})
    return redirect("/manage/principals/")


@admin_view
def principal_new(request):
    viewer = request.viewer
    choices = selectors.directory_choices(viewer=viewer)
    form = f.PrincipalNewForm(request.POST or None, roles=choices["roles"], teams=choices["teams"])
    if request.method == "POST":
        saved = _save(
            form,
            lambda fields: principals.principal_add(
                tenant=viewer.tenant, fields=fields, viewer=viewer
            ),
        )
        if saved is not None:
            return redirect(f"/manage/principals/{saved.external_id}/")
    context = {"form": form, "choices": choices, "new": True}
    status = 422 if form.errors else 200
    return manage_page(request, PRINCIPAL, context, tab="principals", status=status)


def _save(form, save):
    """Validate like the API, save through the service; None (errors on the form) if not."""
    if not form.is_valid():
        return None
    try:
        return save(form.fields_sent())
    except (Invalid, Conflict) as error:
        form.refused(error)
        return None


def _principal_page(request, principal_id: str, *, forms=None, saved=None):
    viewer = request.viewer
    context = selectors.principal_page(viewer=viewer, principal_id=principal_id)
    context.update(choices=selectors.directory_choices(viewer=viewer), saved=saved)
    context.update(forms or {})
    status = 422 if any(form.errors for form in (forms or {}).values()) else 200
    return manage_page(request, PRINCIPAL, context, tab="principals", status=status)


def _principal_change(request, principal_id: str, form_name: str, make_form):
    viewer = request.viewer
    principal = access.directory_for(viewer=viewer, kind="principal", name=principal_id)
    if request.method != "POST":
        return redirect(f"/manage/principals/{principal_id}/")
    form = make_form(request.POST)
    saved = _save(
        form,
        lambda fields: principals.principal_update(
            principal=principal, fields=fields, viewer=viewer
        ),
    )
    if saved is None:
        return _principal_page(request, principal_id, forms={form_name: form})
    return _principal_page(request, principal_id, saved=form_name)


@admin_view
def principal_detail(request, principal_id: str):
    if request.method == "POST":
        choices = selectors.directory_choices(viewer=request.viewer)
        return _principal_change(
            request,
            principal_id,
            "details_form",
            lambda data: f.PrincipalDetailsForm(data, teams=choices["teams"]),
        )
    return _principal_page(request, principal_id)


@admin_view
@require_recent_auth
def principal_roles(request, principal_id: str):
    choices = selectors.directory_choices(viewer=request.viewer)
    return _principal_change(
        request,
        principal_id,
        "roles_form",
        lambda data: f.PrincipalRolesForm(data, roles=choices["roles"]),
    )


@admin_view
@require_recent_auth
def principal_password(request, principal_id: str):
    return _principal_change(request, principal_id, "password_form", f.PrincipalPasswordForm)


@admin_view
@require_recent_auth
def principal_active(request, principal_id: str):
    """Deactivate (`active=no`) or reactivate (`active=yes`)."""
    viewer = request.viewer
    principal = access.directory_for(viewer=viewer, kind="principal", name=principal_id)
    if request.method != "POST":
        return redirect(f"/manage/principals/{principal_id}/")
    active = request.POST.get("active") == "yes"
    try:
        principals.principal_update(principal=principal, fields={"active": active}, viewer=viewer)
    except Conflict as error:  # last_admin: said at the top of the page
        return _principal_page_error(request, principal_id, error)
    return _principal_page(request, principal_id, saved="reactivated" if active else "deactivated")


def _principal_page_error(request, principal_id: str, error):
    viewer = request.viewer
    context = selectors.principal_page(viewer=viewer, principal_id=principal_id)
    context.update(choices=selectors.directory_choices(viewer=viewer), refused=error.message)
    return manage_page(request, PRINCIPAL, context, tab="principals", status=error.status)


# --- roles ---


@admin_view
def roles_index(request):
    context = {"roles": selectors.roles_list(viewer=request.viewer, limit=200)["items"]}
    context["saved"] = request.GET.get("saved")
    return manage_page(request, ROLES, context, tab="roles")


def _role_page(request, form, *, role=None, status=200, refused=None):
    viewer = request.viewer
    globs = f.lines(form["decide_tools"].value() or "")
    context = {
        "form": form,
        "role": role,
        "capabilities": [(c, f.CAPABILITY_HELP[c]) for c in CAPABILITIES],
        "preview": selectors.tools_matched(viewer=viewer, globs=globs),
        "refused": refused,
    }
    return manage_page(request, ROLE, context, tab="roles", status=status)


@admin_view
@require_recent_auth
def role_new(request):
    viewer = request.viewer
    form = f.RoleForm(
        request.POST or None, new=True, capabilities=CAPABILITIES, initial={"slack_decide": True}
    )
    if request.method == "POST":
        saved = _save(
            form, lambda fields: roles.role_add(tenant=viewer.tenant, fields=fields, viewer=viewer)
        )
        if saved is not None:
            return redirect(f"/manage/roles/?saved={saved.name}")
    return _role_page(request, form, status=422 if form.errors else 200)


@admin_view
def role_edit(request, role_name: str):
    role = selectors.role_read(viewer=request.viewer, name=role_name)
    if request.method == "POST":
        return _role_save(request, role_name)
    initial = {
        "capabilities": role["capabilities"],
        "decide_tools": "\n".join(role["decide_tools"]),
        "slack_decide": role["slack_decide"],
    }
    form = f.RoleForm(initial=initial, new=False, capabilities=CAPABILITIES)
    return _role_page(request, form, role=role)


@require_recent_auth
def _role_save(request, role_name: str):
    viewer = request.viewer
    role = access.directory_for(viewer=viewer, kind="role", name=role_name)
    form = f.RoleForm(request.POST, new=False, capabilities=CAPABILITIES)
    try:
        saved = _save(
            form, lambda fields: roles.role_update(role=role, fields=fields, viewer=viewer)
        )
    except Conflict as error:  # last_admin: said above the form
        return _role_page(
            request,
            form,
            role=selectors.role_read(viewer=viewer, name=role_name),
            status=409,
            refused=error.message,
        )
    if saved is None:
        return _role_page(
            request, form, role=selectors.role_read(viewer=viewer, name=role_name), status=422
        )
    return redirect(f"/manage/roles/?saved={role_name}")


@admin_view
@require_recent_auth
def role_delete(request, role_name: str):
    viewer = request.viewer
    role = access.directory_for(viewer=viewer, kind="role", name=role_name)
    if request.method != "POST":
        return redirect(f"/manage/roles/{role_name}/")
    try:
        roles.role_delete(role=role, viewer=viewer)
    except Conflict as error:
        form = f.RoleForm(initial={}, new=False, capabilities=CAPABILITIES)
        current = selectors.role_read(viewer=viewer, name=role_name)
        form.initial = {
            "capabilities": current["capabilities"],
            "decide_tools": "\n".join(current["decide_tools"]),
            "slack_decide": current["slack_decide"],
        }
        return _role_page(request, form, role=current, status=409, refused=error.message)
    return redirect("/manage/roles/")


@admin_view
def role_preview(request):
    """The live preview: which known tool names the typed globs match (htmx, GET)."""
    globs = f.lines(request.GET.get("decide_tools", ""))
    context = {"preview": selectors.tools_matched(viewer=request.viewer, globs=globs)}
    return render(request, f"{ROLE}#tool-preview", context)


# --- teams ---


@admin_view
def teams_index(request):
    context = {"teams": selectors.teams_list(viewer=request.viewer, limit=200)["items"]}
    context["saved"] = request.GET.get("saved")
    return manage_page(request, TEAMS, context, tab="teams")


def _team_page(request, form, *, team=None, status=200, refused=None):
    context = {
        "form": form,
        "team": team,
        "refused": refused,
        "choices": selectors.directory_choices(viewer=request.viewer),
    }
    return manage_page(request, TEAM, context, tab="teams", status=status)


@admin_view
def team_new(request):
    viewer = request.viewer
    choices = selectors.directory_choices(viewer=viewer)["principals"]
    form = f.TeamForm(request.POST or None, new=True, principals=choices)
    if request.method == "POST":
        saved = _save(
            form, lambda fields: teams.team_add(tenant=viewer.tenant, fields=fields, viewer=viewer)
        )
        if saved is not None:
            return redirect(f"/manage/teams/?saved={saved.name}")
    return _team_page(request, form, status=422 if form.errors else 200)


@admin_view
def team_edit(request, team_name: str):
    viewer = request.viewer
    current = selectors.team_read(viewer=viewer, name=team_name)
    choices = selectors.directory_choices(viewer=viewer)["principals"]
    if request.method != "POST":
        initial = {"members": current["members"], "leads": current["leads"]}
        form = f.TeamForm(initial=initial, new=False, principals=choices)
        return _team_page(request, form, team=current)
    team = access.directory_for(viewer=viewer, kind="team", name=team_name)
    form = f.TeamForm(request.POST, new=False, principals=choices)
    saved = _save(form, lambda fields: teams.team_update(team=team, fields=fields, viewer=viewer))
    if saved is None:
        return _team_page(request, form, team=current, status=422)
    return redirect(f"/manage/teams/?saved={team_name}")


@admin_view
def team_delete(request, team_name: str):
    viewer = request.viewer
    team = access.directory_for(viewer=viewer, kind="team", name=team_name)
    if request.method != "POST":
        return redirect(f"/manage/teams/{team_name}/")
    try:
        teams.team_delete(team=team, viewer=viewer)
    except Conflict as error:
        current = selectors.team_read(viewer=viewer, name=team_name)
        choices = selectors.directory_choices(viewer=viewer)["principals"]
        form = f.TeamForm(
            initial={"members": current["members"], "leads": current["leads"]},
            new=False,
            principals=choices,
        )
        return _team_page(request, form, team=current, status=409, refused=error.message)
    return redirect("/manage/teams/")


urlpatterns = [
    path("manage/principals/", principals_index, name="manage-principals"),
    path("manage/principals/new/", principal_new, name="manage-principal-new"),
    path("manage/principals/<str:principal_id>/", principal_detail, name="manage-principal"),
    path("manage/principals/<str:principal_id>/roles/", principal_roles),
    path("manage/principals/<str:principal_id>/password/", principal_password),
    path("manage/principals/<str:principal_id>/active/", principal_active),
    path("manage/principals/<str:principal_id>/reviewed/", principal_reviewed),
    path("manage/roles/", roles_index, name="manage-roles"),
    path("manage/roles/new/", role_new, name="manage-role-new"),
    path("manage/roles/preview/", role_preview, name="manage-role-preview"),
    path("manage/roles/<str:role_name>/", role_edit, name="manage-role"),
    path("manage/roles/<str:role_name>/delete/", role_delete),
    path("manage/teams/", teams_index, name="manage-teams"),
    path("manage/teams/new/", team_new, name="manage-team-new"),
    path("manage/teams/<str:team_name>/", team_edit, name="manage-team"),
    path("manage/teams/<str:team_name>/delete/", team_delete),
]
