"""Single sign-on (accounts/oidc.py) against a provider in the test process whose token endpoint answers
with ID tokens the tests forge: the flow with PKCE, group mapping, local log-in off, log-out, and every
refusal (bad state, wrong audience, expired, unsigned, other key, unknown issuer) ending on the console's
"Sign-in failed" page with nobody signed in. The real provider is in test_oidc_provider.py."""
from __future__ import annotations

import base64
import html
import hashlib
import json
import re
import time
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse
from joserfc import jwt
from joserfc.jwk import RSAKey

from accounts.models import OidcIdentity
from tests.accounts.oidc_helpers import FakeProvider

CLIENT_ID = "gpu-console"
SECRET = "client-secret-from-a-file"


@pytest.fixture(scope="module")
def signing_key():
    return RSAKey.generate_key(2048, parameters={"kid": "provider-key"})


@pytest.fixture
def provider(signing_key):
    fake = FakeProvider({"keys": [signing_key.as_dict(private=False)]})
    yield fake
    fake.stop()


@pytest.fixture
def sso(provider, settings, tmp_path):
    secret = tmp_path / "client-secret"
    secret.write_text(SECRET + "\n")
    settings.OIDC_ISSUER = provider.url
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET_FILE = str(secret)
    settings.OIDC_GROUPS_CLAIM = "groups"
    return provider


def claims_for(provider, nonce, **overrides):
    now = int(time.time())
    claims = {"iss": provider.url, "sub": "u-1001", "aud": CLIENT_ID, "exp": now + 300, "iat": now,
              "nonce": nonce, "preferred_username": "alice", "email": "alice@example.com",
              "groups": ["gpu-rnd-admins", "everyone"]}
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def begin(client, next_url="/departments/"):
    response = client.get(reverse("oidc-login"), {"next": next_url})
    assert response.status_code == 302
    query = {k: v[0] for k, v in parse_qs(urlparse(response["Location"]).query).items()}
    return query


def finish(client, provider, key, query, header=None, **overrides):
    provider.next_id_token = jwt.encode(header or {"alg": "RS256", "kid": "provider-key"},
                                        claims_for(provider, query["nonce"], **overrides), key)
    return client.get(reverse("oidc-callback"), {"code": "the-code", "state": query["state"]})


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def assert_refused(response, client, words):
    assert response.status_code == 400
    text = html.unescape(response.content.decode())
    assert "<h1>Sign-in failed</h1>" in text
    assert f"Sign-in failed: {words}" in text
    assert not signed_in(client)
    assert not get_user_model().objects.filter(username="alice").exists()


@pytest.mark.django_db
def test_sign_in_with_pkce_creates_the_user_and_maps_groups_to_role_assignments(client, sso, signing_key, org):
    from access.rules import Role
    from projects import services

    services.role_assign(actor=None, role=Role.DEPARTMENT_ADMIN, group=Group.objects.create(name="gpu-rnd-admins"),
                         department=org.rnd)
    query = begin(client)
    assert urlparse(query["redirect_uri"]).path == "/oidc/callback/"
    assert query["client_id"] == CLIENT_ID and query["response_type"] == "code"
    assert "openid" in query["scope"].split()
    assert query["code_challenge_method"] == "S256"
    response = finish(client, sso, signing_key, query)
    assert response.status_code == 302 and response["Location"] == "/departments/"
    # PKCE: the verifier sent to the token endpoint hashes to the challenge; the secret from the file.
    [token_request] = sso.token_requests
    digest = hashlib.sha256(token_request["code_verifier"].encode()).digest()
    assert base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == query["code_challenge"]
    assert base64.b64decode(token_request["authorization"].split()[1]).decode() == f"{CLIENT_ID}:{SECRET}"

    user = get_user_model().objects.get(username="alice")
    assert user.email == "alice@example.com" and not user.has_usable_password()
    assert sorted(user.groups.values_list("name", flat=True)) == ["everyone", "gpu-rnd-admins"]
    assert OidcIdentity.objects.get(user=user).subject == "u-1001"
    # The group's role assignment decides access: the department page opens.
    page = client.get(reverse("department-detail", args=[org.rnd.pk]))
    assert page.status_code == 200
    assert client.get(reverse("department-detail", args=[org.ops.pk])).status_code in (403, 404)


