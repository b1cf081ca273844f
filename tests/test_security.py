"""Hardening: CSRF on session writes, login throttling, Content-Security-Policy, docs without a CDN,
and production settings that pass `manage.py check --deploy`."""
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from common import security

ROOT = Path(__file__).resolve().parent.parent


# --- CSRF -----------------------------------------------------------------------------------------

def test_page_writes_without_the_csrf_token_are_refused(users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["rnd_admin"])
    assert client.post("/account/tokens/", {"name": "x"}).status_code == 403
    page = client.get("/account/tokens/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)
    assert client.post("/account/tokens/", {"name": "x", "csrfmiddlewaretoken": token}).status_code == 200


def test_api_session_writes_need_the_csrf_header(org, users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["sysadmin"])
    url = f"/api/v1/projects/{org.rnd_a.pk}/"
    response = client.patch(url, {"description": "x"}, content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]
    client.get("/account/tokens/")  # any page sets the CSRF cookie
    csrf = client.cookies["csrftoken"].value
    response = client.patch(url, {"description": "x"}, content_type="application/json", HTTP_X_CSRFTOKEN=csrf)
    assert response.status_code == 200


def test_logout_needs_csrf(users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["sysadmin"])
    assert client.post("/logout/").status_code == 403


# --- Login throttling (django-axes) -----------------------------------------------------------------------------

@pytest.fixture
def fresh_counters(users):
    names = ["rnd-admin", "sysadmin"]
    for name in names:
        for address in ("127.0.0.1", "10.9.8.7"):
            security.login_failures_reset(name, address)
    yield
    for name in names:
        for address in ("127.0.0.1", "10.9.8.7"):
            security.login_failures_reset(name, address)


def test_login_is_refused_after_repeated_failures_even_with_the_right_password(client, users, fresh_counters, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    for _ in range(3):
        response = client.post("/login/", {"username": "rnd-admin", "password": "wrong"})
        assert response.status_code == 200 and b"didn't match" in response.content
    response = client.post("/login/", {"username": "rnd-admin", "password": "pw-rnd-admin"})
    assert response.status_code == 429
    assert "Too many failed log-in attempts" in response.content.decode()
    assert "_auth_user_id" not in client.session
    # Another username, or the same one from another address, is not affected.
    assert client.post("/login/", {"username": "sysadmin", "password": "pw-sysadmin"}).status_code == 302
    other = Client(REMOTE_ADDR="10.9.8.7")
    assert other.post("/login/", {"username": "rnd-admin", "password": "pw-rnd-admin"}).status_code == 302


def test_a_successful_login_resets_the_count(client, users, fresh_counters, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    for _ in range(2):
        client.post("/login/", {"username": "RND-admin", "password": "wrong"})
    assert client.post("/login/", {"username": "rnd-admin", "password": "pw-rnd-admin"}).status_code == 302
    assert security.login_failures("rnd-admin", "127.0.0.1") == 0


def test_the_count_ignores_case_spaces_and_forwarded_for_headers(client, users, fresh_counters, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    for name in ("rnd-admin", " RND-Admin", "rnd-ADMIN "):
        # X-Forwarded-For is whatever the sender writes: it must not give a fresh budget.
        client.post("/login/", {"username": name, "password": "wrong"}, HTTP_X_FORWARDED_FOR=f"10.0.0.{len(name)}")
    assert security.login_failures("rnd-admin", "127.0.0.1") == 3
    response = client.post("/login/", {"username": "rnd-admin", "password": "pw-rnd-admin"},
                           HTTP_X_FORWARDED_FOR="10.1.2.3")
    assert response.status_code == 429


def test_lockout_and_policy_come_from_django_axes_and_django_csp(client, users, fresh_counters, settings):
    from axes.models import AccessAttempt

    assert "axes.middleware.AxesMiddleware" in settings.MIDDLEWARE
    assert "csp.middleware.CSPMiddleware" in settings.MIDDLEWARE
    assert not hasattr(security, "ContentSecurityPolicyMiddleware") and not hasattr(security, "ThrottledLoginView")
    client.post("/login/", {"username": "rnd-admin", "password": "wrong"})
    # Failed log-ins are django-axes' records (listed in the Django admin too).
    attempt = AccessAttempt.objects.get(username="rnd-admin", ip_address="127.0.0.1")
    assert attempt.failures_since_start == 1
    from django.contrib import admin

    assert AccessAttempt in admin.site._registry


@pytest.mark.django_db(transaction=True)
def test_lockout_through_the_asgi_server_path(users, settings):
    """Daphne runs Django's async middleware path: the lockout and its messages are the same there."""
    import asyncio

    from django.test import AsyncClient

    settings.LOGIN_FAILURE_LIMIT = 2

    async def scenario():
        client = AsyncClient()
        first = await client.post("/login/", {"username": "proj-admin", "password": "wrong"})
        second = await client.post("/login/", {"username": "proj-admin", "password": "wrong"})
        third = await client.post("/login/", {"username": "proj-admin", "password": "pw-proj-admin"})
        return first, second, third

    first, second, third = asyncio.run(scenario())
    assert first.status_code == second.status_code == 200
    assert b"didn't match" in first.content and b"didn't match" in second.content
    assert third.status_code == 429 and b"Too many failed log-in attempts" in third.content
    assert csp_directives(third["Content-Security-Policy"])["script-src"] == "'self'"


def test_admin_login_goes_through_the_throttled_login(client, db):
    response = client.get("/admin/login/?next=/admin/")
    assert response.status_code == 302 and response.url == "/login/?next=/admin/"


# --- Content-Security-Policy (django-csp) and the API docs -----------------------------------------------------

def csp_directives(header: str) -> dict[str, str]:
    directives = [d.strip().split(" ", 1) for d in header.split(";") if d.strip()]
    assert len({d[0] for d in directives}) == len(directives), header  # each directive once
    return {d[0]: d[1] if len(d) > 1 else "" for d in directives}


def test_every_response_carries_the_content_security_policy(client, users, org):
    client.force_login(users["sysadmin"])
    for url in ("/login/", "/account/tokens/", "/audit/", "/usage/", "/api/v1/node-pools/", "/api/docs/", "/api/schema/"):
        policy = csp_directives(client.get(url)["Content-Security-Policy"])
        # (django-csp writes the directives in any order: they are compared one by one.)
        assert policy["default-src"] == "'self'" and policy["script-src"] == "'self'", url
        assert "'unsafe-inline'" not in policy["script-src"]
        assert policy["style-src"] == "'self' 'unsafe-inline'" and policy["object-src"] == "'none'", url


def test_pages_have_no_inline_scripts(client, users, org):
    import json

    client.force_login(users["sysadmin"])
    for url in ("/account/tokens/", "/audit/", "/usage/", "/api/docs/", f"/clusters/{org.cluster.pk}/",
                f"/pools/{org.a100.pk}/"):
        html = client.get(url).content.decode()
        scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
        # Data for the charts (json_script) is JSON the browser never runs; anything else must be a file.
        data = [body for attrs, body in scripts if 'type="application/json"' in attrs]
        assert all(isinstance(json.loads(body), dict) for body in data), url
        inline = [s for s in scripts if 'type="application/json"' not in s[0] and (s[1].strip() or "src=" not in s[0])]
        assert inline == [], url
        assert not re.search(r"\son[a-z]+=", html), url  # no inline event handlers either


def test_swagger_ui_is_served_by_the_app_not_a_cdn(client, users):
    client.force_login(users["sysadmin"])
    html = client.get("/api/docs/").content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources and all(s.startswith("/") for s in sources), sources
    for source in sources:
        response = client.get(source.replace("&amp;", "&"))
        assert response.status_code == 200, source
        if hasattr(response, "streaming_content"):
            b"".join(response.streaming_content)


# --- Production settings --------------------------------------------------------------------------

def production_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}}
    env.update({
        "SECRET_KEY": secrets.token_urlsafe(60),
        "ALLOWED_HOSTS": "gpu.example.com",
        "CSRF_TRUSTED_ORIGINS": "https://gpu.example.com",
        "DATABASE_URL": "postgres://console:secret@db.example.com:5432/console",
        "REDIS_URL": "redis://redis.example.com:6379/0",
        "DJANGO_SETTINGS_MODULE": "console.settings",
    })
    env.update(extra)
    return env


def test_production_settings_pass_check_deploy_without_warnings():
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                            env=production_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_does_flag_a_weak_secret_key():
    # The check above is meaningful: the same command fails when a documented variable is wrong.
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                            env=production_env(SECRET_KEY="short"), capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "security.W009" in result.stdout + result.stderr
