"""The management API for the directory (`manage` scope, `admin`): principals, roles, teams.

Handlers only translate: the writes are `console.services.*`, the reads `console.selectors_*`.
Who may call: a `manage` key whose principal holds `admin`, or a signed-in browser session
whose principal does (checked with the credentials, before the path's object or the body:
401 → 403 → 404 → 422 → 409). Sensitive writes from a browser session (roles and
capabilities, a principal's roles, (de)activation, a password) need a recent sign-in.
"""

from ninja import Query, Router

from console.core.wire import errors
from console.directory import access, selectors, signin
from console.directory.schemas import directory as s
from console.directory.services import principals, roles, teams
from console.web.auth import CapableSession, PrincipalKeyAuth

router = Router(tags=["principals, roles and teams"])

ADMIN = [PrincipalKeyAuth("manage", "admin"), CapableSession("admin")]
SENSITIVE_PRINCIPAL_FIELDS = {"roles", "active", "password"}


# --- principals ---


@router.get(
    "/principals",
    auth=ADMIN,
    response={200: s.PrincipalListOut, **errors(422)},
    by_alias=True,
    summary="The tenant's principals (q: substring of id, name or email; oldest first)",
)
def principals_index(request, query: Query[s.PrincipalListQuery]):
    return selectors.principals_list(viewer=request.auth, **query.model_dump())


@router.post(
    "/principals",
    auth=ADMIN,
    response={201: s.PrincipalOut, **errors(409, 413, 422)},
    by_alias=True,
    summary="Create a principal (a held id: 409 principal_exists)",
)
def principals_create(request, payload: s.PrincipalIn):
    viewer = request.auth
    if payload.password or payload.roles:
        signin.require_recent_auth_api(request)
    principal = principals.principal_add(
        tenant=viewer.tenant, fields=payload.model_dump(), viewer=viewer
    )
    return 201, selectors.principal_read(viewer=viewer, principal_id=principal.external_id)


@router.get(
    "/principals/{principal_id}",
    auth=ADMIN,
    response={200: s.PrincipalOut, **errors(404)},
    by_alias=True,
    summary="One principal",
)
def principals_get(request, principal_id: str):
    return selectors.principal_read(viewer=request.auth, principal_id=principal_id)


@router.patch(
    "/principals/{principal_id}",
    auth=ADMIN,
    response={200: s.PrincipalOut, **errors(404, 409, 413, 422)},
    by_alias=True,
    summary="Change a principal; active: false deactivates it (sessions, sockets, keys end)",
)
def principals_patch(request, principal_id: str, payload: s.PrincipalPatch):
    viewer = request.auth
    principal = access.directory_for(viewer=viewer, kind="principal", name=principal_id)
    fields = payload.changes()
    if SENSITIVE_PRINCIPAL_FIELDS & set(fields):
        signin.require_recent_auth_api(request)
    principals.principal_update(principal=principal, fields=fields, viewer=viewer)
    return selectors.principal_read(viewer=viewer, principal_id=principal_id)


# --- roles ---


@router.get(
    "/roles",
    auth=ADMIN,
    response={200: s.RoleListOut, **errors(422)},
    by_alias=True,
    summary="The tenant's roles with how many principals hold each",
)
def roles_index(request, query: Query[s.ListQuery]):
    return selectors.roles_list(viewer=request.auth, **query.model_dump())


@router.post(
    "/roles",
    auth=ADMIN,
    response={201: s.RoleOut, **errors(409, 413, 422)},
    by_alias=True,
    summary="Create a role (a held name: 409 role_exists; an unknown capability: 422)",
)
def roles_create(request, payload: s.RoleIn):
    viewer = request.auth
    signin.require_recent_auth_api(request)
    role = roles.role_add(tenant=viewer.tenant, fields=payload.model_dump(), viewer=viewer)
    return 201, selectors.role_read(viewer=viewer, name=role.name)


@router.get(
    "/roles/{role_name}",
    auth=ADMIN,
    response={200: s.RoleOut, **errors(404)},
    by_alias=True,
    summary="One role",
)
def roles_get(request, role_name: str):
    return selectors.role_read(viewer=request.auth, name=role_name)


@router.patch(
    "/roles/{role_name}",
    auth=ADMIN,
    response={200: s.RoleOut, **errors(404, 409, 413, 422)},
    by_alias=True,
    summary="Change a role's capabilities, tool globs or slackDecide (409 last_admin)",
)
def roles_patch(request, role_name: str, payload: s.RolePatch):
    viewer = request.auth
    role = access.directory_for(viewer=viewer, kind="role", name=role_name)
    signin.require_recent_auth_api(request)
    roles.role_update(role=role, fields=payload.changes(), viewer=viewer)
    return selectors.role_read(viewer=viewer, name=role_name)


@router.delete(
    "/roles/{role_name}",
    auth=ADMIN,
    response={204: None, **errors(404, 409)},
    summary="Delete a role no one holds (409 role_in_use, details.principals)",
)
def roles_delete(request, role_name: str):
    viewer = request.auth
    role = access.directory_for(viewer=viewer, kind="role", name=role_name)
    signin.require_recent_auth_api(request)
    roles.role_delete(role=role, viewer=viewer)
    return 204, None


# --- teams ---


@router.get(
    "/teams",
    auth=ADMIN,
    response={200: s.TeamListOut, **errors(422)},
    by_alias=True,
    summary="The tenant's teams with their members and leads",
)
def teams_index(request, query: Query[s.ListQuery]):
    return selectors.teams_list(viewer=request.auth, **query.model_dump())


@router.post(
    "/teams",
    auth=ADMIN,
    response={201: s.TeamOut, **errors(409, 413, 422)},
    by_alias=True,
    summary="Create a team (leads must be members too; a held name: 409 team_exists)",
)
def teams_create(request, payload: s.TeamIn):
    viewer = request.auth
    team = teams.team_add(tenant=viewer.tenant, fields=payload.model_dump(), viewer=viewer)
    return 201, selectors.team_read(viewer=viewer, name=team.name)


@router.get(
    "/teams/{team_name}",
    auth=ADMIN,
    response={200: s.TeamOut, **errors(404)},
    by_alias=True,
    summary="One team",
)
def teams_get(request, team_name: str):
    return selectors.team_read(viewer=request.auth, name=team_name)


@router.patch(
    "/teams/{team_name}",
    auth=ADMIN,
    response={200: s.TeamOut, **errors(404, 413, 422)},
    by_alias=True,
    summary="Set a team's members and/or leads (whole lists)",
)
def teams_patch(request, team_name: str, payload: s.TeamPatch):
    viewer = request.auth
    team = access.directory_for(viewer=viewer, kind="team", name=team_name)
    teams.team_update(team=team, fields=payload.changes(), viewer=viewer)
    return selectors.team_read(viewer=viewer, name=team_name)


@router.delete(
    "/teams/{team_name}",
    auth=ADMIN,
    response={204: None, **errors(404, 409)},
    summary="Delete a team no budget scopes (409 team_in_use)",
)
def teams_delete(request, team_name: str):
    viewer = request.auth
    team = access.directory_for(viewer=viewer, kind="team", name=team_name)
    teams.team_delete(team=team, viewer=viewer)
    return 204, None
