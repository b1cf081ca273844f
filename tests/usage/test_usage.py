"""Usage history: snapshots per pool / department / project, the command that takes them, the
compliance CSV for a date range (restricted by role), the API, and the chart's figures."""
import csv
import re
import datetime
import io
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.template import Context, Template
from django.test import RequestFactory
from django.utils import timezone

from projects import services
from usage.models import UsageSnapshot
from usage.services import usage_snapshot_take


@pytest.fixture
def history(org):
    """Three snapshots a day apart: rnd-a grows from 1 to 3 GPUs in a100 over a 2-GPU quota."""
    services.quota_update(actor=None, quota=org.quota(org.rnd, org.a100), expected_version=None, gpu_deserved=4)
    services.quota_update(actor=None, quota=org.quota(org.rnd_a, org.a100), expected_version=None, gpu_deserved=2)
    now = timezone.now().replace(microsecond=0)
    times = [now - datetime.timedelta(days=2), now - datetime.timedelta(days=1), now]
    for index, at in enumerate(times):
        org.run(f"train-{index}", org.rnd_a, "a100-1", gpus=1, cpu="2", memory="2Gi")
        usage_snapshot_take(at=at)
    return times


def rows(**filters):
    return list(UsageSnapshot.objects.filter(**filters).order_by("taken"))


def test_a_snapshot_has_one_row_per_pool_and_per_owner_in_each_pool(org):
    count = usage_snapshot_take()
    # 2 pools + 2 pools x (2 departments + 3 projects)
    assert count == 2 + 2 * 5 == UsageSnapshot.objects.count()


def test_values_per_project_department_and_pool(org, history):
    project = rows(kind=UsageSnapshot.Kind.PROJECT, project=org.rnd_a, pool=org.a100)
    assert [(r.gpu_deserved, r.gpu_allocated, r.gpu_over_quota) for r in project] == [
        (Decimal("2.00"), Decimal("1.00"), Decimal("0.00")),
        (Decimal("2.00"), Decimal("2.00"), Decimal("0.00")),
        (Decimal("2.00"), Decimal("3.00"), Decimal("1.00")),
    ]
    last = project[-1]
    assert (last.cpu_allocated, last.memory_allocated_mib, last.cpu_deserved) == (Decimal("6.000"), 6144, None)
    assert last.department_id == org.rnd.pk
    department = rows(kind=UsageSnapshot.Kind.DEPARTMENT, department=org.rnd, pool=org.a100)[-1]
    assert (department.gpu_deserved, department.gpu_allocated, department.gpu_over_quota) == (4, 3, 0)
    pool = rows(kind=UsageSnapshot.Kind.POOL, pool=org.a100)[-1]
    assert (pool.gpu_capacity, pool.gpu_deserved, pool.gpu_allocated) == (8, 4, 3)


def test_command_once_and_bounded_loop(org, capsys):
    call_command("snapshot_usage", "--once")
    assert UsageSnapshot.objects.values("taken").distinct().count() == 1
    call_command("snapshot_usage", "--every", "1", "--count", "2")
    assert UsageSnapshot.objects.values("taken").distinct().count() == 3
    assert "usage snapshot: 12 rows" in capsys.readouterr().out


def download(response):
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_compliance_csv_for_a_date_range(client, users, org, history):
    client.force_login(users["sysadmin"])
    day = history[1].date().isoformat()
    table = download(client.get("/usage/export.csv", {"date_from": day, "date_to": day}))
    assert table[0][:6] == ["Time (UTC)", "Cluster", "Node pool", "Kind", "Department", "Project"]
    assert len(table) == 1 + 12 and {row[0][:10] for row in table[1:]} == {day}
    rnd_a = next(row for row in table[1:] if row[5] == "rnd-a" and row[2] == "a100")
    assert rnd_a[1:5] == ["lab", "a100", "Project", "rnd"] and rnd_a[7:10] == ["2.000", "2.000", "0.000"]
    assert rnd_a[11] == "unlimited"


def test_csv_holds_only_rows_the_role_may_see(client, users, org, history):
    client.force_login(users["researcher"])  # project rnd-a only
    table = download(client.get("/usage/export.csv"))
    kinds = {(row[3], row[4], row[5]) for row in table[1:]}
    assert kinds == {("Pool", "", ""), ("Project", "rnd", "rnd-a")}
    client.force_login(users["rnd_viewer"])
    owners = {row[5] or row[4] for row in download(client.get("/usage/export.csv"))[1:] if row[3] != "Pool"}
    assert owners == {"rnd", "rnd-a", "rnd-b"}
    client.force_login(users["nobody"])
    assert download(client.get("/usage/export.csv")) == [download(client.get("/usage/export.csv"))[0]]


