"""The sign-in pages: /accounts/login/ with the lockout, and their audit rows.

Every password check of the browser goes through `password_attempt` (sign-in and, later,
re-authentication): the lockout first (console/signin.py), then Django's authentication,
then `signin.failed` / `signin.succeeded` in the audit log of every tenant the login belongs
to. A username that names no login is audited nowhere (no tenant owns it): it is logged.
"""

import logging
from datetime import UTC, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.views import LoginView
from django.shortcuts import render

from console import signin
from console.models import Principal
from console.services import audit

log = logging.getLogger(__name__)
USERNAME_LIMIT = 150  # characters of a tried username kept in the audit log (Django's maximum)
USER_AGENT_LIMIT = 256


def _facts(request, *, username: str, **extra) -> dict:
    return {
        "username": username[:USERNAME_LIMIT],
        "address": signin.client_address(request),
        "userAgent": request.META.get("HTTP_USER_AGENT", "")[:USER_AGENT_LIMIT],
        **extra,
    }


def _failure_reason(username: str) -> str:
    user = get_user_model().objects.filter(username=username).first() if username else None
    if user is None:
        return "unknown_account"
    if not user.is_active:
        return "inactive"
    return "wrong_password"


def audit_signin(request, *, action: str, username: str, **extra) -> None:
    """`signin.failed` / `signin.succeeded` in each tenant where the login is a principal."""
    data = _facts(request, username=username, **extra)
    principals = list(
        Principal.objects.filter(user__username=username).select_related("tenant")
        if username
        else []
    )
    if not principals:
        log.warning("%s for no tenant's login: %s", action, data)
    for principal in principals:
        audit(
            tenant=principal.tenant,
            action=action,
            object_type="principal",
            object_id=principal.external_id,
            data=data,
            principal=principal if action == "signin.succeeded" else None,
        )


def locked_page(request, attempt: signin.Attempt):
    """429: when to try again, as a clock time (the next whole minute after the lock ends,
    in UTC) and as Retry-After seconds."""
    until = attempt.locked_until.astimezone(UTC)
    retry_at = until.replace(second=0, microsecond=0)
    if retry_at < until:
        retry_at += timedelta(minutes=1)
    response = render(
        request,
        "registration/locked.html",
        {
            "retry_at_text": retry_at.strftime("%H:%M UTC"),
            "retry_at_iso": retry_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        status=429,
    )
    response["Retry-After"] = str(attempt.retry_after())
    return response


def password_attempt(request, *, username: str, check, **facts):
    """Run `check()` (True: the password was right) under the lockout, and audit it.
    Returns the refused Attempt (locked: answer `locked_page`) or None and check's answer."""
    attempt = signin.attempt_begin(username=username, address=signin.client_address(request))
    if attempt.locked_until is not None:
        if signin.refusal_to_audit(attempt):
            audit_signin(
                request,
                action="signin.failed",
                username=username,
                reason="locked_out",
                lockedUntil=attempt.locked_until.isoformat(),
                **facts,
            )
        return attempt, False
    if check():
        signin.attempt_succeeded(attempt)
        audit_signin(request, action="signin.succeeded", username=username, **facts)
        return None, True
    locked = signin.attempt_failed(attempt)
    extra = {"lockedUntil": locked.isoformat()} if locked else {}
    audit_signin(
        request,
        action="signin.failed",
        username=username,
        reason=_failure_reason(username),
        **extra,
        **facts,
    )
    return None, False


class SignInView(LoginView):
    """Django's login view under the lockout: a locked account or address is a 429 page
    before any password is checked."""

    def post(self, request, *args, **kwargs):
        form = self.get_form()
        username = str(request.POST.get("username", ""))
        refused, ok = password_attempt(request, username=username, check=form.is_valid)
        if refused is not None:
            return locked_page(request, refused)
        if ok:
            return self.form_valid(form)
        return self.form_invalid(form)


sign_in = SignInView.as_view()
