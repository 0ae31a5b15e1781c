"""Reads of the directory (principals, roles, teams) for admins: their wire resources, the
filtered and keyset-paginated lists, and the known tool names a role's globs match."""

from __future__ import annotations

from collections.abc import Callable
from fnmatch import fnmatchcase

from django.db.models import Count, Prefetch, Q

from console.core import paging
from console.directory import access
from console.directory.schemas.directory import principal_snapshot, role_snapshot, team_snapshot
from console.models import Principal, Role, Team


def _cursor(raw: str | None, tag: str) -> int:
    if raw is None:
        return 0
    return paging.read(lambda c: paging.decode_tagged(tag, c), raw)


def _page(qs, *, limit: int, cursor: str | None, tag: str, resource) -> dict:
    rows = list(qs.filter(pk__gt=_cursor(cursor, tag)).order_by("pk")[: limit + 1])
    more, rows = len(rows) > limit, rows[:limit]
    next_cursor = None
    if more:
        next_cursor = paging.encode(f"{tag}{rows[-1].pk}")
    return {"items": [resource(row) for row in rows], "next_cursor": next_cursor}


# --- principals ---


def principal_resource(principal: Principal) -> dict:
    wire = principal_snapshot(principal)
    user = principal.user
    return {
        "id": wire["id"],
        "name": wire["name"],
        "email": wire["email"],
        "roles": wire["roles"],
        "teams": wire["teams"],
        "active": wire["active"],
        "reviewed": wire["reviewed"],
        "can_sign_in": wire["canSignIn"],
        "created_at": principal.created_at,
        "last_sign_in_at": user.last_login if user else None,
    }


def principals_filtered(
    *,
    viewer,
    q: str | None = None,
    team: str | None = None,
    role: str | None = None,
    active: bool | None = None,
    reviewed: bool | None = None,
):
    """The tenant's principals matching the filters (q: a substring of id, name or email).
    DISTINCT only when a filter joins a principal's roles or teams: over every column of the
    principal and its user it costs a sort of all the tenant's principals."""
    qs = access.directory_of(viewer=viewer, kind="principal")
    if q:
        qs = qs.filter(Q(external_id__icontains=q) | Q(name__icontains=q) | Q(email__icontains=q))
    if team:
        qs = qs.filter(teams__name=team)
    if role:
        qs = qs.filter(roles__name=role)
    if active is not None:
        qs = qs.filter(is_active=active)
    if reviewed is not None:
        qs = qs.filter(reviewed=reviewed)
    names = {  # the resource reads their names only
        "roles": Prefetch("roles", queryset=Role.objects.only("name")),
        "teams": Prefetch("teams", queryset=Team.objects.only("name")),
    }
    qs = qs.select_related("user").prefetch_related(names["roles"], names["teams"])
    return qs.distinct() if team or role else qs


def principals_list(*, viewer, limit: int = 50, cursor: str | None = None, **filters) -> dict:
    """One page of principals, oldest first."""
    qs = principals_filtered(viewer=viewer, **filters)
    return _page(qs, limit=limit, cursor=cursor, tag="p", resource=principal_resource)


def principal_read(*, viewer, principal_id: str) -> dict:
    principal = access.directory_for(viewer=viewer, kind="principal", name=principal_id)
    return principal_resource(principal)


# --- roles ---


def role_resource(role: Role) -> dict:
    wire = role_snapshot(role)
    held = getattr(role, "holders", None)
    if held is None:
        held = role.principals.count()
    return {
        "name": wire["name"],
        "capabilities": wire["capabilities"],
        "decide_tools": wire["decideTools"],
        "slack_decide": wire["slackDecide"],
        "principals": held,
    }


def roles_list(*, viewer, limit: int = 50, cursor: str | None = None) -> dict:
    qs = access.directory_of(viewer=viewer, kind="role").annotate(holders=Count("principals"))
    return _page(qs, limit=limit, cursor=cursor, tag="r", resource=role_resource)


def role_read(*, viewer, name: str) -> dict:
    return role_resource(access.directory_for(viewer=viewer, kind="role", name=name))


def team_resource(team: Team) -> dict:
    return team_snapshot(team)


def teams_list(*, viewer, limit: int = 50, cursor: str | None = None) -> dict:
    qs = access.directory_of(viewer=viewer, kind="team").prefetch_related("principals", "leads")
    return _page(qs, limit=limit, cursor=cursor, tag="t", resource=team_resource)


def team_read(*, viewer, name: str) -> dict:
    return team_resource(access.directory_for(viewer=viewer, kind="team", name=name))


# --- what the /manage/ forms offer ---


def directory_choices(*, viewer, principals: bool = True) -> dict:
    """The tenant's role names, team names and principal ids (the forms' choices);
    `principals=False`: without the principal ids (every principal of the tenant), for the
    pages whose forms offer roles and teams only."""
    kinds = ("role", "team", "principal") if principals else ("role", "team")
    qs = {k: access.directory_of(viewer=viewer, kind=k) for k in kinds}
    choices = {
        "roles": list(qs["role"].order_by("name").values_list("name", flat=True)),
        "teams": list(qs["team"].order_by("name").values_list("name", flat=True)),
    }
    if principals:
        choices["principals"] = list(
            qs["principal"].order_by("external_id").values_list("external_id", flat=True)
        )
    return choices


def principal_page(*, viewer, principal_id: str) -> dict:
    """A principal's page: its resource and its keys (by name and prefix only)."""
    principal = access.directory_for(viewer=viewer, kind="principal", name=principal_id)
    keys = principal.api_keys.filter(revoked_at__isnull=True).order_by("created_at")
    return {
        "principal": principal_resource(principal),
        "keys": [{"name": k.name, "prefix": k.key_prefix, "scopes": k.scopes} for k in keys],
    }


# --- the tools a role's globs match ---
# Which tool names a tenant's calls have named is the approvals app's to know: it registers
# its `known_tools` here in `ready()`, so the directory (and the role form) knows no feature.


def _no_tools(*, viewer) -> list[str]:
    return []


_known_tools: Callable[..., list[str]] = _no_tools


def register_known_tools(source: Callable[..., list[str]]) -> None:
    """`source(viewer=)`: the tenant's tool names, sorted (an admin's read)."""
    global _known_tools
    _known_tools = source


def tools_matched(*, viewer, globs: list[str]) -> dict:
    """Which known tool names the globs match (fnmatch, case-sensitive, as `can` decides)."""
    tools = _known_tools(viewer=viewer)
    globs = [g.strip() for g in globs if g.strip()]
    matched = [t for t in tools if any(fnmatchcase(t, g) for g in globs)]
    return {"globs": globs, "matched": matched, "known": len(tools)}
