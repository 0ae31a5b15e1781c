"""Sign in with SSO: the browser side of a tenant's OpenID Connect (the authorization-code
flow with PKCE S256, a fresh state and nonce per attempt).

`POST /accounts/sso/` (CSRF; `org` = a tenant slug or a work email whose domain a tenant
proved it owns) answers the same page for any `org`, which moves on to
`/accounts/sso/continue/`: there, for a known organisation, an attempt starts (its state, nonce
and PKCE verifier go into the session under the tenant's slug) and the browser goes to the
provider; any other `org` ends at a refusal. The provider sends it back to
`/accounts/sso/<slug>/callback/`, where the attempt is taken out of the session (one use),
the state compared, the code exchanged (with the verifier) and the ID token verified
(console/oidc.py); then the principal it names is signed in (console/services/sso.py).
Every refusal is a page that says what went wrong and a `signin.failed` in the tenant's audit
log (the tenant is in the callback's address, so even a stray callback is recorded).
"""

import hmac
import logging
import secrets
import time
from urllib.parse import urlencode

from django.contrib.auth import login
from django.core import signing
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from console.core import crypto
from console.core.errors import Conflict
from console.directory import access, oidc, signin
from console.directory.services import audit, sso_domains
from console.directory.services import sso as services
from console.models import Tenant, TenantOidc
from console.web.reauth import USER_AGENT_LIMIT, _safe_next

log = logging.getLogger("console.sso")
SESSION_KEY = "gavel_sso"
ATTEMPT_SECONDS = 10 * 60  # an attempt not completed within this is refused
BACKEND = "console.logins.LoginBackend"


def _facts(request, **extra) -> dict:
    return {
        "method": "sso",
        "address": signin.client_address(request),
        "userAgent": request.META.get("HTTP_USER_AGENT", "")[:USER_AGENT_LIMIT],
        **extra,
    }


def _refused(request, *, tenant, reason: str, message: str, principal_id=None, status=403):
    """The refusal page, and `signin.failed` in the tenant's audit log."""
    if tenant is not None:
        audit(
            tenant=tenant,
            action="signin.failed",
            object_type="principal" if principal_id else "tenant",
            object_id=principal_id or tenant.slug,
            data=_facts(request, reason=reason, detail=message[:500]),
        )
    else:
        log.warning("SSO sign-in refused for no tenant: %s %s", reason, message)
    context = {"message": message, "reason": reason}
    return render(request, "registration/sso_refused.html", context, status=status)


def _config_for(org: str) -> TenantOidc | None:
    """The SSO settings of a tenant named by slug, or by a work email's domain."""
    org = org.strip().lower()
    if "@" in org:  # only a domain its tenant proved it owns
        return sso_domains.domain_routed(org.rsplit("@", 1)[1])
    return TenantOidc.objects.select_related("tenant").filter(tenant__slug=org).first()


CONTINUE_SESSION_KEY = "gavel_sso_continue"
CONTINUE_SALT = "gavel.sso.continue"
UNKNOWN_MESSAGE = (
    'We can\'t sign you in with single sign-on as "{org}". Check your organisation or work '
    "email, or sign in with your password."
)


@never_cache
@require_POST
def sso_start(request):
    """The same answer for any `org`, known or not (no tenant is told apart here): a page
    that moves on to /accounts/sso/continue/ with the request signed and bound to this
    session; that step sends a known organisation's people to its provider and ends any
    other at a refusal."""
    org = str(request.POST.get("org", ""))[:254].strip()
    nonce = secrets.token_urlsafe(16)
    request.session[CONTINUE_SESSION_KEY] = nonce
    ticket = signing.dumps(
        {"org": org, "next": _safe_next(request, request.POST.get("next")), "n": nonce},
        salt=CONTINUE_SALT,
    )
    url = f"{reverse('sso_continue')}?{urlencode({'t': ticket})}"
    return render(request, "registration/sso_redirect.html", {"sso_url": url})


def _ticket(request) -> dict | None:
    nonce = request.session.pop(CONTINUE_SESSION_KEY, None)
    try:
        data = signing.loads(request.GET.get("t", ""), salt=CONTINUE_SALT, max_age=ATTEMPT_SECONDS)
    except signing.BadSignature:
        return None
    if not nonce or not hmac.compare_digest(str(data.get("n", "")), nonce):
        return None
    return data


@never_cache
@require_GET
def sso_continue(request):
    data = _ticket(request)
    if data is None:
        message = "No sign-in was in progress here (it was used already, or expired)."
        return _refused(request, tenant=None, reason="no_attempt", message=message)
    org = str(data.get("org", ""))
    config = _config_for(org) if org else None
    if config is None:
        message = UNKNOWN_MESSAGE.format(org=org[:100])
        return _refused(request, tenant=None, reason="unknown_org", message=message)
    try:
        metadata = oidc.discover(config.issuer)
    except oidc.OidcError as error:
        return _refused(
            request,
            tenant=config.tenant,
            reason="discovery_failed",
            message=f"Your organisation's identity provider could not be reached: {error.message}",
            status=502,
        )
    attempt = oidc.new_attempt()
    attempts = request.session.get(SESSION_KEY, {})
    attempts[config.tenant.slug] = {**attempt, "at": time.time(), "next": data.get("next") or "/"}
    request.session[SESSION_KEY] = attempts
    url = oidc.authorization_url(
        metadata,
        client_id=config.client_id,
        redirect_uri=services.redirect_uri(config.tenant, request),
        attempt=attempt,
        login_hint=org.lower() if "@" in org else None,
    )
    # Not an answer to a form (that was /accounts/sso/'s page), so the login form's CSP
    # (form-action 'self') does not apply to this redirect.
    return redirect(url)


