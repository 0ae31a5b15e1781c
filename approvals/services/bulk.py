"""Deciding many held calls at once (the desk's multi-select, across runs): each call is its own
decision through `approval_decide` (roles, four-eyes, exactly once, audit, live hints), and
each call's refusal or lost race is reported with it rather than failing the others."""

from __future__ import annotations

from django.db.models import Exists, OuterRef

from approvals.models import Approval
from approvals.services.decisions import DECISIONS, approval_decide
from console.core.errors import GavelError, Invalid, NotFound

MAX_BULK = 200  # calls one request may decide (a page of the desk holds 50)


def _validate(approval_ids, decision) -> list[str]:
    if decision not in DECISIONS:
        raise Invalid(
            "decision must be 'approve' or 'deny'",
            code="validation_error",
            details=[{"path": "decision", "message": "must be approve or deny"}],
        )
    if not approval_ids or len(approval_ids) > MAX_BULK:
        raise Invalid(
            f"approvalIds must hold 1 to {MAX_BULK} ids",
            code="validation_error",
            details=[{"path": "approvalIds", "message": f"1 to {MAX_BULK} ids"}],
        )
    return list(dict.fromkeys(approval_ids))  # each call once, in the order asked


def approvals_decide_many(*, viewer, approval_ids, decision, message=None) -> list[dict]:
    """Decide each of these calls (of the viewer's tenant) as `viewer`; a bad request body
    (Invalid) changes nothing. Returns one result a call, in the order asked (a repeated id
    once): `{"id", "approval": the Approval or None, "error": GavelError or None}`; another
    tenant's id is `approval_not_found`, exactly like one that does not exist."""
    ids = _validate(approval_ids, decision)
    found = {
        a.public_id: a
        for a in Approval.objects.with_run()
        .filter(tenant_id=viewer.tenant_id, public_id__in=ids)
        .annotate(mirrored=Exists(Approval.objects.filter(mirror_of=OuterRef("pk"))))
    }
    results = []
    for approval_id in ids:
        approval = found.get(approval_id)
        if approval is None:
            error = NotFound(f"no approval '{approval_id}'", code="approval_not_found")
            results.append({"id": approval_id, "approval": None, "error": error})
            continue
        try:
            decided = approval_decide(
                approval=approval, viewer=viewer, decision=decision, message=message
            )
        except GavelError as exc:  # Forbidden, Conflict (decided already), Invalid
            results.append({"id": approval_id, "approval": None, "error": exc})
            continue
        results.append({"id": approval_id, "approval": decided, "error": None})
    return results
