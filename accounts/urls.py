from django.urls import path

from accounts import views

urlpatterns = [
    path("account/tokens/", views.token_list, name="account-tokens"),
    path("account/tokens/<int:pk>/revoke/", views.token_revoke, name="account-token-revoke"),
    # Single sign-on (OpenID Connect); 404 while OIDC_ISSUER / OIDC_CLIENT_ID are unset.
    path("oidc/login/", views.oidc_login, name="oidc-login"),
    path("oidc/callback/", views.oidc_callback, name="oidc-callback"),
]
