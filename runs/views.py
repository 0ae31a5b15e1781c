"""Run pages: the list (/runs/) and one run (/runs/<runId>/), plus their htmx fragments.

Views only translate: the filter form turns the query string into `RunFilters`, and each page
or fragment renders a named partial from the one context function that builds it
(runs/selectors_pages.py), so a fragment is byte-for-byte the page's own unit.
"""

from django import forms
from django.shortcuts import render

from console.web.pages import error_page, viewer_view
from runs import selectors_pages as pages
from runs.models import RunStatus

GROUPS = (("principal", "principal"), ("conversation", "conversation"))


class RunFilterForm(forms.Form):
    principal = forms.CharField(required=False, max_length=255, strip=True)
    no_principal = forms.BooleanField(required=False)
    conversation = forms.CharField(required=False, max_length=255, strip=True)
    no_conversation = forms.BooleanField(required=False)
    agent = forms.CharField(required=False, max_length=255, strip=True)
    status = forms.ChoiceField(required=False, choices=[("", "any"), *RunStatus.choices])
    since = forms.DateField(required=False)
    until = forms.DateField(required=False)
    q = forms.CharField(required=False, max_length=128, strip=True)
    group = forms.ChoiceField(required=False, choices=GROUPS)
    limit = forms.IntegerField(required=False, min_value=1, max_value=pages.MAX_PAGE_SIZE)
    before = forms.RegexField(required=False, regex=pages.CURSOR_RE)
    after = forms.RegexField(required=False, regex=pages.CURSOR_RE)

    def clean(self):
        data = super().clean()
        if data.get("since") and data.get("until") and data["since"] > data["until"]:
            self.add_error("until", "must not be before 'since'")
        if data.get("before") and data.get("after"):
            self.add_error("after", "give either 'before' or 'after', not both")
        return data

    def filters(self) -> pages.RunFilters:
        data = {k: v for k, v in self.cleaned_data.items() if v not in (None, "")}
        return pages.RunFilters(**data)


def _wants_fragment(request) -> bool:
    """An htmx swap of the list (not a history restore, which needs the whole page)."""
    return bool(request.htmx) and not request.htmx.history_restore_request


@viewer_view
def run_list(request):
    """The list; an htmx request (filters, pager) gets only the `run-list` partial."""
    form = RunFilterForm(request.GET)
    template = "runs/list.html#run-list" if _wants_fragment(request) else "runs/list.html"
    if not form.is_valid():  # a bad filter changes nothing: it is named, no runs are listed
        context = {"form": form, "errors": form.errors, "groups": [], "nav_active": "runs"}
        return render(request, template, context, status=400)
    context = pages.runs_list_context(viewer=request.viewer, filters=form.filters())
    context.update(form=form, nav_active="runs")
    return render(request, template, context)


@viewer_view
def run_row(request, run_id: str):
    context = pages.run_row_context(viewer=request.viewer, run_id=run_id)
    return render(request, "runs/list.html#run-row", context)


@viewer_view
def run_detail(request, run_id: str):
    context = pages.run_page_context(viewer=request.viewer, run_id=run_id)
    return render(request, "runs/detail.html", context)


@viewer_view
def run_partial(request, run_id: str, name: str):
    builder = pages.PARTIALS.get(name)
    if builder is None:
        return error_page(request, status=404, title="Not found", message=f"no part '{name}'")
    run = pages.run_page_run(viewer=request.viewer, run_id=run_id)
    context = builder(viewer=request.viewer, run=run)
    return render(request, f"runs/detail.html#{name}", context)


@viewer_view
def run_step(request, run_id: str, number: int):
    run = pages.run_page_run(viewer=request.viewer, run_id=run_id)
    context = pages.run_step_context(viewer=request.viewer, run=run, number=number)
    return render(request, "runs/detail.html#run-step", context)
