from budgets.rules import THRESHOLD_MAX, THRESHOLD_MIN
from budgets.services import budget_ensure
from console.core.commands import ProvisioningCommand, split_csv
from console.core.errors import Invalid
from console.directory.services import tenant_get

SCOPES = "tenant|team:NAME|principal:ID|agent:ID"


def _scope(raw: str) -> dict:
    kind, _, name = raw.partition(":")
    if kind == "tenant" and not name:
        return {"type": "tenant", "id": None}
    if kind in ("team", "principal", "agent") and name:
        return {"type": kind, "id": name}
    raise Invalid(f"--scope must be {SCOPES}, not '{raw}'")


def _positive(raw: str | None, option: str) -> int | None:
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise Invalid(f"{option} must be a whole number of at least 1, not '{raw}'")
    return int(raw)


def _thresholds(raw: str) -> list[int]:
    values = split_csv(raw) or []
    if not all(v.isdigit() and THRESHOLD_MIN <= int(v) <= THRESHOLD_MAX for v in values):
        raise Invalid(
            f"--thresholds must be percents from {THRESHOLD_MIN} to {THRESHOLD_MAX}, not '{raw}'"
        )
    return [int(v) for v in values]


class Command(ProvisioningCommand):
    help = (
        "Create a budget, or update the active budget of that name to the values given. "
        "Prints the budget id on its last line."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--name", required=True)
        parser.add_argument("--scope", required=True, help=SCOPES)
        parser.add_argument("--period", required=True, choices=("day", "week", "month"))
        parser.add_argument("--ceiling", required=True, help="minor units of the currency")
        parser.add_argument("--ceiling-tokens")
        parser.add_argument("--thresholds", help="percents, default 80,100")
        parser.add_argument("--over-budget", choices=("refuse", "ask"))
        parser.add_argument("--lead", action="append", help="a principal id (repeatable)")

    def handle(self, *args, tenant, name, scope, period, ceiling, **options):
        fields = {
            "name": name,
            "scope": _scope(scope),
            "period": period,
            "ceiling_minor_units": _positive(ceiling, "--ceiling"),
        }
        if options["ceiling_tokens"] is not None:
            fields["ceiling_tokens"] = _positive(options["ceiling_tokens"], "--ceiling-tokens")
        if options["thresholds"] is not None:
            fields["thresholds"] = _thresholds(options["thresholds"])
        if options["over_budget"] is not None:
            fields["over_budget"] = options["over_budget"]
        if options["lead"] is not None:
            fields["leads"] = options["lead"]
        budget, created = budget_ensure(tenant=tenant_get(slug=tenant), fields=fields)
        self.stdout.write(
            f"budget '{budget.name}' {'created' if created else 'updated'} in tenant {tenant}: "
            f"{budget.scope_type}{':' + budget.scope_id if budget.scope_id else ''}, "
            f"{budget.ceiling_minor_units} per {budget.period}"
        )
        self.stdout.write(budget.public_id)
