"""The forms of /manage/principals/, /manage/roles/ and /manage/teams/.

They only translate: form fields become the API's body, validated by the API's own schema
(console/schemas_directory.py), so a page accepts and refuses exactly what the API does; the
view then calls the services the API calls, and their 422s (the details name the wire path)
and 409s land on the fields they name.
"""

from __future__ import annotations

from django import forms

from console.directory.schemas import directory as s
from console.web.forms import SchemaForm

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


class DirectoryForm(SchemaForm):
    """The directory's forms: a problem inside a field (a role map's key, say) names it; a
    taken name or id is shown on its field."""

    conflict_field = {"principal_exists": "id", "role_exists": "name", "team_exists": "name"}

    def message_for(self, path, message: str) -> str:
        parts = [str(p) for p in path]
        if len(parts) > 1 and self.field_for(path) and not parts[1].isdigit():
            return f"{parts[1]}: {message}"
        return message


class PrincipalNewForm(DirectoryForm):
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


class PrincipalDetailsForm(DirectoryForm):
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


class PrincipalRolesForm(DirectoryForm):
    schema = s.PrincipalPatch
    roles = forms.MultipleChoiceField(required=False, choices=())

    def __init__(self, *args, roles=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["roles"].choices = [(r, r) for r in roles]

    def body(self) -> dict:
        return {"roles": list(self.cleaned_data.get("roles") or [])}


class PrincipalPasswordForm(DirectoryForm):
    schema = s.PrincipalPatch
    password = forms.CharField(required=False)

    def body(self) -> dict:
        return {"password": self.cleaned_data.get("password") or ""}


class RoleForm(DirectoryForm):
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


class TeamForm(DirectoryForm):
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
