"""The console's own password pages, at Django's addresses (/accounts/password_change/,
/accounts/password_reset/, /accounts/reset/<uid>/<token>/ and their "done" pages).

- A change needs the current password, checked like a sign-in (`accounts.password_attempt`:
  the lockout, a wrong one audited `signin.failed` with `via: password_change`); then
  Django's validators and the one writer (console/services/passwords.py).
- A reset request is throttled per address (429 page) and per account (silently), audited,
  and its mail queued in the outbox; the answer is the same whether or not an account uses
  the address. The link is Django's token (it dies with the password it resets).
"""

from django.contrib.auth import update_session_auth_hash
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordResetForm, SetPasswordForm
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters

from console.directory import signin
from console.directory.services import passwords
from console.web import reauth as accounts

CHANGE_PAGE = "registration/password_change_form.html"
RESET_PAGE = "registration/password_reset_form.html"


def _facts(request) -> dict:
    return {
        "address": signin.client_address(request),
        "userAgent": request.META.get("HTTP_USER_AGENT", "")[: accounts.USER_AGENT_LIMIT],
    }


@never_cache
@sensitive_post_parameters()
@login_required
def password_change(request):
    user = request.user
    form = SetPasswordForm(user, request.POST or None)
    wrong_current = False
    if request.method == "POST":
        current = str(request.POST.get("old_password", ""))
        refused, ok = accounts.password_attempt(
            request,
            username=user.get_username(),
            user=user,
            check=lambda: user.is_active and user.check_password(current),
            via="password_change",
        )
        if refused is not None:
            return accounts.locked_page(request, refused)
        wrong_current = not ok
        if ok and form.is_valid():
            password = form.cleaned_data["new_password1"]
            passwords.login_password_change(
                user=user, password=password, via="password_change", facts=_facts(request)
            )
            update_session_auth_hash(request, user)  # this session stays; the others end
            return redirect("password_change_done")
    context = {"form": form, "wrong_current": wrong_current}
    status = 422 if request.method == "POST" else 200
    return render(request, CHANGE_PAGE, context, status=status)


@never_cache
def password_reset(request):
    form = PasswordResetForm(request.POST or None)
    if request.method == "POST":
        if not passwords.reset_address_allowed(address=signin.client_address(request)):
            return render(request, RESET_PAGE, {"form": form, "throttled": True}, status=429)
        if form.is_valid():
            email = form.cleaned_data["email"]
            passwords.password_reset_request(email=email, facts=_facts(request))
            return redirect("password_reset_done")
        return render(request, RESET_PAGE, {"form": form}, status=422)
    return render(request, RESET_PAGE, {"form": form})


class ResetConfirm(auth_views.PasswordResetConfirmView):
    """Django's confirmation page (its token check and its redirect that keeps the token out
    of the Referer), with the new password stored by the console's writer, audited."""

    template_name = "registration/password_reset_confirm.html"

    def form_valid(self, form):
        passwords.login_password_change(
            user=form.user,
            password=form.cleaned_data["new_password1"],
            via="password_reset",
            facts=_facts(self.request),
        )
        del self.request.session[auth_views.INTERNAL_RESET_SESSION_TOKEN]
        return redirect(self.get_success_url())


def _page(template):
    return never_cache(lambda request: render(request, template))


urlpatterns = [
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password_change/", password_change, name="password_change"),
    path(
        "accounts/password_change/done/",
        login_required(_page("registration/password_change_done.html")),
        name="password_change_done",
    ),
    path("accounts/password_reset/", password_reset, name="password_reset"),
    path(
        "accounts/password_reset/done/",
        _page("registration/password_reset_done.html"),
        name="password_reset_done",
    ),
    path(
        "accounts/reset/<uidb64>/<token>/",
        ResetConfirm.as_view(),
        name="password_reset_confirm",
    ),
    path(
        "accounts/reset/done/",
        _page("registration/password_reset_complete.html"),
        name="password_reset_complete",
    ),
]
