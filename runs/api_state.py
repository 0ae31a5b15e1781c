"""Runs over the wire, the other two ways in: whole RunStates and IRunOutcomes. Handlers only
translate (the services and selectors do the work)."""

from typing import Annotated

from ninja import Router, Status
from pydantic import SkipValidation

from console.core.wire import errors
from console.web.auth import ingest_auth
from runs import access as runs_access
from runs import schemas as s
from runs.schemas_state import RunOutcomeIn, RunStateIn, RunStateOut
from runs.selectors import run_resource
from runs.selectors_state import run_state_render
from runs.services.outcomes import run_outcome_apply
from runs.services.snapshots import run_state_put_body

router = Router(tags=["runs"])


@router.put(
    "/runs/{run_id}/state",
    auth=ingest_auth,
    response={201: s.RunOut, 200: s.RunOut, **errors(409, 413, 422)},
    by_alias=True,
    summary="Put a whole RunState (201 when it creates the run; an identical state is a no-op)",
)
def runs_state_put(request, run_id: str, payload: Annotated[RunStateIn, SkipValidation]):
    # The service validates, after looking whether these very bytes put the current state.
    run, created = run_state_put_body(
        tenant=request.auth.tenant, run_id=run_id, body=request.body, data=payload
    )
    return Status(201 if created else 200, run_resource(run=run))


@router.get(
    "/runs/{run_id}/state",
    auth=ingest_auth,
    response={200: RunStateOut, **errors(404)},
    by_alias=True,
    exclude_unset=True,
    summary="The run as a RunState, with decisions applied (to resume it elsewhere)",
)
def runs_state_get(request, run_id: str):
    run = runs_access.run_for(viewer=request.auth, run_id=run_id)
    return run_state_render(run=run)


@router.post(
    "/runs/{run_id}/outcome",
    auth=ingest_auth,
    response={200: s.RunOut, **errors(404, 409, 413, 422)},
    by_alias=True,
    summary="Report an invocation's outcome (IRunOutcome: DONE, PAUSED or ABORTED)",
)
def runs_outcome(request, run_id: str, payload: RunOutcomeIn):
    run = runs_access.run_in_tenant(tenant_id=request.auth.tenant_id, run_id=run_id)
    return run_resource(run=run_outcome_apply(run=run, outcome=payload))
