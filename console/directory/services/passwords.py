"""A login's password: the one writer (`login_password_write`, also what an admin's password
for a principal uses), a person's own change (after proving the current password under the
sign-in lockout: console/passwords.py), and reset mail.

Reset requests are throttled per account and per address on the lockout's table, audited in
the login's tenants, and their mail goes through the mail outbox (sent by the sweep, never in
the request). The answer to a request never says whether an account uses the address.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.forms import PasswordResetForm
from django.contrib.auth.tokens import default_token_generator
from django.db import transaction
from django.template.loader import render_to_string
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from console.audit.log import audit
from console.core import links, outbox
from console.directory import logins, signin
from console.models import Principal

log = logging.getLogger("console.services.passwords")

# Reset mail: per account, and requests per address, in the sign-in window (15 minutes).
RESET_ACCOUNT_LIMIT = 3
RESET_ADDRESS_LIMIT = 10
RESET_SCOPE_ACCOUNT = "reset_account"
RESET_SCOPE_ADDRESS = "reset_address"
SUBJECT = "Reset your Gavel password"


def login_password_write(*, user, password: str, email: str | None = None) -> None:
    """Store a login's new password (and its email, when given): the one place it is set."""
    user.set_password(password)
    fields = ["password"]
    if email is not None:
        user.email = email
        fields.append("email")
    user.save(update_fields=fields)


def _principals(user) -> list[Principal]:
    return list(Principal.objects.filter(user=user).select_related("tenant").order_by("pk"))


@transaction.atomic
def login_password_change(*, user, password: str, via: str, facts: dict) -> None:
    """The person's own new password (`via`: `password_change` or `password_reset`),
    audited `principal.password_changed` in each tenant where the login is a principal."""
    login_password_write(user=user, password=password)
    for principal in _principals(user):
        audit(
            tenant=principal.tenant,
            action="principal.password_changed",
            object_type="principal",
            object_id=principal.external_id,
            data={"via": via, **facts},
            principal=principal,
        )


def reset_address_allowed(*, address: str) -> bool:
    """Another reset request from this address in the window? (Counted before any lookup.)"""
    return signin.throttle_take(
        scope=RESET_SCOPE_ADDRESS,
        value=signin.address_bucket(address),
        limit=RESET_ADDRESS_LIMIT,
    )


def _resettable(email: str) -> list:
    """Django's choice of logins for a reset (active, a usable password, this email), less
    operators' logins and logins that are no tenant's principal (their reset is the
    operator's: `manage.py changepassword`)."""
    users = PasswordResetForm().get_users(email)
    return [u for u in users if not logins.is_operator(u) and _principals(u)]


@transaction.atomic
def password_reset_request(*, email: str, facts: dict) -> None:
    """Queue a reset mail to each login that uses this address, at most RESET_ACCOUNT_LIMIT
    per login per window; audited `principal.password_reset_requested` (`mailed` false when
    throttled) in the login's tenants. Says nothing back either way."""
    for user in _resettable(email):
        principals = _principals(user)
        mailed = signin.throttle_take(
            scope=RESET_SCOPE_ACCOUNT, value=str(user.pk), limit=RESET_ACCOUNT_LIMIT
        )
        if mailed:
            _reset_mail(user=user, email=email, principal=principals[0])
        for principal in principals:
            audit(
                tenant=principal.tenant,
                action="principal.password_reset_requested",
                object_type="principal",
                object_id=principal.external_id,
                data={"mailed": mailed, **facts},
            )


def _reset_mail(*, user, email: str, principal: Principal) -> None:
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    name = principal.external_id
    if user.get_username() != name:
        name = f"{principal.tenant.slug}{logins.QUALIFIER}{name}"
    context = {
        "reset_url": links.public_url(f"/accounts/reset/{uid}/{token}/"),
        "sign_in_name": name,
        "hours": settings.PASSWORD_RESET_TIMEOUT // 3600,
    }
    outbox.mail(
        tenant=principal.tenant,
        to=email,
        subject=SUBJECT,
        text_body=render_to_string("registration/password_reset_email.txt", context),
    )