def test_filtering_another_departments_rows_by_id_is_refused(client, users, org, history):
    client.force_login(users["rnd_admin"])
    response = client.get("/usage/", {"department": org.ops.pk})
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    # The compliance CSV refuses the same filter with the page's message, and shows none of ops' rows.
    response = client.get("/usage/export.csv", {"department": org.ops.pk})
    assert response.status_code == 400 and "ops" not in response.content.decode()
    assert response.content.decode().startswith("Department (and its projects): Select a valid choice.")


def test_history_survives_deleting_a_project(client, users, org, history):
    pk = org.rnd_b.pk
    services.project_delete(actor=None, project=org.rnd_b)
    client.force_login(users["sysadmin"])
    table = download(client.get("/usage/export.csv", {"kind": "project"}))
    assert any(row[5] == f"#{pk} (deleted)" for row in table[1:])


def test_api_lists_and_exports_restricted_rows(api, users, org, history):
    body = api(users["researcher"]).get("/api/v1/usage-snapshots/", {"kind": "project"}).json()
    assert body["count"] == 6 and {r["project"] for r in body["results"]} == {org.rnd_a.pk}
    response = api(users["researcher"]).get("/api/v1/usage-snapshots/export/", {"kind": "project", "pool": org.a100.pk})
    table = download(response)
    assert [row[8] for row in table[1:]] == ["1.000", "2.000", "3.000"]
    response = api(users["researcher"]).get("/api/v1/usage-snapshots/", {"date_from": "not a date"})
    assert response.status_code == 400 and "date_from" in response.json()["errors"]


def render_chart(user, **context):
    request = RequestFactory().get("/")
    request.user = user
    return Template('{% include "usage/_chart.html" %}').render(Context({"request": request, **context}))


