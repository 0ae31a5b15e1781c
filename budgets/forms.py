"""The budget form of /budgets/new/ and /budgets/<budgetId>/edit/.

It only translates: form fields become the API's body (a ceiling typed in the currency's major
units becomes minor units, comma lists become lists), and that body is validated by the API's
own `budgets.schemas.BudgetIn`. So the form accepts and refuses exactly what POST
/api/v1/budgets does (an edit submits the whole budget, which the same schema validates, and
PATCH's service takes every field); the view then calls the services the API calls, and their
422s (an unknown team, principal or lead) and 409s (a name in use) land on the fields they
name.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from babel.numbers import get_currency_precision
from django import forms

from budgets import schemas
from budgets.services import budget_snapshot
from console.core.formatting import money
from console.web.forms import SchemaForm

SCOPES = (
    ("tenant", "The whole tenant"),
    ("team", "A team"),
    ("principal", "A principal"),
    ("agent", "An agent"),
)
PERIODS = (("day", "Day"), ("week", "Week (from Monday)"), ("month", "Month"))
OVER_BUDGET = (("refuse", "Refuse the step"), ("ask", "Ask a lead (override approval)"))
# The first segment of a wire path (the API's 422 `details[].path`) -> the form field.
FIELD_OF = {
    "name": "name",
    "scope": "scope_id",
    "period": "period",
    "ceilingMinorUnits": "ceiling",
    "ceilingTokens": "ceiling_tokens",
    "thresholds": "thresholds",
    "overBudget": "over_budget",
    "leads": "leads",
}


def _field(path) -> str | None:
    parts = [str(p) for p in path]
    if parts[:2] == ["scope", "type"]:
        return "scope_type"
    return FIELD_OF.get(parts[0]) if parts else None


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


class BudgetForm(SchemaForm):
    """Every field is text here: what a value may be is the API schema's to say."""

    schema = schemas.BudgetIn
    field_of = FIELD_OF
    conflict_field = {"budget_exists": "name"}

    name = forms.CharField(required=False, label="Name")
    scope_type = forms.CharField(required=False, label="Applies to")
    scope_id = forms.CharField(required=False, label="Team, principal or agent")
    period = forms.CharField(required=False, label="Period")
    ceiling = forms.CharField(required=False, label="Ceiling")
    ceiling_tokens = forms.CharField(required=False, label="Token ceiling")
    thresholds = forms.CharField(required=False, label="Alert thresholds")
    over_budget = forms.CharField(required=False, label="Over budget")
    leads = forms.CharField(required=False, label="Leads")

    def __init__(self, *args, currency: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.currency = currency

    # --- form text -> the API body ---

    def _ceiling(self, text: str):
        digits = get_currency_precision(self.currency)
        try:
            amount = Decimal(text.replace(",", "").replace(" ", ""))
        except InvalidOperation:
            self.add_error("ceiling", f"'{text}' is not an amount in {self.currency}")
            return None
        if not amount.is_finite():
            self.add_error("ceiling", f"'{text}' is not an amount in {self.currency}")
            return None
        minor = amount.scaleb(digits)
        if minor != minor.to_integral_value():
            self.add_error("ceiling", f"{self.currency} has {digits} decimal places at most")
            return None
        return int(minor)

    def _integers(self, name: str, text: str) -> list[int] | None:
        values = []
        for item in _list(text):
            try:
                values.append(int(item))
            except ValueError:
                self.add_error(name, f"'{item}' is not a whole number")
                return None
        return values

    def body(self) -> dict:
        """The wire body these fields make (camelCase, as a client would POST it)."""
        data = self.cleaned_data
        body = {
            "name": data["name"],
            "scope": {"type": data["scope_type"], "id": data["scope_id"] or None},
            "period": data["period"],
            "overBudget": data["over_budget"] or "refuse",
            "leads": _list(data["leads"]),
        }
        if data["ceiling"]:
            ceiling = self._ceiling(data["ceiling"])
            if ceiling is not None:
                body["ceilingMinorUnits"] = ceiling
        tokens = self._integers("ceiling_tokens", data["ceiling_tokens"])
        if tokens is not None:
            if len(tokens) > 1:
                self.add_error("ceiling_tokens", "one whole number, or empty for none")
            body["ceilingTokens"] = tokens[0] if tokens else None
        thresholds = self._integers("thresholds", data["thresholds"])
        if thresholds is not None:
            body["thresholds"] = thresholds
        return body

    def field_for(self, path) -> str | None:
        return _field(path)

    def message_for(self, path, message: str) -> str:
        if self.field_for(path) == "ceiling" and "greater than or equal to 1" in message:
            return f"must be at least {money(1, self.currency)}"
        parts = list(path)
        if len(parts) == 2 and isinstance(parts[1], int) and parts[0] in ("thresholds", "leads"):
            return f"'{self.sent[parts[0]][parts[1]]}': {message}"  # which entry of the list
        return message


def initial(budget, *, currency: str) -> dict:
    """The edit form's values: the budget as the audit log records it (wire names)."""
    held = budget_snapshot(budget)
    digits = get_currency_precision(currency)
    ceiling = Decimal(held["ceilingMinorUnits"]).scaleb(-digits)
    return {
        "name": held["name"],
        "scope_type": held["scope"]["type"],
        "scope_id": held["scope"]["id"] or "",
        "period": held["period"],
        "ceiling": f"{ceiling:.{digits}f}",
        "ceiling_tokens": "" if held["ceilingTokens"] is None else str(held["ceilingTokens"]),
        "thresholds": ", ".join(str(t) for t in held["thresholds"]),
        "over_budget": held["overBudget"],
        "leads": ", ".join(held["leads"]),
    }


NEW_INITIAL = {"scope_type": "tenant", "period": "month", "thresholds": "80, 100"}
NEW_INITIAL["over_budget"] = "refuse"