def _take_attempt(request, slug: str) -> dict | None:
    attempts = request.session.get(SESSION_KEY, {})
    attempt = attempts.pop(slug, None)
    request.session[SESSION_KEY] = attempts
    return attempt


def _check_response(request, config, attempt) -> None:
    """Raises OidcError unless the provider's answer belongs to this very attempt."""
    params = request.GET
    if attempt is None:
        raise oidc.OidcError(
            "no_attempt", "No sign-in was in progress here (it was used already, or expired)."
        )
    if params.get("error"):
        raise oidc.OidcError(
            "idp_error",
            f"Your identity provider did not sign you in ({params.get('error')[:100]}).",
        )
    if not hmac.compare_digest(str(params.get("state", "")), attempt["state"]):
        raise oidc.OidcError("state_mismatch", "This answer is not for the sign-in you started.")
    if time.time() - attempt["at"] > ATTEMPT_SECONDS:
        raise oidc.OidcError("attempt_expired", "The sign-in took too long: start it again.")
    if params.get("iss") not in (None, config.issuer):
        raise oidc.OidcError("issuer_mismatch", "The answer came from an unknown issuer.")
    if not params.get("code"):
        raise oidc.OidcError("no_code", "Your identity provider sent no code.")


def _claims(request, config, attempt) -> dict:
    """The verified claims of the ID token this attempt's code is exchanged for."""
    _check_response(request, config, attempt)
    metadata = oidc.discover(config.issuer)
    secret = crypto.decrypt(config.client_secret_encrypted) or ""
    if not secret:
        raise oidc.OidcError("no_secret", "Single sign-on needs its client secret set again.")
    token = oidc.exchange_code(
        metadata,
        client_id=config.client_id,
        client_secret=secret,
        redirect_uri=services.redirect_uri(config.tenant, request),
        code=request.GET["code"],
        verifier=attempt["verifier"],
    )
    return oidc.verify_id_token(
        token["id_token"],
        jwks=oidc.jwks(metadata),
        issuer=config.issuer,
        client_id=config.client_id,
        nonce=attempt["nonce"],
        access_token=token.get("access_token"),
    )


@never_cache
@require_GET
def sso_callback(request, slug: str):
    tenant = Tenant.objects.filter(slug=slug).first()
    config = TenantOidc.objects.filter(tenant=tenant).first() if tenant else None
    attempt = _take_attempt(request, slug)
    if config is None:
        message = "This organisation does not sign in with SSO."
        return _refused(request, tenant=tenant, reason="not_configured", message=message)
    try:
        claims = _claims(request, config, attempt)
        signed_in, user = services.sso_principal(config=config, claims=claims)
    except oidc.OidcError as error:
        return _refused(request, tenant=tenant, reason=error.reason, message=error.message)
    except services.Refused as refusal:
        return _refused(
            request,
            tenant=tenant,
            reason=refusal.reason,
            message=refusal.message,
            principal_id=refusal.principal_id,
        )
    login(request, user, backend=BACKEND)
    request.session[access.TENANT_SESSION_KEY] = tenant.pk
    principal = signed_in.principal
    audit(
        tenant=tenant,
        action="signin.succeeded",
        object_type="principal",
        object_id=principal.external_id,
        data=_facts(request, issuer=config.issuer, created=signed_in.created),
        principal=principal,
    )
    return redirect(attempt["next"])


# --- a domain's verification by mail (console/services/sso_domains.py) ---


@never_cache
def sso_domain_confirm(request, token: str):
    """The link mailed to a domain's administrative address: GET asks to confirm (a link
    scanner that follows it confirms nothing), POST (CSRF) verifies the domain once."""
    row = sso_domains.sso_domain_for_link(token=token)
    context = {"domain": row.domain if row else None, "tenant": row.tenant if row else None}
    if request.method == "POST" and row is not None:
        try:
            confirmed = sso_domains.sso_domain_confirm(token=token)
        except Conflict as error:
            context["refused"] = error.message
            confirmed = None
        context["confirmed"] = confirmed is not None
    status = 200 if row is not None else 404
    return render(request, "registration/sso_domain_confirm.html", context, status=status)


urlpatterns = [
    path("accounts/sso/", sso_start, name="sso_start"),
    path("accounts/sso/continue/", sso_continue, name="sso_continue"),
    path("accounts/sso/domains/<str:token>/", sso_domain_confirm, name="sso_domain_confirm"),
    path("accounts/sso/<slug:slug>/callback/", sso_callback, name="sso_callback"),
]
