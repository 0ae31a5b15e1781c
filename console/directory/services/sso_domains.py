"""Which tenant's provider an email domain's people are sent to: only a tenant that proved it
owns the domain (security audit 3, M6: claims used to be first come, first served).

A tenant's SSO settings claim domains (`emailDomains`); each claim is an `SsoDomain` row with
a token. The claim routes the login page only once verified, by one of:
- DNS: a TXT record `gavel-domain-verification=<token>` at `_gavel.<domain>` or at the domain
  itself (console/dnscheck.py, dnspython);
- mail: a one-time link sent to one of the domain's administrative addresses (admin@,
  administrator@, hostmaster@, postmaster@, webmaster@), through the mail outbox;
- an operator's pin: `manage.py sso_domain --tenant SLUG --pin DOMAIN`.
Until then a claim blocks no other tenant's claim; a verified domain is one tenant's only
(another tenant's claim of it is 409 `domain_taken`).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.utils import timezone

from console.core import dnscheck, links, outbox
from console.core.errors import Conflict, Invalid, NotFound
from console.directory.services import actor_of, audit
from console.models import SsoDomain, TenantOidc

TXT_PREFIX = "gavel-domain-verification="
TXT_LABEL = "_gavel"
MAIL_LOCAL_PARTS = ("admin", "administrator", "hostmaster", "postmaster", "webmaster")
MAIL_LINK_VALID = timedelta(days=3)
MAIL_INTERVAL = timedelta(minutes=5)  # at most one verification mail per domain this often
CONFIRM_PATH = "/accounts/sso/domains/{token}/"


def txt_name(domain: str) -> str:
    return f"{TXT_LABEL}.{domain}"


def txt_value(row: SsoDomain) -> str:
    return f"{TXT_PREFIX}{row.token}"


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def domains_sync(*, tenant, domains: list[str]) -> None:
    """The tenant's claims are its settings' domains: new ones claimed (unverified, a fresh
    token), dropped ones forgotten. Call inside the settings' transaction."""
    SsoDomain.objects.filter(tenant=tenant).exclude(domain__in=domains).delete()
    held = set(SsoDomain.objects.filter(tenant=tenant).values_list("domain", flat=True))
    SsoDomain.objects.bulk_create(
        SsoDomain(tenant=tenant, domain=d, token=secrets.token_urlsafe(24))
        for d in dict.fromkeys(domains)
        if d not in held
    )


def domains_wire(tenant) -> list[dict]:
    """Each claimed domain's verification state, as the OIDC resource shows it."""
    rows = SsoDomain.objects.filter(tenant=tenant).order_by("domain") if tenant else []
    return [
        {
            "domain": row.domain,
            "verified": row.verified_at is not None,
            "method": row.method or None,
            "verifiedAt": row.verified_at.isoformat() if row.verified_at else None,
            "txtName": txt_name(row.domain),
            "txtValue": txt_value(row),
        }
        for row in rows
    ]


def verified_elsewhere(*, tenant, domains: list[str]) -> list[str]:
    """The domains another tenant holds verified."""
    return sorted(
        set(
            SsoDomain.objects.filter(domain__in=domains, verified_at__isnull=False)
            .exclude(tenant=tenant)
            .values_list("domain", flat=True)
        )
    )


def domain_routed(domain: str) -> TenantOidc | None:
    """The SSO settings the login page sends this domain's people to: those of the one tenant
    that holds the domain verified, if any."""
    return (
        TenantOidc.objects.filter(
            tenant__sso_domains__domain=domain, tenant__sso_domains__verified_at__isnull=False
        )
        .select_related("tenant")
        .first()
    )


def _claim(*, tenant, domain: str) -> SsoDomain:
    row = SsoDomain.objects.filter(tenant=tenant, domain=domain).first()
    if row is None:
        raise NotFound(f"'{domain}' is not one of this tenant's SSO email domains")
    return row


@transaction.atomic
def _verify(row: SsoDomain, *, method: str, viewer=None) -> SsoDomain:
    row = SsoDomain.objects.select_for_update().get(pk=row.pk)
    if row.verified_at is not None:
        return row
    if verified_elsewhere(tenant=row.tenant, domains=[row.domain]):
        raise Conflict(
            "another tenant holds this email domain verified",
            code="domain_taken",
            details={"emailDomains": [row.domain]},
        )
    row.verified_at, row.method, row.mail_token_hash = timezone.now(), method, ""
    try:
        with transaction.atomic():
            row.save(update_fields=["verified_at", "method", "mail_token_hash"])
    except IntegrityError:  # a concurrent verification elsewhere won
        raise Conflict(
            "another tenant holds this email domain verified", code="domain_taken"
        ) from None
    audit(
        tenant=row.tenant,
        action="tenant.sso_domain_verified",
        object_type="tenant",
        object_id=row.tenant.slug,
        data={"domain": row.domain, "method": method},
        **actor_of(viewer),
    )
    return row


