from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from approvals import views_webhooks
from console.accounts import passwords, scim_urls, sso
from console.accounts import views as accounts
from console.api import api
from console.web import pages as views
from gateway import views as gateway_views
from ops import views as ops_views

urlpatterns = [
    # Health, readiness and metrics: no session, no key (ops/views.py)
    path("healthz", ops_views.healthz, name="healthz"),
    path("readyz", ops_views.readyz, name="readyz"),
    path("metrics", ops_views.metrics, name="metrics"),
    path("api/v1/", api.urls),
    *scim_urls.urlpatterns,  # SCIM 2.0 provisioning (`scim` keys; loaded at first use)
    path("accounts/login/", accounts.sign_in, name="login"),
    path("accounts/reauth/", accounts.reauth, name="reauth"),
    path("accounts/tenant/", accounts.switch_tenant, name="switch_tenant"),
    *sso.urlpatterns,  # Sign in with SSO (OpenID Connect, per tenant)
    *passwords.urlpatterns,  # sign-out, password change and reset: the console's own
    path("", views.home, name="home"),
    path("", include("console.manage.urls")),
    *views_webhooks.urlpatterns,  # /manage/webhooks/: the approvals app's page
    *gateway_views.urlpatterns,  # /manage/mcp/: the gateway's upstream MCP servers
    path("", include("runs.urls")),
    path("", include("approvals.urls")),
    path("", include("notifications.urls")),
    path("", include("budgets.urls")),
]

# Django admin is the operator's (staff logins; it reaches every tenant): routed only with
# GAVEL_DJANGO_ADMIN=1. Every password sign-in passes the lockout: its login page is ours too.
django_admin = [
    path("django-admin/login/", accounts.sign_in),
    path("django-admin/", admin.site.urls),
]
if settings.GAVEL_DJANGO_ADMIN:
    urlpatterns[1:1] = django_admin
