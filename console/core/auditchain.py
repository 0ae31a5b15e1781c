"""The pure side of the audit log: the canonical form of an entry and its hash, the writer's
tag, the signed checkpoints of a chain's head, the keys they use, the entries' public ids, and
where an entry came from when no request is at hand (a socket).

Two generations of entry hash. A *legacy* entry (sealed before migration
`console/0013_audit_keyed_chain`) has SHA-256 over the previous entry's hash (hex, empty for a
tenant's first entry) followed by the entry's canonical JSON (sorted keys, no spaces, UTF-8).
A *keyed* entry has HMAC-SHA256 under the chain key over the same bytes, its canonical JSON
also naming its public id: nobody without the key (the database included) can recompute it.
The canonical form is built from the values as the database returns them (never from the
Python objects that were inserted), so sealing and verifying always hash the same bytes.

The keys are never in the database: HKDF-SHA256 derives them from GAVEL_AUDIT_KEY (else
SECRET_KEY), each under a purpose of its own (so none is SECRET_KEY itself nor a key Django
derives from it): the chain key, the writer key (the tag `AuditEvent`'s insert gives every
entry, so that a sealer seals only what the console wrote), and an Ed25519 key pair whose
private half signs checkpoints (the chain's head: tenant, position, hash, entry count, time)
and whose public half lets anyone check them. Verifying also accepts the keys of earlier
material (SECRET_KEY when GAVEL_AUDIT_KEY is set, SECRET_KEY_FALLBACKS), so a rotation
breaks nothing already sealed.

The migrations `console/0008_audit_chain` and `0013` use this module too: it imports no
project module.
"""

import base64
import functools
import hashlib
import hmac
import json
import secrets
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings

# (ip, user agent) of the socket being served: set by console.consumers for the code it runs.
# Requests need nothing: console.links.current_request already carries the request.
current_origin: ContextVar = ContextVar("gavel_audit_origin", default=None)

USER_AGENT_MAX = 512


def _time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _form(row: dict) -> dict:
    return {
        "id": row["id"],
        "tenant": row["tenant_id"],
        "seq": row["chain_seq"],
        "at": _time(row["at"]),
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


def _json(form) -> bytes:
    return json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def canonical(row: dict) -> bytes:
    """`row`: the entry's columns as the database returns them (model field names)."""
    return _json(_form(row))


def entry_hash(row: dict, prev_hash: str | None) -> str:
    """A legacy entry's hash (unkeyed SHA-256): entries sealed before keyed hashing began."""
    digest = hashlib.sha256((prev_hash or "").encode())
    digest.update(canonical(row))
    return digest.hexdigest()


# What sealing and verifying read of each legacy entry (model field names; the columns that
# migration 0008 knew).
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
# ... and of every entry since migration 0013.
KEYED_FIELDS = (*FIELDS, "public_id", "writer_tag")


def keyed_message(row: dict, prev_hash: str | None) -> bytes:
    return (prev_hash or "").encode() + _json({**_form(row), "publicId": row["public_id"]})


def keyed_hash(row: dict, prev_hash: str | None, key: bytes | None = None) -> str:
    """A keyed entry's hash: HMAC-SHA256 under the chain key (the current one unless given)."""
    key = audit_keys()[0].chain if key is None else key
    return hmac.new(key, keyed_message(row, prev_hash), hashlib.sha256).hexdigest()


def keyed_hash_valid(row: dict, prev_hash: str | None) -> bool:
    """Whether the entry's stored hash is its keyed hash under any accepted key."""
    message, stored = keyed_message(row, prev_hash), row["hash"] or ""
    return any(
        hmac.compare_digest(hmac.new(k.chain, message, hashlib.sha256).hexdigest(), stored)
        for k in audit_keys()
    )


# --- the writer's tag: what an entry held when the console inserted it ---

WRITER_FIELDS = (
    "tenant_id",
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
    "public_id",
)


def _number(value) -> str:
    """A JSON number as the same text whichever way it was stored: PostgreSQL's jsonb keeps
    a number as numeric (1e+20 comes back as the integer 100000000000000000000, -0.0 as 0.0),
    SQLite's JSON text keeps Python's own."""
    number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    return "0" if number.is_zero() else str(number.normalize())


def _numbers(value):
    """The value with each number as `{"\\u0000n": _number(it)}` (no stored string or key
    holds U+0000: PostgreSQL cannot, the API refuses it), the rest as it is."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return {"\u0000n": _number(value)}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _stable(value) -> str:
    """Canonical JSON text that reads the same for a value before it was stored and as the
    database returns it (keys sorted, no spaces, numbers as `_number`)."""
    return json.dumps(_numbers(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def writer_message(row: dict) -> bytes:
    fields = {name: row[name] for name in WRITER_FIELDS}
    fields["at"] = _time(fields["at"])
    return _stable(fields).encode()


def writer_tag(row: dict) -> str:
    """The tag the console's insert gives an entry (HMAC-SHA256 under the writer key over
    its content and public id): a row inserted by anyone else cannot carry a valid one."""
    key = audit_keys()[0].writer
    return hmac.new(key, writer_message(row), hashlib.sha256).hexdigest()


def writer_tag_valid(row: dict) -> bool:
    stored = row.get("writer_tag") or ""
    if not stored or not row.get("public_id"):
        return False
    message = writer_message(row)
    return any(
        hmac.compare_digest(hmac.new(k.writer, message, hashlib.sha256).hexdigest(), stored)
        for k in audit_keys()
    )


def as_stored(value):
    """A JSON column's value as the database will return it (tuples become lists, keys
    strings): what the writer's tag covers at insert time."""
    return json.loads(json.dumps(value))


