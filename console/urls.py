from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

from accounts import views as account_views
from common import errors
from console import health

from projects import views as project_views

handler400 = errors.handler400
handler403 = errors.handler403
handler404 = errors.handler404
handler500 = errors.handler500

urlpatterns = [
    path("", project_views.home, name="home"),
    path("favicon.ico", errors.favicon, name="favicon"),
    # Password form and single sign-on (accounts/oidc.py); log-out also ends the provider's session.
    path("login/", account_views.LoginView.as_view(), name="login"),
    path("logout/", account_views.logout_view, name="logout"),
    # One login form for everything, so that its throttling cannot be bypassed through the admin's.
    path("admin/login/", RedirectView.as_view(pattern_name="login", query_string=True), name="admin-login-redirect"),
    path("admin/", admin.site.urls),
    path("", include("accounts.urls")),
    path("", include("usage.urls")),
    path("", include("ledger.urls")),
    # Pages of each app (the console in the browser).
    path("", include("nodepools.urls")),
    path("", include("projects.urls")),
    path("", include("provisioning.urls")),
    path("", include("audit.urls")),
    path("", include("enforcers.urls")),
    path("", include("workloads.urls")),
    # REST API and its OpenAPI description.
    path("", include("console.api_urls")),
    # Probes and Prometheus (answered by console.health.OpsMiddleware before host checks; named here).
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics_view, name="metrics"),
]
