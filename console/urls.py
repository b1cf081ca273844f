from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from nodepools import views as nodepool_views

urlpatterns = [
    path("", nodepool_views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # Pages of each app (the console in the browser).
    path("", include("nodepools.urls")),
    path("", include("projects.urls")),
    path("", include("audit.urls")),
    # REST API and its OpenAPI description.
    path("", include("console.api_urls")),
]
