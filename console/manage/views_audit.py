"""/manage/audit/: the audit log with its filters, pages, exports, chain status and retention
(reads from console.audit.selectors; the chain check is the API's own service)."""

from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET

from console.audit import selectors
from console.audit.log import audit_verify
from console.web.admin_pages import admin_view, manage_page


@require_GET
@admin_view
def audit_index(request):
    context = selectors.audit_page_context(tenant=request.viewer.tenant, params=request.GET)
    return manage_page(request, "manage/audit.html", context, tab="audit")


@require_GET
@admin_view
def audit_chain(request):
    """The chain's status (htmx: the button on the page swaps it in)."""
    chain = audit_verify(tenant=request.viewer.tenant)
    return render(request, "manage/audit.html#chain-status", {"chain": chain, "checked": True})


urlpatterns = [
    path("manage/audit/", audit_index, name="manage-audit"),
    path("manage/audit/verify/", audit_chain, name="manage-audit-verify"),
]
