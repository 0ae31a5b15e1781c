"""Passwords in the browser, the base every sensitive page uses: `password_attempt` (every
password check of the browser: the lockout first, console/directory/signin.py, then the
password, then `signin.failed` / `signin.succeeded` in the audit log of every tenant the login
belongs to; a username that names no login is audited nowhere, it is logged) and
`require_recent_auth` (a sensitive action asks for the password again when the last one is
old). The sign-in pages that use them are console/accounts/views.py."""

import logging
from datetime import UTC, timedelta
from functools import wraps
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.debug import sensitive_post_parameters

from console.audit.log import audit
from console.directory import logins, signin
from console.models import Principal

log = logging.getLogger("console.accounts")
USERNAME_LIMIT = 150  # characters of a tried username kept in the audit log (Django's maximum)
USER_AGENT_LIMIT = 256
# The password field of the re-authentication prompt: a name no form of ours uses, so that a
# re-posted form keeps its own fields (a "new password" form has a `password` of its own).
REAUTH_FIELD = "gavel_reauth_password"


def _facts(request, *, username: str, **extra) -> dict:
    return {
        "username": username[:USERNAME_LIMIT],
        "address": signin.client_address(request),
        "userAgent": request.META.get("HTTP_USER_AGENT", "")[:USER_AGENT_LIMIT],
        **extra,
    }


def _failure_reason(user) -> str:
    if user is None:
        return "unknown_account"
    if not user.is_active:
        return "inactive"
    return "wrong_password"


def audit_signin(request, *, action: str, username: str, user=None, **extra) -> None:
    """`signin.failed` / `signin.succeeded` in each tenant where the login (`user`: the one
    the typed `username` opens, as Django's sign-in resolves it) is a principal."""
    data = _facts(request, username=username, **extra)
    principals = list(
        Principal.objects.filter(user=user).select_related("tenant") if user is not None else []
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


def password_attempt(request, *, username: str, check, user=None, **facts):
    """Run `check()` (True: the password was right) under the lockout, and audit it.
    `username`: what was typed; the lockout and the audit go by the login it opens, found
    as Django's sign-in form and backend find it (stripped, NFKC: `logins.login_named`), so
    every variant of a name counts for the same account. `user`: that login, when the
    caller knows it already (re-authentication). Returns the refused Attempt (locked: answer
    `locked_page`) or None and check's answer."""
    if user is None:
        user = logins.login_named(username)
    key = logins.lockout_key(raw=username, user=user)
    attempt = signin.attempt_begin(username=key, address=signin.client_address(request))
    if attempt.locked_until is not None:
        if signin.refusal_to_audit(attempt):
            audit_signin(
                request,
                action="signin.failed",
                username=username,
                user=user,
                reason="locked_out",
                lockedUntil=attempt.locked_until.isoformat(),
                **facts,
            )
        return attempt, False
    result = check()  # True, False, or the reason a right password is refused
    if result is True:
        signin.attempt_succeeded(attempt)
        audit_signin(request, action="signin.succeeded", username=username, user=user, **facts)
        return None, True
    locked = signin.attempt_failed(attempt)
    extra = {"lockedUntil": locked.isoformat()} if locked else {}
    audit_signin(
        request,
        action="signin.failed",
        username=username,
        user=user,
        reason=result if isinstance(result, str) else _failure_reason(user),
        **extra,
        **facts,
    )
    return None, False


def _safe_next(request, raw: str | None) -> str:
    if raw and url_has_allowed_host_and_scheme(
        raw, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return raw
    return "/"


def _reauthenticate(request, password: str):
    """Check the signed-in user's password under the lockout; on success the session's
    sign-in time is now. Returns (a 429 response or None, whether it was right)."""
    user = request.user
    refused, ok = password_attempt(
        request,
        username=user.get_username(),
        user=user,
        check=lambda: user.is_active and user.check_password(password),
        reauth=True,
    )
    if refused is not None:
        return locked_page(request, refused), False
    if ok:
        signin.auth_record(request.session)
    return None, ok


def _prompt(request, *, action: str, fields, error: bool = False, again: bool = False):
    """The password prompt. `fields`: (name, value) pairs it carries as hidden inputs, so the
    original form is posted again, whole, with the password. For htmx the prompt replaces the
    page's main content (a plain form: its submit is a normal page load)."""
    context = {
        "action": action,
        "fields": fields,
        "field": REAUTH_FIELD,
        "error": error,
        "again": again,
        "minutes": settings.GAVEL_REAUTH_SECONDS // 60,
    }
    if getattr(request, "htmx", False):
        response = render(request, "registration/reauth.html#reauth", context)
        response["HX-Retarget"] = "#main"
        response["HX-Reswap"] = "innerHTML"
        return response
    return render(request, "registration/reauth.html", context)


def _replayed(post) -> list[tuple[str, str]]:
    return [
        (name, value)
        for name, values in post.lists()
        if name not in ("csrfmiddlewaretoken", REAUTH_FIELD)
        for value in values
    ]


def _without_password(request) -> None:
    if REAUTH_FIELD in request.POST:
        post = request.POST.copy()
        del post[REAUTH_FIELD]
        post._mutable = False
        request.POST = post


def require_recent_auth(view):
    """For a sensitive browser action (role or capability changes, key or webhook creation,
    deactivation, tenant settings): the session must have proved its password within
    GAVEL_REAUTH_SECONDS. If not, a GET goes to /accounts/reauth/?next=<this page>; a POST
    answers a password prompt that carries the form's fields and posts them again, whole,
    to this URL with the password, so the action resumes in one step (nothing is stored on
    the server; a form with files is asked to be submitted again instead). A wrong password
    prompts again (audited, under the lockout). Put it below `viewer_view`."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if signin.auth_is_recent(request.session):
            _without_password(request)
            return view(request, *args, **kwargs)
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return redirect(f"{signin.REAUTH_URL}?{urlencode({'next': request.get_full_path()})}")
        if request.method != "POST" or request.FILES:
            # Not replayable here: confirm, then come back to the page and submit again.
            back = request.headers.get("HX-Current-URL") or request.headers.get("Referer")
            fields = [("next", _safe_next(request, back))]
            return _prompt(request, action=signin.REAUTH_URL, fields=fields, again=True)
        password = request.POST.get(REAUTH_FIELD)
        if password is not None:
            locked, ok = _reauthenticate(request, password)
            if locked is not None:
                return locked
            if ok:
                _without_password(request)
                return view(request, *args, **kwargs)
        return _prompt(
            request,
            action=request.get_full_path(),
            fields=_replayed(request.POST),
            error=password is not None,
        )

    return sensitive_post_parameters(REAUTH_FIELD)(wrapped)
