"""Writes to the directory that every writer shares: tenants, first-sight principals, API keys,
and the helpers principals.py, roles.py and teams.py use. The provisioning commands' create-or-
update of a principal or a role is `principals.principal_create` / `roles.role_create`, on the
same writers as the API's (one audit shape per action).
"""

from django.db import IntegrityError, transaction

from console.audit.log import audit  # noqa: F401 (the one writer of audit entries)
from console.core.errors import Conflict, Invalid, NotFound
from console.directory import keycopies, logins, signin
from console.directory.services.passwords import login_password_write
from console.directory.services.wire import actor_fields, api_key_resource
from console.models import (
    DEFAULT_ROLES,
    PRINCIPAL_SCOPES,
    SCOPES,
    ApiKey,
    Principal,
    Role,
    Team,
    Tenant,
)


def _get_or_create(model, *, defaults=None, **lookup):
    """get_or_create that survives a concurrent creator (the unique constraint decides)."""
    try:
        with transaction.atomic():
            return model.objects.get_or_create(defaults=defaults or {}, **lookup)
    except IntegrityError:
        return model.objects.get(**lookup), False


def tenant_get(*, slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise NotFound(f"no tenant '{slug}'", code="tenant_not_found")
    return tenant


@transaction.atomic
def tenant_create(
    *, slug: str, name: str | None = None, allow_self_approval: bool | None = None
) -> tuple[Tenant, bool]:
    from django.utils.text import slugify

    if not slug or slugify(slug) != slug:
        raise Invalid(f"tenant slug '{slug}' must be lowercase letters, digits and hyphens")
    tenant, created = _get_or_create(Tenant, slug=slug, defaults={"name": name or slug})
    changed = {}
    if not created and name and tenant.name != name:
        changed["name"] = name
    if allow_self_approval is not None and tenant.allow_self_approval != allow_self_approval:
        changed["allow_self_approval"] = allow_self_approval
    if created and allow_self_approval:
        changed["allow_self_approval"] = True
    if changed:
        Tenant.objects.filter(pk=tenant.pk).update(**changed)
        keycopies.bump()  # an update() sends no post_save: the key copies hold the tenant
        tenant.refresh_from_db()
    for role_name, spec in DEFAULT_ROLES.items():
        _get_or_create(Role, tenant=tenant, name=role_name, defaults=spec)
    if created or changed:
        audit(
            tenant=tenant,
            action="tenant.created" if created else "tenant.updated",
            object_type="tenant",
            object_id=tenant.slug,
            data={"name": tenant.name, "allowSelfApproval": tenant.allow_self_approval},
        )
    return tenant, created


def role_get(*, tenant: Tenant, name: str) -> Role:
    role = Role.objects.filter(tenant=tenant, name=name).first()
    if role is None:
        raise NotFound(f"no role '{name}' in tenant '{tenant.slug}'", code="role_not_found")
    return role


@transaction.atomic
def principal_ensure(*, tenant: Tenant, external_id: str) -> Principal:
    """The principal with this id, registered on first sight (not yet reviewed by an admin)."""
    principal, created = _get_or_create(
        Principal, tenant=tenant, external_id=external_id, defaults={"reviewed": False}
    )
    if created:
        audit(
            tenant=tenant,
            action="principal.registered",
            object_type="principal",
            object_id=external_id,
            data={"firstSight": True},
        )
    return principal


def principal_refuse_reserved(*, external_id: str, path: str = "id") -> None:
    """409 `login_reserved` for an id that names an operator's (staff or superuser) login:
    such a login is never a tenant's principal (it reaches every tenant through Django
    admin). The answer says no more than that the id cannot be used (`details[].path`: the
    field refused, `id` or `password`)."""
    if logins.reserved(external_id):
        message = f"the id '{external_id}' cannot be used for a principal here"
        raise Conflict(
            f"{message}: choose another id",
            code="login_reserved",
            details=[{"path": path, "message": message}],
        )


def _shared_login_proof(*, tenant: Tenant, external_id: str, password: str):
    """The login named `external_id` when it is another tenant's principal's (and no
    operator's) and this is its current password: the same person, so this tenant's
    principal is linked to it. Else None: the principal gets a login of its own. The check
    is counted by the sign-in lockout like a sign-in (a locked login is not tried), and its
    outcome never changes the answer, so it tells a tenant nothing about other tenants."""
    user = logins.plain_login(external_id)  # the same id's login (never `<slug>/<id>`)
    if (
        user is None
        or logins.is_operator(user)
        or not user.is_active
        or not logins.shared_elsewhere(user, tenant_id=tenant.pk)
        or Principal.objects.filter(user=user, tenant=tenant)
        .exclude(external_id=external_id)
        .exists()
    ):
        return None
    attempt = signin.attempt_begin(username=logins.lockout_key(user=user), address=None)
    if attempt.locked_until is not None:
        return None
    if user.check_password(password):
        signin.attempt_succeeded(attempt)
        return user
    signin.attempt_failed(attempt)
    return None


USERNAME_MAX = 150  # Django's User.username: a principal id signs in as itself


def _principal_set_login(*, principal: Principal, password: str, link=None) -> None:
    """Give the principal a password. A tenant writes only a login it owns alone
    (`logins.owned_alone`): never an operator's, never one another tenant's principal
    shares, never a bare login found by name. Otherwise the principal gets a login of its
    own (its id if that username is free, else `<tenant>/<id>`), leaving the other login as
    it was. `link`: a login whose password was proven (`_shared_login_proof`), linked as is."""
    principal_refuse_reserved(external_id=principal.external_id, path="password")
    if len(principal.external_id) > USERNAME_MAX:  # a 500 the fuzz run found (issue 18)
        raise Invalid(
            f"a principal whose id is over {USERNAME_MAX} characters cannot sign in",
            code="validation_error",
            details=[{"path": "password", "message": "the id is too long to sign in with"}],
        )
    replaced = None
    if link is not None and (principal.user_id in (None, link.pk) or logins.owned_alone(principal)):
        replaced = principal.user if principal.user_id not in (None, link.pk) else None
        user = link
    elif logins.owned_alone(principal):
        user = principal.user
        login_password_write(user=user, password=password, email=principal.email)
    else:
        user = logins.create_login(
            tenant=principal.tenant,
            principal_id=principal.external_id,
            email=principal.email,
            password=password,
        )
    if principal.user_id != user.pk:
        principal.user = user
        principal.save(update_fields=["user"])
    if replaced is not None:  # its own login, now no principal's: gone with the link
        replaced.delete()


def principal_get(*, tenant: Tenant, external_id: str) -> Principal:
    principal = Principal.objects.filter(tenant=tenant, external_id=external_id).first()
    if principal is None:
        raise NotFound(f"no principal '{external_id}' in tenant '{tenant.slug}'")
    return principal


@transaction.atomic
def api_key_create(
    *,
    tenant: Tenant,
    name: str,
    scopes: list[str],
    principal: Principal | None = None,
    expires_at=None,
    rate_per_minute: int | None = None,
    rate_burst: int | None = None,
    actor=None,
) -> tuple[ApiKey, str]:
    """A new key (always new; names need not be unique). Returns the key and its raw value,
    which is shown once and never stored. `actor`: who made it (a Principal, or a `manage`
    ApiKey acting as its principal; None: a provisioning command). Audited `apikey.created`
    with the key's wire form (console/services/keys.py) as `after`."""
    if not name:
        raise Invalid("a key needs a name")
    if not scopes:
        raise Invalid(f"a key needs at least one scope ({', '.join(SCOPES)})")
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise Invalid(f"unknown scopes: {', '.join(unknown)} (known: {', '.join(SCOPES)})")
    for scope in PRINCIPAL_SCOPES:
        if scope in scopes and principal is None:
            raise Invalid(
                f"a key with the '{scope}' scope must be bound to a principal (--principal)"
            )
    if "scim" in scopes and principal is not None:
        raise Invalid("a key with the 'scim' scope acts as no principal (no --principal)")
    raw, key_hash, prefix = ApiKey.generate()
    key = ApiKey.objects.create(
        tenant=tenant,
        name=name,
        key_hash=key_hash,
        key_prefix=prefix,
        scopes=sorted(set(scopes)),
        principal=principal,
        expires_at=expires_at,
        rate_per_minute=rate_per_minute,
        rate_burst=rate_burst,
    )
    audit(
        tenant=tenant,
        action="apikey.created",
        object_type="apikey",
        object_id=key.public_id,
        data={"before": None},
        after=api_key_resource(key, wire=True),
        **actor_fields(actor),
    )
    return key, raw


# --- shared by the directory's services (principals.py, roles.py, teams.py) ---


def actor_of(viewer) -> dict:
    """audit()'s actor keywords for a viewer: a principal, or a key and its principal."""
    if viewer is None:
        return {}
    if isinstance(viewer, ApiKey):
        return {"principal": viewer.principal, "key": viewer}
    return {"principal": viewer}


def invalid(path: str, message: str) -> Invalid:
    """A 422 naming the wire field (`details[].path`)."""
    return Invalid(
        f"{path}: {message}", code="validation_error", details=[{"path": path, "message": message}]
    )


def tenant_lock(*, tenant_id: int) -> Tenant:
    """The tenant row, locked for the rest of the transaction: every change that could leave
    the tenant without an admin takes it first, so two of them run one after the other and
    the second sees the first's result (`admins_exist`)."""
    return Tenant.objects.select_for_update().get(pk=tenant_id)


def admins_exist(*, tenant_id: int) -> bool:
    """Is some active principal of the tenant holding `admin` through a role?"""
    admin_roles = [
        role.pk
        for role in Role.objects.filter(tenant_id=tenant_id).only("pk", "capabilities")
        if "admin" in role.capabilities
    ]
    return Principal.objects.filter(
        tenant_id=tenant_id, is_active=True, roles__in=admin_roles
    ).exists()


def admins_remain(*, tenant_id: int, had: bool) -> None:
    """409 `last_admin` (rolling the change back) if the tenant had an active admin before
    the change and has none after it. Call with the tenant locked (`tenant_lock`)."""
    if had and not admins_exist(tenant_id=tenant_id):
        raise Conflict(
            "this change would leave the tenant without an active principal holding 'admin'",
            code="last_admin",
        )


def roles_named(*, tenant_id: int, names: list[str], path: str = "roles") -> list[Role]:
    """The tenant's roles by name, in order (422 at `path.N` for an unknown one)."""
    found = {r.name: r for r in Role.objects.filter(tenant_id=tenant_id, name__in=names)}
    for n, name in enumerate(names):
        if name not in found:
            raise invalid(f"{path}.{n}", f"no role '{name}' in this tenant")
    return [found[name] for name in dict.fromkeys(names)]


def teams_named(*, tenant_id: int, names: list[str], path: str = "teams") -> list[Team]:
    """The tenant's teams by name, in order (422 at `path.N` for an unknown one)."""
    found = {t.name: t for t in Team.objects.filter(tenant_id=tenant_id, name__in=names)}
    for n, name in enumerate(names):
        if name not in found:
            raise invalid(f"{path}.{n}", f"no team '{name}' in this tenant")
    return [found[name] for name in dict.fromkeys(names)]


def principals_named(*, tenant_id: int, ids: list[str], path: str) -> list[Principal]:
    """The tenant's principals by id, in order (422 at `path.N` for an unknown one)."""
    found = {
        p.external_id: p for p in Principal.objects.filter(tenant_id=tenant_id, external_id__in=ids)
    }
    for n, principal_id in enumerate(ids):
        if principal_id not in found:
            raise invalid(f"{path}.{n}", f"no principal '{principal_id}' in this tenant")
    return [found[i] for i in dict.fromkeys(ids)]
