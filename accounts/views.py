"""Personal API tokens (create, list, revoke); the log-in page, single sign-on and log-out."""
from __future__ import annotations

import logging
from urllib.parse import urlencode

from authlib.integrations.base_client.errors import MismatchingStateError, OAuthError
from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login as auth_login
from django.contrib.auth import logout as auth_logout
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST
from joserfc import errors as jose
from requests import RequestException

from accounts import oidc, services
from accounts.models import ApiToken
from accounts.services import SignInRefused


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. 'CI quota sync'.")


@login_required
def token_list(request):
    form = TokenForm(request.POST or None)
    created = None
    if request.method == "POST" and form.is_valid():
        try:
            token, created = services.token_create(actor=request.user, name=form.cleaned_data["name"])
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            form = TokenForm()
    tokens = ApiToken.objects.filter(user=request.user)
    response = render(request, "account/tokens.html", {"form": form, "tokens": tokens, "created": created})
    if created:
        response["Cache-Control"] = "no-store"  # the token text must not linger in a cache
    return response


@login_required
@require_POST
def token_revoke(request, pk: int):
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    services.token_revoke(actor=request.user, token=token)
    messages.success(request, f"Token '{token.name}' revoked: it no longer works.")
    return redirect("account-tokens")


# --- Log-in, single sign-on and log-out ----------------------------------------------------------------------

logger = logging.getLogger(__name__)
NEXT_KEY = "oidc_next"
ID_TOKEN_KEY = "oidc_id_token"


class LoginView(auth_views.LoginView):
    """The log-in page: the password form unless LOCAL_LOGIN=0, and a single sign-on button when
    OIDC is configured. With local log-in off, passwords POSTed anyway are refused. Repeated failures
    lock out through django-axes (common/security.py)."""

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context.update(local_login=oidc.local_login_enabled(), sso_enabled=oidc.enabled(),
                       sso_label=settings.OIDC_PROVIDER_NAME)
        return context

    def post(self, request, *args, **kwargs):
        if not oidc.local_login_enabled():
            response = self.render_to_response(self.get_context_data(
                refused="Password log-in is turned off here: sign in with single sign-on."))
            response.status_code = 403
            return response
        return super().post(request, *args, **kwargs)


def _safe_next(request, url: str | None) -> str:
    if url and url_has_allowed_host_and_scheme(url, allowed_hosts={request.get_host()},
                                              require_https=request.is_secure()):
        return url
    return reverse(settings.LOGIN_REDIRECT_URL)


def sign_in_failed(request, reason: str, status: int = 400):
    logger.warning("single sign-on refused: %s", reason)
    return render(request, "account/sso_failed.html", {"reason": reason}, status=status)


def _refusal(exc: Exception) -> str:
    """What went wrong, in words a person (and their platform team) can act on."""
    if isinstance(exc, SignInRefused):
        return str(exc)
    if isinstance(exc, MismatchingStateError):
        return ("the sign-in state does not match this browser's (an old, replayed or forged link). "
                "Start again from the log-in page.")
    if isinstance(exc, OAuthError):
        detail = f"{exc.error}: {exc.description}" if exc.description else str(exc.error)
        return f"the provider refused: {detail}."
    if isinstance(exc, jose.ExpiredTokenError):
        return "the identity token has expired. Check the clocks, then start again."
    if isinstance(exc, (jose.InvalidClaimError, jose.MissingClaimError)):
        claim = getattr(exc, "claim", "") or str(exc)
        words = {"iss": "the identity token comes from an unknown issuer (iss)",
                 "aud": "the identity token was issued for another client (aud/azp)",
                 "nonce": "the identity token does not answer this sign-in (nonce)",
                 "azp": "the identity token was issued for another client (aud/azp)"}
        return words.get(claim, f"the identity token's claim {claim!r} is not valid") + "."
    if isinstance(exc, jose.BadSignatureError):
        return "the identity token's signature does not match the provider's keys."
    if isinstance(exc, jose.InvalidKeyIdError):
        return "the identity token is signed by a key the provider does not publish (its kid is not in the JWKS)."
    if isinstance(exc, (jose.UnsupportedAlgorithmError, jose.MissingAlgorithmError)):
        return "the identity token is not signed with an accepted algorithm."
    if isinstance(exc, jose.JoseError):
        return f"the identity token was refused ({exc.__class__.__name__}: {exc})."
    if isinstance(exc, RequestException):
        return "the identity provider could not be reached. Try again later or tell your platform team."
    if isinstance(exc, OSError):
        return "the console's single sign-on settings cannot be read (OIDC_CLIENT_SECRET_FILE)."
    return f"unexpected answer from the identity provider ({exc.__class__.__name__})."


