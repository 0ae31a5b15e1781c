"""The one rule behind every "may this user, key or socket see or do this?" answer: who the
viewer is, its capabilities, and the directory's, SCIM's and keys' lookups. Each feature app
applies the same rule to its own rows in its own access.py (runs, approvals, budgets,
notifications), built on `can` / `require_capability` here.

Another tenant's object is NotFound (404), exactly like one that does not exist; a missing
capability or scope is Forbidden (403). No view, endpoint or consumer filters by tenant itself.

A *viewer* is either a Principal (a signed-in person, or the principal a `decide` key is bound
to) or an ApiKey (a runtime, or a `decide` / `manage` key acting as its bound principal).
"""

from fnmatch import fnmatchcase

from django.db.models import QuerySet

from console.core.errors import Forbidden, NotFound
from console.core.kept import Kept
from console.models import CAPABILITIES, ApiKey, Principal, Role, Team

Viewer = Principal | ApiKey

# The session's key for the tenant its person acts in (a Tenant id), when the login is a
# principal in several tenants; set by the tenant switcher (console/accounts.py).
TENANT_SESSION_KEY = "gavel_tenant"


def principals_of_user(user) -> list[Principal]:
    """The active principals a signed-in login may act as, one per tenant, by tenant slug
    (one query, with their tenants)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return []
    return list(
        Principal.objects.filter(user=user, is_active=True)
        .select_related("tenant")
        .order_by("tenant__slug")
    )


def login_deactivated(user) -> bool:
    """Is this login a principal somewhere, and deactivated everywhere it is one?"""
    principals = Principal.objects.filter(user=user)
    return principals.exists() and not principals.filter(is_active=True).exists()


def principal_for_session(*, user, session) -> Principal | None:
    """The principal a signed-in login acts as: the one in the session's tenant, if it is
    still an active principal of this login there; else its first (by tenant slug); None
    for a login that is no active principal anywhere. Asked afresh on every request."""
    return _choose(principals_of_user(user), session)


def _choose(principals: list[Principal], session) -> Principal | None:
    chosen = session.get(TENANT_SESSION_KEY) if session is not None else None
    for principal in principals:
        if principal.tenant_id == chosen:
            return principal
    return principals[0] if principals else None


def principal_for_user(request) -> Principal | None:
    """The active principal a request's signed-in user acts as (see principal_for_session),
    or None. Asked once per request (the page, its navigation and the API ask alike)."""
    cached = getattr(request, "_gavel_principals", None)
    if cached is None:
        cached = principals_of_user(getattr(request, "user", None))
        request._gavel_principals = cached
    return _choose(cached, getattr(request, "session", None))


def principals_for_request(request) -> list[Principal]:
    """Every active principal of the request's login (the tenant switcher's choices)."""
    principal_for_user(request)
    return request._gavel_principals


# A principal's roles, as `principal.roles.all()` reads them (compiled once: every request
# of a person or a bound key asks).
_ROLES_OF = Kept(lambda principal_id: Role.objects.filter(principals=principal_id))


def _roles(principal: Principal):
    # Cached on the instance: a request asks many questions of the same viewer.
    cached = getattr(principal, "_gavel_roles", None)
    if cached is None:
        prefetched = getattr(principal, "_prefetched_objects_cache", {}).get("roles")
        cached = list(prefetched) if prefetched is not None else _ROLES_OF(principal.pk)
        principal._gavel_roles = cached
    return cached


def roles_key(principal: Principal) -> str:
    """The principal's roles as a short key: two principals with the same key get the same
    answers from `can` (live sockets render once per such audience)."""
    return ",".join(sorted(str(role.pk) for role in _roles(principal)))


def capabilities_of(principal: Principal) -> set[str]:
    caps: set[str] = set()
    for role in _roles(principal):
        caps.update(role.capabilities)
    if "admin" in caps:
        caps.update(CAPABILITIES)
    return caps


def acting_principal(viewer: Viewer) -> Principal | None:
    """The principal a viewer acts as: itself, or the one a key is bound to (None: a runtime's
    key, which acts as no one)."""
    return viewer.principal if isinstance(viewer, ApiKey) else viewer


def can(viewer: Viewer, capability: str, tool_name: str | None = None) -> bool:
    """May the viewer use a capability (for `decide`, on this tool)?

    A key's scopes open doors and its principal's roles say what it may do behind them: an
    `ingest` key reads runs, a `decide` key decides and a `manage` key uses every other
    capability, each as its bound principal."""
    if isinstance(viewer, ApiKey):
        if capability == "ingest" or (capability == "view_runs" and viewer.has_scope("ingest")):
            return viewer.has_scope("ingest")
        if capability == "decide":
            return bool(viewer.has_scope("decide") and viewer.principal) and can(
                viewer.principal, "decide", tool_name
            )
        if viewer.has_scope("manage") and viewer.principal:
            return can(viewer.principal, capability, tool_name)
        return False
    if not viewer.is_active:
        return False
    caps = capabilities_of(viewer)
    if capability not in caps:
        return False
    if capability == "decide" and tool_name is not None:
        if "admin" in caps:
            return True
        # Deciding a tool needs ONE role that both may decide and names the tool: the globs of
        # a role without the capability decide nothing.
        return any(
            fnmatchcase(tool_name, glob)
            for role in _roles(viewer)
            if "decide" in role.capabilities
            for glob in role.decide_tools
        )
    return True


def decides_every_tool(viewer: Viewer) -> bool:
    """Does `can(viewer, "decide", name)` hold for every tool name? An admin, or a role that
    may decide and whose globs include one of stars only (`*` matches every name). Lets a
    count of decidable calls skip asking the roles tool by tool."""
    principal = acting_principal(viewer)
    if principal is None or not can(viewer, "decide"):
        return False
    return "admin" in capabilities_of(principal) or any(
        glob and not glob.strip("*")
        for role in _roles(principal)
        if "decide" in role.capabilities
        for glob in role.decide_tools
    )


def tenant_of(viewer: Viewer):
    return viewer.tenant


def require_scope(key: ApiKey, scope: str) -> None:
    if not key.has_scope(scope):
        raise Forbidden(f"this API key lacks the '{scope}' scope", code="missing_scope")


def require(viewer: Viewer, capability: str) -> None:
    if not can(viewer, capability):
        raise Forbidden(f"you may not {capability.replace('_', ' ')}", code="forbidden")


def require_capability(viewer: Viewer, capability: str) -> None:
    """Forbidden unless the viewer (a Principal, or a `manage` key acting as its principal)
    holds the capability through its roles (`admin` implies every one)."""
    if not can(viewer, capability):
        raise Forbidden(
            f"you may not {capability.replace('_', ' ')}: none of your roles has the "
            f"'{capability}' capability",
            code="forbidden",
        )


def own_principal(*, viewer: Viewer) -> Principal:
    """The active principal whose own things (notifications, settings) a viewer reaches: a
    runtime's key, bound to no one, has none."""
    principal = acting_principal(viewer)
    if principal is None or not principal.is_active:
        raise Forbidden("notifications are a principal's: this key is bound to no active one")
    return principal