def chart_figure(html):
    import json
    import re

    match = re.search(r'<script id="usage-chart-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(match.group(1)) if match else None


def test_chart_of_a_pool_has_capacity_deserved_and_allocated(users, org, history):
    html = render_chart(users["rnd_viewer"], pool=org.a100)
    data = chart_figure(html)
    assert "<svg" not in html and data["type"] == "time"
    assert {s["label"]: s["values"][-1] for s in data["series"]} == {
        "Capacity (Ready)": 8, "Deserved": 4, "Allocated": 3}
    assert "GPUs of node pool a100" in html and "<td class=\"num\">8</td><td class=\"num\">4</td><td class=\"num\">3</td>" in html


def test_chart_of_a_department_and_of_everything(users, org, history):
    html = render_chart(users["rnd_viewer"], department=org.rnd)
    assert "GPUs of department rnd" in html
    assert {s["label"]: s["values"][-1] for s in chart_figure(html)["series"]} == {"Deserved": 4, "Allocated": 3}
    html = render_chart(users["rnd_viewer"])
    assert "all node pools you may see" in html and chart_figure(html)["series"]


def test_chart_shows_nothing_the_user_may_not_see(users, org, history):
    html = render_chart(users["researcher"], department=org.ops)
    assert chart_figure(html) is None and "No usage history in the last 7 days" in html


def test_usage_page(client, users, org, history):
    client.force_login(users["rnd_admin"])
    html = client.get("/usage/").content.decode()
    assert 'id="usage-chart-data"' in html and "Download CSV" in html and "rnd-a" in html and "ops-a" not in html


# --- Columns chosen per user, and the page's CSV following them -------------------------------------

def test_usage_columns_are_chosen_ordered_and_remembered(client, users, org, history):
    from django.urls import reverse

    from tests.pages import headers, login

    login(client, users, "rnd_admin")
    assert headers(client.get("/usage/")) == [
        "Time (UTC)", "Kind", "Node pool", "Department", "Project", "GPU capacity (Ready)", "GPU deserved",
        "GPU allocated", "GPU over-quota", "CPU allocated (cores)", "Memory allocated (GiB)"]
    assert reverse("table-columns", args=["usage"]) in client.get("/usage/").content.decode()
    client.post(reverse("table-columns", args=["usage"]),
                {"order": ["project", "gpu_allocated", "cpu_deserved", "taken"],
                 "columns": ["project", "gpu_allocated", "cpu_deserved"]})
    assert headers(client.get("/usage/")) == ["Project", "GPU allocated", "CPU deserved (cores)"]
    client.post(reverse("table-columns", args=["usage"]),
                {"order": ["project", "gpu_allocated", "cpu_deserved"], "columns": ["project", "gpu_allocated",
                                                                                    "cpu_deserved"],
                 "move": "down:project"})
    assert headers(client.get("/usage/")) == ["GPU allocated", "Project", "CPU deserved (cores)"]
    login(client, users, "rnd_viewer")
    assert headers(client.get("/usage/"))[:2] == ["Time (UTC)", "Kind"]


def test_usage_page_csv_holds_the_chosen_columns_in_order_with_filters_and_sort(client, users, org, history):
    from tests.pages import csv_of, login
    from ui import services
    from usage.tables import UsageSnapshotTable

    login(client, users, "researcher")  # project rnd-a only, and the pools' own rows
    services.table_preference_set(user=users["researcher"], table="usage",
                                  columns=["project", "gpu_allocated", "cpu_deserved", "kind"],
                                  allowed=UsageSnapshotTable.column_names())
    rows = csv_of(client.get("/usage/", {"kind": "project", "pool": org.a100.pk, "sort": "gpu_allocated",
                                         "format": "csv"}))
    assert rows == [["Project", "GPU allocated", "CPU deserved (cores)", "Kind"],
                    ["rnd-a", "1", "unlimited", "Project"], ["rnd-a", "2", "unlimited", "Project"],
                    ["rnd-a", "3", "unlimited", "Project"]]
    rows = csv_of(client.get("/usage/", {"format": "csv", "columns": "all", "sort": "-taken"}))
    assert rows[0] == ["Time (UTC)", "Cluster", "Node pool", "Kind", "Department", "Project", "GPU capacity (Ready)",
                       "GPU deserved", "GPU allocated", "GPU over-quota", "CPU capacity (cores)", "CPU deserved (cores)",
                       "CPU allocated (cores)", "CPU over-quota (cores)", "Memory capacity (GiB)",
                       "Memory deserved (GiB)", "Memory allocated (GiB)", "Memory over-quota (GiB)",
                       "GPU utilization (%)", "Idle GPUs"]
    assert {(row[1], row[3], row[4], row[5]) for row in rows[1:]} == {
        ("lab", "Pool", "", ""), ("lab", "Project", "rnd", "rnd-a")}
    newest_a100 = next(row for row in rows[1:] if row[2] == "a100" and row[5] == "rnd-a")
    assert newest_a100[7:10] == ["2", "3", "1"] and newest_a100[11] == "unlimited"
    # Memory in GiB (the snapshots' MiB / 1024: 6144 MiB allocated to rnd-a there); unlimited deserved memory.
    assert newest_a100[14:17] == ["", "unlimited", "6"]


def test_usage_page_names_deleted_owners(client, users, org, history):
    from tests.pages import login, table_rows

    pk = org.rnd_b.pk
    services.project_delete(actor=None, project=org.rnd_b)
    login(client, users, "sysadmin")
    assert any(row[4] == f"#{pk} (deleted)" for row in table_rows(client.get("/usage/", {"kind": "project"})))


# --- The filter form: labels, date inputs, a range that runs backwards -------------------------------

def test_usage_filters_read_cluster_and_take_dates_from_date_inputs(client, users, org, history):
    from tests.pages import text

    client.force_login(users["sysadmin"])
    html = client.get("/usage/").content.decode()
    form = html[html.index('<form method="get" class="filters"'):]
    form = form[:form.index("</form>")]
    labels = [text(label).split(" All")[0] for label in re.findall(r"<label>(.*?)<(?:input|select)", form, re.S)]
    assert "Cluster" in labels and "[invalid name]" not in form
    assert re.search(r'<input type="date" name="date_from"', form) and re.search(r'<input type="date" name="date_to"', form)
    day = history[1].date().isoformat()
    page = client.get("/usage/", {"date_from": day}).content.decode()
    assert f'type="date" name="date_from" value="{day}"' in page


MESSAGE = "From (date, UTC): must not be after To (date, UTC, inclusive) (2026-11-20); it is 2026-11-25."


def test_a_range_starting_after_its_end_is_an_error_beside_the_fields(client, users, org, history):
    from tests.pages import page_text, table_rows

    client.force_login(users["sysadmin"])
    response = client.get("/usage/", {"date_from": "2026-11-25", "date_to": "2026-11-20"})
    assert response.status_code == 200
    assert MESSAGE in page_text(response)
    assert table_rows(response) == []  # nothing shown rather than the whole history


def test_the_compliance_csv_of_a_backwards_range_is_a_400_with_the_same_message(client, users, org, history):
    client.force_login(users["sysadmin"])
    response = client.get("/usage/export.csv", {"date_from": "2026-11-25", "date_to": "2026-11-20"})
    assert response.status_code == 400 and response.content.decode() == MESSAGE
    response = client.get("/usage/export.csv", {"date_from": "not a date"})
    assert response.status_code == 400 and response.content.decode() == (
        "From (date, UTC): “not a date” is not a date: write it YYYY-MM-DD, e.g. 2026-11-01.")
    # The API answers the same rule in its JSON errors.
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(users["sysadmin"])
    response = api.get("/api/v1/usage-snapshots/export/", {"date_from": "2026-11-25", "date_to": "2026-11-20"})
    assert response.status_code == 400
    assert response.json()["errors"]["date_from"] == [MESSAGE.split(": ", 1)[1]]
