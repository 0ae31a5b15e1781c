"""Single sign-on's writes: a tenant's OIDC settings (checked against the issuer's discovery
document, the client secret encrypted) and the principal an ID token signs in (found, or
created on first sign-in with roles from the tenant's `roleMap`). Each audited.

The protocol itself is console/oidc.py; the browser flow is console/sso.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.core import crypto, links, outbound
from console.core.errors import Conflict, Invalid
from console.directory import logins, oidc
from console.directory.access import acting_principal, capabilities_of
from console.directory.services import audit, sso_domains
from console.directory.services.principals import principal_add, principal_update
from console.models import ApiKey, Principal, Role, TenantOidc

FIELDS = (
    "issuer",
    "client_id",
    "principal_claim",
    "groups_claim",
    "role_map",
    "email_domains",
    "allow_password_login",
)


def oidc_of(tenant) -> TenantOidc | None:
    return TenantOidc.objects.filter(tenant=tenant).first()


CALLBACK_PATH = "/accounts/sso/{slug}/callback/"


def redirect_uri(tenant, request=None) -> str:
    """Where the provider sends the browser back: one address per tenant (register it with
    the provider), under GAVEL_PUBLIC_URL (else the request's own address)."""
    path = CALLBACK_PATH.format(slug=tenant.slug)
    if request is not None and not settings.GAVEL_PUBLIC_URL:
        return request.build_absolute_uri(path)
    return links.public_url(path)


def oidc_wire(config: TenantOidc | None) -> dict:
    """The settings as the wire shows them (the secret only as whether one is set); a
    tenant without single sign-on shows the defaults with `issuer: null`."""
    if config is None:
        return {
            "issuer": None,
            "clientId": None,
            "clientSecretSet": False,
            "principalClaim": "email",
            "groupsClaim": "groups",
            "roleMap": {},
            "emailDomains": [],
            "allowPasswordLogin": True,
            "domainVerification": [],
        }
    return {
        "issuer": config.issuer,
        "clientId": config.client_id,
        "clientSecretSet": bool(config.client_secret_encrypted),
        "principalClaim": config.principal_claim,
        "groupsClaim": config.groups_claim,
        "roleMap": config.role_map,
        "emailDomains": config.email_domains,
        "allowPasswordLogin": config.allow_password_login,
        "domainVerification": sso_domains.domains_wire(config.tenant),
    }


def _invalid(path: str, message: str) -> Invalid:
    return Invalid(message, code="validation_error", details=[{"path": path, "message": message}])


def _check(tenant, values: dict) -> None:
    """422 for settings that cannot work; 409 for an email domain another tenant holds
    verified (an unverified claim elsewhere blocks nobody: console/services/sso_domains.py)."""
    issuer = values["issuer"]
    if not issuer:
        raise _invalid("issuer", "an issuer is required")
    schemes = ("https://", "http://") if settings.GAVEL_OIDC_ALLOW_HTTP else ("https://",)
    if not issuer.startswith(schemes):
        raise _invalid("issuer", "the issuer must be an https:// URL")
    loopback = outbound.loopback_allowed(settings.GAVEL_OIDC_ALLOW_HTTP)
    if refusal := outbound.url_refusal(issuer, allow_loopback=loopback):
        raise _invalid("issuer", f"the issuer {refusal}")
    if not values["client_id"]:
        raise _invalid("clientId", "a client id is required")
    if values["principal_claim"] not in TenantOidc.PRINCIPAL_CLAIMS:
        raise _invalid("principalClaim", f"one of {', '.join(TenantOidc.PRINCIPAL_CLAIMS)}")
    known = set(Role.objects.filter(tenant=tenant).values_list("name", flat=True))
    for group, role in values["role_map"].items():
        if role not in known:
            raise _invalid(f"roleMap.{group}", f"no role '{role}' in this tenant")
    for domain in values["email_domains"]:
        if "." not in domain or "@" in domain or domain != domain.lower().strip():
            raise _invalid("emailDomains", f"'{domain}' is not a lowercase domain name")
    taken = sso_domains.verified_elsewhere(tenant=tenant, domains=values["email_domains"])
    if taken:
        raise Conflict(
            "another tenant signs in people of this email domain",
            code="domain_taken",
            details={"emailDomains": taken},
        )


def oidc_update(*, tenant, fields: dict, viewer) -> TenantOidc:
    """Create or change the tenant's OIDC settings from the wire's changes (snake_case keys;
    `client_secret` write-only). The issuer's discovery document is read first (422 naming
    `issuer` when it fails); nothing is written unless everything holds."""
    current = oidc_of(tenant)
    values = {name: getattr(current, name) if current else None for name in FIELDS}
    if current is None:
        values.update(principal_claim="email", groups_claim="groups", role_map={})
        values.update(email_domains=[], allow_password_login=True, client_id="", issuer="")
    values.update({k: v for k, v in fields.items() if k in FIELDS})
    secret = fields.get("client_secret")
    if current is None and not secret:
        raise _invalid("clientSecret", "a client secret is required")
    _check(tenant, values)
    if current is None or values["issuer"] != current.issuer:
        try:
            oidc.discover(values["issuer"])
        except oidc.OidcError as error:
            raise _invalid("issuer", f"the discovery document: {error.message}") from None
    return _oidc_save(tenant=tenant, current=current, values=values, secret=secret, viewer=viewer)


@transaction.atomic
def _oidc_save(*, tenant, current, values, secret, viewer) -> TenantOidc:
    before = oidc_wire(current) if current else None
    config = current or TenantOidc(tenant=tenant)
    for name, value in values.items():
        setattr(config, name, value)
    if secret:
        config.client_secret_encrypted = crypto.encrypt(secret)
    config.updated_at = timezone.now()
    config.save()
    sso_domains.domains_sync(tenant=tenant, domains=config.email_domains)
    audit(
        tenant=tenant,
        action="tenant.oidc_updated",
        object_type="tenant",
        object_id=tenant.slug,
        before=before,
        after=oidc_wire(config),
        data={"clientSecretChanged": bool(secret)},
        principal=acting_principal(viewer),
        key=viewer if isinstance(viewer, ApiKey) else None,
    )
    return config


@transaction.atomic
def oidc_delete(*, tenant, viewer) -> None:
    """Turn single sign-on off (principals it created stay, and sign in as admins allow)."""
    current = oidc_of(tenant)
    if current is None:
        return
    before = oidc_wire(current)
    current.delete()
    sso_domains.domains_sync(tenant=tenant, domains=[])
    audit(
        tenant=tenant,
        action="tenant.oidc_updated",
        object_type="tenant",
        object_id=tenant.slug,
        before=before,
        principal=acting_principal(viewer),
        key=viewer if isinstance(viewer, ApiKey) else None,
    )


def oidc_offered() -> bool:
    """Does any tenant sign in with SSO (the login page then offers it)?"""
    return TenantOidc.objects.exists()


def password_refusal(user) -> str | None:
    """Why this login may not sign in with a password, or None: it is a non-admin principal
    of a tenant whose SSO says `allowPasswordLogin: false`."""
    principals = Principal.objects.filter(
        user=user, is_active=True, tenant__oidc__allow_password_login=False
    ).select_related("tenant")
    for principal in principals:
        if "admin" not in capabilities_of(principal):
            return principal.tenant.slug
    return None


# --- signing in a principal from verified claims ---


class Refused(Exception):
    """No sign-in: `reason` for the audit, `message` for the person."""

    def __init__(self, reason: str, message: str, principal_id: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.principal_id = principal_id


@dataclass
class SignIn:
    principal: Principal
    created: bool


def _principal_id(config: TenantOidc, claims: dict) -> str:
    value = claims.get(config.principal_claim)
    if not isinstance(value, str) or not value.strip():
        raise Refused("no_claim", f"Your identity provider sent no {config.principal_claim}.")
    if config.principal_claim == "email" and claims.get("email_verified") is False:
        raise Refused("email_unverified", "Your identity provider has not verified your email.")
    return value.strip()[:255]


def _mapped_roles(config: TenantOidc, claims: dict) -> list[str]:
    groups = claims.get(config.groups_claim)
    groups = groups if isinstance(groups, list) else []
    return sorted(
        {config.role_map[g] for g in groups if isinstance(g, str) and g in config.role_map}
    )


def _refuse_operator(principal_id: str):
    raise Refused(
        "staff_login",
        "This account cannot sign in with SSO here: sign in with its password.",
        principal_id,
    )


def _login_for(principal: Principal):
    """The Django login this principal signs in with: its own, else a new login of this
    tenant's (never one found by name: that may be another tenant's or the operator's). A
    login shared with another tenant is refused (this tenant's provider vouches for this
    tenant only), and so is an operator's (staff or superuser: the whole console, beyond any
    one tenant's provider), or an id naming one."""
    user = principal.user
    if logins.is_operator(user):
        _refuse_operator(principal.external_id)
    if user is not None:
        if logins.shared_elsewhere(user, tenant_id=principal.tenant_id):
            raise Refused(
                "login_shared",
                "Your account is shared with another organisation here: sign in with your "
                "password.",
                principal.external_id,
            )
        if not user.is_active:
            raise Refused("deactivated", "Your account is deactivated.", principal.external_id)
    else:
        user = logins.create_login(
            tenant=principal.tenant, principal_id=principal.external_id, email=principal.email
        )
        principal.user = user
        principal.save(update_fields=["user"])
    return user


@transaction.atomic
def sso_principal(*, config: TenantOidc, claims: dict) -> tuple[SignIn, object]:
    """The principal verified claims name in the config's tenant, and its login. Created on
    first sign-in with the roles the IdP groups map to (none mapped: `viewer`, not yet
    reviewed). A deactivated principal is refused."""
    tenant = config.tenant
    principal_id = _principal_id(config, claims)
    if logins.reserved(principal_id):
        _refuse_operator(principal_id)
    principal = Principal.objects.filter(tenant=tenant, external_id=principal_id).first()
    created = principal is None
    if created:
        roles = _mapped_roles(config, claims)
        email = claims.get("email") if isinstance(claims.get("email"), str) else None
        name = claims.get("name") if isinstance(claims.get("name"), str) else None
        fields = {"id": principal_id, "name": (name or "")[:200], "email": email or ""}
        principal = principal_add(
            tenant=tenant, fields={**fields, "roles": roles or ["viewer"]}, viewer=None
        )
        if not roles:
            principal = principal_update(
                principal=principal, fields={"reviewed": False}, viewer=None
            )
    elif not principal.is_active:
        raise Refused("deactivated", "Your account here is deactivated.", principal_id)
    user = _login_for(principal)
    return SignIn(principal=principal, created=created), user
