"""SCIM's reads: a `scim` key's tenant's principals (Users) and teams (Groups), as the served
models (console/schemas_scim.py) hold them; which of them a key reaches is console/access.py's.

Searches are scim2-models' `SearchRequest` (the RFC 7644 filter grammar, its operators and
case rules, `sortBy`/`sortOrder`), evaluated on the resources this builds for the tenant; a
tenant's directory is small (people, not runs), so this reads it whole, in two queries per
resource type.
"""

from __future__ import annotations

from django.db.models import Prefetch

from console.directory import access
from console.directory.schemas.scim import GROUP_URN, USER_URN, ScimGroup, ScimUser
from console.models import Principal, Team

SCIM_PATH = "/scim/v2"


def _location(base: str, kind: str, resource_id: str) -> str:
    return f"{base}{SCIM_PATH}/{kind}/{resource_id}"


def _meta(kind: str, created, location: str) -> dict:
    stamp = created.isoformat()
    return {"resourceType": kind, "created": stamp, "lastModified": stamp, "location": location}


def user_of(principal: Principal, *, base: str) -> ScimUser:
    """A principal as a SCIM User: its one name is both `displayName` and `name.formatted`."""
    user = {
        "schemas": [USER_URN],
        "id": principal.external_id,
        "externalId": principal.scim_external_id or None,
        "userName": principal.external_id,
        "displayName": principal.name or None,
        "name": {"formatted": principal.name} if principal.name else None,
        "emails": [{"value": principal.email, "type": "work"}] if principal.email else None,
        "active": principal.is_active,
        "groups": [
            {
                "value": t.name,
                "display": t.name,
                "$ref": _location(base, "Groups", t.name),
                "type": "direct",
            }
            for t in principal.teams.all()
        ]
        or None,
        "meta": _meta(
            "User", principal.created_at, _location(base, "Users", principal.external_id)
        ),
    }
    return ScimUser.model_validate(user)


def group_of(team: Team, *, base: str) -> ScimGroup:
    """A team as a SCIM Group; its members SCIM deleted are not shown (nor changed)."""
    group = {
        "schemas": [GROUP_URN],
        "id": team.name,
        "externalId": team.scim_external_id or None,
        "displayName": team.name,
        "members": [
            {
                "value": p.external_id,
                "$ref": _location(base, "Users", p.external_id),
                "type": "User",
            }
            for p in team.principals.all()
            if p.scim_deleted_at is None
        ]
        or None,
        "meta": _meta("Group", team.created_at, _location(base, "Groups", team.name)),
    }
    return ScimGroup.model_validate(group)


def users(*, key, base: str) -> list[ScimUser]:
    """Every User the key reaches, in creation order."""
    principals = access.scim_users(key=key).prefetch_related("teams").order_by("created_at", "pk")
    return [user_of(p, base=base) for p in principals]


def user(*, key, user_id: str, base: str) -> ScimUser:
    """One User (NotFound: another tenant's, a SCIM-deleted or a missing one)."""
    return user_of(access.scim_user(key=key, user_id=user_id), base=base)


def groups(*, key, base: str) -> list[ScimGroup]:
    """Every Group the key reaches, in creation order."""
    teams = access.scim_groups(key=key).prefetch_related(
        Prefetch("principals", queryset=Principal.objects.order_by("external_id"))
    )
    return [group_of(t, base=base) for t in teams.order_by("created_at", "pk")]


def group(*, key, group_id: str, base: str) -> ScimGroup:
    """One Group (NotFound: another tenant's or a missing one)."""
    return group_of(access.scim_group(key=key, group_id=group_id), base=base)


def search(request, resources: list) -> tuple[int, list]:
    """The resources a SearchRequest matches (`filter`), ordered (`sortBy`, `sortOrder`),
    and the page of them it asks for (`startIndex`, `count`): (every match, the page)."""
    found = [r for r in resources if request.filter is None or request.filter.match(r)]
    found = request.sort(found)
    return len(found), found[request.start_index_0 : request.stop_index_0]
