"""Principals managed by an admin (the management API and /manage/principals/): create,
change, deactivate and reactivate, each audited with the wire form before → after.

Deactivation (`active: false`) ends the principal's browser sessions in this tenant at once
(the sessions a login acts in another tenant through are left alone), closes its sockets on
commit (console/realtime.py's Principal receiver), and its keys answer 401 from then on
(console/auth.py) until it is reactivated. See docs/api.md "Principals".
"""

from __future__ import annotations

import contextlib

from django.contrib.auth import password_validation
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from console.core.errors import Conflict, Invalid
from console.directory import access
from console.directory.schemas.directory import principal_snapshot
from console.directory.services import (
    _principal_set_login,
    _shared_login_proof,
    actor_of,
    admins_exist,
    admins_remain,
    audit,
    principal_refuse_reserved,
    role_get,
    roles_named,
    teams_named,
    tenant_lock,
)
from console.directory.services.teams import team_add
from console.models import Principal, Team, Tenant, UserSession


def _password_checked(password: str | None, principal: Principal | None) -> None:
    """Django's password validators (settings.AUTH_PASSWORD_VALIDATORS): 422 with their
    messages at `password`."""
    if password is None:
        return
    try:
        password_validation.validate_password(password, principal.user if principal else None)
    except ValidationError as error:
        raise Invalid(
            "password: " + " ".join(error.messages),
            code="validation_error",
            details=[{"path": "password", "message": m} for m in error.messages],
        ) from None


def principal_add(*, tenant: Tenant, fields: dict, viewer) -> Principal:
    """A new principal (`fields`: id, name, email, roles, teams, password). 422 for a
    password the validators refuse or an unknown role or team; 409 `principal_exists` for a
    held id; 409 `login_reserved` for an id naming an operator's (staff or superuser) login.
    With a password it signs in with its id (or `<tenant>/<id>`): a login that is already
    another tenant's principal is linked only with its current password (checked under the
    sign-in lockout, so this runs outside a transaction first), else the principal gets a
    login of its own; the answer is the same either way (docs/architecture.md "Identity")."""
    password = fields.get("password")
    _password_checked(password, None)
    roles_named(tenant_id=tenant.pk, names=fields.get("roles", []))
    teams_named(tenant_id=tenant.pk, names=fields.get("teams", []))
    _not_held(tenant=tenant, principal_id=fields["id"])
    principal_refuse_reserved(external_id=fields["id"])
    link = bool(password) and _shared_login_proof(
        tenant=tenant, external_id=fields["id"], password=password
    )
    return _principal_add(tenant=tenant, fields=fields, link=link or None, viewer=viewer)


def _not_held(*, tenant: Tenant, principal_id: str) -> None:
    if Principal.objects.filter(tenant=tenant, external_id=principal_id).exists():
        raise Conflict(
            f"a principal '{principal_id}' already exists in this tenant",
            code="principal_exists",
            details={"id": principal_id},
        )


@transaction.atomic
def _principal_add(*, tenant: Tenant, fields: dict, link, viewer) -> Principal:
    roles = roles_named(tenant_id=tenant.pk, names=fields.get("roles", []))
    teams = teams_named(tenant_id=tenant.pk, names=fields.get("teams", []))
    try:
        with transaction.atomic():
            principal = Principal.objects.create(
                tenant=tenant,
                external_id=fields["id"],
                name=fields.get("name") or "",
                email=fields.get("email") or "",
                reviewed=True,
            )
    except IntegrityError:
        _not_held(tenant=tenant, principal_id=fields["id"])  # a concurrent creator won
        raise
    principal.roles.set(roles)
    principal.teams.set(teams)
    if fields.get("password"):
        _principal_set_login(principal=principal, password=fields["password"], link=link)
    after = principal_snapshot(principal)
    audit(
        tenant=tenant,
        action="principal.created",
        object_type="principal",
        object_id=principal.external_id,
        after=after,
        **actor_of(viewer),
    )
    return principal


