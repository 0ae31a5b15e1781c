"""The one writer of a decision: every path (a reviewer, a `decide` key, a bulk decision, the
expiry clock) settles an approval through `approval_settle`.

A decision is one conditional UPDATE (`status='pending'` → decided) plus its AuditEvent, in one
transaction. The runs' rows are locked first, in primary-key order, so that a run's decisions
get gap-free, ordered cursors (`decision_seq`) and commit in that order (ingest locks the run
too); the conditional UPDATE is what picks the single winner. A parent's mirrored approval and
the parked child's call are the same call and are settled together.
"""

from django.db import connections, transaction
from django.db.models import Exists, Max, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.db.models.sql import UpdateQuery
from django.utils import timezone

from approvals.models import Approval, ApprovalStatus, Webhook
from approvals.services.webhooks import webhooks_approval_decided
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
    base = Approval.objects.select_related("run", "run__tenant")
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
    hooked = Exists(Webhook.objects.filter(tenant_id=OuterRef("tenant_id"), is_active=True))
    rows = (
        Run.objects.select_for_update(of=("self",))
        .filter(pk__in=sorted(set(run_ids)))
        .order_by("pk")
        .annotate(hooked=hooked)
        .values_list("tenant_id", "hooked")
    )
    return {tenant_id for tenant_id, has in rows if has}


def _next_decision_seq(run_id: int):
    """The run's next decision cursor, computed by the UPDATE that takes it (under the run's
    lock, so gap-free): no read of its own before the write."""
    top = (
        Approval.objects.filter(run_id=run_id)
        .order_by()
        .values("run_id")
        .annotate(m=Max("decision_seq"))
        .values("m")
    )
    return Coalesce(Subquery(top), Value(0)) + 1


def _update_returning(approval, pending, fields, *, principal, key, rule) -> bool:
    """`pending.update(**fields)` as one UPDATE ... RETURNING: when it wins, `approval` holds
    the row as written (as refresh_from_db would, with no read after the write; its loaded
    run and the deciders stay loaded). False when no row matched (the call lost)."""
    query = pending.query.chain(UpdateQuery)
    query.add_update_values(fields)
    sql, params = query.get_compiler(pending.db).as_sql()
    quote = connections[pending.db].ops.quote_name
    columns = ", ".join(quote(field.column) for field in Approval._meta.concrete_fields)
    rows = list(Approval.objects.raw(f"{sql} RETURNING {columns}", params))
    if len(rows) != 1:
        return False
    (row,) = rows
    for field in Approval._meta.concrete_fields:  # a changed key drops its loaded object
        setattr(approval, field.attname, getattr(row, field.attname))
    # The deciders as written, loaded (the answer names them: no query for them).
    approval.decided_by, approval.decided_via_key, approval.decided_by_rule = principal, key, rule
    return True


def _settle_one(
    approval, *, status, message, arguments, principal, key, rule, now, action, via, hooked
) -> bool:
    """The conditional UPDATE and its audit row. True when this call won."""
    fields = {
        "status": status,
        "decided_by": principal,
        "decided_via_key": key,
        "decided_by_rule": rule,
        "decided_at": now,
        "message": message,
        "decided_arguments": arguments,
        "decision_seq": _next_decision_seq(approval.run_id),
    }
    pending = Approval.objects.filter(pk=approval.pk, status=ApprovalStatus.PENDING)
    if status == ApprovalStatus.EXPIRED:
        pending = pending.filter(expires_at__lte=now)  # not one extended meanwhile
    else:
        pending = pending.filter(expires_at__gt=now)  # never approve past expiry
    if not _update_returning(approval, pending, fields, principal=principal, key=key, rule=rule):
        return False
    # Published first: on commit, the waiting runtime's wake goes out before the audit chain
    # is sealed (on_commit callbacks run in the order they were registered).
    realtime.approvals_changed(run=approval.run, approval_ids=[approval.public_id], change=status)
    audit(
        tenant=approval.run.tenant,
        action=action,
        object_type="approval",
        object_id=approval.public_id,
        principal=principal,
        key=key,
        rule=rule,  # the actor of a rule's decision
        data={
            "runId": approval.run.external_id,
            "toolCallId": approval.tool_call_id,
            "toolName": approval.tool_name,
            "status": status,
            "message": message,
            "argumentsEdited": arguments is not None and arguments != approval.arguments,
            **({"via": via} if via else {}),
        },
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
