"""Budgets (a ceiling on a scope's spend per calendar period), the alerts their thresholds
fired, and the over-budget overrides leads granted."""

import secrets

from django.db import models
from django.db.models import Q
from django.utils import timezone

from approvals.models import Approval
from console.models import Principal, Team, Tenant
from runs.models import Agent, Run


def new_budget_id() -> str:
    return "bdg_" + secrets.token_hex(12)


def default_thresholds() -> list[int]:
    return [80, 100]


class ScopeType(models.TextChoices):
    TENANT = "tenant"
    TEAM = "team"
    PRINCIPAL = "principal"
    AGENT = "agent"


class Period(models.TextChoices):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"


class OverBudget(models.TextChoices):
    REFUSE = "refuse"
    ASK = "ask"


class Budget(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budgets")
    public_id = models.CharField(max_length=32, unique=True, default=new_budget_id)
    name = models.CharField(max_length=200)
    scope_type = models.CharField(max_length=16, choices=ScopeType.choices)
    # Exactly the one the scope names (none for the tenant); a scoped team, principal or agent
    # cannot be deleted while a budget names it.
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.PROTECT, related_name="budgets"
    )
    principal = models.ForeignKey(
        Principal, null=True, blank=True, on_delete=models.PROTECT, related_name="budgets"
    )
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.PROTECT, related_name="budgets"
    )
    period = models.CharField(max_length=8, choices=Period.choices)
    ceiling_minor_units = models.BigIntegerField()
    ceiling_tokens = models.BigIntegerField(null=True, blank=True)
    thresholds = models.JSONField(default=default_thresholds)  # percents, 1..1000, ascending
    over_budget = models.CharField(
        max_length=8, choices=OverBudget.choices, default=OverBudget.REFUSE
    )
    # Who hears this budget's alerts and decides its overrides (none: manage_budgets holders).
    leads = models.ManyToManyField(Principal, blank=True, related_name="led_budgets")
    archived_at = models.DateTimeField(null=True, blank=True)  # deleted: kept, not applied
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=Q(archived_at__isnull=True),
                name="budget_unique_active_name",
            ),
            models.CheckConstraint(
                condition=(
                    Q(scope_type="tenant", team__isnull=True, principal__isnull=True)
                    & Q(agent__isnull=True)
                )
                | Q(
                    scope_type="team",
                    team__isnull=False,
                    principal__isnull=True,
                    agent__isnull=True,
                )
                | Q(scope_type="principal", team__isnull=True, principal__isnull=False)
                & Q(agent__isnull=True)
                | Q(scope_type="agent", team__isnull=True, principal__isnull=True)
                & Q(agent__isnull=False),
                name="budget_scope_names_one",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "archived_at"], name="budget_tenant_active")]

    def __str__(self):
        return self.public_id

    @property
    def is_active(self) -> bool:
        return self.archived_at is None

    @property
    def scope_id(self) -> str | None:
        if self.scope_type == ScopeType.TEAM:
            return self.team.name
        if self.scope_type == ScopeType.PRINCIPAL:
            return self.principal.external_id
        if self.scope_type == ScopeType.AGENT:
            return self.agent.external_id
        return None


class BudgetAlert(models.Model):
    """A threshold a budget's spend reached in a period: written once per (budget, period,
    threshold), in the ingest transaction whose usage reached it."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    period_start = models.DateTimeField()  # local midnight of the period's first day
    threshold = models.PositiveIntegerField()  # percent of the ceiling
    spent_minor_units = models.BigIntegerField()  # the spend that reached it
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period_start", "threshold"], name="budgetalert_once"
            )
        ]
        ordering = ["at", "id"]

    def __str__(self):
        return f"{self.budget_id}@{self.threshold}%"


OVERRIDE_TOOL = "budget.override"  # the tool name of an over-budget approval


class BudgetOverride(models.Model):
    """An over-budget check that asked a human: its pending `budget.override` approval on the
    run, the estimate asked for, and (once approved) whether a check used the grant up."""

    approval = models.OneToOneField(
        Approval, on_delete=models.CASCADE, related_name="budget_override"
    )
    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="overrides")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="budget_overrides")
    estimated_cost_minor_units = models.BigIntegerField()
    estimated_tokens = models.BigIntegerField(default=0)
    used_at = models.DateTimeField(null=True, blank=True)  # the one step it allowed
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["run", "budget"], name="budgetoverride_run")]
