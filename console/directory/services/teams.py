"""Teams managed by an admin: create, change members and leads, delete; audited before → after.

Leads are members too: a lead who is not among the team's members is a 422 at `leads.N`. A team
that a budget scopes (archived budgets too: their history names it) cannot be deleted: 409
`team_in_use`.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from console.core.errors import Conflict
from console.directory.schemas.directory import team_snapshot
from console.directory.services import actor_of, audit, invalid, principals_named
from console.models import Team, Tenant


def _members_and_leads(*, tenant_id: int, members: list[str], leads: list[str]):
    member_objs = principals_named(tenant_id=tenant_id, ids=members, path="members")
    lead_objs = principals_named(tenant_id=tenant_id, ids=leads, path="leads")
    for n, lead in enumerate(leads):
        if lead not in members:
            raise invalid(f"leads.{n}", f"'{lead}' leads the team, so must be a member too")
    return member_objs, lead_objs


@transaction.atomic
def team_add(*, tenant: Tenant, fields: dict, viewer) -> Team:
    """A new team (name, members, leads); 409 `team_exists` for a held name."""
    members, leads = _members_and_leads(
        tenant_id=tenant.pk, members=fields.get("members", []), leads=fields.get("leads", [])
    )
    try:
        with transaction.atomic():
            team = Team.objects.create(tenant=tenant, name=fields["name"])
    except IntegrityError:
        raise Conflict(
            f"a team '{fields['name']}' already exists in this tenant",
            code="team_exists",
            details={"name": fields["name"]},
        ) from None
    team.principals.set(members)
    team.leads.set(leads)
    audit(
        tenant=tenant,
        action="team.created",
        object_type="team",
        object_id=team.name,
        after=team_snapshot(team),
        **actor_of(viewer),
    )
    return team


@transaction.atomic
def team_update(*, team: Team, fields: dict, viewer) -> Team:
    """Set members and/or leads (whole lists; only those in `fields`)."""
    team = Team.objects.select_for_update().select_related("tenant").get(pk=team.pk)
    before = team_snapshot(team)
    members, leads = _members_and_leads(
        tenant_id=team.tenant_id,
        members=fields.get("members", before["members"]),
        leads=fields.get("leads", before["leads"]),
    )
    team.principals.set(members)
    team.leads.set(leads)
    after = team_snapshot(team)
    if after != before:
        audit(
            tenant=team.tenant,
            action="team.updated",
            object_type="team",
            object_id=team.name,
            before=before,
            after=after,
            **actor_of(viewer),
        )
    return team


@transaction.atomic
def team_delete(*, team: Team, viewer) -> None:
    """Delete a team no budget scopes (409 `team_in_use`, `details.budgets`)."""
    team = Team.objects.select_for_update().select_related("tenant").get(pk=team.pk)
    before = team_snapshot(team)
    try:
        team.delete()
    except ProtectedError as protected:  # budgets scope teams (budgets.models: PROTECT)
        budgets = sorted(obj.public_id for obj in protected.protected_objects)
        raise Conflict(
            f"the team '{team.name}' is the scope of {len(budgets)} budget(s)",
            code="team_in_use",
            details={"budgets": budgets},
        ) from None
    audit(
        tenant=team.tenant,
        action="team.deleted",
        object_type="team",
        object_id=before["name"],
        before=before,
        **actor_of(viewer),
    )
