"""Which Django login a sign-in name opens, which logins a tenant owns, and the name a new
login gets (docs/architecture.md "Identity").

A sign-in name is normalised exactly as Django's `AuthenticationForm` does (its
`UsernameField`: stripped, then NFKC; case kept, as Django's backend compares), so the
lockout, its audit and the password check all see the same account whatever variant was typed.

Names: a principal's login signs in with its principal id when the login holds that plain
name, and always with `<tenant slug>/<principal id>`, which resolves inside that tenant alone
(so no other tenant can take it). A tenant only ever writes a login it owns: one linked to its
principal and to no other tenant's, and never a staff or superuser login (the operator's).
"""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import UsernameField
from django.db.models import Q

from console.models import Principal

QUALIFIER = "/"  # `<tenant slug>/<principal id>`: a login inside that tenant


def _username_max() -> int:
    User = get_user_model()
    return User._meta.get_field(User.USERNAME_FIELD).max_length


def signin_name(raw) -> str:
    """The name as Django's sign-in form cleans it (strip, then NFKC)."""
    return UsernameField(max_length=_username_max()).to_python(str(raw or "")) or ""


def _qualified(name: str):
    """The login of `<slug>/<id>`: that tenant's principal's, or None."""
    slug, sep, principal_id = name.partition(QUALIFIER)
    if not sep or not slug or not principal_id:
        return None
    principal = (
        Principal.objects.filter(tenant__slug=slug, external_id=principal_id, user__isnull=False)
        .select_related("user")
        .first()
    )
    return principal.user if principal else None


def plain_login(raw):
    """The login whose username is this name (normalised), or None."""
    name = signin_name(raw)
    if not name:
        return None
    User = get_user_model()
    return User._default_manager.filter(**{User.USERNAME_FIELD: name}).first()


def login_named(raw):
    """The one login a typed sign-in name opens, or None: `<slug>/<id>` names that tenant's
    principal's login; any other name is the login of that (plain) username."""
    name = signin_name(raw)
    if not name:
        return None
    return _qualified(name) or plain_login(name)


def lockout_key(*, raw=None, user=None) -> str:
    """What the per-account lockout counts: the login a name opens (so every name that opens
    it shares one count), else the normalised name (an unknown name is counted all the same)."""
    if user is None and raw is not None:
        user = login_named(raw)
    if user is not None:
        return f"login:{user.pk}"
    return f"name:{signin_name(raw)}"


def is_operator(user) -> bool:
    return bool(user is not None and (user.is_staff or user.is_superuser))


def reserved(principal_id: str) -> bool:
    """Does this id name a staff or superuser login (the operator's, for Django admin)? Such
    an id is never a tenant's principal with a login."""
    name = signin_name(principal_id)
    if not name:
        return False
    return (
        get_user_model()
        ._default_manager.filter(Q(is_staff=True) | Q(is_superuser=True))
        .filter(**{get_user_model().USERNAME_FIELD: name})
        .exists()
    )


def owned_alone(principal: Principal) -> bool:
    """Is the principal's login this tenant's to write: linked to it, to no other tenant's
    principal, and not an operator's?"""
    user = principal.user
    if user is None or is_operator(user):
        return False
    return not Principal.objects.filter(user=user).exclude(pk=principal.pk).exists()


def shared_elsewhere(user, *, tenant_id: int) -> bool:
    """Is this login another tenant's principal's too?"""
    return Principal.objects.filter(user=user).exclude(tenant_id=tenant_id).exists()


def new_username(*, tenant, principal_id: str) -> str:
    """The username for a new login of this tenant's principal: its id when that plain name
    is free (and reads as no `<slug>/<id>`), else `<slug>/<id>` (else an opaque name); the
    qualified name signs in either way. Nothing here depends on whether another tenant holds
    the id in a way its answer could show."""
    User = get_user_model()
    names = User._default_manager
    field = User.USERNAME_FIELD
    plain = User.normalize_username(principal_id)
    limit = _username_max()
    if (
        QUALIFIER not in plain
        and len(plain) <= limit
        and signin_name(plain) == plain
        and not names.filter(**{field: plain}).exists()
    ):
        return plain
    qualified = f"{tenant.slug}{QUALIFIER}{plain}"
    if len(qualified) <= limit and not names.filter(**{field: qualified}).exists():
        return qualified
    return f"~{tenant.slug}~{secrets.token_hex(8)}"[:limit]


def create_login(*, tenant, principal_id: str, email: str = "", password: str | None = None):
    """A new login of this tenant's own (an unusable password without one)."""
    User = get_user_model()
    username = new_username(tenant=tenant, principal_id=principal_id)
    return User.objects.create_user(username=username, email=email or "", password=password)


class LoginBackend(ModelBackend):
    """Django's ModelBackend, with the login found by `login_named` (plain or
    `<slug>/<id>`). Runs the hasher once for an unknown name too, as Django does."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None:
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        if username is None or password is None:
            return None
        user = login_named(username)
        if user is None:
            get_user_model()().set_password(password)  # the same time as a wrong password
            return None
        if user.check_password(password) and self.user_can_authenticate(user):
            return user
        return None
