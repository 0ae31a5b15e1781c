"""Exports (issue #27): one run as JSON, a whole tenant as a JSON Lines stream.

A run's export is what a new home for it would need: the run as a RunState (the shape of
`GET /runs/{runId}/state`, decisions applied), its approvals (the shape of
`GET /approvals`), its decisions (the long-poll's shape) and the audit entries about it
(its approvals' and the run's own, the shape of `GET /audit`), oldest first.

A tenant's export streams one JSON object per line, `{"type": ..., "data": ...}`: first
`tenant` (its settings) and `retention`, then every `principal`, every `run` (each a run
export), every `auditEntry` (oldest first), and last `end` with the counts, so a reader can
tell a complete export from a cut one. Rows are read in keyset chunks: memory stays bounded
whatever the tenant holds. Both are `admin` only (they hold the audit log); both sign the
audit chain's head first, like the audit log's own export."""

from __future__ import annotations

import json
from collections.abc import Iterator

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Q
from pydantic.alias_generators import to_camel

from approvals.models import DECIDED, Approval
from approvals.schemas import ApprovalOut, approval_resource
from budgets.spend import run_costs
from console.audit.selectors import audit_resource, audit_wire
from console.directory import access
from console.directory.selectors import principal_resource
from console.directory.services.tenant import tenant_settings
from console.models import AuditEvent, Principal, Tenant
from retention.policy import retention_settings
from runs import access as runs_access
from runs.models import Run
from runs.selectors_state import decision_item, run_state_render

CHUNK = 200
_ENCODER = DjangoJSONEncoder


def _plain(value):
    """The value as JSON text would carry it (times as ISO 8601)."""
    return json.loads(json.dumps(value, cls=_ENCODER))


def _audit_rows(qs) -> Iterator[dict]:
    after = 0
    qs = qs.select_related("actor_principal", "actor_key").order_by("pk")
    while True:
        chunk = list(qs.filter(pk__gt=after)[:CHUNK])
        for entry in chunk:
            yield _plain(audit_wire(audit_resource(entry)))
        if len(chunk) < CHUNK:
            return
        after = chunk[-1].pk


def run_export(*, run: Run) -> dict:
    """One run's export (see the module's doc). The caller checked the viewer's rights."""
    state = run_state_render(run=run)
    approvals = list(
        Approval.objects.filter(run=run)
        .select_related("decided_by", "decided_by_rule")
        .order_by("requested_at", "pk")
    )
    costs = run_costs(runs=[run])
    ids = [a.public_id for a in approvals]
    about = Q(object_type="run", object_id=run.external_id)
    if ids:
        about |= Q(object_type="approval", object_id__in=ids)
    entries = AuditEvent.objects.filter(about, tenant_id=run.tenant_id)
    return {
        "runId": run.external_id,
        "state": _plain(state),
        "approvals": [
            ApprovalOut.model_validate(
                approval_resource(a, costs=costs, run_id=run.external_id)
            ).model_dump(by_alias=True, mode="json")
            for a in approvals
        ],
        "decisions": [
            _plain(decision_item(a))
            for a in sorted(
                (a for a in approvals if a.status in DECIDED),
                key=lambda a: (a.decision_seq or 0, a.pk),
            )
        ],
        "auditEntries": list(_audit_rows(entries)),
    }


def run_export_for(*, viewer, run_id: str) -> dict:
    """The viewer's run (404 outside its tenant) exported; `admin` only."""
    access.require_capability(viewer, "admin")
    return run_export(run=runs_access.run_for(viewer=viewer, run_id=run_id))


def _line(kind: str, data) -> str:
    return json.dumps({"type": kind, "data": data}, cls=_ENCODER, ensure_ascii=False) + "\n"


def tenant_export_lines(*, viewer) -> Iterator[str]:
    """The viewer's tenant as JSON Lines (see the module's doc); `admin` only, checked before
    the first line."""
    access.require_capability(viewer, "admin")
    return _tenant_lines(tenant_id=viewer.tenant_id)


def _tenant_lines(*, tenant_id: int) -> Iterator[str]:
    tenant = Tenant.objects.get(pk=tenant_id)
    yield _line("tenant", tenant_settings(tenant))
    yield _line("retention", retention_settings(tenant))
    counts = {"principals": 0, "runs": 0, "auditEntries": 0}
    after = 0
    principals = Principal.objects.filter(tenant_id=tenant_id).select_related("user")
    while chunk := list(principals.filter(pk__gt=after).order_by("pk")[:CHUNK]):
        for principal in chunk:
            resource = principal_resource(principal)
            yield _line("principal", {to_camel(k): v for k, v in resource.items()})
            counts["principals"] += 1
        after = chunk[-1].pk
    after = 0
    runs = Run.objects.filter(tenant_id=tenant_id).defer("snapshot")
    while chunk := list(
        runs.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:CHUNK]
    ):
        for pk in chunk:
            run = Run.objects.filter(pk=pk).first()
            if run is not None:  # pruned meanwhile
                yield _line("run", run_export(run=run))
                counts["runs"] += 1
        after = chunk[-1]
    for entry in _audit_rows(AuditEvent.objects.filter(tenant_id=tenant_id)):
        yield _line("auditEntry", entry)
        counts["auditEntries"] += 1
    yield _line("end", counts)
