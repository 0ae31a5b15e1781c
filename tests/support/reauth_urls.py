"""The console's URLs plus one test-only sensitive view (the /manage/ pages come later)."""

from django.http import HttpResponse
from django.urls import path

from console.urls import urlpatterns as console_urlpatterns
from console.web.pages import viewer_view
from console.web.reauth import require_recent_auth

CALLS: list[dict] = []  # what the sensitive view was called with


@viewer_view
@require_recent_auth
def sensitive(request):
    if request.method == "GET":
        return HttpResponse("the form")
    posted = {k: request.POST.getlist(k) for k in request.POST if k != "csrfmiddlewaretoken"}
    CALLS.append({"method": request.method, "post": posted, "viewer": request.viewer.pk})
    return HttpResponse("done")


urlpatterns = [path("test/sensitive/", sensitive), *console_urlpatterns]
