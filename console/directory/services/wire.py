"""The wire forms the console's services write into audit rows and answer with, kept apart
from the services so that `api_key_create` (console/services/__init__.py) and
console/services/keys.py share them without importing each other."""

from __future__ import annotations

from console.directory import access
from console.models import ApiKey


def actor_fields(actor) -> dict:
    """The audit row's actor: the principal, and the key when a `manage` key acted."""
    if actor is None:
        return {}
    return {
        "principal": access.acting_principal(actor),
        "key": actor if isinstance(actor, ApiKey) else None,
    }


def api_key_resource(key: ApiKey, *, wire: bool = False) -> dict:
    """The key as the API shows it (never its secret or hash). `wire`: camelCase with ISO
    times (the audit row's before/after), else snake_case for the API's schema."""
    resource = {
        "id": key.public_id,
        "name": key.name,
        "prefix": key.key_prefix,
        "scopes": list(key.scopes),
        "principal_id": key.principal.external_id if key.principal_id else None,
        "created_at": key.created_at,
        "last_used_at": key.last_used_at,
        "expires_at": key.expires_at,
        "revoked_at": key.revoked_at,
        "rate_per_minute": key.rate_per_minute,
        "rate_burst": key.rate_burst,
    }
    if not wire:
        return resource
    camel = {
        "principal_id": "principalId",
        "created_at": "createdAt",
        "last_used_at": "lastUsedAt",
        "expires_at": "expiresAt",
        "revoked_at": "revokedAt",
        "rate_per_minute": "ratePerMinute",
        "rate_burst": "rateBurst",
    }
    return {
        camel.get(name, name): value.isoformat() if hasattr(value, "isoformat") else value
        for name, value in resource.items()
    }
