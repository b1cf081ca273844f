"""The provider's OAuth2Validator (django-oauth-toolkit's extension point, OAUTH2_VALIDATOR_CLASS).

Besides the claims the console maps (name, e-mail, groups), a test-only fault switch: a test sets the
fault of the next ID token (POST /test-admin/fault, idp/views.py) and the provider then issues that
faulty token through its real authorization-code flow:

- ``wrong-audience``: ``aud`` names another client;
- ``expired``: ``exp`` (and ``iat``) an hour in the past;
- ``unknown-issuer``: ``iss`` is not this provider;
- ``unsigned``: the token is sent with ``alg: none`` and no signature;
- ``other-key``: signed by a key that is not in the provider's JWKS, under the provider's own ``kid``;
- ``unknown-key``: signed by a key that is not in the provider's JWKS, under that key's ``kid``.

One fault serves one token; the switch is process-wide (runserver is one process).
"""
import json
import threading
import time

from jwcrypto import jwk, jwt
from jwcrypto.common import base64url_decode, base64url_encode
from oauth2_provider.oauth2_validators import OAuth2Validator

FAULTS = ("wrong-audience", "expired", "unknown-issuer", "unsigned", "other-key", "unknown-key")
_fault_lock = threading.Lock()
_next_fault: list[str] = []


def set_next_fault(fault: str | None) -> None:
    """The fault of the next ID token the provider issues (None: the next one is sound)."""
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; one of {', '.join(FAULTS)}")
    with _fault_lock:
        _next_fault[:] = [fault] if fault else []


def _take_fault() -> str | None:
    with _fault_lock:
        return _next_fault.pop() if _next_fault else None


class GroupsClaimValidator(OAuth2Validator):
    """Adds the user's name, e-mail and groups (their Django groups here) to the ID token and userinfo."""

    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "openid"}

    def get_additional_claims(self, request):
        user = request.user
        return {
            "preferred_username": user.username,
            "email": user.email,
            "given_name": user.first_name,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }

    def get_id_token_dictionary(self, token, token_handler, request):
        # These claims override what oauthlib set before (aud, iat): see finalize_id_token.
        claims, expiration_time = super().get_id_token_dictionary(token, token_handler, request)
        fault = getattr(request, "idp_fault", None)
        if fault == "wrong-audience":
            claims["aud"] = "some-other-client"
        elif fault == "expired":
            past = int(time.time()) - 3600
            claims["exp"], claims["iat"] = past, past - 300
        elif fault == "unknown-issuer":
            claims["iss"] = "https://evil.example.com/o"
        return claims, expiration_time

    def finalize_id_token(self, id_token, token, token_handler, request):
        request.idp_fault = fault = _take_fault()
        signed = super().finalize_id_token(id_token, token, token_handler, request)
        if fault not in ("unsigned", "other-key", "unknown-key"):
            return signed
        # The same token (claims, nonce, at_hash as the flow made them), signed otherwise.
        _, payload, _ = signed.split(".")
        if fault == "unsigned":
            return f"{base64url_encode(json.dumps({'typ': 'JWT', 'alg': 'none'}))}.{payload}."
        stranger = jwk.JWK.generate(kty="RSA", size=2048)
        kid = request.client.jwk_key.thumbprint() if fault == "other-key" else stranger.thumbprint()
        forged = jwt.JWT(header={"typ": "JWT", "alg": "RS256", "kid": kid},
                         claims=base64url_decode(payload).decode())
        forged.make_signed_token(stranger)
        return forged.serialize()