@pytest.mark.django_db
def test_groups_follow_the_claim_at_each_sign_in_added_and_removed(client, sso, signing_key, org):
    from access.rules import Role
    from projects import services

    services.role_assign(actor=None, role=Role.DEPARTMENT_ADMIN, group=Group.objects.create(name="gpu-rnd-admins"),
                         department=org.rnd)
    finish(client, sso, signing_key, begin(client))
    assert client.get(reverse("department-detail", args=[org.rnd.pk])).status_code == 200
    client.post(reverse("logout"))
    response = finish(client, sso, signing_key, begin(client), groups=["gpu-ops-viewers"])
    assert response.status_code == 302
    user = get_user_model().objects.get(username="alice")
    assert list(user.groups.values_list("name", flat=True)) == ["gpu-ops-viewers"]
    assert get_user_model().objects.filter(username__startswith="alice").count() == 1  # same person
    assert client.get(reverse("department-detail", args=[org.rnd.pk])).status_code in (403, 404)


@pytest.mark.django_db
def test_a_local_account_of_the_same_name_is_never_taken_over(client, sso, signing_key):
    local = get_user_model().objects.create_user("alice", password="local-pw")
    finish(client, sso, signing_key, begin(client))
    sso_user = get_user_model().objects.get(oidc_identities__subject="u-1001")
    assert sso_user.pk != local.pk and sso_user.username == "alice-2"
    assert int(client.session["_auth_user_id"]) == sso_user.pk


@pytest.mark.django_db
def test_forged_state_is_refused(client, sso, signing_key):
    query = begin(client)
    query["state"] = "forged-state"
    assert_refused(finish(client, sso, signing_key, query), client, "the sign-in state does not match")
    assert sso.token_requests == []  # the code was never exchanged


@pytest.mark.django_db
def test_callback_without_a_started_sign_in_is_refused(client, sso):
    response = client.get(reverse("oidc-callback"), {"code": "c", "state": "s"})
    assert_refused(response, client, "the sign-in state does not match")


@pytest.mark.django_db
def test_wrong_audience_is_refused(client, sso, signing_key):
    response = finish(client, sso, signing_key, begin(client), aud="some-other-client")
    assert_refused(response, client, "the identity token was issued for another client (aud/azp)")


@pytest.mark.django_db
def test_expired_token_is_refused(client, sso, signing_key):
    past = int(time.time()) - 3600
    response = finish(client, sso, signing_key, begin(client), exp=past, iat=past - 300)
    assert_refused(response, client, "the identity token has expired")


@pytest.mark.django_db
def test_unsigned_token_alg_none_is_refused(client, sso):
    query = begin(client)

    def b64(data):
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    sso.next_id_token = f"{b64({'alg': 'none'})}.{b64(claims_for(sso, query['nonce']))}."
    response = client.get(reverse("oidc-callback"), {"code": "c", "state": query["state"]})
    assert_refused(response, client, "the identity token is unsigned (alg none)")


@pytest.mark.django_db
def test_token_signed_by_another_key_is_refused(client, sso):
    intruder = RSAKey.generate_key(2048, parameters={"kid": "provider-key"})  # same kid, other key
    response = finish(client, sso, intruder, begin(client))
    assert_refused(response, client, "the identity token's signature does not match the provider's keys")


@pytest.mark.django_db
def test_token_from_an_unknown_issuer_is_refused(client, sso, signing_key):
    response = finish(client, sso, signing_key, begin(client), iss="https://evil.example.com")
    assert_refused(response, client, "the identity token comes from an unknown issuer (iss)")


@pytest.mark.django_db
def test_wrong_nonce_is_refused(client, sso, signing_key):
    query = begin(client)
    response = finish(client, sso, signing_key, {**query, "nonce": "replayed"})
    assert_refused(response, client, "the identity token does not answer this sign-in (nonce)")


@pytest.mark.django_db
def test_discovery_naming_another_issuer_is_refused(client, settings, signing_key, tmp_path):
    fake = FakeProvider({"keys": [signing_key.as_dict(private=False)]}, issuer_override="https://idp.example.com")
    try:
        settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID = fake.url, CLIENT_ID
        response = client.get(reverse("oidc-login"))
        assert response.status_code == 400
        assert "Sign-in failed: the provider&#x27;s discovery document names issuer" in response.content.decode()
    finally:
        fake.stop()