def principal_create(
    *,
    tenant: Tenant,
    external_id: str,
    name: str | None = None,
    email: str | None = None,
    password: str | None = None,
    roles: list[str] | None = None,
    teams: list[str] | None = None,
) -> tuple[Principal, bool]:
    """The provisioning commands' create-or-update (idempotent: they may run again, and
    concurrently), written by the API's own writers, so each action has one audit shape: a
    new principal through `principal_add`'s, a known one through `principal_update`'s (only
    what is given changes; roles and teams are added to those it has), a team it names and
    the tenant lacks through `team_add`. An unknown role is refused before anything is
    written. An operator's command sets the password it is given (the password validators
    judge a person's choice in the API and the pages). An id that names an operator's login
    is refused (409 `login_reserved`). A login that is already another tenant's principal is
    linked only when the password is its current one (checked here before anything is
    written and counted by the sign-in lockout: call this outside a transaction); otherwise
    the principal gets a login of its own, and the answer is the same either way."""
    if not external_id:
        raise Invalid("a principal needs an id")
    principal_refuse_reserved(external_id=external_id)
    for role in roles or []:
        role_get(tenant=tenant, name=role)
    link = bool(password) and _shared_login_proof(
        tenant=tenant, external_id=external_id, password=password
    )
    with transaction.atomic():
        for team in teams or []:
            _team_ensure(tenant=tenant, name=team)
        held = Principal.objects.filter(tenant=tenant, external_id=external_id).first()
        if held is None:
            fields = {"id": external_id, "name": name, "email": email, "password": password}
            fields |= {"roles": roles or [], "teams": teams or []}
            try:
                return _principal_add(
                    tenant=tenant, fields=fields, link=link or None, viewer=None
                ), True
            except Conflict:  # a concurrent command made it first
                held = Principal.objects.get(tenant=tenant, external_id=external_id)
        fields = {"reviewed": True}
        fields |= {k: v for k, v in (("name", name), ("email", email)) if v is not None}
        if roles:
            fields["roles"] = sorted({*held.roles.values_list("name", flat=True), *roles})
        if teams:
            fields["teams"] = sorted({*held.teams.values_list("name", flat=True), *teams})
        if password:
            fields["password"] = password
        return _principal_update(
            principal=held, fields=fields, viewer=None, link=link or None
        ), False


def _team_ensure(*, tenant: Tenant, name: str) -> None:
    if Team.objects.filter(tenant=tenant, name=name).exists():
        return
    with contextlib.suppress(Conflict):  # a concurrent command made it first
        team_add(tenant=tenant, fields={"name": name}, viewer=None)


def principal_update(*, principal: Principal, fields: dict, viewer) -> Principal:
    """Change any of name, email, roles, teams, active, reviewed, password (`fields` holds
    only those sent). 422 before anything is written (password validators, unknown role or
    team); 409 `login_reserved` for a password of an id naming an operator's login; a
    password for a login this tenant does not own alone (one shared with another tenant)
    gives the principal a login of its own and leaves the shared one as it was; 409
    `last_admin` for a change that leaves the tenant without an active admin. Audited
    `principal.updated`, or `.deactivated` / `.reactivated` when `active` changed."""
    _password_checked(fields.get("password"), principal)
    return _principal_update(principal=principal, fields=fields, viewer=viewer)


@transaction.atomic
def _principal_update(*, principal: Principal, fields: dict, viewer, link=None) -> Principal:
    tenant_lock(tenant_id=principal.tenant_id)
    had = admins_exist(tenant_id=principal.tenant_id)
    principal = (
        Principal.objects.select_for_update(of=("self",))
        .select_related("user")
        .get(pk=principal.pk)
    )
    roles = teams = None
    if "roles" in fields:
        roles = roles_named(tenant_id=principal.tenant_id, names=fields["roles"])
    if "teams" in fields:
        teams = teams_named(tenant_id=principal.tenant_id, names=fields["teams"])
    before = principal_snapshot(principal)
    if fields.get("active") is False and principal.is_active:
        _sessions_end(principal)  # before the save: which sessions act as it is asked now
    changed = [f for f in ("name", "email", "reviewed") if f in fields]
    for name in changed:
        setattr(principal, name, fields[name])
    if "active" in fields:
        principal.is_active = fields["active"]
        changed.append("is_active")
    if changed:
        principal.save(update_fields=changed)  # a deactivation closes its sockets on commit
    if roles is not None:
        principal.roles.set(roles)
    if teams is not None:
        principal.teams.set(teams)
        for team in principal.led_teams.exclude(pk__in=[t.pk for t in teams]):
            team.leads.remove(principal)  # a lead leaving a team stops leading it
    if fields.get("password"):
        _principal_set_login(principal=principal, password=fields["password"], link=link)
    admins_remain(tenant_id=principal.tenant_id, had=had)
    after = principal_snapshot(principal)
    if after != before or fields.get("password"):
        audit(
            tenant=principal.tenant,
            action=_action(before, after),
            object_type="principal",
            object_id=principal.external_id,
            before=before,
            after=after,
            data={"passwordSet": True} if fields.get("password") else None,
            **actor_of(viewer),
        )
    return principal


def _action(before: dict, after: dict) -> str:
    if before["active"] and not after["active"]:
        return "principal.deactivated"
    if after["active"] and not before["active"]:
        return "principal.reactivated"
    return "principal.updated"


def _sessions_end(principal: Principal) -> None:
    """End, in this transaction, every browser session that acts as this principal: the
    sessions of its login (UserSession, written at sign-in) whose chosen tenant is this
    principal's. A session of the same login acting in another tenant goes on."""
    if principal.user_id is None:
        return
    keys = UserSession.objects.filter(user_id=principal.user_id).values_list(
        "session_key", flat=True
    )
    ended = []
    for session in Session.objects.filter(session_key__in=list(keys)):
        acting = access.principal_for_session(user=principal.user, session=session.get_decoded())
        if acting is not None and acting.pk == principal.pk:
            ended.append(session.session_key)
    Session.objects.filter(session_key__in=ended).delete()
    UserSession.objects.filter(user_id=principal.user_id).exclude(
        session_key__in=Session.objects.values("session_key")
    ).delete()