# --- public ids (no global sequence on the wire) ---

PUBLIC_ID_PREFIX = "aud_"


def new_public_id() -> str:
    """A random id (80 bits, base32: never all digits, so never a legacy `aud_<n>`)."""
    while True:
        body = base64.b32encode(secrets.token_bytes(10)).decode().lower()
        if not body.isdigit():
            return PUBLIC_ID_PREFIX + body


def wire_id(pk: int, public_id: str | None = None) -> str:
    """An entry's wire id: its random public id, or `aud_<n>` for an entry written before
    public ids (n: its row number; such ids stay what they always were)."""
    return public_id or f"{PUBLIC_ID_PREFIX}{pk}"


def legacy_pk(wire: str) -> int | None:
    """The row number of a legacy wire id `aud_<n>`; None for any other text."""
    body = wire[len(PUBLIC_ID_PREFIX) :] if wire.startswith(PUBLIC_ID_PREFIX) else ""
    if body.isdigit() and body.isascii() and len(body) <= 18:
        return int(body)
    return None


# --- keys ---

PURPOSES = {
    "chain": b"gavel: audit chain v1",
    "writer": b"gavel: audit writer v1",
    "signing": b"gavel: audit checkpoints v1",
}


@dataclass(frozen=True)
class AuditKeys:
    chain: bytes
    writer: bytes
    signing: Ed25519PrivateKey
    public: bytes  # the raw Ed25519 public key (32 bytes)
    key_id: str  # the first 16 hex digits of the public key's SHA-256


def _derive(material: str, purpose: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(
        material.encode()
    )


@functools.cache
def _keys_of(material: str) -> AuditKeys:
    signing = Ed25519PrivateKey.from_private_bytes(_derive(material, PURPOSES["signing"]))
    public = signing.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return AuditKeys(
        chain=_derive(material, PURPOSES["chain"]),
        writer=_derive(material, PURPOSES["writer"]),
        signing=signing,
        public=public,
        key_id=hashlib.sha256(public).hexdigest()[:16],
    )


def audit_keys() -> list[AuditKeys]:
    """The current keys first, then those of earlier material still accepted by verify."""
    configured = getattr(settings, "GAVEL_AUDIT_KEY", "")
    materials = [configured or settings.SECRET_KEY]
    if configured:
        materials.append(settings.SECRET_KEY)
    materials += list(getattr(settings, "SECRET_KEY_FALLBACKS", []))
    return [_keys_of(m) for m in dict.fromkeys(materials)]


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# --- checkpoints: the signed chain head ---


def checkpoint_statement(
    *,
    tenant: str,
    position: int,
    head_hash: str | None,
    at: datetime,
    keyed_from: int,
    pruned_through: int = 0,
    pruned_hash: str | None = None,
    by: str,
) -> str:
    """What a checkpoint signs (compact JSON, sorted keys): the tenant (its slug, which never
    changes), the head's position (chain seq) and hash, how many entries the chain holds
    (the position less a pruned prefix), when, where keyed hashing began (entries before
    `keyedFrom` are legacy), the pruned prefix (`prunedThrough`: the last pruned position,
    `prunedHash`: its hash, which anchors the first kept entry) and what made it."""
    form = {
        "v": 1,
        "tenant": tenant,
        "position": position,
        "hash": head_hash,
        "entries": position - pruned_through,
        "at": _time(at),
        "keyedFrom": keyed_from,
        "prunedThrough": pruned_through,
        "prunedHash": pruned_hash,
        "by": by,
    }
    return json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sign(statement: str) -> tuple[str, str]:
    """(key id, signature: base64url Ed25519) of a statement, with the current key."""
    keys = audit_keys()[0]
    return keys.key_id, b64(keys.signing.sign(statement.encode()))


def signature_valid(statement: str, key_id: str, signature: str) -> bool:
    for keys in audit_keys():
        if keys.key_id != key_id:
            continue
        try:
            keys.signing.public_key().verify(_unb64(signature), statement.encode())
        except (InvalidSignature, ValueError):
            return False
        return True
    return False


def public_key(key_id: str) -> str | None:
    """The base64url raw Ed25519 public key that `key_id` names (None: not one of ours)."""
    return next((b64(k.public) for k in audit_keys() if k.key_id == key_id), None)