def sso_domain_verify_dns(*, tenant, domain: str, viewer) -> SsoDomain:
    """Verified if `_gavel.<domain>` or the domain has the claim's TXT record (422
    `domain_unverified` naming the record otherwise; 409 if another tenant verified it)."""
    row = _claim(tenant=tenant, domain=domain)
    if row.verified_at is not None:
        return row
    expected = txt_value(row)
    for name in (txt_name(domain), domain):
        if expected in (record.strip() for record in dnscheck.txt_records(name)):
            return _verify(row, method=SsoDomain.DNS, viewer=viewer)
    message = f"no TXT record '{expected}' at {txt_name(domain)} or {domain} (yet)"
    raise Invalid(
        message, code="domain_unverified", details=[{"path": "domain", "message": message}]
    )


@transaction.atomic
def sso_domain_mail(*, tenant, domain: str, local_part: str, viewer) -> SsoDomain:
    """Queue a one-time verification link to `<local_part>@<domain>` (an administrative
    address only), at most once per MAIL_INTERVAL per domain; audited."""
    row = SsoDomain.objects.select_for_update().filter(pk=_claim(tenant=tenant, domain=domain).pk)
    row = row.get()
    if row.verified_at is not None:
        return row
    if local_part not in MAIL_LOCAL_PARTS:
        message = f"one of {', '.join(f'{p}@{domain}' for p in MAIL_LOCAL_PARTS)}"
        raise Invalid(
            message, code="validation_error", details=[{"path": "to", "message": message}]
        )
    now = timezone.now()
    if row.mail_sent_at and now - row.mail_sent_at < MAIL_INTERVAL:
        raise Conflict(
            "a verification mail for this domain was sent a moment ago: wait a few minutes",
            code="mail_recently_sent",
        )
    token = secrets.token_urlsafe(32)
    row.mail_token_hash, row.mail_sent_at = _hash(token), now
    row.save(update_fields=["mail_token_hash", "mail_sent_at"])
    to = f"{local_part}@{domain}"
    context = {
        "domain": domain,
        "tenant": tenant,
        "url": links.public_url(CONFIRM_PATH.format(token=token)),
        "days": MAIL_LINK_VALID.days,
    }
    outbox.mail(
        tenant=tenant,
        to=to,
        subject=f"Confirm {domain} for single sign-on to Gavel",
        text_body=render_to_string("registration/sso_domain_email.txt", context),
    )
    audit(
        tenant=tenant,
        action="tenant.sso_domain_mail_sent",
        object_type="tenant",
        object_id=tenant.slug,
        data={"domain": domain, "to": to},
        **actor_of(viewer),
    )
    return row


def sso_domain_for_link(*, token: str) -> SsoDomain | None:
    """The claim a mailed link confirms, while the link is valid (None otherwise)."""
    return (
        SsoDomain.objects.filter(
            mail_token_hash=_hash(token),
            verified_at__isnull=True,
            mail_sent_at__gt=timezone.now() - MAIL_LINK_VALID,
        )
        .select_related("tenant")
        .first()
    )


def sso_domain_confirm(*, token: str) -> SsoDomain | None:
    """A mailed link, followed and confirmed: the domain is verified (once)."""
    row = sso_domain_for_link(token=token) if token else None
    return _verify(row, method=SsoDomain.MAIL) if row is not None else None


@transaction.atomic
def sso_domain_pin(*, tenant, domain: str) -> SsoDomain:
    """The operator's word: the domain is this tenant's (claimed and verified; any other
    tenant's verification of it ends, audited there). The tenant must have SSO settings."""
    domain = domain.strip().lower()
    if "." not in domain or "@" in domain or " " in domain:
        raise Invalid(f"'{domain}' is not a domain name")
    config = TenantOidc.objects.select_for_update().filter(tenant=tenant).first()
    if config is None:
        raise Invalid(f"tenant '{tenant.slug}' has no single sign-on settings")
    for other in SsoDomain.objects.filter(domain=domain, verified_at__isnull=False).exclude(
        tenant=tenant
    ):
        SsoDomain.objects.filter(pk=other.pk).update(verified_at=None, method="")
        audit(
            tenant=other.tenant,
            action="tenant.sso_domain_unverified",
            object_type="tenant",
            object_id=other.tenant.slug,
            data={"domain": domain, "by": "operator"},
        )
    if domain not in config.email_domains:
        config.email_domains = [*config.email_domains, domain]
        config.save(update_fields=["email_domains"])
    domains_sync(tenant=tenant, domains=config.email_domains)
    return _verify(_claim(tenant=tenant, domain=domain), method=SsoDomain.OPERATOR)


@transaction.atomic
def sso_domain_unpin(*, tenant, domain: str) -> bool:
    """The operator's undo: the tenant's claim of the domain is no longer verified."""
    changed = SsoDomain.objects.filter(
        tenant=tenant, domain=domain.strip().lower(), verified_at__isnull=False
    ).update(verified_at=None, method="")
    if changed:
        audit(
            tenant=tenant,
            action="tenant.sso_domain_unverified",
            object_type="tenant",
            object_id=tenant.slug,
            data={"domain": domain, "by": "operator"},
        )
    return bool(changed)
