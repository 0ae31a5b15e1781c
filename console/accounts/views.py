"""The sign-in pages: /accounts/login/ with the lockout, /accounts/reauth/ (the password again,
then back), and the tenant switcher. Every password check of the browser goes through
`password_attempt`, and sensitive actions through `require_recent_auth`: both are
console/web/reauth.py, the base every app's page may use."""

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView, redirect_to_login
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from console.directory import access, signin
from console.directory.services import sso
from console.live import realtime
from console.web.pages import error_page
from console.web.reauth import (
    REAUTH_FIELD,
    _prompt,
    _reauthenticate,
    _safe_next,
    locked_page,
    password_attempt,
)


class SignInForm(AuthenticationForm):
    """Django's sign-in form; a login whose every principal an admin has deactivated is
    refused like an inactive account (reactivation restores it). A login that is no
    principal at all (a bare superuser, for /admin/) still signs in."""

    def confirm_login_allowed(self, user):
        super().confirm_login_allowed(user)
        if access.login_deactivated(user):
            raise forms.ValidationError(
                "This account has been deactivated by an admin.", code="inactive"
            )


class SignInView(LoginView):
    """Django's login view under the lockout: a locked account or address is a 429 page
    before any password is checked."""

    authentication_form = SignInForm

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "sso_offered": sso.oidc_offered()}

    def post(self, request, *args, **kwargs):
        form = self.get_form()
        username = str(request.POST.get("username", ""))
        sso_only = []

        def check():
            if not form.is_valid():
                return False
            sso_only.append(sso.password_refusal(form.get_user()))
            return "password_login_disabled" if sso_only[0] else True

        refused, ok = password_attempt(request, username=username, check=check)
        if refused is not None:
            return locked_page(request, refused)
        if ok:
            return self.form_valid(form)
        if sso_only and sso_only[0]:  # the password was right, but this tenant uses SSO
            return self.render_to_response(self.get_context_data(form=form, sso_only=True))
        return self.form_invalid(form)


sign_in = SignInView.as_view()


# --- /accounts/reauth/ (the base is console/web/reauth.py) ---


@never_cache
@sensitive_post_parameters(REAUTH_FIELD)
def reauth(request):
    """/accounts/reauth/?next=...: the password again, then back to `next` (a safe, local
    URL; else home)."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    next_url = _safe_next(request, request.POST.get("next") or request.GET.get("next"))
    fields = [("next", next_url)]
    if request.method == "POST":
        locked, ok = _reauthenticate(request, request.POST.get(REAUTH_FIELD, ""))
        if locked is not None:
            return locked
        if ok:
            return redirect(next_url)
        return _prompt(request, action=signin.REAUTH_URL, fields=fields, error=True)
    return _prompt(request, action=signin.REAUTH_URL, fields=fields)


# --- the tenant switcher ---


@require_POST
def switch_tenant(request):
    """POST /accounts/tenant/ (CSRF): act as this login's principal in another tenant, for
    the rest of the session. Only a tenant where the login is an active principal (else 404,
    nothing changed). The session's open sockets close (they watch the old tenant), and the
    switch lands on the home page: the page it came from may name the old tenant's objects."""
    if not request.user.is_authenticated:
        return redirect_to_login("/")
    slug = str(request.POST.get("tenant", ""))
    target = next(
        (p for p in access.principals_of_user(request.user) if p.tenant.slug == slug), None
    )
    if target is None:
        return error_page(
            request,
            status=404,
            title="Not found",
            message=f"You are not an active principal of a tenant '{slug[:64]}'.",
        )
    if request.session.get(access.TENANT_SESSION_KEY) != target.tenant_id:
        request.session[access.TENANT_SESSION_KEY] = target.tenant_id
        realtime.user_sockets_close(
            user_id=request.user.pk,
            session_key=request.session.session_key,
            reason="tenant_switched",
        )
    return redirect("/")
