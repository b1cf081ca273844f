"""Single sign-on through OpenID Connect (Authlib): discovery, authorization code with PKCE, ID-token checks.

Configured from the environment (console/settings.py): OIDC_ISSUER, OIDC_CLIENT_ID and
OIDC_CLIENT_SECRET_FILE; SSO is off while the issuer or the client id is unset. Authlib keeps the state,
nonce and PKCE verifier in the session, checks the state on return, and verifies the ID token (signature
by the provider's published keys, iss, aud, exp, iat, nonce, at_hash). We add: only asymmetric signing
algorithms (never `none`, never an HMAC keyed by the client secret), the discovery document must name the
configured issuer, and a token response without an ID token is refused.
"""
from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass
from pathlib import Path

from authlib.integrations.django_client import DjangoOAuth2App, OAuth
from django.conf import settings

from accounts.services import SignInRefused
from common import caches

# Asymmetric algorithms only: `none` is unsigned and HS* would be keyed by our own client secret.
ALLOWED_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


@dataclass(frozen=True)
class OidcConfig:
    issuer: str
    client_id: str
    client_secret: str
    scopes: str
    groups_claim: str
    username_claim: str

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


def enabled() -> bool:
    return bool(getattr(settings, "OIDC_ISSUER", "") and getattr(settings, "OIDC_CLIENT_ID", ""))


def local_login_enabled() -> bool:
    return bool(getattr(settings, "LOCAL_LOGIN", True))


def config() -> OidcConfig:
    secret = ""
    path = getattr(settings, "OIDC_CLIENT_SECRET_FILE", "")
    if path:
        # Read at each sign-in: a rotated Secret mounted as a file takes effect without a restart.
        secret = Path(path).read_text().strip()
    return OidcConfig(
        issuer=settings.OIDC_ISSUER,
        client_id=settings.OIDC_CLIENT_ID,
        client_secret=secret,
        scopes=settings.OIDC_SCOPES,
        groups_claim=settings.OIDC_GROUPS_CLAIM,
        username_claim=settings.OIDC_USERNAME_CLAIM,
    )


_clients: dict[OidcConfig, object] = caches.register({})
_clients_lock = threading.Lock()


def _oauth_registry():
    class ConsoleOAuth2App(DjangoOAuth2App):
        def parse_id_token(self, token, nonce, **kwargs):
            alg = token_algorithm(token.get("id_token", ""))
            if alg not in ALLOWED_ALGORITHMS:
                raise SignInRefused(
                    f"the identity token is {'unsigned (alg none)' if str(alg).lower() == 'none' else f'signed with {alg!r}'}; "
                    f"only {', '.join(ALLOWED_ALGORITHMS[:3])} and other public-key signatures are accepted."
                )
            return super().parse_id_token(token, nonce, **kwargs)

    class ConsoleOAuth(OAuth):
        oauth2_client_cls = ConsoleOAuth2App

    return ConsoleOAuth()


def client(cfg: OidcConfig | None = None):
    """The Authlib client of this configuration; it caches the discovery document and the keys."""
    cfg = cfg or config()
    with _clients_lock:
        app = _clients.get(cfg)
        if app is None:
            oauth = _oauth_registry()
            app = oauth.register(
                name="console",
                client_id=cfg.client_id,
                client_secret=cfg.client_secret or None,
                server_metadata_url=cfg.discovery_url,
                client_kwargs={"scope": cfg.scopes, "code_challenge_method": "S256", "timeout": 10},
            )
            _clients[cfg] = app
        return app


def metadata(app, cfg: OidcConfig) -> dict:
    """The provider's discovery document, which must name the configured issuer (OIDC Discovery §4.3)."""
    data = app.load_server_metadata()
    issuer = data.get("issuer")
    configured = cfg.issuer
    if issuer is None or issuer.rstrip("/") != configured.rstrip("/"):
        raise SignInRefused(f"the provider's discovery document names issuer {issuer!r}, not {configured!r}.")
    return data


def token_algorithm(id_token: str) -> str | None:
    try:
        header = id_token.split(".")[0]
        return json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4))).get("alg")
    except (ValueError, AttributeError, IndexError):
        return None
