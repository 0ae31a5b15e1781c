"""The one writer of a decision: every path (a reviewer, a `decide` key, a bulk decision, the
expiry clock) settles an approval through `approval_settle`.

A decision is one conditional UPDATE (`status='pending'` → decided) plus its AuditEvent, in one
transaction. The runs' rows are locked first, in primary-key order, so that a run's decisions
get gap-free, ordered cursors (`decision_seq`) and commit in that order (ingest locks the run
too); the conditional UPDATE is what picks the single winner. A parent's mirrored approval and
the parked child's call are the same call and are settled together. A call a lasting rule
decides as it is asked is born decided (`approvals_insert`): the same fields, cursor, audit
entry, live update and webhook, written with its row.
"""

import functools

from django.db import connections, transaction
from django.db.models import Count, Exists, Max, OuterRef, Q
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, Webhook
from approvals.services.webhooks import webhooks_approval_decided
from console.audit.log import audit_many
from console.core.kept import Kept
from console.core.rows import instances_insert
from console.directory.services import audit
from console.live import realtime
from runs.models import Run


def approval_mirror_targets(approval: Approval) -> list[Approval]:
    """Every other approval of the same held call: up the `mirror_of` chain to the sub-run's
    own approval, then every mirror of it at any depth (parent, grandparent...).
    Each comes with `run` and `run.tenant` loaded. An approval read with its `mirrored`
    annotation (access.approval_for_decider) that mirrors nothing and has no mirror costs no
    query."""
    if approval.mirror_of_id is None and getattr(approval, "mirrored", None) is False:
        return []
    base = Approval.objects.with_run()
    root, seen = approval, {approval.pk}
    while root.mirror_of_id and root.mirror_of_id not in seen:
        root = base.get(pk=root.mirror_of_id)
        seen.add(root.pk)
    group, frontier = {root.pk: root}, [root.pk]
    while frontier:
        found = list(base.filter(mirror_of_id__in=frontier).exclude(pk__in=list(group)))
        group.update({a.pk: a for a in found})
        frontier = [a.pk for a in found]
    return [a for pk, a in group.items() if pk != approval.pk]


def _lock_runs(run_ids) -> set[int]:
    """Lock the runs' rows in primary-key order (no deadlock with ingest, which locks runs).
    Returns the runs' tenants that have an active webhook (read in the same statement: a tenant
    without one costs the decision no webhook query)."""
    rows = _LOCK_RUNS(*sorted(set(run_ids)))
    return {tenant_id for tenant_id, has in rows if has}


# `_lock_runs`' statement, compiled once per number of runs (console/core/kept.py).
_LOCK_RUNS = Kept(
    lambda *run_ids: (
        Run.objects.select_for_update(of=("self",))
        .filter(pk__in=run_ids)
        .order_by("pk")
        .annotate(
            hooked=Exists(Webhook.objects.filter(tenant_id=OuterRef("tenant_id"), is_active=True))
        )
        .values_list("tenant_id", "hooked")
    )
)


def _lock_run_once(run) -> set[int]:
    """`_lock_runs` of one run, once per transaction: a unit of work deciding many calls of
    its run (an ingest batch requesting them one by one) locks it on the first. The mark is
    a no-op commit hook of this transaction: gone at its commit or rollback (or with a
    rolled-back savepoint that took the lock), so a later transaction locks again."""
    kept = run.__dict__.get("_gavel_run_locked")
    pending = transaction.get_connection().run_on_commit
    if kept is not None and any(func is kept[0] for _, func, _ in pending):
        return kept[1]
    hooked = _lock_runs([run.pk])

    def mark() -> None:
        return None

    transaction.on_commit(mark)
    run.__dict__["_gavel_run_locked"] = (mark, hooked)
    return hooked


# The fields a decision writes, in the order of `_decide_sql`'s SET (then its cursor).
_DECIDED = (
    "status",
    "decided_by",
    "decided_via_key",
    "decided_by_rule",
    "decided_at",
    "message",
    "decided_arguments",
)


