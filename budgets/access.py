"""Budgets' tenant scoping: the budgets a viewer reaches. Another tenant's budget is NotFound
(404), like a missing one; a missing capability is Forbidden (403). The viewer and its
capabilities are console.directory.access's; this module applies that one rule to budgets."""

from django.db.models import QuerySet

from budgets.models import Budget
from console.core.errors import NotFound
from console.directory.access import Viewer, require_capability

BUDGET_RELATED = ("team", "principal", "agent", "tenant")


def budgets_visible_to(*, viewer: Viewer) -> QuerySet:
    """The tenant's active budgets (archived ones are kept but no longer listed)."""
    require_capability(viewer, "view_budgets")
    return Budget.objects.filter(tenant_id=viewer.tenant_id, archived_at__isnull=True)


def budget_for(*, viewer: Viewer, budget_id: str, capability: str = "view_budgets") -> Budget:
    """The budget a viewer asks for (archived ones too: their history is kept): NotFound
    outside its tenant, Forbidden without the capability."""
    budget = (
        Budget.objects.select_related(*BUDGET_RELATED)
        .filter(tenant_id=viewer.tenant_id, public_id=budget_id)
        .first()
    )
    if budget is None:
        raise NotFound(f"no budget '{budget_id}'", code="budget_not_found")
    require_capability(viewer, capability)
    return budget


def budget_in_tenant(*, tenant_id: int, budget_id: str) -> None:
    """NotFound unless this tenant holds a budget with this id (the API's 404 check)."""
    if not Budget.objects.filter(tenant_id=tenant_id, public_id=budget_id).exists():
        raise NotFound(f"no budget '{budget_id}'", code="budget_not_found")
