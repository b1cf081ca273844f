"""Idle allocated GPUs over a scripted hour of DCGM samples held by a REAL Prometheus (backfilled with
promtool): a GPU idle all along, one busy, one that became idle 10 minutes ago, one whose pod started
8 minutes ago; the Idle GPUs page, its CSV and role restrictions; usage snapshots store utilization;
Prometheus down gives "—" with the reason."""
import csv
import datetime
import io
import time
from decimal import Decimal

import pytest
from django.test import override_settings
from django.utils import timezone

from kubesim.dcgm_history import Gpu, create_blocks, write_openmetrics
from projects.utilization import cluster_idle_gpus
from tests.pages import csv_of
from usage.models import UsageSnapshot
from usage.services import usage_snapshot_take

# Set when the Prometheus starts (a whole suite may run long after this module is collected).
NOW = time.time()
BUSY_UNTIL = NOW - 600  # the "recent" GPU became idle 10 minutes ago
YOUNG_FROM = NOW - 480  # the "young" pod started 8 minutes ago


def _set_clock() -> None:
    global NOW, BUSY_UNTIL, YOUNG_FROM
    NOW = time.time()
    BUSY_UNTIL, YOUNG_FROM = NOW - 600, NOW - 480


def scripted_gpus():
    return [
        Gpu("a100-1", 0, "NVIDIA A100-SXM4-40GB", 40960, lambda t: 1, namespace="runai-rnd-a", pod="idle-pod"),
        Gpu("a100-1", 1, "NVIDIA A100-SXM4-40GB", 40960, lambda t: 80, namespace="runai-rnd-b", pod="busy-pod"),
        Gpu("a100-2", 0, "NVIDIA A100-SXM4-40GB", 40960, lambda t: 70 if t < BUSY_UNTIL else 2,
            namespace="runai-ops-a", pod="recent-pod"),
        Gpu("a100-2", 1, "NVIDIA A100-SXM4-40GB", 40960, lambda t: 0),  # held by no pod
    ]


@pytest.fixture(scope="module")
def history_prometheus(tmp_path_factory):
    """A real Prometheus holding the last hour of the scripted GPUs, every 15 s (and the young pod's 8 minutes)."""
    from gpumetrics import localprom
    from tests.conftest import require_prometheus

    require_prometheus()
    _set_clock()
    work = tmp_path_factory.mktemp("idle-history")
    data = work / "tsdb"
    end = NOW - 15
    write_openmetrics(work / "hour.om", scripted_gpus(), start=end - 3600, end=end, interval=15)
    create_blocks(work / "hour.om", data)
    young = [Gpu("v100-1", 0, "Tesla V100-SXM2-16GB", 16384, lambda t: 0, namespace="runai-rnd-a", pod="young-pod")]
    write_openmetrics(work / "young.om", young, start=YOUNG_FROM, end=end, interval=15)
    create_blocks(work / "young.om", data)
    prom = localprom.LocalPrometheus(tsdb_dir=str(data))
    prom.start()
    yield prom
    prom.stop()


@pytest.fixture
def fleet(org, history_prometheus):
    import gpumetrics

    gpumetrics.cache_clear()
    org.cluster.prometheus_url = history_prometheus.url
    org.cluster.save()
    org.run("idle-pod", org.rnd_a, "a100-1")
    org.run("busy-pod", org.rnd_b, "a100-1")
    org.run("recent-pod", org.ops_a, "a100-2")
    org.run("young-pod", org.rnd_a, "v100-1")
    return org


def found(cluster, **kwargs):
    gpus, reason = cluster_idle_gpus(cluster, now=datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc),
                                     **kwargs)
    assert reason == ""
    return {g.pod: g for g in gpus}


def minutes_ago(moment) -> float:
    return (NOW - moment.timestamp()) / 60


@override_settings(GPU_IDLE_LOOKBACK_HOURS=2)
def test_idle_over_the_window_busy_recent_and_young(fleet):
    window_20 = found(fleet.cluster, window=datetime.timedelta(minutes=20))
    # Busy: not idle. Idle for only 10 minutes: not yet. Pod reporting for only 8 minutes: not yet.
    assert set(window_20) == {"idle-pod"}
    idle = window_20["idle-pod"]
    assert (idle.node, idle.index, idle.namespace, idle.model) == ("a100-1", "0", "runai-rnd-a", "NVIDIA A100-SXM4-40GB")
    assert 58 <= minutes_ago(idle.since) <= 61 and not idle.since_before
    assert Decimal("0.95") <= idle.gpu_hours_wasted <= Decimal("1.02")
    # A 5-minute window: the recent one (idle since 10 minutes) and the young one (8 minutes) count too.
    window_5 = found(fleet.cluster, window=datetime.timedelta(minutes=5))
    assert set(window_5) == {"idle-pod", "recent-pod", "young-pod"}
    assert 9 <= minutes_ago(window_5["recent-pod"].since) <= 11
    assert 7 <= minutes_ago(window_5["young-pod"].since) <= 9
    # A threshold above every value: each GPU a pod held long enough is idle; the unheld one never.
    assert set(found(fleet.cluster, window=datetime.timedelta(minutes=20), threshold=90)) == {"idle-pod", "busy-pod", "recent-pod"}