@functools.cache
def _decide_sql(alias: str, expired: bool) -> str:
    """The decision's one conditional UPDATE ... RETURNING, made once per database (the ORM
    compiled it afresh for each decision, ~1 ms of CPU). Its cursor is the run's next
    `decision_seq`, computed by the UPDATE that takes it (under the run's lock, so gap-free:
    no read of its own before the write). An expiry settles only a call whose expiry has
    passed (not one extended meanwhile); a decision never approves past expiry. Identifiers
    come from the model; every value is a parameter (`_decide_params`)."""
    meta = Approval._meta
    quote = connections[alias].ops.quote_name
    table = quote(meta.db_table)

    def column(name: str) -> str:
        return quote(meta.get_field(name).column)

    sets = ", ".join(f"{column(name)} = %s" for name in _DECIDED)
    seq, run = column("decision_seq"), column("run")
    cursor = f"COALESCE((SELECT MAX(U0.{seq}) FROM {table} U0 WHERE U0.{run} = %s), 0) + 1"  # noqa: S608
    returning = ", ".join(quote(field.column) for field in meta.concrete_fields)
    return (
        f"UPDATE {table} SET {sets}, {seq} = {cursor} "  # noqa: S608
        f"WHERE {quote(meta.pk.column)} = %s AND {column('status')} = %s "
        f"AND {column('expires_at')} {'<=' if expired else '>'} %s RETURNING {returning}"
    )


def _decide_params(approval, values: dict, now, alias: str) -> list:
    """`_decide_sql`'s values, each prepared as the ORM prepares it for that field."""
    meta, connection = Approval._meta, connections[alias]
    params = []
    for name in _DECIDED:
        field, value = meta.get_field(name), values[name]
        if field.is_relation:
            field, value = field.target_field, getattr(value, "pk", None)
        params.append(field.get_db_prep_save(value, connection))
    expires = meta.get_field("expires_at").get_db_prep_value(now, connection)
    return [*params, approval.run_id, approval.pk, ApprovalStatus.PENDING.value, expires]


def _update_returning(approval, values: dict, *, now, expired: bool) -> bool:
    """The decision's UPDATE ... RETURNING (`_decide_sql`): when it wins, `approval` holds the
    row as written (as refresh_from_db would, with no read after the write; its loaded run
    and the deciders stay loaded). False when no row matched (the call lost)."""
    alias = "default"
    sql = _decide_sql(alias, expired)
    rows = list(Approval.objects.raw(sql, _decide_params(approval, values, now, alias)))
    if len(rows) != 1:
        return False
    (row,) = rows
    for field in Approval._meta.concrete_fields:  # a changed key drops its loaded object
        setattr(approval, field.attname, getattr(row, field.attname))
    # The deciders as written, loaded (the answer names them: no query for them).
    approval.decided_by = values["decided_by"]
    approval.decided_via_key = values["decided_via_key"]
    approval.decided_by_rule = values["decided_by_rule"]
    return True


def _decided_entry(approval, *, status, message, arguments, principal, key, rule, action, via):
    """The audit entry of a decision (`audit`'s arguments)."""
    return {
        "tenant": approval.run.tenant,
        "action": action,
        "object_type": "approval",
        "object_id": approval.public_id,
        "principal": principal,
        "key": key,
        "rule": rule,  # the actor of a rule's decision
        "data": {
            "runId": approval.run.external_id,
            "toolCallId": approval.tool_call_id,
            "toolName": approval.tool_name,
            "status": status,
            "message": message,
            "argumentsEdited": arguments is not None and arguments != approval.arguments,
            **({"via": via} if via else {}),
        },
    }