@pytest.mark.django_db
def test_provider_refusal_is_shown(client, sso):
    query = begin(client)
    response = client.get(reverse("oidc-callback"), {"error": "access_denied", "error_description": "User said no",
                                                      "state": query["state"]})
    assert_refused(response, client, "the provider refused: access_denied: User said no.")


@pytest.mark.django_db
def test_unreachable_provider_is_a_clear_page(client, settings):
    settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID = "http://127.0.0.1:1", CLIENT_ID
    response = client.get(reverse("oidc-login"))
    assert response.status_code == 502
    assert "Sign-in failed: the identity provider could not be reached" in response.content.decode()


@pytest.mark.django_db
def test_next_cannot_send_the_person_elsewhere(client, sso, signing_key):
    response = finish(client, sso, signing_key, begin(client, next_url="https://evil.example.com/"))
    assert response["Location"] == reverse("home")


@pytest.mark.django_db
def test_logout_ends_the_providers_session_too(client, sso, signing_key):
    finish(client, sso, signing_key, begin(client))
    id_token = client.session["oidc_id_token"]
    response = client.post(reverse("logout"))
    assert not signed_in(client)
    # A page that moves on to the provider by itself (a cross-origin redirect of the form would be
    # blocked by the CSP's form-action 'self'), with a link for browsers that do not follow it.
    assert response.status_code == 200 and "<h1>Logged out</h1>" in response.content.decode()
    link = re.search(r'id="end-session" href="([^"]+)"', response.content.decode()).group(1)
    assert f'http-equiv="refresh" content="0;url={link}"' in response.content.decode()
    target = urlparse(html.unescape(link))
    assert f"{target.scheme}://{target.netloc}{target.path}" == f"{sso.url}/logout"
    params = {k: v[0] for k, v in parse_qs(target.query).items()}
    assert params["id_token_hint"] == id_token
    assert params["post_logout_redirect_uri"] == "http://testserver/login/"


@pytest.mark.django_db
def test_logout_without_end_session_endpoint_ends_the_console_session(client, settings, signing_key):
    fake = FakeProvider({"keys": [signing_key.as_dict(private=False)]}, end_session=False)
    try:
        settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID = fake.url, CLIENT_ID
        finish(client, fake, signing_key, begin(client))
        assert signed_in(client)
        response = client.post(reverse("logout"))
        assert response["Location"] == reverse("login") and not signed_in(client)
    finally:
        fake.stop()


@pytest.mark.django_db
def test_login_page_offers_sso_and_password_by_default(client, sso):
    text = client.get(reverse("login")).content.decode()
    assert "Sign in with single sign-on" in text and 'name="password"' in text


@pytest.mark.django_db
def test_local_login_off_hides_the_form_and_refuses_passwords(client, sso, settings):
    settings.LOCAL_LOGIN = False
    get_user_model().objects.create_user("bob", password="bob-password-1")
    text = client.get(reverse("login")).content.decode()
    assert "Sign in with single sign-on" in text and 'name="password"' not in text
    response = client.post(reverse("login"), {"username": "bob", "password": "bob-password-1"})
    assert response.status_code == 403
    assert "Password log-in is turned off here" in response.content.decode()
    assert not signed_in(client)


@pytest.mark.django_db
def test_sso_off_without_issuer_local_login_as_today(client, settings):
    settings.OIDC_ISSUER = ""
    get_user_model().objects.create_user("bob", password="bob-password-1")
    assert "single sign-on" not in client.get(reverse("login")).content.decode()
    assert client.get(reverse("oidc-login")).status_code == 404
    response = client.post(reverse("login"), {"username": "bob", "password": "bob-password-1"})
    assert response.status_code == 302 and signed_in(client)


@pytest.mark.django_db
def test_token_signed_with_the_client_secret_hs256_is_refused(client, sso):
    from joserfc.jwk import OctKey

    query = begin(client)
    sso.next_id_token = jwt.encode({"alg": "HS256"}, claims_for(sso, query["nonce"]), OctKey.import_key(SECRET))
    response = client.get(reverse("oidc-callback"), {"code": "c", "state": query["state"]})
    assert_refused(response, client, "the identity token is signed with 'HS256'")
