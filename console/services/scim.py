"""SCIM's writes (console/scim.py calls these): Users onto the directory's principal services,
Groups onto its team services, so SCIM changes a principal exactly as the management API does
(deactivation with every effect: sessions ended, sockets closed, keys 401; `last_admin`), each
audited with the `scim` key as actor. PATCH is scim2-models' (`PatchOp.patch` on the
resource as it is now); the patched resource is then written like a PUT."""

from __future__ import annotations

from scim2_models import Group, User

from console.errors import Invalid
from console.models import Principal, Team
from console.services.principals import principal_add, principal_update
from console.services.teams import team_add, team_delete, team_update

NEW_USER_ROLES = ["viewer"]


def _email(user: User) -> str:
    emails = user.emails or []
    primary = next((e for e in emails if e.primary), emails[0] if emails else None)
    return (primary.value or "") if primary else ""


def _name(user: User) -> str:
    if user.display_name:
        return user.display_name
    name = user.name
    if name is None:
        return ""
    if name.formatted:
        return name.formatted
    return " ".join(p for p in (name.given_name, name.family_name) if p)


def _user_fields(user: User) -> dict:
    return {"name": _name(user)[:200], "email": _email(user)}


def scim_user_create(*, tenant, user: User, key) -> Principal:
    """A principal named by `userName` (409 `uniqueness` for a held one), `viewer`, not yet
    reviewed (its roles are an admin's to give); `active: false` creates it deactivated."""
    if not user.user_name:
        raise Invalid("userName is required", code="validation_error")
    fields = {"id": user.user_name, **_user_fields(user), "roles": NEW_USER_ROLES}
    principal = principal_add(tenant=tenant, fields=fields, viewer=key)
    later = {"reviewed": False}
    if user.active is False:
        later["active"] = False
    return principal_update(principal=principal, fields=later, viewer=key)


def scim_user_replace(*, principal: Principal, user: User, key) -> Principal:
    fields = _user_fields(user)
    if user.active is not None:
        fields["active"] = user.active
    return principal_update(principal=principal, fields=fields, viewer=key)


def scim_user_delete(*, principal: Principal, key) -> Principal:
    """Principals are never deleted (runs, decisions and the audit log name them): SCIM's
    DELETE deactivates, with every effect."""
    return principal_update(principal=principal, fields={"active": False}, viewer=key)


def _member_ids(group: Group) -> list[str]:
    return [m.value for m in group.members or [] if m.value]


def scim_group_create(*, tenant, group: Group, key) -> Team:
    if not group.display_name:
        raise Invalid("displayName is required", code="validation_error")
    fields = {"name": group.display_name, "members": _member_ids(group)}
    return team_add(tenant=tenant, fields=fields, viewer=key)


def scim_group_replace(*, team: Team, group: Group, key) -> Team:
    """Members as the group says; a lead who is no longer a member stops leading."""
    members = _member_ids(group)
    leads = [p.external_id for p in team.leads.all() if p.external_id in members]
    return team_update(team=team, fields={"members": members, "leads": leads}, viewer=key)


def scim_group_delete(*, team: Team, key) -> None:
    team_delete(team=team, viewer=key)
