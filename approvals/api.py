"""Approvals over the wire: decisions for runtimes (long-poll) and deciding with a `decide` key
(or a signed-in browser session with CSRF). Handlers only translate."""

import asyncio
import contextlib
import random
from collections import Counter
from typing import Annotated, Any, Literal

from django.conf import settings
from ninja import Field, Query, Router
from pydantic import ConfigDict, WithJsonSchema
from pydantic.alias_generators import to_camel

from approvals import access as approvals_access
from approvals.schemas import (
    ApprovalOut,
    DecisionOut,
    approval_resource,
    parse_cursor,
    parse_wait,
)
from approvals.selectors import approvals_list
from approvals.services.bulk import MAX_BULK, approvals_decide_many
from approvals.services.decisions import UNSET, approval_decide, approvals_announce_delivered
from approvals.services.delivery import decisions_answer_async, recheck_seconds
from budgets.spend import run_costs
from console.core.db import released
from console.core.errors import Invalid, RateLimited
from console.core.wire import CamelSchema, OptionalCursor, errors, own_transaction
from console.live import realtime
from console.web.auth import browser_session, decide_auth, ingest_auth_held
from ops.context import Lifecycle
from runs import access as runs_access

router = Router(tags=["approvals"])
LONGPOLL_RETRY_AFTER = 2  # seconds a long-poll refused for its tenant's cap waits to read again


class DecisionsOut(CamelSchema):
    complete: bool
    decisions: list[DecisionOut]
    pending: list[str]
    cursor: str


