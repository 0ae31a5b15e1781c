"""SCIM's writes (console/scim.py calls these): Users onto the directory's principal services,
Groups onto its team services, so SCIM changes a principal exactly as the management API does
(deactivation with every effect: sessions ended, sockets closed, keys 401; `last_admin`), each
audited with the `scim` key as actor. Resources are the served models (console/schemas_scim.py);
PATCH is scim2-models' (`PatchOp.patch` on the resource as it is now), and the patched
resource is then written like a PUT, but for the name and email (below).

A principal has one name and one email. `displayName` and `name.formatted` both show the
name: a POST or PUT sets it from `displayName`, else `name.formatted`, else the
`name.givenName` and `name.familyName` an identity provider may send (not kept apart); a
PATCH sets it from whichever of the two it changed (removing either removes the name). The
email is the first of `emails` (the one an identity provider marks `primary`, if any; in a
PATCH, the one it added).

Principals are never deleted (runs, decisions and the audit log name them): DELETE
deactivates the principal with every effect, takes it out of its teams and hides it from SCIM
(404, listed nowhere); a later POST of its userName brings it back as SCIM creates a new one.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from console.core.errors import Invalid
from console.directory.schemas.scim import ScimGroup, ScimUser
from console.directory.services import actor_of, audit
from console.directory.services.principals import principal_add, principal_update
from console.directory.services.teams import team_add, team_delete, team_update
from console.models import Principal, Team

NEW_USER_ROLES = ["viewer"]
NAME_MAX = 200


def _unknown(attribute, name: str):
    """A sub-attribute the served schema leaves out but a request carried (case-insensitive)."""
    extra = getattr(attribute, "unknown_attributes", None) or {}
    return next((v for k, v in extra.items() if k.casefold() == name.casefold()), None)


def _from_name(name) -> str:
    if name is None:
        return ""
    if name.formatted:
        return name.formatted
    parts = (_unknown(name, "givenName"), _unknown(name, "familyName"))
    return " ".join(p for p in parts if isinstance(p, str) and p)


def _name_given(user: ScimUser) -> str:
    return (user.display_name or _from_name(user.name))[:NAME_MAX]


def _name_patched(before: ScimUser, after: ScimUser) -> str | None:
    """The name a PATCH leaves (None: it did not touch it)."""
    if after.display_name != before.display_name:
        return (after.display_name or "")[:NAME_MAX]
    if after.name != before.name:
        return _from_name(after.name)[:NAME_MAX]
    return None


def _emails(user: ScimUser) -> list:
    return [e for e in user.emails or [] if e.value]


def _email_given(user: ScimUser) -> str:
    emails = _emails(user)
    primary = next((e for e in emails if _unknown(e, "primary") is True), None)
    chosen = primary or (emails[0] if emails else None)
    return chosen.value if chosen else ""


def _email_patched(before: ScimUser, after: ScimUser) -> str | None:
    """The email a PATCH leaves (None: it did not touch it)."""
    had = [e.value for e in _emails(before)]
    now = [e.value for e in _emails(after)]
    if now == had:
        return None
    added = [value for value in now if value not in had]
    return added[-1] if added else (now[0] if now else "")


def _scim_facts(obj, *, kind: str, external_id=None, deleted=None, key) -> None:
    """Keep and audit what only SCIM knows of a principal or team: the client's
    `externalId`, and (principals) whether SCIM deleted it. None leaves a fact as it is."""
    before, after, fields = {}, {}, []
    if external_id is not None and external_id != obj.scim_external_id:
        before["externalId"], after["externalId"] = obj.scim_external_id, external_id
        obj.scim_external_id = external_id
        fields.append("scim_external_id")
    if deleted is not None and deleted != (obj.scim_deleted_at is not None):
        before["scimDeleted"], after["scimDeleted"] = not deleted, deleted
        obj.scim_deleted_at = timezone.now() if deleted else None
        fields.append("scim_deleted_at")
    if not fields:
        return
    obj.save(update_fields=fields)
    audit(
        tenant=obj.tenant,
        action=f"{kind}.updated",
        object_type=kind,
        object_id=obj.external_id if kind == "principal" else obj.name,
        before=before,
        after=after,
        **actor_of(key),
    )


@transaction.atomic
def scim_user_create(*, tenant, user: ScimUser, key, deleted: Principal | None) -> Principal:
    """A principal named by `userName` (409 `uniqueness` for a held one), `viewer`, not yet
    reviewed (its roles are an admin's to give), active as `active` says. `deleted`: the
    principal of this id SCIM deleted, brought back the same way (roles reset to `viewer`)."""
    fields = {"name": _name_given(user), "email": _email_given(user)}
    later = {"reviewed": False, "active": user.active is not False}
    if deleted is None:
        principal = principal_add(
            tenant=tenant,
            fields={"id": user.user_name, **fields, "roles": NEW_USER_ROLES},
            viewer=key,
        )
    else:
        principal = deleted
        later.update(fields, roles=NEW_USER_ROLES)
    principal = principal_update(principal=principal, fields=later, viewer=key)
    _scim_facts(
        principal, kind="principal", external_id=user.external_id or "", deleted=False, key=key
    )
    return principal


@transaction.atomic
def scim_user_replace(*, principal: Principal, user: ScimUser, key) -> Principal:
    """PUT: name, email and active as the user says (`userName` cannot change)."""
    fields = {"name": _name_given(user), "email": _email_given(user), "active": user.active}
    principal = principal_update(principal=principal, fields=fields, viewer=key)
    _scim_facts(principal, kind="principal", external_id=user.external_id or "", key=key)
    return principal


@transaction.atomic
def scim_user_patch(*, principal: Principal, before: ScimUser, after: ScimUser, key):
    """PATCH: `after` is `before` with the operations applied (scim2-models)."""
    fields = {"active": after.active}
    name, email = _name_patched(before, after), _email_patched(before, after)
    if name is not None:
        fields["name"] = name
    if email is not None:
        fields["email"] = email
    principal = principal_update(principal=principal, fields=fields, viewer=key)
    _scim_facts(principal, kind="principal", external_id=after.external_id or "", key=key)
    return principal


@transaction.atomic
def scim_user_delete(*, principal: Principal, key) -> Principal:
    """Deactivate (every effect), leave every team, and hide from SCIM; never delete."""
    principal = principal_update(
        principal=principal, fields={"active": False, "teams": []}, viewer=key
    )
    _scim_facts(principal, kind="principal", deleted=True, key=key)
    return principal


def _member_ids(*, tenant_id: int, group: ScimGroup) -> list[str]:
    """The members a group names; one SCIM deleted is unknown to SCIM (400 invalidValue)."""
    wanted = list(dict.fromkeys(m.value for m in group.members or [] if m.value))
    hidden = set(
        Principal.objects.filter(
            tenant_id=tenant_id, external_id__in=wanted, scim_deleted_at__isnull=False
        ).values_list("external_id", flat=True)
    )
    for n, principal_id in enumerate(wanted):
        if principal_id in hidden:
            raise Invalid(f"members.{n}: no user '{principal_id}'", code="validation_error")
    return wanted


@transaction.atomic
def scim_group_create(*, tenant, group: ScimGroup, key) -> Team:
    fields = {"name": group.display_name, "members": _member_ids(tenant_id=tenant.pk, group=group)}
    team = team_add(tenant=tenant, fields=fields, viewer=key)
    _scim_facts(team, kind="team", external_id=group.external_id or "", key=key)
    return team


@transaction.atomic
def scim_group_replace(*, team: Team, group: ScimGroup, key) -> Team:
    """Members as the group says (those SCIM deleted, which it cannot see, stay); a lead who
    is no longer a member stops leading. The name (its id) cannot change."""
    members = _member_ids(tenant_id=team.tenant_id, group=group)
    members += [
        p.external_id
        for p in team.principals.filter(scim_deleted_at__isnull=False)
        if p.external_id not in members
    ]
    leads = [p.external_id for p in team.leads.all() if p.external_id in members]
    team = team_update(team=team, fields={"members": members, "leads": leads}, viewer=key)
    _scim_facts(team, kind="team", external_id=group.external_id or "", key=key)
    return team


def scim_group_delete(*, team: Team, key) -> None:
    team_delete(team=team, viewer=key)
