"""Usage and budgets over the wire (`manage` keys acting as their principal, or a signed-in
browser session), and the budget check for runtimes (`ingest`). Handlers only translate."""

from __future__ import annotations

from typing import Annotated

from django.http import HttpResponse
from ninja import Query, Router
from pydantic import ValidationError, WithJsonSchema

from budgets import access as budgets_access
from budgets import schemas as s
from budgets import selectors, services
from budgets.check import budget_check
from console.core.csvsafe import csv_text
from console.core.errors import Invalid
from console.core.wire import errors, own_transaction, strict_json, unstorable_text
from console.web.auth import CapableSession, PrincipalKeyAuth, ingest_auth
from runs import access as runs_access

router = Router(tags=["budgets"])

# A manage key acting as its principal, or a signed-in session; the capability is checked with
# the credentials, before the path's object is looked up or the body parsed.
READ = [PrincipalKeyAuth("manage", "view_budgets"), CapableSession("view_budgets")]
WRITE = [PrincipalKeyAuth("manage", "manage_budgets"), CapableSession("manage_budgets")]


# The query is checked by usage_query (after the credentials); the schema says what it takes.
Day = Annotated[str, WithJsonSchema({"type": "string", "format": "date"})]
GroupBy = Annotated[
    str,
    WithJsonSchema(
        {
            "type": "string",
            "pattern": "^(day|principal|agent|model|team)(,(day|principal|agent|model|team))*$",
        }
    ),
]
Format = Annotated[str, WithJsonSchema({"type": "string", "enum": ["json", "csv"]})]
USAGE_SPAN = (
    f"`from` must not be after `to`, and from..to (both days included) spans at most "
    f"{s.MAX_USAGE_DAYS} days: otherwise a 422 validation_error"
)
USAGE_FROM = (
    "the first day, YYYY-MM-DD in the tenant's time zone (default: the 1st of this month); "
    + USAGE_SPAN
)
USAGE_TO = "the last day, YYYY-MM-DD in the tenant's time zone (default: today); " + USAGE_SPAN


@router.get(
    "/usage",
    auth=READ,
    response={200: s.UsageOut, **errors(422)},
    by_alias=True,
    exclude_unset=True,
    summary="Usage by day, principal, agent, model and team (`format=csv`: text/csv)",
    openapi_extra={
        "responses": {
            200: {
                "description": "the report (JSON), or its rows as text/csv with format=csv",
                "content": {"text/csv": {"schema": {"type": "string"}}},
            }
        }
    },
)
def usage(
    request,
    date_from: Annotated[Day | None, Query(alias="from", description=USAGE_FROM)] = None,
    date_to: Annotated[Day | None, Query(alias="to", description=USAGE_TO)] = None,
    group_by: Annotated[
        GroupBy | None, Query(alias="groupBy", description="day,principal,agent,model,team")
    ] = None,
    format: Annotated[Format | None, Query(description="json (default) or csv")] = None,  # noqa: A002
):
    viewer = request.auth
    query = s.usage_query(
        raw_from=date_from,
        raw_to=date_to,
        raw_group_by=group_by,
        raw_format=format,
        today=selectors.tenant_today(tenant=viewer.tenant),
    )
    want_csv = query.pop("csv")
    report = selectors.usage_report(viewer=viewer, **query)
    if not want_csv:
        return report
    text = csv_text(selectors.usage_csv_lines(report))
    response = HttpResponse(text, content_type="text/csv; charset=utf-8")
    name = f"usage-{report['from']}-{report['to']}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@router.get(
    "/budgets",
    auth=READ,
    response={200: s.BudgetListOut, **errors(422)},
    by_alias=True,
    summary="The tenant's budgets with their current spend (oldest first, keyset pages)",
)
def budgets_index(request, query: Query[s.BudgetListQuery]):
    return selectors.budgets_list(viewer=request.auth, **query.model_dump())


