from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from console import errors, security

from nodepools import views as nodepool_views

handler403 = errors.handler403
handler404 = errors.handler404
handler500 = errors.handler500

urlpatterns = [
    path("", nodepool_views.home, name="home"),
    path("favicon.ico", errors.favicon, name="favicon"),
    path("login/", security.ThrottledLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # One login form for everything, so that its throttling cannot be bypassed through the admin's.
    path("admin/login/", RedirectView.as_view(pattern_name="login", query_string=True), name="admin-login-redirect"),
    path("admin/", admin.site.urls),
    path("", include("accounts.urls")),
    path("", include("usage.urls")),
    # Pages of each app (the console in the browser).
    path("", include("nodepools.urls")),
    path("", include("projects.urls")),
    path("", include("audit.urls")),
    # REST API and its OpenAPI description.
    path("", include("console.api_urls")),
]
