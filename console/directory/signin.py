"""Sign-in protection (the lockout), the client's address, and when the session last proved
its password.

The lockout (contract: "Sign-in protection"): 5 failed attempts for one account or 20 from one
address within 15 minutes lock that account or address for 15 minutes; while locked, every
attempt is refused before the password is looked at. The counts live in `SigninThrottle`, one
row per account and per address, changed only by single atomic statements (an upsert, a
conditional UPDATE), so all processes share them, on PostgreSQL and SQLite alike.

An attempt *reserves* its place first (`attempt_begin` counts it as a failure before the
password is checked) and gives it back when the password was right (`attempt_succeeded`), so
twenty guesses sent at once cannot all be checked before the first lock is written. Windows are
fixed: the first failure opens one, and it closes 15 minutes later. Why not django-axes:
docs/architecture.md ("Sign-in protection").

The clock is `now()` here, so tests move time without sleeping.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.db import connection
from django.db.models import F, Q
from django.dispatch import receiver
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from console.core.errors import Forbidden
from console.core.request import _ip, client_address  # noqa: F401  (client_address: its old home)
from console.models import ApiKey, SigninThrottle, UserSession

# The session's key for when it last proved the password (a POSIX timestamp): set at sign-in
# and at re-authentication; `require_recent_auth` (console/accounts.py) reads it.
AUTH_AT_SESSION_KEY = "gavel_auth_at"
REAUTH_URL = "/accounts/reauth/"
REFUSAL_AUDIT_INTERVAL = timedelta(seconds=60)  # one `locked_out` audit row per account per minute
PURGE_INTERVAL = 60.0  # seconds between two purges of finished rows, per process
_last_purge = 0.0


def now() -> datetime:
    """This module's clock (a seam: tests replace it to move time)."""
    return timezone.now()


def _window() -> timedelta:
    return timedelta(seconds=settings.GAVEL_SIGNIN_WINDOW_SECONDS)


def _lockout() -> timedelta:
    return timedelta(seconds=settings.GAVEL_SIGNIN_LOCKOUT_SECONDS)


# --- the client's address ---


def address_bucket(address: str) -> str:
    """What the per-address limit counts: an IPv4 address, or an IPv6 address's /64 (one
    subscriber's network: one host can pick any address in it)."""
    ip = _ip(address)
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip) if ip is not None else address


# --- the lockout ---


@dataclass
class Attempt:
    """One sign-in attempt's reserved places; `locked_until` set: refused (429)."""

    at: datetime
    places: list[tuple[str, str, int]] = field(default_factory=list)  # (scope, key, limit)
    locked_until: datetime | None = None

    def retry_after(self) -> int:
        """Whole seconds until the lock ends (for Retry-After)."""
        if self.locked_until is None:
            return 0
        return max(1, math.ceil((self.locked_until - now()).total_seconds()))


def _key(scope: str, value: str) -> str:
    return hashlib.sha256(f"{scope}:{value}".encode()).hexdigest()


def _db_datetime(value: datetime):
    return connection.ops.adapt_datetimefield_value(value)


def _py_datetime(value) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value if value is None or timezone.is_aware(value) else value.replace(tzinfo=UTC)
    parsed = parse_datetime(value)  # SQLite hands back text
    return parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)


def _reserve(scope: str, key: str, at: datetime) -> tuple[int, datetime | None]:
    """Count one more attempt for (scope, key) in its window (a new window if the last one
    closed) in one upsert; the count and the lock as they are now."""
    table = connection.ops.quote_name(SigninThrottle._meta.db_table)
    q = connection.ops.quote_name
    sql = (
        f"INSERT INTO {table} ({q('scope')}, {q('key')}, {q('window_start')}, {q('failures')}) "  # noqa: S608
        f"VALUES (%s, %s, %s, 1) "
        f"ON CONFLICT ({q('scope')}, {q('key')}) DO UPDATE SET "
        f"{q('failures')} = CASE WHEN {table}.{q('window_start')} > %s "
        f"THEN {table}.{q('failures')} + 1 ELSE 1 END, "
        f"{q('window_start')} = CASE WHEN {table}.{q('window_start')} > %s "
        f"THEN {table}.{q('window_start')} ELSE excluded.{q('window_start')} END "
        f"RETURNING {q('failures')}, {q('locked_until')}"
    )
    opened_after = _db_datetime(at - _window())
    with connection.cursor() as cursor:
        cursor.execute(sql, [scope, key, _db_datetime(at), opened_after, opened_after])
        failures, locked_until = cursor.fetchone()
    return failures, _py_datetime(locked_until)


def _lock(scope: str, key: str, at: datetime, *, limit: int) -> datetime | None:
    """Lock (scope, key) from `at` if its window holds `limit` failures and it is not locked
    already; the lock in force afterwards (None: not locked)."""
    SigninThrottle.objects.filter(scope=scope, key=key, failures__gte=limit).filter(
        Q(locked_until__isnull=True) | Q(locked_until__lte=at)
    ).update(locked_until=at + _lockout())
    row = SigninThrottle.objects.filter(scope=scope, key=key, locked_until__gt=at).first()
    return row.locked_until if row else None


