"""Every page (every URL pattern of the console, as tests/test_permission_matrix.py enumerates them, so a form
added later is covered too) refuses a form with a NUL in a field (400, a page naming the field) and a body
over the limit (413, a page naming the limit) before any view reads them: nothing is stored and the next
request is answered. The API's endpoints are tests/hostile/test_endpoints.py's."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.hostile.conftest import row_counts
from tests.test_permission_matrix import MATRIX, url_names, world  # noqa: F401  (the matrix's objects)

pytestmark = pytest.mark.django_db

# Answered by console.health.OpsMiddleware for the kubelet and Prometheus before any body is read (the ASGI
# wrapper in front of Django has refused an oversized body already).
OPS = {"healthz", "readyz", "metrics"}
PAGES = sorted(name for name in MATRIX if not name.startswith("api") and name not in OPS)


def test_every_page_is_listed():
    assert set(PAGES) | OPS >= {name for name in url_names() if not name.startswith("api")}


@pytest.mark.parametrize("name", PAGES)
def test_a_form_with_a_nul_or_over_the_limit_is_refused_on_every_page(world, client, settings, name):  # noqa: F811
    client.force_login(world.users["sysadmin"])
    client.get(reverse("home"))
    url = reverse(name, kwargs=MATRIX[name][0].kwargs(world))
    rows = row_counts()
    response = client.post(url, {"name": "ok", "description": "a\x00b"})
    assert response.status_code == 400, (url, response.status_code)
    page = response.content.decode()
    assert "The field “description” cannot be accepted" in page and "U+0000 (NUL)" in page
    response = client.post(url, {"name": "x" * (settings.CONSOLE_MAX_BODY_BYTES + 1)})
    assert response.status_code == 413, (url, response.status_code)
    assert "at most 1 MiB (1048576 bytes) in one request" in response.content.decode()
    assert row_counts() == rows
    assert client.get(reverse("home")).status_code in (200, 302)


def test_the_login_form_is_bounded_for_anonymous_visitors_too(client, settings):
    rows = row_counts()
    response = client.post(reverse("login"), {"username": "admin\x00", "password": "x"})
    assert response.status_code == 400 and "The field “username” cannot be accepted" in response.content.decode()
    response = client.post(reverse("login"), {"username": "admin", "password": "x" * 2_000_000})
    assert response.status_code == 413
    assert row_counts() == rows
    assert client.get(reverse("login")).status_code == 200
