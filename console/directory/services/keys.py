"""API keys from the management API and /manage/keys/: create (the secret answered once),
list, revoke. The raw key is never stored (SHA-256 only, console/models.py) and never shown
again; a revoked key or one past its `expiresAt` answers 401 (`ApiKeyQuerySet.for_raw_key`)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from console.core import paging
from console.core.errors import Invalid
from console.directory import access
from console.directory.services import api_key_create, audit
from console.directory.services.wire import actor_fields, api_key_resource
from console.models import ApiKey, Principal, Tenant


def _invalid(path: str, message: str) -> Invalid:
    return Invalid(message, code="validation_error", details=[{"path": path, "message": message}])


def api_key_state(key: ApiKey, now=None) -> str:
    """`active`, `revoked` or `expired` (what the console's table shows)."""
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= (now or timezone.now()):
        return "expired"
    return "active"


def _principal(tenant: Tenant, principal_id: str | None) -> Principal | None:
    if principal_id is None:
        return None
    principal = Principal.objects.filter(tenant=tenant, external_id=principal_id).first()
    if principal is None:
        raise _invalid("principalId", f"no principal '{principal_id}' in this tenant")
    return principal


def api_key_issue(
    *,
    viewer,
    name: str,
    scopes: list[str],
    principal_id: str | None = None,
    expires_at=None,
    rate_per_minute: int | None = None,
    rate_burst: int | None = None,
) -> tuple[ApiKey, str]:
    """POST /keys and /manage/keys/: an admin makes a key (returns it and its secret, shown
    once). Every refusal is a 422 naming the wire field, before anything is written."""
    access.require_capability(viewer, "admin")
    tenant = viewer.tenant
    needs_principal = sorted({"decide", "manage"} & set(scopes))
    if needs_principal and principal_id is None:
        scope = needs_principal[0]
        raise _invalid("principalId", f"a key with the '{scope}' scope must name its principal")
    if expires_at is not None and expires_at <= timezone.now():
        raise _invalid("expiresAt", "must be in the future")
    principal = _principal(tenant, principal_id)
    return api_key_create(
        tenant=tenant,
        name=name,
        scopes=scopes,
        principal=principal,
        expires_at=expires_at,
        rate_per_minute=rate_per_minute,
        rate_burst=rate_burst,
        actor=viewer,
    )


@transaction.atomic
def api_key_revoke(*, key: ApiKey, viewer) -> ApiKey:
    """DELETE /keys/{keyId}: the key answers 401 from now on. Revoking a revoked key changes
    nothing (and writes nothing). Audited `apikey.revoked` (before → after)."""
    access.require_capability(viewer, "admin")
    key = ApiKey.objects.select_for_update(of=("self",)).select_related("principal").get(pk=key.pk)
    if key.revoked_at is not None:
        return key
    before = api_key_resource(key, wire=True)
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    audit(
        tenant=key.tenant,
        action="apikey.revoked",
        object_type="apikey",
        object_id=key.public_id,
        before=before,
        after=api_key_resource(key, wire=True),
        **actor_fields(viewer),
    )
    return key


def api_keys_page(*, viewer, limit: int = 50, cursor: str | None = None) -> dict:
    """GET /keys and /manage/keys/: the tenant's keys, newest first (revoked ones too),
    keyset-paginated (a read beside the writes)."""
    rows, next_cursor = paging.newest_first(
        access.keys_of(viewer=viewer), kind="key", limit=limit, cursor=cursor,
        message=paging.NOT_ISSUED,
    )  # fmt: skip
    return {"items": rows, "next_cursor": next_cursor}