# --- the directory (principals, roles, teams): `admin` ---

_DIRECTORY = {
    "principal": (Principal, "external_id", "principal_not_found"),
    "role": (Role, "name", "role_not_found"),
    "team": (Team, "name", "team_not_found"),
}


def _missing(noun: str, value, code: str) -> NotFound:
    """The 404 of a path parameter this tenant holds no object for (a missing one and another
    tenant's read the same)."""
    return NotFound(f"no {noun} '{value}'", code=code)


def held_in_tenant(qs, *, tenant_id: int, value: str, noun: str, code: str,
                   field: str = "public_id") -> None:  # fmt: skip
    """NotFound unless this tenant holds an object of `qs` with `field=value` (the API's 404
    check of a path parameter)."""
    if not qs.filter(tenant_id=tenant_id, **{field: value}).exists():
        raise _missing(noun, value, code)


def one_in_tenant(qs, *, tenant_id: int, value: str, noun: str, code: str,
                  field: str = "public_id"):  # fmt: skip
    """The object of `qs` this tenant holds with `field=value`, else NotFound: another tenant's
    is answered exactly like a missing one. Callers check the capability after it (a missing
    object is a 404 whoever asks)."""
    try:  # `field` is unique in a tenant: no ORDER BY (`first()`'s) to compile and run
        return qs.get(tenant_id=tenant_id, **{field: value})
    except qs.model.DoesNotExist:
        raise _missing(noun, value, code) from None


