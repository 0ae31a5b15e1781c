"""Who is calling the API: an API key (`Authorization: Bearer`) checked for one scope, or a
signed-in browser session (with CSRF) acting as its principal.

The contract's order holds because these run before the body is parsed: 401 for no/bad/revoked
key, then 403 for a missing scope, then the key's rate limit (429).
"""

import math
from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from ninja.security import APIKeyCookie, HttpBearer

from console.audit.log import audit_refused
from console.core import ratelimit
from console.core.db import released
from console.core.errors import Forbidden, RateLimited
from console.directory import access, keycopies, signin
from console.models import ApiKey

LAST_USED_RESOLUTION = timedelta(seconds=60)


class KeyAuth(HttpBearer):
    """`Authorization: Bearer <key>` → the ApiKey (request.auth), checked for one scope."""

    def __init__(self, scope: str):
        super().__init__()
        self.scope = scope

    def authenticate(self, request, token):
        key, wait = _key_of(token)
        if key is None or (key.principal is not None and not key.principal.is_active):
            return None  # a key bound to a deactivated principal is 401, whatever its scopes
        request.gavel_actor = key  # who a refusal below is audited for (console/api.py)
        access.require_scope(key, self.scope)
        if wait is None:
            wait = ratelimit.take(key.pk, per_minute=key.rate_per_minute, burst=key.rate_burst)
        if wait:
            raise RateLimited("rate limit exceeded for this key", retry_after=math.ceil(wait))
        now = timezone.now()
        if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
            keycopies.touched(token, now)
        return key


def _key_of(token: str):
    """(the live key of a bearer token or None, the rate-limit wait when its token was taken
    already, else None). From this process's copy while the keys epoch that the rate-limit
    script returns says it still holds (console/directory/keycopies.py), else from the
    database; either way the token is taken once."""
    kept = keycopies.find(token)
    taken = None
    if kept is not None:
        key, epoch = kept
        wait, now_epoch = ratelimit.take_with_epoch(
            key.pk, per_minute=key.rate_per_minute, burst=key.rate_burst
        )
        if keycopies.usable(key, epoch, now_epoch):
            return keycopies.fresh(key), wait
        keycopies.drop(token)
        taken = (key.pk, key.rate_per_minute, key.rate_burst), wait, now_epoch
    # The epoch to keep the rows with is read before them: a change committed after it
    # moves it on (the one just returned with the token taken is such a read).
    if taken is not None:
        epoch = taken[2]
    else:
        epoch = keycopies.epoch_now() if keycopies.enabled() else None
    read = ApiKey.objects.for_raw_key(token)
    if read is None:
        return None, None
    keycopies.keep(token, read, epoch)
    wait = None
    if taken is not None and taken[0] == (read.pk, read.rate_per_minute, read.rate_burst):
        wait = taken[1]
    return (keycopies.fresh(read) if epoch is not None else read), wait


class HeldKeyAuth(KeyAuth):
    """The key check of an async operation that holds its request (the decisions long-poll).
    The lookup takes a database connection and gives it back (to the pool) at once, instead
    of keeping it through the request's thread for the whole wait. Only for async operations:
    ninja awaits it there (`is_async`)."""

    is_async = True

    async def __call__(self, request):
        return await released(self._checked)(request)

    def _checked(self, request):
        """The key check, with a refusal audited here, in the worker thread (console/api.py's
        handler runs on the event loop, where the ORM may not)."""
        try:
            return KeyAuth.__call__(self, request)
        except Forbidden as exc:
            audit_refused(
                actor=getattr(request, "gavel_actor", None),
                path=request.path,
                method=request.method,
                reason=exc.message,
                code=exc.code,
                ip=signin.client_address(request),
                user_agent=request.META.get("HTTP_USER_AGENT") or None,
            )
            request.gavel_refusal_audited = True
            raise


class PrincipalKeyAuth(KeyAuth):
    """A key that acts as its bound principal (the `manage` scope): a key whose principal is
    deactivated answers 401 (as if revoked), and the operation's capability, when it does not
    depend on the object, is checked here, before the body is parsed: 403 comes before 422."""

    def __init__(self, scope: str, capability: str | None = None):
        super().__init__(scope)
        self.capability = capability

    def authenticate(self, request, token):
        key = super().authenticate(request, token)
        if key is None or key.principal is None or not key.principal.is_active:
            return None
        if self.capability:
            access.require_capability(key, self.capability)
        return key


class BrowserSession(APIKeyCookie):
    """A signed-in browser (session cookie + CSRF) acting as its principal. Without a session
    it steps aside (401 from the key auth); with one, a missing CSRF token is a 403."""

    param_name = settings.SESSION_COOKIE_NAME

    def _get_key(self, request):
        if not request.user.is_authenticated:
            return None
        return super()._get_key(request)

    def authenticate(self, request, key):
        if key is None:
            return None
        principal = access.principal_for_user(request)
        if principal is None:
            raise Forbidden("this account is not an active principal of any tenant")
        request.gavel_actor = principal  # who a refusal below is audited for (console/api.py)
        return principal


class CapableSession(BrowserSession):
    """A signed-in browser session whose principal holds `capability` (checked before the
    body is parsed, like PrincipalKeyAuth's)."""

    def __init__(self, capability: str):
        super().__init__()
        self.capability = capability

    def authenticate(self, request, key):
        principal = super().authenticate(request, key)
        if principal is not None:
            access.require_capability(principal, self.capability)
        return principal


ingest_auth = KeyAuth("ingest")
decide_auth = KeyAuth("decide")
manage_auth = PrincipalKeyAuth("manage")  # the management API: the key acts as its principal
manage_admin_auth = PrincipalKeyAuth("manage", capability="admin")
ingest_auth_held = HeldKeyAuth("ingest")
browser_session = BrowserSession()
