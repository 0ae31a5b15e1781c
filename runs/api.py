"""Runs over the wire: admission, listing, one run, events. Handlers only translate."""

from ninja import Query, Router, Status

from console.core.wire import errors, own_transaction
from console.web.auth import ingest_auth
from runs import schemas as s
from runs.selectors import run_get, run_resource, runs_list
from runs.services.ingest import run_admit, run_events_apply

router = Router(tags=["runs"])


@router.post(
    "/runs",
    auth=ingest_auth,
    response={201: s.RunOut, 200: s.RunOut, **errors(409, 413, 422)},
    by_alias=True,
    summary="Admit a run (201 new, 200 identical replay, 409 a different body)",
)
def runs_admit(request, payload: s.NewRunIn):
    run, created = run_admit(tenant=request.auth.tenant, body=payload)
    return Status(201 if created else 200, run_resource(run=run))


@router.get(
    "/runs",
    auth=ingest_auth,
    response={200: s.RunListOut, **errors(422)},
    by_alias=True,
    summary="List runs newest first (keyset pagination with an opaque cursor)",
)
def runs_index(request, filters: Query[s.RunListQuery]):
    return runs_list(viewer=request.auth, **filters.model_dump())


@router.get(
    "/runs/{run_id}",
    auth=ingest_auth,
    response={200: s.RunOut, **errors(404)},
    by_alias=True,
    summary="One run",
)
def runs_show(request, run_id: str):
    return run_get(viewer=request.auth, run_id=run_id)


@router.post(
    "/runs/{run_id}/events",
    auth=ingest_auth,
    response={200: s.EventsAppliedOut, **errors(404, 409, 413, 422)},
    by_alias=True,
    summary="Append a batch of 1..500 events in one transaction",
)
@own_transaction  # one transaction; the answer is its last seq
def runs_events(request, run_id: str, payload: s.EventBatchIn):
    last_seq = run_events_apply(
        tenant_id=request.auth.tenant_id, run_id=run_id, events=payload.events
    )
    return {"last_seq": last_seq}
