"""Signed checkpoints of a tenant's audit chain (finding L7): the head (position, hash, entry
count, time) signed with the Ed25519 key of console.auditchain, which the database does not
hold, stored as an `AuditCheckpoint` row and written to the log (logger
`gavel.audit.checkpoint`, INFO), so the head is anchored outside the table: removing the
newest entries leaves a checkpoint beyond the head, rewriting the chain leaves one whose hash
no longer matches. Made by verify (when the chain is intact), by the exports and by the sweep
(when the head moved and the last checkpoint is CHECKPOINT_EVERY old). Pruning (issue #27)
will record the pruned prefix's last position and hash in the checkpoint that replaces it."""

import json
import logging
from datetime import timedelta

from django.db import DatabaseError, transaction
from django.utils import timezone

from console.core import auditchain
from console.models import AuditCheckpoint, AuditEvent, Tenant

log = logging.getLogger("gavel.audit.checkpoint")

CHECKPOINT_EVERY = timedelta(minutes=10)  # the sweep's cadence, for a tenant that wrote
SWEEP_EVERY = timedelta(minutes=1)  # how often the sweep looks at all
_next_sweep = {"at": None}


def chain_head(*, tenant_id: int) -> tuple[int, str | None]:
    """(position, hash) of the tenant's newest sealed entry; (0, None) for an empty chain."""
    head = (
        AuditEvent.objects.filter(tenant_id=tenant_id, chain_seq__isnull=False)
        .order_by("-chain_seq")
        .values_list("chain_seq", "hash")
        .first()
    )
    return head or (0, None)


def checkpoint_terms(checkpoint: AuditCheckpoint | None) -> dict:
    """What a checkpoint carries forward: where keyed hashing began and the pruned prefix.
    With no checkpoint: every entry keyed, nothing pruned."""
    if checkpoint is None:
        return {"keyed_from": 1, "pruned_through": 0, "pruned_hash": None}
    form = json.loads(checkpoint.statement)
    return {
        "keyed_from": form["keyedFrom"],
        "pruned_through": form["prunedThrough"],
        "pruned_hash": form["prunedHash"],
    }


def checkpoint_valid(checkpoint: AuditCheckpoint, *, tenant: Tenant) -> bool:
    """Signed by one of our keys, for this tenant, and saying what its columns say."""
    if not auditchain.signature_valid(
        checkpoint.statement, checkpoint.key_id, checkpoint.signature
    ):
        return False
    form = json.loads(checkpoint.statement)
    return (form["tenant"], form["position"], form["hash"]) == (
        tenant.slug,
        checkpoint.position,
        checkpoint.head_hash,
    )


def latest_checkpoint(*, tenant_id: int) -> AuditCheckpoint | None:
    return AuditCheckpoint.objects.filter(tenant_id=tenant_id).order_by("-pk").first()


def latest_valid_checkpoint(*, tenant: Tenant) -> AuditCheckpoint | None:
    """The newest checkpoint whose signature holds: the only one whose terms are carried
    forward (a forged row must never be signed over)."""
    for checkpoint in AuditCheckpoint.objects.filter(tenant=tenant).order_by("-pk").iterator():
        if checkpoint_valid(checkpoint, tenant=tenant):
            return checkpoint
    return None


@transaction.atomic
def audit_checkpoint(*, tenant: Tenant, by: str, terms: dict | None = None) -> AuditCheckpoint:
    """Sign the tenant's chain head now, unless the latest checkpoint already names it
    (then that one). `terms`: keyed_from and the pruned prefix (default: the latest
    checkpoint's; the caller that verified the chain passes what it verified against)."""
    position, head_hash = chain_head(tenant_id=tenant.pk)
    latest = latest_valid_checkpoint(tenant=tenant)
    if latest is not None and (latest.position, latest.head_hash) == (position, head_hash):
        return latest
    terms = terms or checkpoint_terms(latest)
    at = timezone.now()
    statement = auditchain.checkpoint_statement(
        tenant=tenant.slug, position=position, head_hash=head_hash, at=at, by=by, **terms
    )
    key_id, signature = auditchain.sign(statement)
    made = AuditCheckpoint.objects.create(
        tenant=tenant,
        at=at,
        position=position,
        head_hash=head_hash,
        statement=statement,
        key_id=key_id,
        signature=signature,
    )
    transaction.on_commit(
        lambda: log.info("audit checkpoint %s %s %s", statement, key_id, signature)
    )
    return made


def audit_checkpoint_due(*, now=None, limit: int = 0) -> int:
    """The sweep (an outbox sender, every minute at most): a checkpoint for each tenant whose
    head moved since its latest checkpoint, once that is CHECKPOINT_EVERY old. Returns how
    many it made."""
    now = now or timezone.now()
    if _next_sweep["at"] is not None and now < _next_sweep["at"]:
        return 0
    _next_sweep["at"] = now + SWEEP_EVERY
    made = 0
    for tenant in Tenant.objects.only("pk", "slug").order_by("pk"):
        latest = latest_checkpoint(tenant_id=tenant.pk)
        if latest is not None and now - latest.at < CHECKPOINT_EVERY:
            continue
        head = chain_head(tenant_id=tenant.pk)
        if head[0] == 0 or (latest and (latest.position, latest.head_hash) == head):
            continue  # nothing to sign, or signed already
        try:
            audit_checkpoint(tenant=tenant, by="sweep")
        except DatabaseError:
            log.warning("checkpointing tenant %s's audit chain failed; retried later", tenant.pk)
            continue
        made += 1
    return made


def checkpoint_resource(checkpoint: AuditCheckpoint | None) -> dict | None:
    """A checkpoint on the wire: the exact statement signed, the signature, the key (its id
    and the raw Ed25519 public key, base64url), and the statement's main values."""
    if checkpoint is None:
        return None
    form = json.loads(checkpoint.statement)
    return {
        "position": form["position"],
        "hash": form["hash"],
        "entries": form["entries"],
        "at": checkpoint.at,
        "statement": checkpoint.statement,
        "signature": checkpoint.signature,
        "key_id": checkpoint.key_id,
        "public_key": auditchain.public_key(checkpoint.key_id),
    }
