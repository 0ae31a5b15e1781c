"""The forms of /manage/principals/, /manage/roles/ and /manage/teams/.

They only translate: form fields become the API's body, validated by the API's own schema
(console/schemas_directory.py), so a page accepts and refuses exactly what the API does; the
view then calls the services the API calls, and their 422s (the details name the wire path)
and 409s land on the fields they name.
"""

from __future__ import annotations

from django import forms
from pydantic import ValidationError
from pydantic.alias_generators import to_snake

from console.core.errors import GavelError
from console.directory.schemas import directory as s

CAPABILITY_HELP = {
    "view_runs": "See runs and their approvals",
    "decide": "Decide calls of the tools below",
    "view_budgets": "See usage and budgets",
    "manage_budgets": "Create and edit budgets, decide overrides",
    "manage_rules": "Create and edit lasting decision rules",
    "admin": "Everything, including this console",
}


def lines(text: str) -> list[str]:
    """Globs or names typed one a line or comma-separated."""
    return [item.strip() for item in text.replace(",", "\n").splitlines() if item.strip()]


class ApiForm(forms.Form):
    """A form whose cleaned body is validated by `schema` (the API's). Subclasses say how
    their fields make the body (`body()`)."""

    schema = None
    # A wire field -> the form field that shows its errors (same name, snake_case, by default).
    field_of: dict = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.payload = None

    def body(self) -> dict:
        raise NotImplementedError

    def clean(self):
        data = super().clean()
        try:
            self.payload = self.schema.model_validate(self.body())
        except ValidationError as error:
            for problem in error.errors():
                self._show(problem.get("loc", ()), problem.get("msg", "invalid"))
        return data

    def _show(self, path, message: str) -> None:
        parts = [str(p) for p in path]
        wire = parts[0] if parts else ""
        field = self.field_of.get(wire, to_snake(wire))
        if field not in self.fields:
            field = None
        if len(parts) > 1 and field:
            message = f"{parts[1]}: {message}" if not parts[1].isdigit() else message
        self.add_error(field, message)

    def fields_sent(self) -> dict:
        """What the services take (snake_case): a PATCH schema's changes, else every field."""
        if hasattr(self.payload, "changes"):
            return self.payload.changes()
        return self.payload.model_dump()

    def refused(self, error: GavelError) -> None:
        """A service's 422 (details name the wire path) or 409, shown on its field."""
        details = error.details if isinstance(error.details, list) else []
        for detail in details:
            self._show(str(detail.get("path", "")).split("."), detail.get("message", ""))
        if not details:
            field = {"principal_exists": "id", "role_exists": "name", "team_exists": "name"}
            target = field.get(error.code)
            self.add_error(target if target in self.fields else None, error.message)


class PrincipalNewForm(ApiForm):
    schema = s.PrincipalIn
    id = forms.CharField(required=False, label="Id")
    name = forms.CharField(required=False, label="Name")
    email = forms.CharField(required=False, label="Email")
    roles = forms.MultipleChoiceField(required=False, choices=())
    teams = forms.MultipleChoiceField(required=False, choices=())
    password = forms.CharField(required=False, label="Password")

    def __init__(self, *args, roles=(), teams=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["roles"].choices = [(r, r) for r in roles]
        self.fields["teams"].choices = [(t, t) for t in teams]

    def body(self) -> dict:
        d = self.cleaned_data
        body = {"id": d.get("id", ""), "name": d.get("name", ""), "email": d.get("email", "")}
        body["roles"] = list(d.get("roles") or [])
        body["teams"] = list(d.get("teams") or [])
        if d.get("password"):
            body["password"] = d["password"]
        return body


class PrincipalDetailsForm(ApiForm):
    """Name, email and teams (not sensitive)."""

    schema = s.PrincipalPatch
    name = forms.CharField(required=False)
    email = forms.CharField(required=False)
    teams = forms.MultipleChoiceField(required=False, choices=())

    def __init__(self, *args, teams=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["teams"].choices = [(t, t) for t in teams]

    def body(self) -> dict:
        d = self.cleaned_data
        return {
            "name": d.get("name", ""),
            "email": d.get("email", ""),
            "teams": list(d.get("teams") or []),
        }


class PrincipalRolesForm(ApiForm):
    schema = s.PrincipalPatch
    roles = forms.MultipleChoiceField(required=False, choices=())

    def __init__(self, *args, roles=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["roles"].choices = [(r, r) for r in roles]

    def body(self) -> dict:
        return {"roles": list(self.cleaned_data.get("roles") or [])}


class PrincipalPasswordForm(ApiForm):
    schema = s.PrincipalPatch
    password = forms.CharField(required=False)

    def body(self) -> dict:
        return {"password": self.cleaned_data.get("password") or ""}


class RoleForm(ApiForm):
    """New (`schema` RoleIn, with a name) or edit (RolePatch, the name is the URL's)."""

    field_of = {"decideTools": "decide_tools", "slackDecide": "slack_decide"}
    name = forms.CharField(required=False)
    capabilities = forms.MultipleChoiceField(required=False, choices=())
    decide_tools = forms.CharField(required=False, widget=forms.Textarea)
    slack_decide = forms.BooleanField(required=False)

    def __init__(self, *args, new: bool, capabilities=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.new = new
        self.schema = s.RoleIn if new else s.RolePatch
        # Any value is accepted here: an unknown capability is the service's 422 to name.
        known = list(capabilities) + [v for v in self.data.getlist("capabilities", [])]
        self.fields["capabilities"].choices = [(c, c) for c in dict.fromkeys(known)]

    def body(self) -> dict:
        d = self.cleaned_data
        body = {
            "capabilities": list(d.get("capabilities") or []),
            "decideTools": lines(d.get("decide_tools") or ""),
            "slackDecide": bool(d.get("slack_decide")),
        }
        if self.new:
            body["name"] = d.get("name", "")
        return body


class TeamForm(ApiForm):
    name = forms.CharField(required=False)
    members = forms.MultipleChoiceField(required=False, choices=())
    leads = forms.MultipleChoiceField(required=False, choices=())

    def __init__(self, *args, new: bool, principals=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.new = new
        self.schema = s.TeamIn if new else s.TeamPatch
        for name in ("members", "leads"):
            self.fields[name].choices = [(p, p) for p in principals]

    def body(self) -> dict:
        d = self.cleaned_data
        body = {"members": list(d.get("members") or []), "leads": list(d.get("leads") or [])}
        if self.new:
            body["name"] = d.get("name", "")
        return body
