from django.contrib import admin
from django.urls import include, path

from console.api import api

urlpatterns = [
    path("api/v1/", api.urls),
    path("django-admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("runs.urls")),
    path("", include("approvals.urls")),
]
