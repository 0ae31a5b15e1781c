"""The pure side of the audit log: the canonical form of an entry and its hash, and where the
entry came from when no request is at hand (a socket).

An entry's hash is SHA-256 over the previous entry's hash (hex, empty for a tenant's first
entry) followed by the entry's canonical JSON (sorted keys, no spaces, UTF-8). The canonical
form is built from the values as the database returns them (never from the Python objects
that were inserted), so sealing and verifying always hash the same bytes. The migration
`console/0008_audit_chain` uses this module too: it imports no project module.
"""

import hashlib
import json
from contextvars import ContextVar
from datetime import UTC

# (ip, user agent) of the socket being served: set by console.consumers for the code it runs.
# Requests need nothing: console.links.current_request already carries the request.
current_origin: ContextVar = ContextVar("gavel_audit_origin", default=None)

USER_AGENT_MAX = 512


def canonical(row: dict) -> bytes:
    """`row`: the entry's columns as the database returns them (model field names)."""
    at = row["at"].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    form = {
        "id": row["id"],
        "tenant": row["tenant_id"],
        "seq": row["chain_seq"],
        "at": at,
        "action": row["action"],
        "principal": row["actor_principal_id"],
        "key": row["actor_key_id"],
        "rule": row["actor_rule"],
        "objectType": row["object_type"],
        "objectId": row["object_id"],
        "data": row["data"],
        "before": row["before"],
        "after": row["after"],
        "ip": row["ip"],
        "userAgent": row["user_agent"],
    }
    return json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def entry_hash(row: dict, prev_hash: str | None) -> str:
    digest = hashlib.sha256((prev_hash or "").encode())
    digest.update(canonical(row))
    return digest.hexdigest()


# What sealing and verifying read of each entry (model field names).
FIELDS = (
    "id",
    "tenant_id",
    "chain_seq",
    "prev_hash",
    "hash",
    "at",
    "action",
    "actor_principal_id",
    "actor_key_id",
    "actor_rule",
    "object_type",
    "object_id",
    "data",
    "before",
    "after",
    "ip",
    "user_agent",
)


def wire_id(pk: int) -> str:
    """An entry's wire id (`aud_<n>`; n grows with every entry of every tenant)."""
    return f"aud_{pk}"


def wire_pk(wire: str) -> int | None:
    if wire.startswith("aud_") and wire[4:].isdigit():
        return int(wire[4:])
    return None