class DecisionIn(CamelSchema):
    """A misspelt field is a 422, never silently dropped (as every request body here)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    decision: Literal["approve", "deny"]
    message: str | None = None
    arguments: Any = None


class ApprovalListOut(CamelSchema):
    items: list[ApprovalOut]
    next_cursor: str | None


class ApprovalListQuery(CamelSchema):
    status: Literal["pending", "approved", "denied", "expired", "cancelled"] | None = None
    run_id: str | None = None
    limit: Annotated[int, Field(ge=1, le=200)] = 50
    cursor: OptionalCursor = None


_background: set = set()  # keeps the pending hint tasks referenced until they finish


def _announce_later(*, run, approval_ids) -> None:
    """The "runtime resumed" hint for reviewers, sent after the answer is on its way."""
    if not approval_ids:
        return
    # Not thread-sensitive: it runs after its request's end, when the request's own thread
    # takes no more work (console/core/requestthreads.py); its connection goes back after it.
    task = asyncio.ensure_future(
        released(approvals_announce_delivered, thread_sensitive=False)(
            run=run, approval_ids=approval_ids
        )
    )
    _background.add(task)
    task.add_done_callback(_background.discard)


class HeldPolls:
    """The decisions long-polls this process holds: per tenant (at most
    GAVEL_LONGPOLL_MAX_PER_TENANT, so one tenant's runtimes cannot take a process from the
    others) and in all (their timer re-reads share one budget: `recheck_seconds`)."""

    by_tenant: Counter = Counter()
    total = 0

    @classmethod
    def full(cls, tenant_id: int) -> bool:
        return cls.by_tenant[tenant_id] >= settings.GAVEL_LONGPOLL_MAX_PER_TENANT

    @classmethod
    @contextlib.contextmanager
    def holding(cls, tenant_id: int):
        cls.by_tenant[tenant_id] += 1
        cls.total += 1
        try:
            yield
        finally:
            cls.total -= 1
            cls.by_tenant[tenant_id] -= 1
            if cls.by_tenant[tenant_id] <= 0:
                del cls.by_tenant[tenant_id]


async def _answer_now(*, run, after, deliver: bool) -> tuple[dict | None, float]:
    # Each read takes a connection and gives it back (to the pool): a held poll holds none
    # while it sleeps.
    answer = await decisions_answer_async(run=run, after=after, deliver=deliver)
    if answer.body is not None:
        _announce_later(run=run, approval_ids=answer.newly_delivered)
    return answer.body, answer.recheck_in


async def _wait_for_decisions(*, run, after, wait: float) -> dict:
    """Answer at once if there is something to say, else hold until a decision or an expiry
    lands (woken through the channel layer), re-checking the database on a timer. A tenant
    already holding its cap of polls here gets what there is to say, else a 429."""
    if wait > 0 and HeldPolls.full(run.tenant_id):
        body, _ = await _answer_now(run=run, after=after, deliver=False)
        if body is not None:
            return body
        raise RateLimited(
            "this tenant already holds as many waiting decision reads on this server as it "
            "may; read again after Retry-After",
            code="too_many_waiting",
            retry_after=LONGPOLL_RETRY_AFTER,
        )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    group = realtime.run_group(run.tenant_id, run.external_id)
    with HeldPolls.holding(run.tenant_id):
        async with realtime.wait_for(group) as woken:
            while True:
                # A server shutting down answers with what it holds (ops/serving.py).
                final = loop.time() >= deadline or Lifecycle.draining
                body, recheck_in = await _answer_now(run=run, after=after, deliver=final)
                if body is not None:
                    return body
                recheck = recheck_seconds(HeldPolls.total) * random.uniform(0.8, 1.0)  # noqa: S311
                timeout = min(deadline - loop.time(), recheck, recheck_in)
                await woken.wait(max(0.0, timeout))


@router.get(
    "/runs/{run_id}/decisions",
    auth=ingest_auth_held,
    response={200: DecisionsOut, **errors(404, 422)},
    by_alias=True,
    summary="The run's decisions for its runtime (long-poll up to `wait` seconds)",
)
async def run_decisions(
    request,
    run_id: str,
    # Both are checked by parse_wait / parse_cursor, after the 404 check; the schema says how.
    wait: Annotated[
        Annotated[str, WithJsonSchema({"type": "number", "minimum": 0, "maximum": 30})] | None,
        Query(description="seconds to hold, 0..30"),
    ] = None,
    after: Annotated[
        Annotated[str, WithJsonSchema({"type": "string", "pattern": r"^[0-9]{1,18}$"})] | None,
        Query(description="a cursor from an earlier answer (digits), or 0"),
    ] = None,
):
    # `wait` and `after` are validated here, after the 404 check (the contract's order), and
    # not by the schema: ninja's 422 path would look the run up from inside the event loop.
    run = await released(runs_access.run_in_tenant)(tenant_id=request.auth.tenant_id, run_id=run_id)
    unknown = sorted(set(request.GET) - {"wait", "after"})
    if unknown:  # a misspelt `wiat=30` would silently not wait
        raise Invalid(
            f"unknown query parameter {unknown[0]!r} (known: wait, after)",
            code="validation_error",
            details=[{"path": f"query.{n}", "message": "unknown parameter"} for n in unknown],
        )
    seconds = parse_wait(wait)
    cursor = parse_cursor(after)
    return await _wait_for_decisions(run=run, after=cursor, wait=seconds)


@router.post(
    "/approvals/{approval_id}/decision",
    auth=[decide_auth, browser_session],
    response={200: ApprovalOut, **errors(404, 409, 413, 422)},
    by_alias=True,
    summary="Decide a held call (exactly one decision wins; a decided call answers 409)",
)
@own_transaction  # the decision is one transaction; nothing is read after it commits
def approvals_decide(request, approval_id: str, payload: DecisionIn):
    """Everything the answer needs is read before the decision is written (a decision changes
    no cost), so its commit is the request's last database work: a request that fails before
    it changes nothing, and the runtime's wake (published at that commit) waits for no read
    of the answer."""
    viewer = request.auth
    approval = approvals_access.approval_for_decider(viewer=viewer, approval_id=approval_id)
    costs = run_costs(runs=[approval.run])
    arguments = payload.arguments if "arguments" in payload.model_fields_set else UNSET
    approval = approval_decide(
        approval=approval,
        viewer=viewer,
        decision=payload.decision,
        message=payload.message,
        arguments=arguments,
    )
    return approval_resource(approval, costs=costs)


@router.get(
    "/approvals",
    auth=decide_auth,
    response={200: ApprovalListOut, **errors(422)},
    by_alias=True,
    summary="Approvals of the key's tenant (oldest first), e.g. ?status=pending",
)
def approvals_index(request, filters: Query[ApprovalListQuery]):
    return approvals_list(viewer=request.auth, **filters.model_dump())


class BulkDecisionIn(CamelSchema):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    decision: Literal["approve", "deny"]
    approval_ids: Annotated[list[str], Field(min_length=1, max_length=MAX_BULK)]
    message: str | None = None


class BulkError(CamelSchema):
    code: str
    message: str
    details: Any = None


class BulkResultOut(CamelSchema):
    approval_id: str
    status: int
    approval: ApprovalOut | None = None
    error: BulkError | None = None


class BulkDecisionOut(CamelSchema):
    results: list[BulkResultOut]
    decided: int
    refused: int


@router.post(
    "/approvals/decisions",
    auth=[decide_auth, browser_session],
    response={200: BulkDecisionOut, **errors(413, 422)},
    by_alias=True,
    summary="Decide many held calls at once (each its own decision; refusals reported per call)",
)
def approvals_decide_bulk(request, payload: BulkDecisionIn):
    results = approvals_decide_many(
        viewer=request.auth,
        approval_ids=payload.approval_ids,
        decision=payload.decision,
        message=payload.message,
    )
    decided = [r["approval"] for r in results if r["approval"] is not None]
    costs = run_costs(runs=[a.run for a in decided])
    items = []
    for r in results:
        error = r["error"]
        items.append(
            {
                "approval_id": r["id"],
                "status": error.status if error else 200,
                "approval": approval_resource(r["approval"], costs=costs) if not error else None,
                "error": {"code": error.code, "message": error.message, "details": error.details}
                if error
                else None,
            }
        )
    return {"results": items, "decided": len(decided), "refused": len(results) - len(decided)}
