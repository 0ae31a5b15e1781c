"""SCIM's reads: a tenant's principals (Users) and teams (Groups), as scim2-models resources.

Filters are scim2-models' (`ScimFilter[User]`: the RFC 7644 grammar, its operators and its
case rules), evaluated on the resources this builds for the tenant; a tenant's directory is
small (people, not runs), so this reads it whole, in two queries per resource type.
"""

from __future__ import annotations

from scim2_models import (
    Email,
    Group,
    GroupMember,
    GroupMembership,
    Meta,
    Name,
    ScimFilter,
    User,
)

from console.models import Principal, Team

SCIM_PATH = "/scim/v2"


def _location(base: str, kind: str, resource_id: str) -> str:
    return f"{base}{SCIM_PATH}/{kind}/{resource_id}"


def user_of(principal: Principal, *, base: str) -> User:
    teams = list(principal.teams.all())
    return User(
        id=principal.external_id,
        user_name=principal.external_id,
        display_name=principal.name or None,
        name=Name(formatted=principal.name) if principal.name else None,
        emails=[Email(value=principal.email, primary=True, type="work")]
        if principal.email
        else None,
        active=principal.is_active,
        groups=[
            GroupMembership(
                value=t.name, display=t.name, ref=_location(base, "Groups", t.name), type="direct"
            )
            for t in teams
        ]
        or None,
        meta=Meta(
            resource_type="User",
            created=principal.created_at,
            last_modified=principal.created_at,
            location=_location(base, "Users", principal.external_id),
        ),
    )


def group_of(team: Team, *, base: str) -> Group:
    members = list(team.principals.all())
    return Group(
        id=team.name,
        display_name=team.name,
        members=[
            GroupMember(
                value=p.external_id,
                display=p.name or p.external_id,
                ref=_location(base, "Users", p.external_id),
                type="User",
            )
            for p in members
        ]
        or None,
        meta=Meta(
            resource_type="Group",
            created=team.created_at,
            last_modified=team.created_at,
            location=_location(base, "Groups", team.name),
        ),
    )


def users(*, tenant, base: str, where: ScimFilter | None = None) -> list[User]:
    principals = (
        Principal.objects.filter(tenant=tenant)
        .prefetch_related("teams")
        .order_by("created_at", "pk")
    )
    found = [user_of(p, base=base) for p in principals]
    return [u for u in found if where is None or where.match(u)]


def user(*, tenant, user_id: str, base: str) -> User | None:
    principal = Principal.objects.filter(tenant=tenant, external_id=user_id).first()
    return user_of(principal, base=base) if principal else None


def groups(*, tenant, base: str, where: ScimFilter | None = None) -> list[Group]:
    teams = Team.objects.filter(tenant=tenant).prefetch_related("principals")
    found = [group_of(t, base=base) for t in teams.order_by("created_at", "pk")]
    return [g for g in found if where is None or where.match(g)]


def group(*, tenant, group_id: str, base: str) -> Group | None:
    team = Team.objects.filter(tenant=tenant, name=group_id).first()
    return group_of(team, base=base) if team else None