def kept_in_tenant(kept: Kept, *, tenant_id: int, value: str, noun: str, code: str):
    """`one_in_tenant` of a hot path's read compiled once (console/core/kept.py): `kept` is
    `Kept(lambda tenant_id, value: <queryset of at most one object>)`."""
    found = kept(tenant_id, value) if isinstance(value, str) else []
    if len(found) != 1:
        raise _missing(noun, value, code)
    return found[0]


def directory_in_tenant(*, tenant_id: int, kind: str, name: str) -> None:
    """NotFound unless this tenant holds the principal, role or team (the API's 404 check)."""
    model, field, code = _DIRECTORY[kind]
    held_in_tenant(
        model.objects, tenant_id=tenant_id, value=name, noun=kind, code=code, field=field
    )


def directory_of(*, viewer: Viewer, kind: str) -> QuerySet:
    """The tenant's principals, roles or teams, for an admin (Forbidden otherwise)."""
    require_capability(viewer, "admin")
    model = _DIRECTORY[kind][0]
    return model.objects.filter(tenant_id=viewer.tenant_id)


def directory_for(*, viewer: Viewer, kind: str, name: str):
    """One principal, role or team of the viewer's tenant: NotFound outside it (another
    tenant's is answered exactly like a missing one), Forbidden without `admin`."""
    model, field, code = _DIRECTORY[kind]
    found = one_in_tenant(
        model.objects, tenant_id=viewer.tenant_id, value=name, noun=kind, code=code, field=field
    )
    require_capability(viewer, "admin")
    return found


# --- SCIM (a `scim` key, bound to no principal): its tenant's directory ---


def scim_users(*, key: ApiKey) -> QuerySet:
    """The principals a `scim` key provisions: its tenant's, but those SCIM deleted (kept,
    deactivated, but answered 404 and listed nowhere by SCIM)."""
    require_scope(key, "scim")
    return Principal.objects.filter(tenant_id=key.tenant_id, scim_deleted_at__isnull=True)


def scim_user(*, key: ApiKey, user_id: str) -> Principal:
    """One of them: another tenant's, a SCIM-deleted or a missing one is NotFound alike."""
    principal = scim_users(key=key).filter(external_id=user_id).first()
    if principal is None:
        raise NotFound(f"no user '{user_id}'", code="principal_not_found")
    return principal


def scim_deleted_user(*, key: ApiKey, user_name: str) -> Principal | None:
    """The principal of this id that SCIM deleted in the key's tenant (a POST of its
    userName brings it back), or None."""
    require_scope(key, "scim")
    return Principal.objects.filter(
        tenant_id=key.tenant_id, external_id=user_name, scim_deleted_at__isnull=False
    ).first()


def scim_groups(*, key: ApiKey) -> QuerySet:
    """The teams a `scim` key provisions: its tenant's."""
    require_scope(key, "scim")
    return Team.objects.filter(tenant_id=key.tenant_id)


def scim_group(*, key: ApiKey, group_id: str) -> Team:
    """One of them: another tenant's or a missing one is NotFound alike."""
    team = scim_groups(key=key).filter(name=group_id).first()
    if team is None:
        raise NotFound(f"no group '{group_id}'", code="team_not_found")
    return team


def keys_of(*, viewer: Viewer) -> QuerySet:
    """The tenant's API keys (revoked and expired ones too), for an admin."""
    require_capability(viewer, "admin")
    return ApiKey.objects.filter(tenant_id=viewer.tenant_id).select_related("principal")


def key_in_tenant(*, tenant_id: int, key_id: str) -> None:
    """NotFound unless this tenant holds a key with this wire id (the API's 404 check)."""
    held_in_tenant(
        ApiKey.objects, tenant_id=tenant_id, value=key_id, noun="API key", code="key_not_found"
    )


def key_for(*, viewer: Viewer, key_id: str) -> ApiKey:
    """One API key of the viewer's tenant: NotFound outside it, Forbidden without admin."""
    key = one_in_tenant(
        ApiKey.objects.select_related("principal", "tenant"),
        tenant_id=viewer.tenant_id, value=key_id, noun="API key", code="key_not_found",
    )  # fmt: skip
    require_capability(viewer, "admin")
    return key
