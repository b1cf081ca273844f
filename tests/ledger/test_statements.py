"""Statements: a department's month (projects × pools × GPU models) and a cluster's (departments ranked),
as a page, a CSV and the API with the same rows; priced at the rate of each day; every total the sum of
its lines; restricted like the quota."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from ledger import services
from ledger.models import Kind, LedgerEntry
from tests.ledger.test_closing import run
from tests.pages import csv_of

UTC = dt.timezone.utc
MARCH = dt.datetime(2026, 3, 14, 0, tzinfo=UTC)
V100, A100 = "Tesla-V100-SXM2-16GB", "NVIDIA-A100-SXM4-40GB"


@pytest.fixture
def month(org, users):
    """March 2026: rnd-a trains on 2 A100 from the 14th 00:00 for 48 h; rnd-b holds 1 V100 for 24 h of
    the 15th; ops-a serves on 1 V100 for 24 h of the 14th; a burn-in pod of no project holds 4 A100 for
    2 h. A100 costs 2 EUR, and 3 EUR from the 15th."""
    run(org, "train", org.rnd_a, "a100-1", MARCH, MARCH + dt.timedelta(hours=48), gpus=2)
    run(org, "notebook", org.rnd_b, "v100-1", MARCH + dt.timedelta(days=1), MARCH + dt.timedelta(days=2))
    run(org, "serve", org.ops_a, "v100-2", MARCH, MARCH + dt.timedelta(days=1), priority=125)
    run(org, "burn-in", None, "a100-2", MARCH, MARCH + dt.timedelta(hours=2), gpus=4)  # of no project
    for h in range(48):
        services.ledger_hour_close(cluster=org.cluster, hour=MARCH + dt.timedelta(hours=h))
    services.rate_create(actor=None, gpu_model=A100, currency="EUR", valid_from=dt.date(2026, 1, 1),
                         gpu_hour=Decimal(2))
    services.rate_create(actor=None, gpu_model=A100, currency="EUR", valid_from=dt.date(2026, 3, 15),
                         gpu_hour=Decimal(3))
    services.rate_create(actor=None, gpu_model=V100, currency="EUR", valid_from=dt.date(2026, 1, 1),
                         gpu_hour=Decimal("0.5"), cpu_core_hour=Decimal("0.01"))
    return org


def csv_rows(response) -> list[list[str]]:
    return csv_of(response)


def test_a_department_manager_reads_the_statement_of_their_department(month, users, client):
    org = month
    client.force_login(users["rnd_viewer"])
    page = client.get(f"/departments/{org.rnd.pk}/statement/", {"month": "2026-03"})
    assert page.status_code == 200
    lines = page.context["statement"].lines
    assert [(l.labels["project"], l.labels["pool"], l.labels["gpu_model"]) for l in lines] == [
        ("rnd-a", "a100", A100), ("rnd-b", "default", V100)]
    train, notebook = lines
    # 2 GPUs × 48 h, all above rnd-a's deserved 0; the rate changes on the 15th: 48 GPU-h at 2, 48 at 3.
    assert (train.gpu_hours, train.over_quota_hours, train.cost) == (Decimal("96.00"), Decimal("96.00"), Decimal("240.00"))
    # 24 GPU-hours at 0.5 plus 2 cores × 24 h at 0.01.
    assert (notebook.gpu_hours, notebook.cost) == (Decimal("24.00"), Decimal("12.48"))
    totals = page.context["statement"].totals
    assert (totals["gpu_hours"], totals["cost"]) == (Decimal("120.00"), Decimal("252.48"))
    html = page.content.decode()
    assert 'data-total="gpu_hours">120.00<' in html and "252.48 EUR" in html
    assert "Print / save as PDF" in html and "statement-trend" in html
    # Another department's statement does not exist for them; nor does the cluster's.
    assert client.get(f"/departments/{org.ops.pk}/statement/").status_code == 404
    assert client.get(f"/clusters/{org.cluster.pk}/statement/").status_code == 404


def test_the_csv_and_the_api_have_the_page_s_rows_and_totals(month, users, client):
    org = month
    client.force_login(users["rnd_admin"])
    page = client.get(f"/departments/{org.rnd.pk}/statement/", {"month": "2026-03"}).context["statement"]
    rows = csv_rows(client.get(f"/departments/{org.rnd.pk}/statement/", {"month": "2026-03", "format": "csv"}))
    assert rows[0][:4] == ["Project", "Node pool", "GPU model", "GPU-hours"]
    assert [r[:4] for r in rows[1:]] == [
        [l.labels["project"], l.labels["pool"], l.labels["gpu_model"], str(l.gpu_hours)] for l in page.lines
    ] + [["Total", "", "", str(page.totals["gpu_hours"])]]
    cost = rows[0].index("Cost")
    assert sum(Decimal(r[cost]) for r in rows[1:-1]) == Decimal(rows[-1][cost]) == page.totals["cost"]
    api = client.get(f"/api/v1/departments/{org.rnd.pk}/statement", {"month": "2026-03"}).json()
    assert [(l["project"], l["pool"], l["gpu_model"], l["gpu_hours"], l["cost"]) for l in api["lines"]] == [
        (r[0], r[1], r[2], r[3], r[cost]) for r in rows[1:-1]]
    assert api["totals"]["cost"] == rows[-1][cost] and api["currency"] == "EUR"
    assert api["lines"][0]["gpu_seconds"] == "345600.000"  # exact: 2 GPUs × 48 h
    assert len(api["days"]) == 31 and api["days"][13]["gpu_hours"] == "48.00"


def test_the_statement_of_a_month_is_the_sum_of_its_hours(month, users, client):
    org = month
    client.force_login(users["sysadmin"])
    api = client.get(f"/api/v1/departments/{org.rnd.pk}/statement", {"month": "2026-03"}).json()
    hours = LedgerEntry.objects.filter(department_id=org.rnd.pk, hour__month=3)
    assert Decimal(api["lines"][0]["gpu_seconds"]) + Decimal(api["lines"][1]["gpu_seconds"]) == sum(
        (e.gpu_seconds for e in hours), Decimal(0))


def test_the_cluster_statement_ranks_departments_for_system_administrators(month, users, client):
    org = month
    client.force_login(users["sysadmin"])
    statement = client.get(f"/clusters/{org.cluster.pk}/statement/", {"month": "2026-03"}).context["statement"]
    assert [l.labels["department"] for l in statement.lines] == ["rnd", "ops", "(pods of no project)"]
    rnd = client.get(f"/departments/{org.rnd.pk}/statement/", {"month": "2026-03"}).context["statement"]
    # A department's line is its own statement's total.
    assert (statement.lines[0].gpu_hours, statement.lines[0].cost) == (rnd.totals["gpu_hours"], rnd.totals["cost"])
    ops = statement.lines[1]
    assert (ops.gpu_hours, ops.non_preemptible_hours, ops.over_quota_hours) == (Decimal(24), Decimal(24), Decimal(24))
    nobody = statement.lines[2]
    assert (nobody.gpu_hours, nobody.over_quota_hours, nobody.cost) == (Decimal(8), Decimal(0), Decimal(16))
    assert statement.totals["gpu_hours"] == sum((l.gpu_hours for l in statement.lines), Decimal(0))
    rows = csv_rows(client.get(f"/clusters/{org.cluster.pk}/statement/", {"month": "2026-03", "format": "csv"}))
    assert [r[:2] for r in rows[1:]] == [["1", "rnd"], ["2", "ops"], ["3", "(pods of no project)"], ["", "Total"]]
    api = client.get(f"/api/v1/clusters/{org.cluster.pk}/statement", {"month": "2026-03"}).json()
    assert [l["department"] for l in api["lines"]] == ["rnd", "ops", "(pods of no project)"]
    client.force_login(users["cluster_viewer"])
    assert client.get(f"/api/v1/clusters/{org.cluster.pk}/statement").status_code == 404


def test_a_pool_s_own_rate_wins_and_hours_without_a_rate_are_said(month, users, client):
    org = month
    services.rate_create(actor=None, gpu_model=V100, pool=org.default, currency="EUR", valid_from=dt.date(2026, 3, 1),
                         gpu_hour=Decimal(1))
    client.force_login(users["sysadmin"])
    [_, notebook] = client.get(f"/departments/{org.rnd.pk}/statement/", {"month": "2026-03"}).context["statement"].lines
    assert notebook.cost == Decimal(24)  # 24 GPU-hours at the pool's 1 EUR (no CPU price in the pool's rate)
    from ledger.models import Rate

    Rate.objects.filter(gpu_model=A100).delete()
    page = client.get(f"/departments/{org.rnd.pk}/statement/", {"month": "2026-03"})
    statement = page.context["statement"]
    assert statement.lines[0].cost == 0 and statement.totals["unpriced_hours"] == Decimal(96)
    assert "96.00 GPU-hours of GPU models with no rate" in page.content.decode()


def test_a_correction_shows_as_such_and_its_negative_figure_is_escaped_in_csv(month, users, client):
    org = month
    hour = MARCH + dt.timedelta(hours=47)
    LedgerEntry.objects.create(hour=hour, kind=Kind.CORRECTION, recorded=hour + dt.timedelta(hours=2),
                               cluster_id=org.cluster.pk, pool=org.a100, gpu_model=A100, department_id=org.rnd.pk,
                               project=org.rnd_a, gpu_seconds=Decimal(-1800))
    services._add_to_days(list(LedgerEntry.objects.filter(kind=Kind.CORRECTION)))
    client.force_login(users["rnd_viewer"])
    rows = csv_rows(client.get(f"/departments/{org.rnd.pk}/statement/", {"month": "2026-03", "format": "csv"}))
    corrections = rows[0].index("Corrections (GPU-hours)")
    assert rows[1][corrections] == "'-0.50"  # a cell starting with "-" is never a formula
    ledger = csv_rows(client.get("/ledger/export.csv", {"kind": "correction"}))
    assert len(ledger) == 2 and ledger[1][1] == "Correction" and ledger[1][8] == "'-0.5000"
    page = client.get("/ledger/", {"kind": "correction"})
    assert b'class="correction' in page.content and b"Correction" in page.content


def test_a_month_that_is_not_one_is_refused_naming_the_rule(month, users, client):
    client.force_login(users["rnd_viewer"])
    page = client.get(f"/departments/{month.rnd.pk}/statement/", {"month": "2026-13"})
    assert page.status_code == 400 and "month: “2026-13” is not a month; write it YYYY-MM" in page.content.decode()
    api = client.get(f"/api/v1/departments/{month.rnd.pk}/statement", {"month": "March"})
    assert api.status_code == 400 and "YYYY-MM" in api.json()["errors"]["month"][0]


def test_the_statements_page_lists_the_departments_one_may_read(month, users, client):
    client.force_login(users["rnd_viewer"])
    page = client.get("/statements/", {"month": "2026-03"})
    assert [d.name for d in page.context["departments"]] == ["rnd"] and page.context["clusters"] == []
    assert page.context["departments"][0].gpu_hours == Decimal(120)
    client.force_login(users["sysadmin"])
    assert [c.name for c in client.get("/statements/").context["clusters"]] == ["lab"]


@pytest.mark.django_db
def test_the_ledger_csv_writes_each_figure_as_the_page_rounds_it(org, users, client):
    """Half a ten-thousandth of an hour is 0.18 s: ties round away from zero, on SQLite (Python) as on
    PostgreSQL (the database writes the numbers)."""
    from ledger.selectors import TEN_THOUSANDTH, gib_hours, hours

    hour = MARCH
    figures = [Decimal("0.180"), Decimal("-0.180"), Decimal("1.620"), Decimal("12345.678"), Decimal(0)]
    for i, seconds in enumerate(figures):
        LedgerEntry.objects.create(hour=hour + dt.timedelta(hours=i), recorded=hour, cluster_id=org.cluster.pk,
                                   pool=org.a100, gpu_model=A100, department_id=org.rnd.pk, project=org.rnd_a,
                                   gpu_seconds=seconds, idle_gpu_seconds=seconds, cpu_core_seconds=seconds * 3,
                                   memory_byte_seconds=Decimal(1 << 30) * 1801, measured_gpu_seconds=Decimal(3),
                                   busy_gpu_seconds=Decimal(1))
    client.force_login(users["sysadmin"])
    rows = csv_rows(client.get("/ledger/export.csv"))
    header = rows[0]
    assert [r[header.index("GPU-hours")] for r in rows[1:]] == ["0.0001", "'-0.0001", "0.0005", "3.4294", "0.0000"]
    for row, seconds in zip(rows[1:], figures):
        assert row[header.index("Idle GPU-hours")].lstrip("'") == str(hours(seconds, TEN_THOUSANDTH))
        assert row[header.index("CPU-core-hours")].lstrip("'") == str(hours(seconds * 3, TEN_THOUSANDTH))
        assert row[header.index("Memory-GiB-hours")] == str(gib_hours(Decimal(1 << 30) * 1801, TEN_THOUSANDTH)) == "0.5003"
        assert row[header.index("GPU utilization (%)")] == "33.3"
        assert row[header.index("GPU-seconds")].lstrip("'") == format(seconds.quantize(Decimal("0.001")), "f")
        assert (row[0], row[1], row[3], row[4], row[6], row[7]) == (
            row[0], "Hour closed", "lab", "a100", "rnd", "rnd-a")
    assert rows[1][0] == "2026-03-14T00:00:00Z"
