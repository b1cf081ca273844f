"""Usage history at the edges of a date range: ending on the calendar's last day, open at one end, or
with a start that is not a date (issue: edge values). The page, its CSV and the API agree."""
from __future__ import annotations

import datetime as dt
import html

import pytest
from django.utils import timezone

from tests.pages import csv_of
from usage.services import usage_snapshot_take

# The org and logins built once for the module (tests/conftest.py, `kept_org`): each test's rows are rolled back.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("kept_org")]


@pytest.fixture
def snapshots(org):
    usage_snapshot_take(at=timezone.now().replace(microsecond=0) - dt.timedelta(days=1))
    return org


@pytest.mark.parametrize("role", ["sysadmin", "rnd_viewer", "cluster_viewer"])
def test_a_range_may_end_on_the_calendars_last_day(snapshots, users, client, api, role):
    client.force_login(users[role])
    params = {"date_from": "2026-01-01", "date_to": "9999-12-31"}
    page = client.get("/usage/", params)
    assert page.status_code == 200
    rows = csv_of(client.get("/usage/export.csv", params))
    listing = api(users[role]).get("/api/v1/usage-snapshots/", params)
    assert listing.status_code == 200 and listing.json()["count"] == len(rows) - 1 > 0
    export = api(users[role]).get("/api/v1/usage-snapshots/export/", params)
    assert export.status_code == 200 and len(csv_of(export)) == len(rows)


@pytest.mark.parametrize("start", [None, "", "abc", "2026-02-30", "２０２６-１１-０１"])
def test_an_open_start_is_never_a_500_and_the_page_and_its_csv_agree(snapshots, users, client, start):
    client.force_login(users["sysadmin"])
    params = {"date_to": (timezone.now() + dt.timedelta(days=1)).date().isoformat()}
    if start is not None:
        params["date_from"] = start
    page = client.get("/usage/", params)
    csv = client.get("/usage/export.csv", params)
    if start in (None, ""):
        # An open range: everything up to the end (the chart shows the days up to it).
        assert page.status_code == 200 and csv.status_code == 200
        assert len(csv_of(csv)) > 1
    else:
        # Not a date: the CSV is a 400 naming the field and the rule; the page (a filter form, as every
        # list page) shows the same message beside the field, and no rows.
        assert csv.status_code == 400
        message = csv.content.decode()
        assert message.startswith("From (date, UTC): “")
        assert page.status_code == 200 and message.split(": ", 1)[1] in html.unescape(page.content.decode())


def test_the_chart_of_a_range_without_start_shows_the_days_up_to_its_end(snapshots, users, client):
    client.force_login(users["sysadmin"])
    page = client.get("/usage/", {"date_to": "2026-11-20"}).content.decode()
    assert "2026-11-14 to 2026-11-20 (UTC)" in page