def oidc_login(request):
    """Send the browser to the provider (authorization code with PKCE, state and nonce in the session)."""
    if not oidc.enabled():
        raise Http404("Single sign-on is not configured.")
    request.session[NEXT_KEY] = _safe_next(request, request.GET.get("next"))
    try:
        cfg = oidc.config()
        app = oidc.client(cfg)
        oidc.metadata(app, cfg)
        return app.authorize_redirect(request, request.build_absolute_uri(reverse("oidc-callback")))
    except Exception as exc:
        if not isinstance(exc, SignInRefused):
            logger.info("single sign-on error", exc_info=True)
        return sign_in_failed(request, _refusal(exc), status=502 if not isinstance(exc, SignInRefused) else 400)


def oidc_callback(request):
    """Back from the provider: exchange the code, verify the ID token, sync the user and their groups."""
    if not oidc.enabled():
        raise Http404("Single sign-on is not configured.")
    try:
        cfg = oidc.config()
        app = oidc.client(cfg)
        data = oidc.metadata(app, cfg)
        token = app.authorize_access_token(request)
        claims = token.get("userinfo")
        if not claims or "id_token" not in token:
            raise SignInRefused("the provider returned no identity token (is the scope 'openid' allowed?).")
        claims = dict(claims)
        if cfg.groups_claim not in claims and data.get("userinfo_endpoint"):
            # Some providers put groups only in the userinfo answer.
            info = app.userinfo(token=token)
            if info.get("sub") == claims.get("sub") and cfg.groups_claim in info:
                claims[cfg.groups_claim] = info[cfg.groups_claim]
        user = services.oidc_user_sign_in(issuer=cfg.issuer, claims=claims, groups_claim=cfg.groups_claim,
                                          username_claim=cfg.username_claim)
    except Exception as exc:
        if not isinstance(exc, SignInRefused):
            logger.info("single sign-on error", exc_info=True)
        return sign_in_failed(request, _refusal(exc))
    next_url = request.session.pop(NEXT_KEY, None)
    auth_login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    request.session[ID_TOKEN_KEY] = token["id_token"]
    return redirect(_safe_next(request, next_url))


@require_POST
def logout_view(request):
    """End the console's session and, when the provider has an end_session_endpoint, the provider's."""
    id_token = request.session.get(ID_TOKEN_KEY)
    auth_logout(request)
    login_url = request.build_absolute_uri(reverse(settings.LOGOUT_REDIRECT_URL))
    if id_token and oidc.enabled():
        try:
            cfg = oidc.config()
            app = oidc.client(cfg)
            end_session = oidc.metadata(app, cfg).get("end_session_endpoint")
        except Exception:
            logger.warning("single sign-on provider unreachable at log-out; ended the console's session only")
            end_session = None
        if end_session:
            params = {"id_token_hint": id_token, "post_logout_redirect_uri": login_url, "client_id": app.client_id}
            separator = "&" if "?" in end_session else "?"
            # A page that moves on by itself rather than a redirect: the log-out form's redirect to another
            # origin would be blocked by the Content-Security-Policy's form-action 'self'.
            response = render(request, "account/logged_out.html",
                              {"end_session_url": end_session + separator + urlencode(params)})
            response["Cache-Control"] = "no-store"
            return response
    return redirect(settings.LOGOUT_REDIRECT_URL)
