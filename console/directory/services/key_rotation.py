"""Rotating an API key: a new secret now, the old one still valid for a grace period the admin
picks (`POST /api/v1/keys/{keyId}/rotate`, the Rotate form of /manage/keys/).

The new secret is a new key with the old one's name, scopes, principal, rate and expiry (keys
are stored as one SHA-256 each, so a second secret is a second key). The old key's
`expiresAt` becomes now + the grace period (never later than it already was), which the
bearer check enforces like any expiry (`ApiKeyQuerySet.for_raw_key`: past it, 401). Audited
`apikey.created` for the new key and `apikey.rotated` for the old one (before → after, with the
new key's id).
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from console.core.errors import Conflict, Invalid
from console.directory import access
from console.directory.services import api_key_create, audit
from console.directory.services.wire import actor_fields, api_key_resource
from console.models import ApiKey

MAX_GRACE_SECONDS = 30 * 24 * 3600  # a month: longer is a second key, not a rotation
DEFAULT_GRACE_SECONDS = 24 * 3600
# The choices the console's form offers (seconds, label).
GRACE_CHOICES = (
    (0, "Stop it now"),
    (3600, "1 hour"),
    (24 * 3600, "24 hours"),
    (7 * 24 * 3600, "7 days"),
    (MAX_GRACE_SECONDS, "30 days"),
)


def _invalid(path: str, message: str) -> Invalid:
    return Invalid(message, code="validation_error", details=[{"path": path, "message": message}])


@transaction.atomic
def api_key_rotate(
    *, viewer, key: ApiKey, grace_seconds: int = DEFAULT_GRACE_SECONDS
) -> tuple[ApiKey, str, ApiKey]:
    """The new key, its secret (shown once) and the old key with its new expiry. A revoked or
    expired key cannot be rotated (409 `key_not_active`: make a new one); a grace period
    outside 0 s … 30 days is a 422 before anything is written."""
    access.require_capability(viewer, "admin")
    if (
        isinstance(grace_seconds, bool)
        or not isinstance(grace_seconds, int)
        or not 0 <= grace_seconds <= MAX_GRACE_SECONDS
    ):
        raise _invalid(
            "graceSeconds", f"must be a whole number of seconds, 0 to {MAX_GRACE_SECONDS}"
        )
    old = ApiKey.objects.select_for_update(of=("self",)).select_related("principal").get(pk=key.pk)
    now = timezone.now()
    if old.revoked_at is not None or (old.expires_at is not None and old.expires_at <= now):
        raise Conflict(
            "this key no longer works (revoked or expired): make a new key instead",
            code="key_not_active",
        )
    before = api_key_resource(old, wire=True)
    new, secret = api_key_create(
        tenant=old.tenant,
        name=old.name,
        scopes=list(old.scopes),
        principal=old.principal,
        expires_at=old.expires_at,
        rate_per_minute=old.rate_per_minute,
        rate_burst=old.rate_burst,
        actor=viewer,
    )
    ends = now + timedelta(seconds=grace_seconds)
    old.expires_at = ends if old.expires_at is None else min(old.expires_at, ends)
    old.save(update_fields=["expires_at"])
    after = api_key_resource(old, wire=True)
    audit(
        tenant=old.tenant,
        action="apikey.rotated",
        object_type="apikey",
        object_id=old.public_id,
        before=before,
        after={**after, "replacedBy": new.public_id, "graceSeconds": grace_seconds},
        **actor_fields(viewer),
    )
    return new, secret, old
