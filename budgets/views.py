"""Budget pages: /budgets/ (every budget's burn chart, usage breakdowns over a time range),
/budgets/<budgetId>/ (one budget, its alerts and overrides), their htmx fragments and CSVs, and
the create / edit forms for `manage_budgets` holders.

Views only translate: the range is read by the parser GET /api/v1/usage uses, every partial is
rendered from its one context function (budgets/selectors_pages.py), the CSVs are the API's rows
(`usage_report` / `usage_csv_lines`), and the forms call the services the API calls.
"""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import redirect, render

from budgets import access as budgets_access
from budgets import schemas, selectors, services
from budgets import selectors_pages as pages
from budgets.forms import NEW_INITIAL, OVER_BUDGET, PERIODS, SCOPES, BudgetForm, initial
from console.core.csvsafe import csv_text
from console.core.errors import Conflict, Invalid
from console.directory import access
from console.web.pages import error_page, viewer_view

INDEX = "budgets/index.html"
DETAIL = "budgets/detail.html"


def _csv(lines: list[list], filename: str) -> HttpResponse:
    response = HttpResponse(csv_text(lines), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _range(request):
    """(the range, None) or (None, the Invalid naming the bad parameter)."""
    try:
        usage = pages.usage_range(
            viewer=request.viewer, raw_from=request.GET.get("from"), raw_to=request.GET.get("to")
        )
    except Invalid as error:
        return None, error
    return usage, None


@viewer_view
def index(request):
    """Every budget; the breakdowns of the range (a bad range: 400, named, nothing listed)."""
    access.require_capability(request.viewer, "view_budgets")
    usage, error = _range(request)
    context = pages.budgets_page_context(viewer=request.viewer, usage=usage)
    context.update(
        nav_active="budgets",
        range_error=error,
        typed={"from": request.GET.get("from", ""), "to": request.GET.get("to", "")},
    )
    return render(request, INDEX, context, status=400 if error else 200)


@viewer_view
def index_partial(request, name: str):
    """A fragment of /budgets/ (a client re-fetching after a reconnect)."""
    viewer = request.viewer
    if name == "budget-list":
        return render(request, f"{INDEX}#budget-list", pages.budget_list_context(viewer=viewer))
    access.require_capability(viewer, "view_budgets")
    usage, error = _range(request)
    if error is not None:
        raise error
    if name == "usage-summary":  # the range's totals: the day breakdown's report
        context = pages.usage_breakdown_context(viewer=viewer, dimension="day", usage=usage)
        return render(request, f"{INDEX}#usage-summary", context)
    dimension = name.removeprefix("usage-")
    if name.startswith("usage-") and dimension in pages.DIMENSIONS:
        context = pages.usage_breakdown_context(viewer=viewer, dimension=dimension, usage=usage)
        return render(request, f"{INDEX}#usage-breakdown", context)
    return error_page(request, status=404, title="Not found", message=f"no part '{name}'")


@viewer_view
def usage_csv(request):
    """The rows GET /api/v1/usage?format=csv answers, with the same query parameters."""
    viewer = request.viewer
    access.require_capability(viewer, "view_budgets")
    query = schemas.usage_query(
        raw_from=request.GET.get("from"),
        raw_to=request.GET.get("to"),
        raw_group_by=request.GET.get("groupBy"),
        raw_format="csv",
        today=selectors.tenant_today(tenant=viewer.tenant),
    )
    query.pop("csv")
    report = selectors.usage_report(viewer=viewer, **query)
    name = f"usage-{report['from']}-{report['to']}.csv"
    return _csv(selectors.usage_csv_lines(report), name)


@viewer_view
def detail(request, budget_id: str):
    context = pages.budget_page_context(viewer=request.viewer, budget_id=budget_id)
    context.update(nav_active="budgets", scopes=dict(SCOPES))
    return render(request, DETAIL, context)


@viewer_view
def detail_partial(request, budget_id: str, name: str):
    viewer = request.viewer
    budget = pages.budget_page_budget(viewer=viewer, budget_id=budget_id)
    if name == f"budget-{budget.public_id}":
        context = pages.budget_card_context(viewer=viewer, budget=budget)
        return render(request, f"{INDEX}#budget-card", context)
    build = pages.DETAIL_PARTIALS.get(name)
    if build is None:
        return error_page(request, status=404, title="Not found", message=f"no part '{name}'")
    return render(request, f"{DETAIL}#{name}", build(viewer=viewer, budget=budget))


@viewer_view
def burn_csv(request, budget_id: str):
    budget = pages.budget_page_budget(viewer=request.viewer, budget_id=budget_id)
    lines = pages.burn_csv_lines(viewer=request.viewer, budget=budget)
    return _csv(lines, f"{budget.public_id}-{lines[1][0] if len(lines) > 1 else 'period'}.csv")


# --- create and edit (manage_budgets) ---


def _form_page(request, form, *, budget=None, status=200):
    context = {
        "form": form,
        "budget": budget,
        "scopes": SCOPES,
        "periods": PERIODS,
        "over_budget": OVER_BUDGET,
        "nav_active": "budgets",
        "currency": request.viewer.tenant.currency,
        **pages.budget_form_choices(viewer=request.viewer),
    }
    return render(request, "budgets/form.html", context, status=status)


def _saved(request, form, save, *, budget=None):
    """Validate like the API, save through the service, or re-render with the errors."""
    if not form.is_valid():
        return _form_page(request, form, budget=budget, status=422)
    try:
        saved = save(form.fields_sent())
    except (Invalid, Conflict) as error:
        form.refused(error)
        return _form_page(request, form, budget=budget, status=422)
    return redirect(f"/budgets/{saved.public_id}/")


@viewer_view
def create(request):
    viewer = request.viewer
    access.require_capability(viewer, "manage_budgets")
    currency = viewer.tenant.currency
    if request.method != "POST":
        return _form_page(request, BudgetForm(initial=NEW_INITIAL, currency=currency))

    def save(fields):
        return services.budget_create(tenant=viewer.tenant, fields=fields, viewer=viewer)

    return _saved(request, BudgetForm(request.POST, currency=currency), save)


@viewer_view
def edit(request, budget_id: str):
    viewer = request.viewer
    budget = budgets_access.budget_for(
        viewer=viewer, budget_id=budget_id, capability="manage_budgets"
    )
    currency = viewer.tenant.currency
    if request.method != "POST":
        form = BudgetForm(initial=initial(budget, currency=currency), currency=currency)
        return _form_page(request, form, budget=budget)

    def save(fields):
        return services.budget_update(budget=budget, fields=fields, viewer=viewer)

    return _saved(request, BudgetForm(request.POST, currency=currency), save, budget=budget)


@viewer_view
def archive(request, budget_id: str):
    """DELETE /budgets/{id}'s service: archived, no longer listed or applied."""
    viewer = request.viewer
    budget = budgets_access.budget_for(
        viewer=viewer, budget_id=budget_id, capability="manage_budgets"
    )
    if request.method != "POST":
        return error_page(request, status=405, title="Not allowed", message="use the form")
    services.budget_archive(budget=budget, viewer=viewer)
    return redirect("/budgets/")
