"""/manage/settings/sso/: the tenant's single sign-on settings (admin). The form only
translates: its fields become PATCH /api/v1/tenant/oidc's body, validated by that API's own
schema (console.schemas_oidc.OidcPatch), and saved by the service the API calls; their 422s
and 409s land on the fields they name."""

from django import forms
from django.urls import path
from django.views.decorators.http import require_POST

from console.core.errors import Conflict, Invalid, NotFound
from console.directory.schemas.oidc import OidcPatch
from console.directory.services import sso as services
from console.directory.services import sso_domains
from console.models import TenantOidc
from console.web.admin_pages import admin_view, manage_page
from console.web.forms import SchemaForm
from console.web.reauth import require_recent_auth

TEMPLATE = "manage/oidc.html"
# The first segment of a wire path (a 422's `details[].path`) -> the form field.
FIELD_OF = {
    "issuer": "issuer",
    "clientId": "client_id",
    "clientSecret": "client_secret",
    "principalClaim": "principal_claim",
    "groupsClaim": "groups_claim",
    "roleMap": "role_map",
    "emailDomains": "email_domains",
    "allowPasswordLogin": "allow_password_login",
}


class OidcForm(SchemaForm):
    """Text fields: what a value may be is the API schema's to say."""

    schema = OidcPatch
    field_of = FIELD_OF

    issuer = forms.CharField(required=False)
    client_id = forms.CharField(required=False)
    client_secret = forms.CharField(required=False, strip=False)
    principal_claim = forms.CharField(required=False)
    groups_claim = forms.CharField(required=False)
    role_map = forms.CharField(required=False)  # "idp-group = role", one per line
    email_domains = forms.CharField(required=False)  # comma-separated
    allow_password_login = forms.BooleanField(required=False)

    @classmethod
    def of(cls, config: TenantOidc | None):
        if config is None:
            return cls(
                initial={"principal_claim": "email", "groups_claim": "groups"}
                | {"allow_password_login": True}
            )
        return cls(
            initial={
                "issuer": config.issuer,
                "client_id": config.client_id,
                "principal_claim": config.principal_claim,
                "groups_claim": config.groups_claim,
                "role_map": "\n".join(f"{g} = {r}" for g, r in config.role_map.items()),
                "email_domains": ", ".join(config.email_domains),
                "allow_password_login": config.allow_password_login,
            }
        )

    def body(self) -> dict:
        data = self.cleaned_data
        role_map = {}
        for line in data["role_map"].splitlines():
            if line.strip():
                group, _, role = line.partition("=")
                role_map[group.strip()] = role.strip()
        body = {
            "issuer": data["issuer"].strip(),
            "clientId": data["client_id"].strip(),
            "principalClaim": data["principal_claim"].strip(),
            "groupsClaim": data["groups_claim"].strip(),
            "roleMap": role_map,
            "emailDomains": [d.strip() for d in data["email_domains"].split(",") if d.strip()],
            "allowPasswordLogin": data["allow_password_login"],
        }
        if data["client_secret"]:  # empty: keep the stored one
            body["clientSecret"] = data["client_secret"]
        return body


def _page(request, form, *, saved=False, status=200, domain_note=None, domain_error=None):
    config = services.oidc_of(request.viewer.tenant)
    context = {
        "form": form,
        "config": config,
        "saved": saved,
        "domains": sso_domains.domains_wire(request.viewer.tenant),
        "mail_local_parts": sso_domains.MAIL_LOCAL_PARTS,
        "domain_note": domain_note,
        "domain_error": domain_error,
        "redirect_uri": services.redirect_uri(request.viewer.tenant, request),
        "principal_claims": TenantOidc.PRINCIPAL_CLAIMS,
    }
    return manage_page(request, TEMPLATE, context, tab="settings", status=status)


@admin_view
def oidc_settings(request):
    if request.method != "POST":
        return _page(request, OidcForm.of(services.oidc_of(request.viewer.tenant)))
    return _save(request)


@require_recent_auth
def _save(request):
    form = OidcForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=422)
    try:
        services.oidc_update(
            tenant=request.viewer.tenant, fields=form.fields_sent(), viewer=request.viewer
        )
    except Invalid as error:
        form.refused(error)
        return _page(request, form, status=422)
    except Conflict as error:  # domain_taken
        form.add_error(
            "email_domains", f"{error.message}: {', '.join(error.details['emailDomains'])}"
        )
        return _page(request, form, status=409)
    return _page(request, OidcForm.of(services.oidc_of(request.viewer.tenant)), saved=True)


@admin_view
@require_POST
def oidc_domain_verify(request):
    """A claimed domain's proof: its DNS TXT record checked now (`method=dns`), or a one-time
    link mailed to one of its administrative addresses (`method=mail`, `to`)."""
    tenant, viewer = request.viewer.tenant, request.viewer
    domain = str(request.POST.get("domain", ""))[:253]
    note, error, status = None, None, 200
    try:
        if request.POST.get("method") == "mail":
            local = str(request.POST.get("to", ""))[:64]
            sso_domains.sso_domain_mail(
                tenant=tenant, domain=domain, local_part=local, viewer=viewer
            )
            note = f"A confirmation link is on its way to {local}@{domain}."
        else:
            row = sso_domains.sso_domain_verify_dns(tenant=tenant, domain=domain, viewer=viewer)
            note = f"{row.domain} is verified."
    except (Invalid, Conflict, NotFound) as refused:
        error, status = refused.message, refused.status
    form = OidcForm.of(services.oidc_of(tenant))
    return _page(request, form, domain_note=note, domain_error=error, status=status)


urlpatterns = [
    path("manage/settings/sso/", oidc_settings, name="manage_oidc"),
    path("manage/settings/sso/domains/verify/", oidc_domain_verify, name="manage_oidc_domain"),
]
