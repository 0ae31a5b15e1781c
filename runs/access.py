"""Runs' tenant scoping: the runs a viewer, a key or a writer reaches. Another tenant's run
is NotFound (404), like a missing one; a missing capability is Forbidden (403). The viewer and
its capabilities are console.directory.access's; this module applies that one rule to runs."""

from django.db.models import OuterRef, QuerySet, Subquery

from approvals.models import RuleVersion
from console.core.errors import NotFound
from console.core.kept import Kept
from console.directory.access import Viewer, kept_in_tenant, one_in_tenant, require
from runs.models import Run


def runs_visible_to(*, viewer: Viewer) -> QuerySet:
    require(viewer, "view_runs")
    return Run.objects.filter(tenant_id=viewer.tenant_id).defer("snapshot")


_LOCKED_RELATED, _LOCKED_DEFER = ("tenant", "principal", "agent"), ("snapshot",)


def run_locked(
    *, tenant_id: int, run_id: str, related=_LOCKED_RELATED, defer=_LOCKED_DEFER
) -> Run | None:
    """The run with this wire id in this tenant with its row locked (the row only, not its
    tenant's or principal's; the caller holds the transaction), or None. For writers. The
    latest RunState (up to the body limit) is read only by GET .../state: deferred. The
    tenant's rules version comes along (`rules_version`): a batch reads it with its run, in
    the same query (approvals.services.rules)."""
    if related == _LOCKED_RELATED and defer == _LOCKED_DEFER:  # every ingest batch's
        found = _RUN_LOCKED(tenant_id, run_id)
        return found[0] if found else None
    return _locked(tenant_id, run_id, related=related, defer=defer).first()


def _locked(tenant_id, run_id, *, related, defer) -> QuerySet:
    qs = Run.objects.filter(tenant_id=tenant_id, external_id=run_id).defer(*defer)
    version = RuleVersion.objects.filter(tenant_id=OuterRef("tenant_id")).values("version")[:1]
    qs = qs.annotate(rules_version=Subquery(version))
    return qs.select_for_update(of=("self",)).select_related(*related)


# Compiled once (console/core/kept.py). The wire id is unique in a tenant: no ORDER BY.
_RUN_LOCKED = Kept(
    lambda tenant_id, run_id: _locked(
        tenant_id, run_id, related=_LOCKED_RELATED, defer=_LOCKED_DEFER
    )[:1]
)


# A runtime's read of its run, compiled once (console/core/kept.py): most runtime requests.
_RUN_IN_TENANT = Kept(
    lambda tenant_id, run_id: Run.objects.defer("snapshot").filter(
        tenant_id=tenant_id, external_id=run_id
    )
)


def run_in_tenant(*, tenant_id: int, run_id: str, for_update: bool = False) -> Run:
    """The run with this wire id in this tenant, or NotFound. For writers (runtimes).
    `for_update`: locked (run_locked), with its tenant, principal and agent (the rollups'
    keys)."""
    if not for_update:
        return kept_in_tenant(
            _RUN_IN_TENANT, tenant_id=tenant_id, value=run_id, noun="run", code="run_not_found"
        )
    run = run_locked(tenant_id=tenant_id, run_id=run_id)
    if run is None:
        raise NotFound(f"no run '{run_id}'", code="run_not_found")
    return run


RUN_RELATED = ("agent", "principal", "conversation")  # what the run resource shows of them
_RUN_SHOWN = Kept(
    lambda tenant_id, run_id: (
        Run.objects.select_related(*RUN_RELATED)
        .defer("snapshot")
        .filter(tenant_id=tenant_id, external_id=run_id)
    )
)


def run_shown(*, viewer: Viewer, run_id: str) -> Run:
    """`run_for` with the run's agent, principal and conversation, in one read compiled once
    (the API's run resource, which runtimes poll)."""
    run = kept_in_tenant(
        _RUN_SHOWN, tenant_id=viewer.tenant_id, value=run_id, noun="run", code="run_not_found"
    )
    require(viewer, "view_runs")
    return run


def run_for(*, viewer: Viewer, run_id: str, for_update: bool = False):
    """The run a viewer asks for: NotFound outside its tenant, Forbidden without view_runs."""
    qs = Run.objects.defer("snapshot")
    run = one_in_tenant(
        qs.select_for_update() if for_update else qs, tenant_id=viewer.tenant_id, value=run_id,
        noun="run", code="run_not_found", field="external_id",
    )  # fmt: skip
    require(viewer, "view_runs")
    return run
