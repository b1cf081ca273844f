"""Single sign-on against a real OpenID provider: tests/oidc_provider (django-oauth-toolkit, RS256 key
generated here, a user with groups, a groups claim) run as a separate process on a free loopback port
with its own SQLite file. A person signs in through the provider's login page, first driven by HTTP
requests, then in Chromium through Playwright; group changes at the provider take effect at the next
sign-in; log-out ends the provider's session too. Each refusal runs against the real provider too: the
state tampered with on the way back, and ID tokens the provider issues with a fault through its real code
flow (wrong audience, expired, unknown issuer, unsigned, signed by a key not in its JWKS), each ending on
the console's "Sign-in failed" page with nobody signed in."""
from __future__ import annotations

import html
import os
import re
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlparse

import pytest
import requests
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse

from tests.accounts.oidc_helpers import RealProvider

CLIENT_ID = "gpu-console"
SECRET = "a-long-client-secret-for-the-console"
CHROMIUM = "/usr/bin/chromium"
REQUIRE_BROWSER = os.environ.get("CONSOLE_REQUIRE_BROWSER") == "1"
ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts"


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    idp = RealProvider(tmp_path_factory.mktemp("idp")).start()
    idp.user("carol", "carol-at-the-idp", ["gpu-rnd-admins", "staff"], email="carol@example.com")
    yield idp
    idp.stop()


@pytest.fixture
def sso(provider, settings, tmp_path):
    secret = tmp_path / "client-secret"
    secret.write_text(SECRET)
    settings.OIDC_ISSUER = provider.issuer
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET_FILE = str(secret)
    return provider


@pytest.fixture
def rnd_admins(org):
    from access.rules import Role
    from projects import services

    services.role_assign(actor=None, role=Role.DEPARTMENT_ADMIN, group=Group.objects.create(name="gpu-rnd-admins"),
                         department=org.rnd)
    return org


def sign_in_at_provider(client, username, password, tamper=None):
    """What a browser does: to the provider, its login form, back to the console's callback (whose query
    `tamper` may change on the way, as an attacker between the provider and the console would)."""
    start = client.get(reverse("oidc-login"))
    assert start.status_code == 302
    browser = requests.Session()
    page = browser.get(start["Location"], timeout=10)
    assert "Test identity provider" in page.text, page.text[:500]
    form = {name: html.unescape(value) for name, value in re.findall(r'name="(csrfmiddlewaretoken|next)" value="([^"]*)"', page.text)}
    response = browser.post(page.url, data={**form, "username": username, "password": password},
                            allow_redirects=False, timeout=10)
    while response.status_code in (301, 302) and not response.headers["Location"].startswith("http://testserver"):
        response = browser.get(urljoin(response.url, response.headers["Location"]), allow_redirects=False, timeout=10)
    assert response.status_code == 302, response.text[:500]
    callback = urlparse(response.headers["Location"])
    query = {k: v[0] for k, v in parse_qs(callback.query).items()}
    assert "code" in query and "state" in query, query
    return client.get(callback.path, tamper(query) if tamper else query)


@pytest.mark.django_db
def test_sign_in_through_the_real_provider_maps_its_groups(client, sso, rnd_admins):
    sso.client(CLIENT_ID, SECRET, ["http://testserver/oidc/callback/"], ["http://testserver/login/"])
    response = sign_in_at_provider(client, "carol", "carol-at-the-idp")
    assert response.status_code == 302 and response["Location"] == reverse("home")
    user = get_user_model().objects.get(username="carol")
    assert sorted(user.groups.values_list("name", flat=True)) == ["gpu-rnd-admins", "staff"]
    page = client.get(reverse("department-detail", args=[rnd_admins.rnd.pk]))
    assert page.status_code == 200 and "<h1>Department rnd</h1>" in page.content.decode()

    # The provider's administrators move carol to another group: the next sign-in follows.
    sso.user("carol", "carol-at-the-idp", ["gpu-ops-viewers"], email="carol@example.com")
    client.post(reverse("logout"))
    assert sign_in_at_provider(client, "carol", "carol-at-the-idp").status_code == 302
    assert list(get_user_model().objects.get(username="carol").groups.values_list("name", flat=True)) == ["gpu-ops-viewers"]
    assert client.get(reverse("department-detail", args=[rnd_admins.rnd.pk])).status_code == 404
    sso.user("carol", "carol-at-the-idp", ["gpu-rnd-admins", "staff"], email="carol@example.com")


@pytest.mark.django_db
def test_real_provider_refuses_a_client_with_the_wrong_secret(client, sso, settings, tmp_path):
    sso.client(CLIENT_ID, SECRET, ["http://testserver/oidc/callback/"], [])
    wrong = tmp_path / "wrong-secret"
    wrong.write_text("not-the-secret")
    settings.OIDC_CLIENT_SECRET_FILE = str(wrong)
    response = sign_in_at_provider(client, "carol", "carol-at-the-idp")
    assert response.status_code == 400
    assert "Sign-in failed: the provider refused: invalid_client" in response.content.decode()
    assert "_auth_user_id" not in client.session


# --- Refused or tampered sign-ins, the faulty tokens issued by the real provider -------------------------------

def assert_refused(client, response, words):
    """The clear page a person sees, and nobody signed in: no user in the session, pages ask to log in."""
    assert response.status_code == 400
    text = html.unescape(response.content.decode())
    assert "<h1>Sign-in failed</h1>" in text
    assert f"Sign-in failed: {words}" in text
    assert "Nobody was signed in." in text
    assert "_auth_user_id" not in client.session
    home = client.get(reverse("home"))
    assert home.status_code == 302 and home["Location"].startswith(reverse("login"))
    assert not get_user_model().objects.filter(username="carol").exists()


