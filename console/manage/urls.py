from django.urls import path

from console.manage import views_audit, views_directory, views_keys, views_oidc
from console.web import pages as views

urlpatterns = [
    path("manage/", views.manage, name="manage"),
    *views_directory.urlpatterns,
    *views_keys.urlpatterns,
    *views_audit.urlpatterns,
    *views_oidc.urlpatterns,  # single sign-on settings
]
