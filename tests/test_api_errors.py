"""Every error under /api/ is the API's JSON (`detail`, `errors` for input, `request_id`), expected or
not: an unexpected exception is a 500 of that format, never Django's HTML page, and its traceback is
logged with the same request id (common/requestid.py, common/errors.py, common/api.py)."""
from __future__ import annotations

import json
import logging

import pytest

from common.jsonlog import JsonFormatter
from common.requestid import PlainFormatter

pytestmark = pytest.mark.django_db


def _boom(*args, **kwargs):
    raise RuntimeError("the database said something unexpected")


def test_an_unexpected_error_in_an_api_view_is_a_json_500_logged_with_its_traceback(users, api, settings,
                                                                                   monkeypatch, caplog):
    from ledger.api.views import RateViewSet

    settings.DEBUG = False
    monkeypatch.setattr(RateViewSet, "list", _boom)
    client = api(users["sysadmin"])
    client.raise_request_exception = False
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = client.get("/api/v1/rates/")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    body = response.json()
    request_id = response["X-Request-ID"]
    assert body["request_id"] == request_id and len(request_id) == 32
    assert body["detail"].startswith("The server failed to answer this request: the error is logged as request "
                                     f"{request_id}.")
    assert "unexpected" not in body["detail"] and "<html" not in response.content.decode().lower()
    [record] = [r for r in caplog.records if r.name == "django.request" and r.levelno == logging.ERROR]
    assert record.request_id == request_id and record.exc_info is not None
    line = PlainFormatter("%(levelname)s %(name)s: %(message)s").format(record)
    assert line.splitlines()[0] == f"ERROR django.request: Internal Server Error: /api/v1/rates/ request_id={request_id}"
    assert "Traceback (most recent call last)" in line and "RuntimeError: the database said something unexpected" in line
    # LOG_FORMAT=json: the same id under its own key, the traceback beside it.
    entry = json.loads(JsonFormatter().format(record))
    assert entry["request_id"] == request_id and "RuntimeError" in entry["exception"]


def test_a_page_still_gets_the_styled_500_page(users, client, settings, monkeypatch):
    from ledger import views

    settings.DEBUG = False
    monkeypatch.setattr(views.selectors, "rate_list", _boom, raising=False)
    monkeypatch.setattr(views, "table_page", _boom)
    client.force_login(users["sysadmin"])
    client.raise_request_exception = False
    response = client.get("/rates/")
    assert response.status_code == 500 and "Something went wrong on our side" in response.content.decode()


def test_expected_errors_carry_the_request_id_too(org, users, api, caplog):
    client = api(users["sysadmin"])
    invalid = client.post("/api/v1/rates/", {"gpu_model": "x", "currency": "EUR", "valid_from": "2026-1-1",
                                             "gpu_hour": "1"}, format="json", HTTP_X_REQUEST_ID="proxy-given.id-1")
    assert invalid.status_code == 400 and invalid["X-Request-ID"] == "proxy-given.id-1"
    assert invalid.json()["request_id"] == "proxy-given.id-1" and list(invalid.json()["errors"]) == ["valid_from"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="django.request"):
        missing = client.get("/api/v1/no-such-thing/", HTTP_X_REQUEST_ID="not a valid id\u00e9")
    assert missing.status_code == 404 and missing["Content-Type"] == "application/json"
    assert missing.json()["request_id"] == missing["X-Request-ID"] != "not a valid id\u00e9"
    assert "no address of the API" in missing.json()["detail"]
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert record.request_id == missing["X-Request-ID"]
    unknown = client.get("/api/v1/rates/987654321/")
    assert unknown.status_code == 404 and unknown.json()["request_id"] == unknown["X-Request-ID"]
    anonymous = api().get("/api/v1/rates/")
    assert anonymous.status_code in (401, 403) and anonymous.json()["request_id"] == anonymous["X-Request-ID"]
