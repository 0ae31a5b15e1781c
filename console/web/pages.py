"""Browser views of the console itself: home, the error pages, the placeholder pages.

`viewer_view` is the one gate every console page passes: sign-in required, a principal
required (a bare Django superuser gets a clear 403), and console.errors mapped to pages.
"""

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.shortcuts import redirect, render

from console.audit.log import audit_refused
from console.core.errors import GavelError
from console.directory import access

NO_PRINCIPAL = (
    "You are signed in, but your account is not a principal of any tenant, so there is "
    "nothing here you may see. Ask an admin to create a principal for you "
    "(manage.py create_principal), then sign in with its id."
)


def error_page(request, *, status: int, title: str, message: str):
    """The error page. Every 403 of a signed-in principal is audited `authz.refused`
    (rate-limited per principal and path); one without a principal has no tenant to log in."""
    if status == 403:
        audit_refused(
            actor=getattr(request, "viewer", None),
            path=request.path,
            method=request.method,
            reason=message,
        )
    return render(
        request,
        "registration/error.html",
        {"status": status, "title": title, "message": message},
        status=status,
    )


def viewer_view(view):
    """Sign-in and principal required; `request.viewer` is the principal; errors become pages."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        viewer = access.principal_for_user(request)
        if viewer is None:
            return error_page(request, status=403, title="No access", message=NO_PRINCIPAL)
        request.viewer = viewer
        try:
            return view(request, *args, **kwargs)
        except GavelError as exc:
            title = "Not found" if exc.status == 404 else "Not allowed"
            return error_page(request, status=exc.status, title=title, message=exc.message)

    return wrapped


@viewer_view
def home(request):
    """The reviewer's inbox for those who decide, else the runs."""
    viewer = request.viewer
    if access.can(viewer, "decide"):
        return redirect("/approvals/")
    if access.can(viewer, "view_runs"):
        return redirect("/runs/")
    return error_page(
        request, status=403, title="No access", message="None of your roles lets you see runs."
    )


def _placeholder(request, *, capability: str, nav: str, title: str, what: str):
    access.require(request.viewer, capability)
    return render(
        request, "registration/placeholder.html", {"title": title, "what": what, "nav_active": nav}
    )


@viewer_view
def manage(request):
    """/manage/ opens on its first tab (the tabs themselves check `admin`)."""
    access.require(request.viewer, "admin")
    return redirect("/manage/principals/")