@pytest.fixture
def faults(sso):
    sso.client(CLIENT_ID, SECRET, ["http://testserver/oidc/callback/"], [])
    yield sso
    sso.next_token_fault(None)  # a test that failed before its token was issued leaves no fault behind


@pytest.mark.django_db
def test_real_provider_state_tampered_on_the_way_back_is_refused(client, faults):
    response = sign_in_at_provider(client, "carol", "carol-at-the-idp",
                                   tamper=lambda query: {**query, "state": query["state"][::-1]})
    assert_refused(client, response, "the sign-in state does not match this browser's")
    # The same person, the provider's redirect untouched: signed in.
    assert sign_in_at_provider(client, "carol", "carol-at-the-idp").status_code == 302
    assert "_auth_user_id" in client.session


@pytest.mark.django_db
def test_real_provider_callback_replayed_after_a_sign_in_is_refused(client, faults):
    first = {}

    def keep(query):
        first.update(query)
        return query

    assert sign_in_at_provider(client, "carol", "carol-at-the-idp", tamper=keep).status_code == 302
    client.post(reverse("logout"))
    get_user_model().objects.filter(username="carol").delete()
    # The same code and state again (a link from the browser's history): the state was used up.
    assert_refused(client, client.get(reverse("oidc-callback"), first), "the sign-in state does not match")


@pytest.mark.django_db
@pytest.mark.parametrize("fault, words", [
    ("wrong-audience", "the identity token was issued for another client (aud/azp)"),
    ("expired", "the identity token has expired"),
    ("unknown-issuer", "the identity token comes from an unknown issuer (iss)"),
    ("unsigned", "the identity token is unsigned (alg none)"),
    ("other-key", "the identity token's signature does not match the provider's keys"),
    ("unknown-key", "the identity token is signed by a key the provider does not publish"),
])
def test_real_provider_issuing_a_faulty_id_token_is_refused(client, faults, fault, words):
    faults.next_token_fault(fault)
    assert_refused(client, sign_in_at_provider(client, "carol", "carol-at-the-idp"), words)
    # The provider's next token is sound: the same person signs in, so the fault alone was refused.
    response = sign_in_at_provider(client, "carol", "carol-at-the-idp")
    assert response.status_code == 302 and response["Location"] == reverse("home")
    assert "_auth_user_id" in client.session


# --- In Chromium -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chromium():
    if not os.path.exists(CHROMIUM):
        if REQUIRE_BROWSER:
            pytest.fail(f"CONSOLE_REQUIRE_BROWSER=1 but {CHROMIUM} is missing: apt-get install -y chromium")
        pytest.skip(f"needs Chromium at {CHROMIUM} (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop on this thread while it runs; the ORM calls of these
    # tests and their fixtures are still plain synchronous code.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(
        executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
    yield browser
    browser.close()
    playwright.stop()
    if previous is None:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_person_signs_in_with_sso_in_the_browser_and_groups_follow_the_provider(
        chromium, live_server, provider, settings, tmp_path, rnd_admins):
    secret = tmp_path / "client-secret"
    secret.write_text(SECRET)
    settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID = provider.issuer, CLIENT_ID
    settings.OIDC_CLIENT_SECRET_FILE = str(secret)
    settings.LOCAL_LOGIN = False
    provider.client(CLIENT_ID, SECRET, [f"{live_server.url}/oidc/callback/"], [f"{live_server.url}/login/"])
    provider.user("carol", "carol-at-the-idp", ["gpu-rnd-admins", "staff"], email="carol@example.com")
    department_url = f"{live_server.url}{reverse('department-detail', args=[rnd_admins.rnd.pk])}"

    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        page.goto(department_url)
        assert page.locator("h1").inner_text() == "Log in"
        assert page.locator("input[name=password]").count() == 0  # LOCAL_LOGIN=0
        page.get_by_role("link", name="Sign in with single sign-on").click()
        assert page.locator("h1").inner_text() == "Test identity provider"
        page.get_by_label("Provider username").fill("carol")
        page.get_by_label("Provider password").fill("carol-at-the-idp")
        page.get_by_role("button", name="Sign in at the provider").click()
        page.wait_for_url(department_url)
        assert page.locator("h1").inner_text() == "Department rnd"
        assert page.locator("header .who").inner_text() == "carol"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "sso-signed-in.png"))

        # Groups change at the provider; log out (ends the provider's session too), sign in again.
        provider.user("carol", "carol-at-the-idp", ["gpu-ops-viewers"], email="carol@example.com")
        page.locator("header .usermenu > summary").click()  # the user's menu in the top bar
        page.get_by_role("button", name="Log out").click()
        page.wait_for_url(f"{live_server.url}/login/")
        page.get_by_role("link", name="Sign in with single sign-on").click()
        # The provider asks again: its session ended with the console's.
        assert page.locator("h1").inner_text() == "Test identity provider"
        page.get_by_label("Provider username").fill("carol")
        page.get_by_label("Provider password").fill("carol-at-the-idp")
        page.get_by_role("button", name="Sign in at the provider").click()
        page.wait_for_url(f"{live_server.url}/")
        page.goto(department_url)
        assert page.locator("h1").inner_text() == "Not found"
    finally:
        context.close()
        provider.user("carol", "carol-at-the-idp", ["gpu-rnd-admins", "staff"], email="carol@example.com")