@router.post(
    "/budgets",
    auth=WRITE,
    response={201: s.BudgetOut, **errors(409, 413, 422)},
    by_alias=True,
    summary="Create a budget (a name held by an active budget: 409 budget_exists)",
)
def budgets_create(request, payload: s.BudgetIn):
    viewer = request.auth
    budget = services.budget_create(
        tenant=viewer.tenant, fields=payload.model_dump(), viewer=viewer
    )
    return 201, selectors.budget_read(viewer=viewer, budget_id=budget.public_id)


def _check_body(request) -> dict:
    """The body as JSON (a 422 otherwise). Parsed here, not by ninja, so that an unknown
    `runId` is a 404 before the rest of the body is validated (the contract's order)."""
    try:
        body = strict_json(request.body)
    except ValueError:
        raise Invalid(
            "the body is not valid JSON",
            code="validation_error",
            details=[{"path": "body", "message": "not valid JSON"}],
        ) from None
    if not isinstance(body, dict):
        raise Invalid(
            "the body must be a JSON object",
            code="validation_error",
            details=[{"path": "body", "message": "not an object"}],
        )
    found = unstorable_text(request.body, body)
    if found is not None:
        where, problem = found
        path = ".".join(str(p) for p in where) or "body"
        raise Invalid(
            problem, code="validation_error", details=[{"path": path, "message": problem}]
        )
    return body


def _validated(body: dict) -> s.BudgetCheckIn:
    try:
        return s.BudgetCheckIn.model_validate(body)
    except ValidationError as error:
        details = [
            {"path": ".".join(str(p) for p in e["loc"]) or "body", "message": e["msg"]}
            for e in error.errors()
        ]
        raise Invalid(
            "the request body is invalid", code="validation_error", details=details
        ) from None


# Registered before /budgets/{budget_id}: `check` is not a budget id.
@router.post(
    "/budgets/check",
    auth=ingest_auth,
    response={200: s.BudgetCheckOut, **errors(404, 409, 413, 422)},
    by_alias=True,
    summary="May this run spend this much? (its limit and budgets, narrowest first)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": s.BudgetCheckIn.model_json_schema(by_alias=True)}
            },
        }
    },
)
# Reads only, or (over an `ask` budget) budgets.check._ask's one transaction, which writes the
# override's request; nothing is read after it commits. No BEGIN / COMMIT round trips around
# the common answer.
@own_transaction
def budgets_check(request):
    tenant_id = request.auth.tenant_id
    body = _check_body(request)
    run = None
    if isinstance(body.get("runId"), str):
        run = runs_access.run_in_tenant(tenant_id=tenant_id, run_id=body["runId"])  # 404 first
    payload = _validated(body)
    return budget_check(
        tenant_id=tenant_id,
        run_id=payload.run_id,
        estimated_cost=payload.estimated_cost_minor_units,
        estimated_tokens=payload.estimated_tokens,
        run=run,
    )


@router.get(
    "/budgets/{budget_id}",
    auth=READ,
    response={200: s.BudgetOut, **errors(404)},
    by_alias=True,
    summary="One budget (a deleted one too: active false) with its current spend",
)
def budgets_get(request, budget_id: str):
    return selectors.budget_read(viewer=request.auth, budget_id=budget_id)


@router.patch(
    "/budgets/{budget_id}",
    auth=WRITE,
    response={200: s.BudgetOut, **errors(404, 409, 413, 422)},
    by_alias=True,
    summary="Change any of a budget's fields",
)
def budgets_patch(request, budget_id: str, payload: s.BudgetPatch):
    viewer = request.auth
    budget = budgets_access.budget_for(
        viewer=viewer, budget_id=budget_id, capability="manage_budgets"
    )
    services.budget_update(budget=budget, fields=payload.changes(), viewer=viewer)
    return selectors.budget_read(viewer=viewer, budget_id=budget_id)


@router.delete(
    "/budgets/{budget_id}",
    auth=WRITE,
    response={204: None, **errors(404)},
    summary="Delete (archive) a budget: no longer listed or applied, its history kept",
)
def budgets_delete(request, budget_id: str):
    viewer = request.auth
    budget = budgets_access.budget_for(
        viewer=viewer, budget_id=budget_id, capability="manage_budgets"
    )
    services.budget_archive(budget=budget, viewer=viewer)
    return 204, None
