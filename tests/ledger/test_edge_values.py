"""The ledger at the edges of what a person may send: the calendar's last day, full-width digits, dates
not written YYYY-MM-DD, a GPU model in another case, a change that changes nothing (issue: edge values)."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from audit.models import AuditEvent
from ledger import services
from ledger.models import Kind, LedgerEntry, Rate
from tests.pages import csv_of

pytestmark = pytest.mark.django_db

A100 = "NVIDIA-A100-SXM4-40GB"
UTC = dt.timezone.utc


@pytest.fixture
def entries(org):
    """Two closed hours of rnd-a on a100: one in 2026, one in 9999 (the calendar's last day)."""
    for hour in (dt.datetime(2026, 11, 20, 10, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, tzinfo=UTC)):
        LedgerEntry.objects.create(hour=hour, kind=Kind.CLOSING, recorded=hour, cluster_id=org.cluster.pk,
                                   pool_id=org.a100.pk, gpu_model=A100, department_id=org.rnd.pk,
                                   project_id=org.rnd_a.pk, gpu_seconds=3600)
    return org


@pytest.mark.parametrize("role", ["sysadmin", "rnd_viewer", "researcher"])
def test_a_range_may_end_on_the_calendars_last_day(entries, users, client, api, role):
    client.force_login(users[role])
    params = {"date_from": "2026-11-01", "date_to": "9999-12-31"}
    page = client.get("/ledger/", params)
    assert page.status_code == 200
    assert len(csv_of(client.get("/ledger/export.csv", params))) == 3  # the header and both hours, the last one of the calendar included
    listing = api(users[role]).get("/api/v1/ledger-entries/", params)
    assert listing.status_code == 200 and listing.json()["count"] == 2
    export = api(users[role]).get("/api/v1/ledger-entries/export/", params)
    assert export.status_code == 200
    assert len(csv_of(export)) == 3
    # A range ending the day before leaves out the last hour; one from 0001-01-01 starts at the first.
    before = api(users[role]).get("/api/v1/ledger-entries/", {"date_from": "0001-01-01", "date_to": "9999-12-30"})
    assert before.status_code == 200 and before.json()["count"] == 1


def test_dates_are_iso_with_ascii_digits_and_the_refusal_names_the_field(entries, users, api, client):
    for value in ("２０２６-１１-２０", "20261120", "2026-1-1", "9999-12-32", "0000-01-01"):
        response = api(users["sysadmin"]).get("/api/v1/ledger-entries/", {"date_to": value})
        assert response.status_code == 400, value
        assert list(response.json()["errors"]) == ["date_to"], value
        assert response.json()["detail"].startswith("Invalid input: date_to: ")
    response = api(users["sysadmin"]).get("/api/v1/ledger-entries/", {"date_from": "２０２６-１１-２０"})
    assert response.json()["errors"]["date_from"] == [
        "“２０２６-１１-２０” holds digits other than 0-9 (２０２６１１２０): write the digits 0-9."]
    client.force_login(users["sysadmin"])
    csv = client.get("/ledger/export.csv", {"date_from": "20261120"})
    assert csv.status_code == 400


def test_a_month_in_full_width_digits_is_not_a_month(org, users, api, client):
    response = api(users["sysadmin"]).get(f"/api/v1/departments/{org.rnd.pk}/statement/", {"month": "２０２６-１１"})
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["month"]
    assert "digits other than 0-9" in response.json()["errors"]["month"][0]
    client.force_login(users["sysadmin"])
    page = client.get(f"/departments/{org.rnd.pk}/statement/", {"month": "２０２６-１１"})
    assert page.status_code == 400 and "digits other than 0-9" in page.content.decode()
    assert api(users["sysadmin"]).get(f"/api/v1/departments/{org.rnd.pk}/statement/",
                                      {"month": "2026-11"}).status_code == 200


def rate_body(**values):
    body = {"gpu_model": A100, "currency": "EUR", "valid_from": "2026-11-01", "gpu_hour": "2.5"}
    body.update(values)
    return body


@pytest.mark.parametrize("field,value", [("gpu_hour", "１"), ("gpu_hour", "1e309"), ("gpu_hour", "inf"),
                                         ("gpu_hour", "nan"), ("cpu_core_hour", "٣"), ("valid_from", "20261101"),
                                         ("valid_from", "2026-1-1"), ("valid_from", "２０２６-１１-０１"),
                                         ("valid_from", "11/01/2026")])
def test_a_rate_refuses_unicode_digits_and_loose_dates_naming_the_field(org, users, api, field, value):
    response = api(users["sysadmin"]).post("/api/v1/rates/", rate_body(**{field: value}), format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == [field]
    assert not Rate.objects.exists()


def test_a_rate_refuses_the_same_on_its_page(org, users, client):
    client.force_login(users["sysadmin"])
    data = {"gpu_model": A100, "pool": "", "currency": "EUR", "valid_from": "20261101", "gpu_hour": "１",
            "cpu_core_hour": "", "memory_gib_hour": "", "description": ""}
    page = client.post("/rates/new/", data)
    assert page.status_code == 200
    html = page.content.decode()
    assert "“20261101” is not a date: write it YYYY-MM-DD" in html
    assert "“１” holds digits other than 0-9" in html
    assert not Rate.objects.exists()


def test_a_gpu_model_in_another_case_is_the_clusters_model(org, users, api):
    response = api(users["sysadmin"]).post("/api/v1/rates/", rate_body(gpu_model="nvidia-a100-sxm4-40gb"), format="json")
    assert response.status_code == 201, response.content
    assert response.json()["gpu_model"] == A100  # the nodes' spelling
    again = api(users["sysadmin"]).post("/api/v1/rates/", rate_body(gpu_model="Nvidia-A100-Sxm4-40gb"), format="json")
    assert again.status_code == 400 and list(again.json()["errors"]) == ["valid_from"]  # the same model and day
    assert list(Rate.objects.values_list("gpu_model", flat=True)) == [A100]
    # A model no cluster reports keeps the spelling of its first rate.
    services.rate_create(actor=None, gpu_model="Future-GPU", currency="EUR", valid_from=dt.date(2026, 1, 1),
                         gpu_hour=Decimal(1))
    rate = services.rate_create(actor=None, gpu_model="future-gpu", currency="EUR", valid_from=dt.date(2026, 2, 1),
                                gpu_hour=Decimal(1))
    assert rate.gpu_model == "Future-GPU"


def test_a_patch_that_changes_nothing_keeps_the_version(org, users, api):
    client = api(users["sysadmin"])
    created = client.post("/api/v1/rates/", rate_body(), format="json").json()
    url = f"/api/v1/rates/{created['id']}/"
    for body in ({}, {"colour": "red"}, {"gpu_hour": "2.5000"}, {"gpu_model": A100.lower()}):
        response = client.patch(url, body, format="json")
        assert response.status_code == 200, response.content
        assert response.json()["version"] == 1, body
    assert not AuditEvent.objects.filter(object_type="rate", action="update").exists()
    changed = client.patch(url, {"gpu_hour": "3"}, format="json")
    assert changed.json()["version"] == 2 and Rate.objects.get().gpu_hour == Decimal(3)