def attempt_begin(*, username: str, address: str | None) -> Attempt:
    """Reserve a sign-in attempt for this account and address. Refused (`locked_until` set)
    while either is locked, or when more attempts are in flight than its limit allows."""
    at = now()
    attempt = Attempt(at=at)
    if username:
        limit = settings.GAVEL_SIGNIN_ACCOUNT_FAILURES
        attempt.places.append((SigninThrottle.ACCOUNT, _key("account", username), limit))
    if address:
        limit = settings.GAVEL_SIGNIN_ADDRESS_FAILURES
        attempt.places.append(
            (SigninThrottle.ADDRESS, _key("address", address_bucket(address)), limit)
        )
    locks = []
    for scope, key, limit in attempt.places:
        failures, locked_until = _reserve(scope, key, at)
        if locked_until is not None and locked_until > at:
            locks.append(locked_until)
        elif failures > limit:
            locks.append(_lock(scope, key, at, limit=limit) or at + _lockout())
    attempt.locked_until = max(locks) if locks else None
    _purge(at)
    return attempt


def attempt_failed(attempt: Attempt) -> datetime | None:
    """The password was wrong: the reserved places stay counted; a place whose window now
    holds its limit is locked for the lockout period. The lock now in force, if any."""
    at = now()
    locks = [_lock(scope, key, at, limit=limit) for scope, key, limit in attempt.places]
    locks = [lock for lock in locks if lock is not None]
    return max(locks) if locks else None


def attempt_succeeded(attempt: Attempt) -> None:
    """The password was right: the account's failures are forgiven; the address gives back
    only this attempt's place (one good password must not clear a guesser's address)."""
    for scope, key, _limit in attempt.places:
        rows = SigninThrottle.objects.filter(scope=scope, key=key)
        if scope == SigninThrottle.ACCOUNT:
            rows.update(failures=0)
        else:
            rows.filter(failures__gt=0).update(failures=F("failures") - 1)


def refusal_to_audit(attempt: Attempt) -> bool:
    """Should this refused attempt be audited? At most once per account (or, without one,
    address) per minute, so a locked account hammered by a script does not flood the log."""
    if not attempt.places:
        return False
    scope, key, _limit = attempt.places[0]
    at = now()
    return bool(
        SigninThrottle.objects.filter(scope=scope, key=key)
        .filter(
            Q(refused_audited_at__isnull=True)
            | Q(refused_audited_at__lte=at - REFUSAL_AUDIT_INTERVAL)
        )
        .update(refused_audited_at=at)
    )


def throttle_take(*, scope: str, value: str, limit: int) -> bool:
    """Count one more use of (scope, value) in its fixed window (the sign-in window) on the
    lockout's table; False once the window holds more than `limit` (nothing is locked: the
    window's end frees it). For throttles beside sign-in, e.g. password reset mail."""
    at = now()
    failures, _locked = _reserve(scope, _key(scope, value), at)
    _purge(at)
    return failures <= limit


def _purge(at: datetime) -> None:
    """Delete rows whose window and lock are over (at most once a minute per process)."""
    global _last_purge  # noqa: PLW0603 - a per-process timer
    tick = time.monotonic()
    if tick - _last_purge < PURGE_INTERVAL:
        return
    _last_purge = tick
    SigninThrottle.objects.filter(window_start__lte=at - _window()).filter(
        Q(locked_until__isnull=True) | Q(locked_until__lte=at)
    ).delete()


# --- when the session last proved its password ---


def auth_record(session) -> None:
    session[AUTH_AT_SESSION_KEY] = now().timestamp()


def auth_is_recent(session) -> bool:
    """Did this session prove its password within GAVEL_REAUTH_SECONDS? (No record: no.)"""
    at = session.get(AUTH_AT_SESSION_KEY) if session is not None else None
    if not isinstance(at, int | float):
        return False
    age = now().timestamp() - at
    return 0 <= age < settings.GAVEL_REAUTH_SECONDS


def require_recent_auth_api(request) -> None:
    """For an API operation that is sensitive in the browser: a browser session that proved
    its password too long ago gets 403 `reauth_required` (details: where to re-authenticate);
    a key is exempt (the key is the credential)."""
    if isinstance(getattr(request, "auth", None), ApiKey):
        return
    if not auth_is_recent(getattr(request, "session", None)):
        raise Forbidden(
            "this action needs your password again: your last sign-in is older than "
            f"{settings.GAVEL_REAUTH_SECONDS // 60} minutes",
            code="reauth_required",
            details={"reauthUrl": REAUTH_URL},
        )


@receiver(user_logged_in, dispatch_uid="gavel-signin-auth-at")
def _signed_in(sender, request, user, **kwargs):
    """Every way in (the login page, the admin's, a future SSO callback) records the time, and
    which login the session is (so deactivation can end it: console/services/principals.py)."""
    session = getattr(request, "session", None)
    if session is not None:
        auth_record(session)
        if session.session_key is None:
            session.save()
        UserSession.objects.get_or_create(
            session_key=session.session_key, defaults={"user_id": user.pk}
        )
