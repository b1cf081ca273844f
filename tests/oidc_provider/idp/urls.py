from django.contrib.auth import views as auth_views
from django.urls import include, path

from idp import views

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("test-admin/user", views.set_user),
    path("test-admin/fault", views.set_fault),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
]
