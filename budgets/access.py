"""Budgets' tenant scoping: the budgets a viewer reaches. Another tenant's budget is NotFound
(404), like a missing one; a missing capability is Forbidden (403). The viewer and its
capabilities are console.directory.access's; this module applies that one rule to budgets."""

from django.db.models import QuerySet

from budgets.models import Budget
from console.directory.access import Viewer, held_in_tenant, one_in_tenant, require_capability

BUDGET_RELATED = ("team", "principal", "agent", "tenant")


def budgets_visible_to(*, viewer: Viewer) -> QuerySet:
    """The tenant's active budgets (archived ones are kept but no longer listed)."""
    require_capability(viewer, "view_budgets")
    return Budget.objects.filter(tenant_id=viewer.tenant_id, archived_at__isnull=True)


def budget_for(*, viewer: Viewer, budget_id: str, capability: str = "view_budgets") -> Budget:
    """The budget a viewer asks for (archived ones too: their history is kept): NotFound
    outside its tenant, Forbidden without the capability."""
    budget = one_in_tenant(
        Budget.objects.select_related(*BUDGET_RELATED), tenant_id=viewer.tenant_id,
        value=budget_id, noun="budget", code="budget_not_found",
    )  # fmt: skip
    require_capability(viewer, capability)
    return budget


def budget_in_tenant(*, tenant_id: int, budget_id: str) -> None:
    """NotFound unless this tenant holds a budget with this id (the API's 404 check)."""
    held_in_tenant(
        Budget.objects, tenant_id=tenant_id, value=budget_id, noun="budget",
        code="budget_not_found",
    )  # fmt: skip