def approvals_insert(*, run, rows: list[Approval], decisions: dict) -> bool:
    """Insert a run's new approvals, numbered after its others, in one INSERT; those a
    lasting rule decided as they were asked (`decisions`: row index -> (status, message,
    arguments, rule)) are born decided: their decision is written with the row (not by an
    UPDATE after it), and each gets what `approval_settle` gives a rule's decision — its
    decision cursor (the run's row locked first, so cursors stay gap-free and ordered), its
    audit entry (one INSERT for them all), its live update and its webhook. A row already
    past its expiry is never approved: it is left pending (the expiry clock takes it). One
    read before the INSERT: the run's last position and cursor, and whether it holds one of
    these tool calls already (False then, nothing written)."""
    now = timezone.now()
    decided = [i for i in sorted(decisions) if rows[i].expires_at > now]
    hooked: set[int] = set()
    if decided:
        hooked = _lock_run_once(run)
    ids = [row.tool_call_id for row in rows]
    top = Approval.objects.filter(run_id=run.pk).aggregate(
        position=Max("position"),
        cursor=Max("decision_seq"),
        held=Count("pk", filter=Q(tool_call_id__in=ids)),
    )
    if top["held"]:
        return False
    for position, row in enumerate(rows, start=(top["position"] or 0) + 1):
        row.position = position
    if decided:
        for seq, index in enumerate(decided, start=(top["cursor"] or 0) + 1):
            status, message, arguments, rule = decisions[index]
            row = rows[index]
            row.status, row.message, row.decided_arguments = status, message, arguments
            row.decided_by_rule, row.decided_at, row.decision_seq = rule, now, seq
    instances_insert(rows, key="public_id")  # one INSERT, as one JSON parameter (PostgreSQL)
    for row in rows:  # nothing mirrors a call held just now: settling it looks for no mirror
        row.mirrored = False
    realtime.approvals_changed(
        run=run, approval_ids=[r.public_id for r in rows], change="requested"
    )
    if not decided:
        return True
    born = [rows[i] for i in decided]
    for status in sorted({row.status for row in born}):
        ids = [row.public_id for row in born if row.status == status]
        realtime.approvals_changed(run=run, approval_ids=ids, change=status)
    audit_many(
        [
            _decided_entry(
                row,
                status=row.status,
                message=row.message,
                arguments=row.decided_arguments,
                principal=None,
                key=None,
                rule=row.decided_by_rule,
                action="approval.decided",
                via=None,
            )
            for row in born
        ]
    )
    if run.tenant_id in hooked:
        for row in born:
            webhooks_approval_decided(approval_id=row.pk, tenant_id=row.tenant_id)
    return True


def _settle_one(
    approval, *, status, message, arguments, principal, key, rule, now, action, via, hooked
) -> bool:
    """The conditional UPDATE and its audit row. True when this call won."""
    values = {
        "status": status,
        "decided_by": principal,
        "decided_via_key": key,
        "decided_by_rule": rule,
        "decided_at": now,
        "message": message,
        "decided_arguments": arguments,
    }
    expired = status == ApprovalStatus.EXPIRED
    if not _update_returning(approval, values, now=now, expired=expired):
        return False
    # Published first: on commit, the waiting runtime's wake goes out before the audit chain
    # is sealed (on_commit callbacks run in the order they were registered).
    realtime.approvals_changed(run=approval.run, approval_ids=[approval.public_id], change=status)
    audit(
        **_decided_entry(
            approval,
            status=status,
            message=message,
            arguments=arguments,
            principal=principal,
            key=key,
            rule=rule,
            action=action,
            via=via,
        )
    )
    if approval.tenant_id in hooked:
        webhooks_approval_decided(approval_id=approval.pk, tenant_id=approval.tenant_id)
    return True


def approval_settle(
    *, approval, status, message, arguments, principal=None, key=None, rule=None, action, via=None
) -> bool:
    """Decide an approval and its mirrors in one transaction. True when this call won.
    `rule`: a lasting rule decided it (approvals/services/rules.py; no principal then).
    `via`: where a person decided it when that is not the console or the API ("slack"), kept
    in the audit entry."""
    now = timezone.now()
    with transaction.atomic():
        targets = approval_mirror_targets(approval)
        hooked = _lock_runs([approval.run_id] + [t.run_id for t in targets])
        common = {
            "hooked": hooked,
            "status": status,
            "principal": principal,
            "key": key,
            "rule": rule,
            "now": now,
            "via": via,
        }
        if not _settle_one(approval, message=message, arguments=arguments, action=action, **common):
            return False
        for target in targets:
            _settle_one(target, message=message, arguments=arguments, action=action, **common)
    return True
