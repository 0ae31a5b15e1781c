"""The wire shapes of principals, roles and teams (camelCase on the wire). Unknown fields in a
body are a 422, as everywhere; PATCH bodies take any subset of their fields and say which
were sent (`changes()`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from ninja import Field
from pydantic import AfterValidator, ConfigDict, StrictBool, StrictStr
from pydantic.alias_generators import to_camel

from console.core.wire import CamelSchema, OptionalCursor
from console.models import CAPABILITIES, Principal, Role, Team

_FORBID = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def _email(value: str) -> str:
    """An email address, or "" for none (Django's validator, as the model's field)."""
    if value:
        try:
            validate_email(value)
        except ValidationError:
            raise ValueError("not an email address") from None
    return value


# A role's or team's name is one path segment of /roles/{name} and /teams/{name}.
Name = Annotated[StrictStr, Field(min_length=1, max_length=100, pattern=r"^[^/]+$")]
PrincipalId = Annotated[StrictStr, Field(min_length=1, max_length=255)]
NewPrincipalId = Annotated[StrictStr, Field(min_length=1, max_length=255, pattern=r"^[^/]+$")]
Names = Annotated[list[Name], Field(max_length=200)]
Ids = Annotated[list[PrincipalId], Field(max_length=1000)]
Glob = Annotated[StrictStr, Field(min_length=1, max_length=200)]
Password = Annotated[
    StrictStr,
    Field(
        min_length=1,
        max_length=200,
        description="checked by the server's password validators (AUTH_PASSWORD_VALIDATORS: "
        "at least 8 characters); one they refuse is a 422 naming `password`",
    ),
]
# What the schema cannot check: the names and ids must exist in the tenant.
TeamNames = Annotated[
    Names, Field(description="each the name of one of the tenant's teams (unknown: a 422)")
]
RoleNames = Annotated[
    Names, Field(description="each the name of one of the tenant's roles (unknown: a 422)")
]
PrincipalIds = Annotated[
    Ids, Field(description="each the id of one of the tenant's principals (unknown: a 422)")
]
Email = Annotated[StrictStr, Field(max_length=254), AfterValidator(_email)]


class _Patch(CamelSchema):
    model_config = _FORBID

    def changes(self) -> dict:
        """The fields the body sent (snake_case), with their values."""
        dumped = self.model_dump()
        return {name: dumped[name] for name in self.model_fields_set}


# --- principals ---


class PrincipalIn(CamelSchema):
    model_config = _FORBID

    id: NewPrincipalId
    name: Annotated[StrictStr, Field(max_length=200)] = ""
    email: Email = ""
    roles: RoleNames = []
    teams: TeamNames = []
    password: Password | None = None


class PrincipalPatch(_Patch):
    """Any of the fields; null is refused for each (its type does not take it)."""

    name: Annotated[StrictStr, Field(max_length=200)] = None
    email: Email = None
    roles: RoleNames = None
    teams: TeamNames = None
    active: StrictBool = None
    reviewed: StrictBool = None
    password: Password = None


class PrincipalOut(CamelSchema):
    id: str
    name: str
    email: str
    roles: list[str]
    teams: list[str]
    active: bool
    reviewed: bool
    can_sign_in: bool
    created_at: datetime
    last_sign_in_at: datetime | None


class PrincipalListOut(CamelSchema):
    items: list[PrincipalOut]
    next_cursor: str | None


class PrincipalListQuery(CamelSchema):
    q: str | None = None
    team: str | None = None
    role: str | None = None
    active: bool | None = None
    reviewed: bool | None = None
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: OptionalCursor = None


# --- roles ---

Capability = Annotated[StrictStr, Field(json_schema_extra={"enum": list(CAPABILITIES)})]


class RoleIn(CamelSchema):
    model_config = _FORBID

    name: Name
    capabilities: Annotated[list[Capability], Field(max_length=len(CAPABILITIES))] = []
    decide_tools: Annotated[list[Glob], Field(max_length=100)] = []
    slack_decide: StrictBool = True


class RolePatch(_Patch):
    capabilities: Annotated[list[Capability], Field(max_length=len(CAPABILITIES))] = None
    decide_tools: Annotated[list[Glob], Field(max_length=100)] = None
    slack_decide: StrictBool = None


class RoleOut(CamelSchema):
    name: str
    capabilities: list[str]
    decide_tools: list[str]
    slack_decide: bool
    principals: int


class RoleListOut(CamelSchema):
    items: list[RoleOut]
    next_cursor: str | None


# --- teams ---


class TeamIn(CamelSchema):
    model_config = _FORBID

    name: Name
    members: PrincipalIds = []
    leads: PrincipalIds = []


class TeamPatch(_Patch):
    members: PrincipalIds = None
    leads: PrincipalIds = None


class TeamOut(CamelSchema):
    name: str
    members: list[str]
    leads: list[str]


class TeamListOut(CamelSchema):
    items: list[TeamOut]
    next_cursor: str | None


class ListQuery(CamelSchema):
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: OptionalCursor = None


# --- the wire forms an audit entry records (and the resources start from) ---


def principal_snapshot(principal: Principal) -> dict:
    """What an audit entry records of a principal: its wire form without the timestamps."""
    user = principal.user
    return {
        "id": principal.external_id,
        "name": principal.name,
        "email": principal.email,
        "roles": sorted(r.name for r in principal.roles.all()),
        "teams": sorted(t.name for t in principal.teams.all()),
        "active": principal.is_active,
        "reviewed": principal.reviewed,
        "canSignIn": bool(user and user.is_active and user.has_usable_password()),
    }


def role_snapshot(role: Role) -> dict:
    """What an audit entry records of a role (its wire form without the holder count)."""
    return {
        "name": role.name,
        "capabilities": list(role.capabilities),
        "decideTools": list(role.decide_tools),
        "slackDecide": role.slack_decide,
    }


def team_snapshot(team: Team) -> dict:
    """A team's wire form (what the audit entry records)."""
    return {
        "name": team.name,
        "members": sorted(p.external_id for p in team.principals.all()),
        "leads": sorted(p.external_id for p in team.leads.all()),
    }