def table_csv(response):
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return csv_of(response)


def download(response):
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


SETTINGS = {"GPU_IDLE_WINDOW_MINUTES": 20, "GPU_IDLE_LOOKBACK_HOURS": 2}


@override_settings(**SETTINGS)
def test_idle_gpus_page_lists_them_by_project_with_since_and_gpu_hours(client, users, fleet):
    client.force_login(users["sysadmin"])
    page = client.get("/usage/idle-gpus/").content.decode()
    assert "idle-pod" in page and "busy-pod" not in page and "recent-pod" not in page
    assert 'id="idle-summary"' in page and "rnd-a" in page
    rows = table_csv(client.get("/usage/idle-gpus/", {"format": "csv", "columns": "all"}))
    header = rows[0]
    assert header == ["Cluster", "Department", "Project", "Namespace", "Pod", "Node", "Node pool", "GPU", "GPU UUID",
                      "GPU model", "Idle since (UTC)", "Idle for (hours)", "GPU-hours wasted"]
    assert len(rows) == 2
    line = dict(zip(header, rows[1]))
    assert (line["Department"], line["Project"], line["Pod"], line["Node pool"], line["GPU"]) == (
        "rnd", "rnd-a", "idle-pod", "a100", "0")
    assert 0.95 <= float(line["GPU-hours wasted"]) <= 1.05  # (the page reads at its own time, a little later)
    since = datetime.datetime.strptime(line["Idle since (UTC)"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    assert 58 <= minutes_ago(since) <= 61


@override_settings(GPU_IDLE_WINDOW_MINUTES=5, GPU_IDLE_LOOKBACK_HOURS=2)
def test_idle_gpus_restricted_per_role_and_filtered(client, users, fleet):
    def pods(user, **query):
        client.force_login(user)
        rows = table_csv(client.get("/usage/idle-gpus/", {"format": "csv", "columns": "all", **query}))
        return sorted(row[4] for row in rows[1:])

    assert pods(users["sysadmin"]) == ["idle-pod", "recent-pod", "young-pod"]
    assert pods(users["rnd_admin"]) == ["idle-pod", "young-pod"]  # department rnd: not ops-a's GPU
    assert pods(users["researcher"]) == ["idle-pod", "young-pod"]
    assert pods(users["nobody"]) == []
    assert pods(users["sysadmin"], department=fleet.ops.pk) == ["recent-pod"]
    assert pods(users["sysadmin"], pool=fleet.a100.pk) == ["idle-pod", "recent-pod"]
    # Another department's id is refused, not quietly ignored.
    client.force_login(users["rnd_admin"])
    page = client.get("/usage/idle-gpus/", {"department": fleet.ops.pk}).content.decode()
    assert "Select a valid choice" in page and "recent-pod" not in page


@override_settings(**SETTINGS)
def test_snapshots_store_utilization_and_idle_gpus(client, users, fleet):
    usage_snapshot_take(at=datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc))
    project = UsageSnapshot.objects.get(kind=UsageSnapshot.Kind.PROJECT, project=fleet.rnd_a, pool=fleet.a100)
    assert (project.gpu_utilization, project.gpu_idle) == (Decimal("1.00"), 1)
    busy = UsageSnapshot.objects.get(kind=UsageSnapshot.Kind.PROJECT, project=fleet.rnd_b, pool=fleet.a100)
    assert (busy.gpu_utilization, busy.gpu_idle) == (Decimal("80.00"), 0)
    # ops-a's GPU was busy (70) for 5 of the last 15 minutes, then 2: (5 x 70 + 10 x 2) / 15.
    ops = UsageSnapshot.objects.get(kind=UsageSnapshot.Kind.PROJECT, project=fleet.ops_a, pool=fleet.a100)
    assert Decimal("22") <= ops.gpu_utilization <= Decimal("27") and ops.gpu_idle == 0
    pool = UsageSnapshot.objects.get(kind=UsageSnapshot.Kind.POOL, pool=fleet.a100)
    assert pool.gpu_idle == 1 and Decimal("33") <= pool.gpu_utilization <= Decimal("37")
    department = UsageSnapshot.objects.get(kind=UsageSnapshot.Kind.DEPARTMENT, department=fleet.rnd, pool=fleet.a100)
    assert (department.gpu_utilization, department.gpu_idle) == (Decimal("40.50"), 1)
    # No GPU of rnd-a in the default pool reports for the whole window, but young-pod's does: 0 %.
    client.force_login(users["sysadmin"])
    rows = download(client.get("/usage/export.csv", {"kind": "project"}))
    header = rows[0]
    assert header[-2:] == ["GPU utilization (%)", "Idle GPUs"]
    line = next(r for r in rows[1:] if r[5] == "rnd-a" and r[2] == "a100")
    assert line[-2:] == ["1.00", "1"]


def test_snapshots_without_prometheus_leave_utilization_unknown(org):
    usage_snapshot_take()
    assert set(UsageSnapshot.objects.values_list("gpu_utilization", "gpu_idle")) == {(None, None)}


def test_prometheus_down_shows_a_dash_with_the_reason(client, users, org):
    import gpumetrics
    from gpumetrics.localprom import _free_port

    gpumetrics.cache_clear()
    org.cluster.prometheus_url = f"http://127.0.0.1:{_free_port('127.0.0.1')}"
    org.cluster.save()
    org.run("idle-pod", org.rnd_a, "a100-1")
    client.force_login(users["sysadmin"])
    page = client.get("/usage/idle-gpus/").content.decode()
    assert "Cluster lab: idle GPUs unknown (—): Prometheus unreachable: connection refused" in page
    part = client.get(f"/projects/{org.rnd_a.pk}/utilization/").content.decode()
    assert '<span id="utilization-now" title="Prometheus unreachable: connection refused">—</span>' in part


@override_settings(GPU_IDLE_WINDOW_MINUTES=5, GPU_IDLE_LOOKBACK_HOURS=2)
def test_api_lists_the_idle_gpus_the_user_may_see(api, users, fleet):
    body = api(users["researcher"]).get("/api/v1/idle-gpus/").json()
    assert (body["threshold_percent"], body["window_minutes"], body["unavailable"]) == (5, 5, {})
    assert sorted(r["pod"] for r in body["results"]) == ["idle-pod", "young-pod"]
    idle = next(r for r in body["results"] if r["pod"] == "idle-pod")
    assert (idle["project"], idle["department"], idle["pool"], idle["node"], idle["gpu"]) == (
        "rnd-a", "rnd", "a100", "a100-1", "0")
    assert 0.95 <= float(idle["gpu_hours_wasted"]) <= 1.05 and idle["idle_since_before"] is False
    body = api(users["sysadmin"]).get("/api/v1/idle-gpus/", {"project": fleet.ops_a.pk}).json()
    assert [r["pod"] for r in body["results"]] == ["recent-pod"]
    response = api(users["rnd_admin"]).get("/api/v1/idle-gpus/", {"project": fleet.ops_a.pk})
    assert response.status_code == 400 and "project" in response.json()["errors"]


def test_a_slow_prometheus_holds_the_idle_gpus_page_one_budget_whatever_its_clusters(client, api, users, org,
                                                                                    slow_prometheus, settings):
    """Two clusters whose Prometheus answers after 3 s: the page's queries share ONE budget
    (GPUMETRICS_IDLE_TIMEOUT), so it renders after about that long with "—" and the reason for each."""
    import html

    import gpumetrics
    from nodepools import services as pool_services
    from tests.conftest import Org

    settings.GPUMETRICS_IDLE_TIMEOUT = 1.0
    second = Org(pool_services.cluster_create(actor=None, name="lab2"))
    for each in (org, second):
        each.cluster.prometheus_url = slow_prometheus
        each.cluster.save()
        each.run("idle-pod", each.rnd_a, "a100-1")
    client.force_login(users["sysadmin"])
    gpumetrics.cache_clear()
    before = gpumetrics.stats.requests
    started = time.monotonic()
    response = client.get("/usage/idle-gpus/")
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert 1.0 <= elapsed < 1.8, f"the page took {elapsed:.2f} s: its budget is 1 s for every query of every cluster"
    shown = {line for line in (f"Cluster {name}: idle GPUs unknown (—): {reason}" for name in ("lab", "lab2")
                               for reason in ("Prometheus timed out after 1.0 s", gpumetrics.NO_BUDGET))
             if line in page}
    # The first cluster's query spent the budget; the second's were not sent.
    assert shown == {"Cluster lab: idle GPUs unknown (—): Prometheus timed out after 1.0 s",
                     f"Cluster lab2: idle GPUs unknown (—): {gpumetrics.NO_BUDGET}"}
    assert gpumetrics.stats.requests - before == 1
    # The API's list reads within the same kind of budget, with the same reasons.
    gpumetrics.cache_clear()
    started = time.monotonic()
    body = api(users["sysadmin"]).get("/api/v1/idle-gpus/").json()
    assert time.monotonic() - started < 1.8
    assert body["unavailable"] == {"lab": "Prometheus timed out after 1.0 s", "lab2": gpumetrics.NO_BUDGET}
    assert body["results"] == []
