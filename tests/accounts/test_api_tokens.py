"""Personal API tokens: created and shown once, stored as a hash, usable as Bearer, revocable."""
import hashlib
import re

from accounts.models import ApiToken


def create_token(client, name="ci"):
    response = client.post("/account/tokens/", {"name": name})
    assert response.status_code == 200
    return re.search(r'id="new-token">([^<]+)<', response.content.decode()).group(1), response


def test_token_is_shown_once_and_stored_only_as_a_hash(client, users):
    client.force_login(users["rnd_admin"])
    raw, response = create_token(client)
    assert response["Cache-Control"] == "no-store"
    token = ApiToken.objects.get(user=users["rnd_admin"])
    assert token.digest == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in {token.name, token.prefix, token.digest} and raw.startswith(token.prefix)
    page = client.get("/account/tokens/").content.decode()
    assert raw not in page and token.prefix in page and "ci" in page


def test_bearer_token_authenticates_api_calls_with_the_users_roles(client, org, users):
    client.force_login(users["rnd_admin"])
    raw, _ = create_token(client)
    client.logout()
    response = client.get("/api/v1/projects/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200
    assert sorted(p["name"] for p in response.json()["results"]) == ["rnd-a", "rnd-b"]
    assert ApiToken.objects.get().last_used is not None


def test_revoked_or_wrong_tokens_are_refused(client, org, users):
    client.force_login(users["rnd_admin"])
    raw, _ = create_token(client)
    token = ApiToken.objects.get()
    response = client.post(f"/account/tokens/{token.pk}/revoke/", follow=True)
    assert "revoked" in response.content.decode()
    client.logout()
    response = client.get("/api/v1/projects/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 401 and response.json()["detail"] == "Invalid or revoked API token."
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/api/v1/projects/", HTTP_AUTHORIZATION="Bearer gcc_guess").status_code == 401


def test_a_user_cannot_revoke_someone_elses_token(client, users):
    client.force_login(users["sysadmin"])
    create_token(client)
    token = ApiToken.objects.get()
    client.force_login(users["rnd_admin"])
    assert client.post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    assert ApiToken.objects.get().revoked is None


def test_token_of_a_deactivated_user_stops_working(client, org, users):
    client.force_login(users["rnd_admin"])
    raw, _ = create_token(client)
    users["rnd_admin"].is_active = False
    users["rnd_admin"].save()
    assert client.get("/api/v1/projects/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401


def test_token_needs_a_name(client, users):
    client.force_login(users["rnd_admin"])
    response = client.post("/account/tokens/", {"name": ""})
    assert "This field is required" in response.content.decode() and not ApiToken.objects.exists()


def test_token_writes_need_no_csrf_but_session_writes_do(org, users):
    from django.test import Client

    from accounts.services import token_create

    _, raw = token_create(actor=users["sysadmin"], name="ci")
    strict = Client(enforce_csrf_checks=True)
    response = strict.patch(f"/api/v1/projects/{org.rnd_a.pk}/", {"description": "t"}, content_type="application/json",
                            HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200
    strict.force_login(users["sysadmin"])
    response = strict.patch(f"/api/v1/projects/{org.rnd_a.pk}/", {"description": "s"}, content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]
