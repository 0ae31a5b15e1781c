"""Writes to the audit log: entries (in the caller's transaction), their sealing into the
tenant's hash chain (after commit), the chain's verification, and `authz.refused` with its
rate limit. The design and its reasons: docs/architecture.md, "The audit log"."""

from __future__ import annotations

import hmac
import logging
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, IntegrityError, close_old_connections, transaction
from django.utils import timezone

from console.audit.checkpoints import (
    audit_checkpoint,
    chain_head,
    checkpoint_resource,
    checkpoint_terms,
    checkpoint_valid,
    latest_checkpoint,
)
from console.core import auditchain, links
from console.core.request import client_address
from console.models import ApiKey, AuditCheckpoint, AuditEvent, AuditRefusalThrottle, Tenant

log = logging.getLogger("console.services.auditlog")

REFUSAL_WINDOW = timedelta(seconds=60)  # at most one authz.refused per actor and path
SEAL_BATCH = 500
MAX_DEPTH = 64  # lists and objects kept inside one another in an entry's data, before, after
CUT = "(nested too deeply to record)"


def _bounded(value, depth: int = 0):
    """`value` with any list or object nested deeper than MAX_DEPTH replaced by CUT: an entry
    is always written, stored and hashed (JSON encoders recurse, and a hostile value could be
    nested thousands deep), and a rolled-back change is never the price of its audit row."""
    if isinstance(value, dict | list | tuple) and depth >= MAX_DEPTH:
        return CUT
    if isinstance(value, dict):
        return {key: _bounded(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_bounded(item, depth + 1) for item in value]
    return value


def _origin() -> tuple[str | None, str | None]:
    """The address (GAVEL_TRUSTED_PROXIES honoured, as for the sign-in lockout) and user agent
    of the request or socket being served; (None, None) off a request (a sweep, a command)."""
    request = links.current_request.get()
    if request is not None:
        agent = request.META.get("HTTP_USER_AGENT") or None
        return client_address(request), agent
    return auditchain.current_origin.get() or (None, None)


def _rule_id(rule) -> str | None:
    if rule is None:
        return None
    return rule if isinstance(rule, str) else rule.public_id


def audit(
    *,
    tenant,
    action,
    object_type,
    object_id,
    data=None,
    before=None,
    after=None,
    principal=None,
    key=None,
    rule=None,
    ip=None,
    user_agent=None,
):
    """One audit entry, in the caller's transaction. `before` / `after` are the object's wire
    form around the change (None where it did not exist; also taken from `data`'s "before" /
    "after", as older callers pass them); `rule` the deciding rule (or its `rul_...` id);
    `data` any other facts. Address and user agent come from the request (or socket) being
    served unless given. The entry is sealed into the chain after commit."""
    entry = _entry(
        tenant=tenant, action=action, object_type=object_type, object_id=object_id, data=data,
        before=before, after=after, principal=principal, key=key, rule=rule, ip=ip,
        user_agent=user_agent,
    )  # fmt: skip
    entry.save()
    _seal_on_commit(entry.tenant_id)
    return entry


def audit_many(entries: list[dict]) -> None:
    """`audit` for many entries of one unit of work (each a dict of `audit`'s arguments), in
    one INSERT, in the order given (the order they are sealed in). Nothing comes back (on
    PostgreSQL the rows are written without reading their ids: AuditQuerySet.insert_many)."""
    rows = [_entry(**entry) for entry in entries]
    AuditEvent.objects.insert_many(rows)
    for tenant_id in sorted({row.tenant_id for row in rows}):
        _seal_on_commit(tenant_id)


def _entry(
    *,
    tenant,
    action,
    object_type,
    object_id,
    data=None,
    before=None,
    after=None,
    principal=None,
    key=None,
    rule=None,
    ip=None,
    user_agent=None,
) -> AuditEvent:
    """The unsaved row of one entry (`audit`'s arguments)."""
    data = dict(data or {})
    before = data.pop("before", None) if before is None else before
    after = data.pop("after", None) if after is None else after
    data.pop("before", None), data.pop("after", None)
    if ip is None and user_agent is None:
        ip, user_agent = _origin()
    return AuditEvent(
        tenant=tenant,
        action=action,
        object_type=object_type,
        object_id=str(object_id),
        data=_bounded(data),
        before=_bounded(before),
        after=_bounded(after),
        actor_principal=principal,
        actor_key=key,
        actor_rule=_rule_id(rule),
        ip=ip,
        user_agent=(user_agent or "")[: auditchain.USER_AGENT_MAX] or None,
    )


def _seal_on_commit(tenant_id: int) -> None:
    """Once per transaction and tenant: seal after commit (skipped, never waited for, while
    another process seals the tenant; the sweep and the next seal catch up). On PostgreSQL
    with GAVEL_AUDIT_SEAL_DELAY_MS, a moment after the commit, off the request's path
    (`Sealer`); else right after the commit, in the committing thread."""
    connection = transaction.get_connection()
    if any(
        getattr(func, "gavel_seal_tenant", None) == tenant_id
        for _, func, _ in connection.run_on_commit
    ):
        return
    delay = settings.GAVEL_AUDIT_SEAL_DELAY_MS / 1000
    if delay > 0 and connection.vendor == "postgresql":

        def seal():
            Sealer.here().request(tenant_id, delay)

    else:

        def seal():
            _seal_now(tenant_id)

    seal.gavel_seal_tenant = tenant_id
    transaction.on_commit(seal, robust=True)


def _seal_now(tenant_id: int) -> None:
    try:
        audit_seal(tenant_id=tenant_id, wait=False)
    except DatabaseError:
        log.warning("sealing tenant %s's audit entries failed; retried later", tenant_id)


class Sealer:
    """This process's seals a moment after their commits (GAVEL_AUDIT_SEAL_DELAY_MS), in one
    thread of its own: the request that wrote an entry answers without waiting for its seal,
    the runtime a decision wakes does its work without a seal beside it, and the commits of
    a tenant within the delay are sealed together (one chain lock, one UPDATE). An entry is
    committed before it is sealed, so nothing is lost if the process stops first: the sweep
    seals it (`audit_seal_due`), and so does the next seal of the tenant, and verify."""

    _lock = threading.Lock()
    _one: Sealer | None = None

    def __init__(self):
        self._due: dict[int, float] = {}  # tenant id -> when to seal it
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="gavel-audit-sealer", daemon=True)
        self._thread.start()

    @classmethod
    def here(cls) -> Sealer:
        with cls._lock:
            if cls._one is None or not cls._one._thread.is_alive():
                cls._one = cls()
            return cls._one

    def request(self, tenant_id: int, delay: float) -> None:
        with self._changed:
            self._due.setdefault(tenant_id, time.monotonic() + delay)
            self._changed.notify()

    def flush(self) -> int:
        """Seal every tenant waiting now, in the calling thread (a stopping server); returns
        how many tenants it sealed."""
        with self._changed:
            tenants, self._due = list(self._due), {}
        for tenant_id in tenants:
            self._seal(tenant_id)
        return len(tenants)

    def _run(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                ready = [t for t, at in self._due.items() if at <= now]
                if not ready:
                    wait = min(self._due.values()) - now if self._due else None
                    self._changed.wait(wait)
                    continue
                for tenant_id in ready:
                    del self._due[tenant_id]
            for tenant_id in ready:
                self._seal(tenant_id)

    @staticmethod
    def _seal(tenant_id: int) -> None:
        try:
            _seal_now(tenant_id)
        except Exception:  # never let the thread die: the sweep seals what is left
            log.exception("sealing tenant %s's audit entries failed", tenant_id)
        finally:
            close_old_connections()  # the connection goes back to the pool between seals


def audit_seals_flush() -> int:
    """The seals this process still has to make, made now (a server's shutdown hook)."""
    sealer = Sealer._one
    return sealer.flush() if sealer is not None else 0


# --- the chain ---


def audit_seal(*, tenant_id: int, limit: int = SEAL_BATCH, wait: bool = True) -> int:
    """Seal up to `limit` of the tenant's unsealed entries, in id order, into its chain (one
    UPDATE for them all). A short transaction of its own that holds the tenant's chain lock
    (its Tenant row) and no other lock, so it can neither deadlock with nor slow down the
    transactions that wrote the entries. `wait=False`: give up at once when another sealer
    holds the lock. Only entries whose writer's tag holds are sealed (keyed:
    console.auditchain): a row inserted behind the console's back stays unsealed, and verify
    reports it. Returns how many it sealed."""
    with transaction.atomic():
        locked = (
            Tenant.objects.select_for_update(skip_locked=not wait)
            .filter(pk=tenant_id)
            .values_list("pk")
            .first()
        )
        if locked is None:
            return 0
        seq, prev = chain_head(tenant_id=tenant_id)
        seals = []
        for row in _unsealed(tenant_id=tenant_id):
            if not auditchain.writer_tag_valid(row):
                continue  # not the console's: left for verify to report
            seq += 1
            row["chain_seq"] = seq
            digest = auditchain.keyed_hash(row, prev)
            seals.append((row["id"], seq, prev, digest))
            prev = digest
            if len(seals) == limit:
                break
        AuditEvent.objects.seal_many(seals)
    return len(seals)


def _unsealed(*, tenant_id: int, chunk: int = SEAL_BATCH):
    """The tenant's unsealed entries in id order, read in chunks."""
    after = 0
    while True:
        rows = list(
            AuditEvent.objects.filter(tenant_id=tenant_id, hash__isnull=True, pk__gt=after)
            .order_by("pk")
            .values(*auditchain.KEYED_FIELDS)[:chunk]
        )
        yield from rows
        if len(rows) < chunk:
            return
        after = rows[-1]["id"]


def audit_seal_due(*, now=None, limit: int = SEAL_BATCH) -> int:
    """Seal every tenant's unsealed entries: the sweep `expire_approvals --loop` (through
    console.outbox), for entries whose commit-time seal was skipped or lost in a crash. A
    tenant whose seal fails (SQLite busy) is left for the next round."""
    sealed = 0
    tenants = (
        AuditEvent.objects.filter(hash__isnull=True).values_list("tenant_id", flat=True).distinct()
    )
    for tenant_id in sorted(set(tenants)):
        try:
            while (done := audit_seal(tenant_id=tenant_id, limit=limit)) > 0:
                sealed += done
                if done < limit:
                    break
        except DatabaseError:
            log.warning("sealing tenant %s's audit entries failed; retried later", tenant_id)
    return sealed


def audit_seal_due_for(*, tenant_id: int) -> None:
    try:
        while audit_seal(tenant_id=tenant_id) == SEAL_BATCH:
            pass
    except DatabaseError:
        log.warning("sealing tenant %s's audit entries failed; verifying what is sealed", tenant_id)


def audit_verify(*, tenant) -> dict:
    """Seal what the console wrote and is pending, then check the tenant's chain against its
    signed checkpoints (console.services.auditcheckpoints): each entry's seq follows the one
    before (`removed` otherwise), its prev hash is that entry's hash and its hash that of its
    content (legacy SHA-256 before the checkpoints' `keyedFrom`, keyed after; `changed`),
    each checkpoint's hash is that of the entry at its position (`rewritten`), no
    checkpoint names a position beyond the head (`truncated`), and no row outside the chain
    lacks the writer's tag (`inserted`). `first_bad_id`: the first entry where a check fails
    (None when the chain's end is missing). An intact chain gets a fresh checkpoint (when
    its head moved), which the answer carries."""
    audit_seal_due_for(tenant_id=tenant.pk)
    before = latest_checkpoint(tenant_id=tenant.pk)
    result = _walk(tenant)
    if not result["ok"] and latest_checkpoint(tenant_id=tenant.pk) != before:
        result = _walk(tenant)  # a prune moved the chain's start meanwhile: walk it again
    checkpoint = None
    if result["ok"]:
        checkpoint = audit_checkpoint(tenant=tenant, by="verify", terms=result.pop("terms"))
    result.pop("terms", None)
    return {**result, "checkpoint": checkpoint_resource(checkpoint)}


def _bad(entries: int, row: dict | None, reason: str) -> dict:
    wire = auditchain.wire_id(row["id"], row["public_id"]) if row else None
    return {"ok": False, "entries": entries, "first_bad_id": wire, "reason": reason}


def _walk(tenant) -> dict:
    latest = latest_checkpoint(tenant_id=tenant.pk)
    if latest is not None and not checkpoint_valid(latest, tenant=tenant):
        return _bad(0, None, "checkpoint_invalid")
    terms = checkpoint_terms(latest)
    pins: dict[int, list[tuple[int, str | None]]] = {}
    for pk, position, head_hash in AuditCheckpoint.objects.filter(
        tenant=tenant, position__gt=terms["pruned_through"]
    ).values_list("pk", "position", "head_hash"):
        pins.setdefault(position, []).append((pk, head_hash))
    entries, prev_seq, prev_hash = 0, terms["pruned_through"], terms["pruned_hash"]
    rows = (
        AuditEvent.objects.filter(tenant=tenant, chain_seq__gt=prev_seq)
        .order_by("chain_seq")
        .values(*auditchain.KEYED_FIELDS)
    )
    for row in rows.iterator(chunk_size=2000):
        entries += 1
        if row["chain_seq"] != prev_seq + 1:
            return _bad(entries, row, "removed")
        if row["prev_hash"] != prev_hash or not _hash_holds(row, prev_hash, terms):
            missing = latest is None and _legacy_holds(row, prev_hash)
            return _bad(entries, row, "checkpoint_missing" if missing else "changed")
        for pk, pinned in pins.pop(row["chain_seq"], ()):
            if pinned != row["hash"]:
                return _bad(entries, row, _pin_broken(pk, tenant, "rewritten"))
        prev_seq, prev_hash = row["chain_seq"], row["hash"]
    if pins:  # checkpoints beyond the head: its newest entries are gone
        pk = pins[min(pins)][0][0]
        return _bad(entries, None, _pin_broken(pk, tenant, "truncated"))
    if (foreign := _first_foreign(tenant)) is not None:
        return _bad(entries, foreign, "inserted")
    return {"ok": True, "entries": entries, "first_bad_id": None, "reason": None, "terms": terms}


def _legacy_holds(row: dict, prev_hash: str | None) -> bool:
    return hmac.compare_digest(auditchain.entry_hash(row, prev_hash), row["hash"] or "")


def _hash_holds(row: dict, prev_hash: str | None, terms: dict) -> bool:
    if row["chain_seq"] < terms["keyed_from"]:
        return _legacy_holds(row, prev_hash)
    return auditchain.keyed_hash_valid(row, prev_hash)


def _pin_broken(pk: int, tenant, reason: str) -> str:
    """A checkpoint disagrees with the chain: `reason` when it is ours, else it is forged."""
    checkpoint = AuditCheckpoint.objects.get(pk=pk)
    return reason if checkpoint_valid(checkpoint, tenant=tenant) else "checkpoint_invalid"


def _first_foreign(tenant) -> dict | None:
    """The first row of the tenant outside its chain that the console did not write (an
    unsealed row of ours is one committed since this verify sealed: not foreign)."""
    rows = (
        AuditEvent.objects.filter(tenant=tenant, chain_seq__isnull=True)
        .order_by("pk")
        .values(*auditchain.KEYED_FIELDS)
    )
    for row in rows.iterator(chunk_size=500):
        if row["hash"] is not None or not auditchain.writer_tag_valid(row):
            return row
    return None


# --- authz.refused ---


def _actor_label(principal, key) -> str:
    return f"p{principal.pk if principal else '-'}:k{key.pk if key else '-'}"


def audit_refused(
    *, actor, path: str, method: str, reason: str, code: str = "forbidden", ip=None, user_agent=None
) -> AuditEvent | None:
    """Record a 403 (a page, an API call or a socket) as `authz.refused`, at most once per
    actor and path a minute: the refusals in between are counted on the throttle row and
    reported by the next entry (`data.count`: how many refusals the entry stands for, itself
    included). `actor`: the Principal or ApiKey refused (None: no tenant to record it in).
    Runs in a transaction of its own (the refused request's work, if any, has rolled back) and
    never raises: a refusal must stay a 403 even when the log cannot be written. Returns the
    entry, or None when the refusal was only counted."""
    if actor is None:
        return None
    key = actor if isinstance(actor, ApiKey) else None
    principal = key.principal if key is not None else actor
    try:
        return _refused(
            tenant_id=actor.tenant_id,
            principal=principal,
            key=key,
            path=path[:255],
            method=method,
            reason=reason,
            code=code,
            ip=ip,
            user_agent=user_agent,
        )
    except DatabaseError:
        log.exception("could not record authz.refused for %s %s", method, path)
        return None


def _refused(*, tenant_id, principal, key, path, method, reason, code, ip, user_agent):
    now = timezone.now()
    lookup = {"tenant_id": tenant_id, "actor": _actor_label(principal, key), "path": path}
    with transaction.atomic():
        try:
            with transaction.atomic():  # a concurrent first refusal may create it first
                AuditRefusalThrottle.objects.get_or_create(**lookup)
        except IntegrityError:
            pass
        row = AuditRefusalThrottle.objects.select_for_update().get(**lookup)
        count = row.pending + 1
        if row.audited_at is not None and now - row.audited_at < REFUSAL_WINDOW:
            AuditRefusalThrottle.objects.filter(pk=row.pk).update(pending=count)
            return None
        AuditRefusalThrottle.objects.filter(pk=row.pk).update(pending=0, audited_at=now)
        return audit(
            tenant=Tenant(pk=tenant_id),
            action="authz.refused",
            object_type="request",
            object_id=path,
            data={"method": method, "path": path, "code": code, "reason": reason, "count": count},
            principal=principal,
            key=key,
            ip=ip,
            user_agent=user_agent,
        )
