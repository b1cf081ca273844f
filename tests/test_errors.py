"""Refused and failed requests: the console's own styled pages, one log line each, and its icon."""
import logging

import pytest
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_an_unknown_address_shows_the_consoles_404_page(client, users):
    client.force_login(users["cluster_viewer"])
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "<h1>Not found</h1>" in html and "/no-such-page/" in html
    assert 'class="topbar"' in html  # the console's layout, not Django's page
    assert "Back to the overview" in html


def test_an_object_the_user_may_not_see_is_the_same_404(client, org, users):
    client.force_login(users["nobody"])
    response = client.get(reverse("cluster-overview", args=[org.cluster.pk]))
    assert response.status_code == 404
    assert "<h1>Not found</h1>" in response.content.decode()


def test_a_refused_action_shows_the_consoles_403_page(client, org, users):
    client.force_login(users["cluster_viewer"])
    response = client.get(reverse("pool-create"))
    assert response.status_code == 403
    html = response.content.decode()
    assert "<h1>Not allowed</h1>" in html and 'class="topbar"' in html


def test_a_failed_csrf_check_shows_the_403_page_in_plain_words(org, users):
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["sysadmin"])
    response = client.post(reverse("pool-create"), {"name": "x"})
    assert response.status_code == 403
    html = response.content.decode()
    assert "<h1>Not allowed</h1>" in html
    assert "Reload the page and try again" in html
    assert "CSRF verification" not in html and "Forbidden" not in html


def test_a_server_error_shows_the_consoles_500_page(client, users, settings):
    from django.urls import path

    def boom(request):
        raise RuntimeError("boom")

    urlconf = type("urls", (), {"urlpatterns": [path("boom/", boom)], "handler500": "common.errors.handler500"})
    settings.ROOT_URLCONF = urlconf
    client.raise_request_exception = False
    response = client.get("/boom/")
    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong on our side" in html and "boom" not in html


def _request_lines(caplog):
    return [r for r in caplog.records if r.name in ("django.request", "django.security.csrf")]


def _formatted(record):
    return logging.Formatter("%(message)s").format(record)


def test_a_404_logs_one_line_with_method_path_status_and_user(client, users, caplog):
    client.force_login(users["cluster_viewer"])
    with caplog.at_level(logging.WARNING):
        client.get("/no-such-page/?x=1")
    [record] = _request_lines(caplog)
    assert _formatted(record) == "GET /no-such-page/?x=1 404 user=cluster-viewer (Not Found)"
    assert "Traceback" not in _formatted(record)


def test_a_403_logs_one_line_not_a_traceback(client, users, caplog):
    client.force_login(users["cluster_viewer"])
    with caplog.at_level(logging.WARNING):
        client.get(reverse("pool-create"))
    [record] = _request_lines(caplog)
    line = _formatted(record)
    assert line.startswith(f"GET {reverse('pool-create')} 403 user=cluster-viewer")
    assert "\n" not in line and record.exc_info is None


def test_a_csrf_failure_logs_one_line(users, caplog):
    client = Client(enforce_csrf_checks=True)
    with caplog.at_level(logging.WARNING):
        client.post(reverse("login"), {"username": "a", "password": "b"})
    lines = [_formatted(r) for r in _request_lines(caplog)]
    assert len(lines) == 1
    assert lines[0].startswith("POST /login/ 403 user=anonymous (Forbidden (CSRF")


def test_favicon_is_the_consoles_own_icon():
    response = Client().get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/vnd.microsoft.icon"
    body = b"".join(response.streaming_content)
    assert body[:4] == b"\x00\x00\x01\x00"  # an ICO file
    assert b"PNG" in body[:64]
    assert "max-age" in response["Cache-Control"]


def test_pages_point_to_the_icon(client, users):
    client.force_login(users["cluster_viewer"])
    html = client.get(reverse("home")).content.decode()
    assert '<link rel="icon" href="/favicon.ico"' in html


def test_the_line_stays_one_line_when_logging_is_configured_again(client, users, settings):
    # dictConfig adds the filter again to an existing logger; the line must still be written once.
    import logging.config

    logging.config.dictConfig(settings.LOGGING)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        client.force_login(users["cluster_viewer"])
        client.get("/no-such-page/")
    finally:
        logger.removeHandler(handler)
    assert [_formatted(r) for r in records] == ["GET /no-such-page/ 404 user=cluster-viewer (Not Found)"]
