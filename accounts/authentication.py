"""DRF authentication by personal API token: `Authorization: Bearer <token>` (or `Token <token>`)."""
from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from accounts.services import token_authenticate


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keywords = ("bearer", "token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].decode(errors="replace").lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("The Authorization header must be 'Bearer <token>'.")
        try:
            raw = header[1].decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("The API token contains invalid characters.")
        token = token_authenticate(raw)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        return token.user, token

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A personal API token from /account/tokens/."}
