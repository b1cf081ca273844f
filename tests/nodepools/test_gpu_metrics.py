"""GPU utilization and memory on the nodes and pools tables, the node page and the API, read from a
real Prometheus scraping the emulator's DCGM exporter; "—" with the reason when Prometheus is down,
slow or its series lack the labels; one Prometheus query per page whatever the number of rows. The
pools' figures are read by the sync's leader (one query per cluster) and the pools page reads them
from the database."""
from __future__ import annotations

import re
import time

import pytest
from django.urls import reverse

import gpumetrics
from kubesim import make_node, make_pod
from kubesim.dcgm import MEMORY_USED_ANNOTATION, UTILIZATION_ANNOTATION
from nodepools import services as pool_services
from nodepools.demo_cluster import operand_pods
from tests.nodepools.test_views import headers, login, table_rows
from tests.pages import csv_of

IDLE_WINDOW_SECONDS = 6  # GPU_IDLE_WINDOW_MINUTES of these tests
EXTRA = [f"gpu-{i:02d}" for i in range(60)]  # more GPU nodes, for the query count


def workload(name, project, node, gpus, utilization, memory_mib):
    return make_pod(name, f"runai-{project}", node=node,
                    containers=[{"name": "main", "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}],
                    annotations={UTILIZATION_ANNOTATION: str(utilization), MEMORY_USED_ANNOTATION: str(memory_mib)})


WORKLOADS = [  # (name, project, node, GPUs, utilization %, memory MiB per GPU)
    ("train-1", "rnd-a", "a100-1", 3, 80, 30000),
    ("idle-1", "rnd-b", "a100-2", 2, 1, 2000),
    ("serve-1", "ops-a", "v100-1", 1, 50, 8000),
]


def cluster_objects():
    """The org fixture's nodes (tests/conftest.py Org), 60 more GPU nodes, the operands and WORKLOADS."""
    nodes = [
        make_node("v100-1", gpus=4, gpu_product="Tesla-V100-SXM2-16GB", gpu_memory_mib=16384),
        make_node("v100-2", gpus=4, gpu_product="Tesla-V100-SXM2-16GB", gpu_memory_mib=16384),
        make_node("a100-1", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960,
                  labels={"gpu-type": "A100"}),
        make_node("a100-2", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960,
                  labels={"gpu-type": "A100"}),
        *[make_node(name, gpus=8, gpu_product="NVIDIA-H100-80GB-HBM3") for name in EXTRA],
    ]
    return nodes, operand_pods(nodes) + [workload(*w) for w in WORKLOADS]


@pytest.fixture(scope="module")
def exporter(module_emulators):
    """The emulator serving the cluster's DCGM exporter, and a real Prometheus scraping it every second."""
    from gpumetrics.localprom import LocalPrometheus
    from tests.conftest import require_prometheus

    require_prometheus()
    nodes, pods = cluster_objects()
    emu = module_emulators(bookmark_interval=1.0)  # KubeEmulator's own, which this module always had
    emu.load(nodes=nodes, pods=pods)
    with LocalPrometheus([emu.url + "/dcgm/metrics"]) as prom:
        prom.wait_for_series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", count=16 + 8 * len(EXTRA))
        # A window of samples before the tests: idle means "under the threshold for the whole window".
        prom.wait_for_series(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE offset {IDLE_WINDOW_SECONDS}s",
                             count=16 + 8 * len(EXTRA))
        yield emu, prom


@pytest.fixture
def gpu_org(org, exporter, settings):
    """The org with the exporter's cluster objects mirrored and its Prometheus named."""
    emu, prom = exporter
    settings.GPUMETRICS_TIMEOUT = 5  # a loaded test machine; the budget tests set their own
    settings.GPU_IDLE_WINDOW_MINUTES = IDLE_WINDOW_SECONDS / 60
    org.nodes, org.pods = cluster_objects()
    org.load()
    pool_services.cluster_update(actor=None, cluster=org.cluster, prometheus_url=prom.url)
    gpumetrics.cache_clear()
    pool_services.pool_gpu_figures_refresh(cluster=org.cluster)  # what the sync's leader does every 30 s
    return org


def served(emu):
    """node -> its devices as the exporter serves them."""
    out = {}
    for dev in emu.dcgm_devices():
        out.setdefault(dev["node"], []).append(dev)
    return out


def served_engine_active(emu, metrics_text: str | None = None) -> dict[tuple[str, int], float]:
    """(node, gpu index) -> DCGM_FI_PROF_GR_ENGINE_ACTIVE (0..1) as the exporter serves it."""
    out = {}
    for line in (metrics_text if metrics_text is not None else emu.dcgm_metrics()).splitlines():
        if line.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{"):
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', line))
            out[(labels["Hostname"], int(labels["gpu"]))] = float(line.rsplit(" ", 1)[1])
    return out


def percent(ratio: float) -> str:
    """A 0..1 ratio as the node page shows it in % (one decimal at most)."""
    from django.template.defaultfilters import floatformat

    return str(floatformat(ratio * 100, "-1"))


def node_gpu_rows(html: str) -> list[list[str]]:
    """The cells of the node page's per-GPU table."""
    table = html[html.index('id="node-gpus"'):]
    table = table[:table.index("</table>")]
    return [[re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr data-gpu[^>]*>(.*?)</tr>", table)]


def mib_text(value) -> str:
    """GPU memory as the node page shows it: human units ("40 GiB", "2.5 GiB")."""
    from ui.formats import mib_text

    return mib_text(value)


def num(value):
    from ui.formats import number

    return str(number(value))


def titles(html: str) -> set[str]:
    return set(re.findall(r'<span class="na" title="([^"]*)">—</span>', html))


def test_nodes_table_and_csv_agree_with_what_the_exporter_served(client, gpu_org, exporter, users):
    emu, _ = exporter
    login(client, users, "sysadmin")
    response = client.get(reverse("node-list"), {"sort": "name", "per_page": 100})
    head = headers(response)
    util, memory = head.index("GPU utilization (%)"), head.index("Used/total GPU memory (GiB)")
    rows = {row[0]: row for row in table_rows(response) if not row[0].startswith("gpu-")}
    devices = served(emu)
    assert set(rows) == {"a100-1", "a100-2", "v100-1", "v100-2"}
    for node, row in rows.items():
        devs = devices[node]
        assert row[util] == num(round(sum(d["utilization"] for d in devs) / len(devs), 1))
        used = round(sum(d["fb_used"] for d in devs) / 1024, 1)
        total = round(sum(d["memory_mib"] for d in devs) / 1024, 1)
        assert row[memory] == f"{num(used)}/{num(total)}"
    # By hand, for a100-1: three GPUs of train-1 at 80 %, one free.
    assert rows["a100-1"][util] == "60" and rows["a100-1"][memory] == f"{num(round(90000 / 1024, 1))}/160"
    assert rows["v100-2"][util] == "0" and rows["v100-2"][memory] == "0/64"
    csv_rows = csv_of(client.get(reverse("node-list"), {"sort": "name", "format": "csv"}))
    assert len(csv_rows) == 1 + 4 + len(EXTRA)
    at = csv_rows[0].index("GPU utilization (%)")
    used_at, total_at = csv_rows[0].index("Used GPU memory (GiB)"), csv_rows[0].index("Total GPU memory reported (GiB)")
    by_name = {row[0]: row for row in csv_rows[1:]}
    for node, row in rows.items():
        assert by_name[node][at] == row[util]
        assert f"{by_name[node][used_at]}/{by_name[node][total_at]}" == row[memory]



def test_the_csv_of_every_node_carries_what_the_sync_read_without_asking_prometheus(client, gpu_org, exporter,
                                                                                     users):
    """A whole fleet's figures take Prometheus seconds: the download reads the figures the sync's leader
    stored in its last round (at most one round old); too old, or never read, they are left out."""
    import datetime

    from nodepools.models import NodeGpuFigures, NodePool

    emu, _ = exporter
    login(client, users, "sysadmin")
    devices = served(emu)
    gpumetrics.cache_clear()
    before = gpumetrics.stats.requests
    csv_rows = csv_of(client.get(reverse("node-list"), {"sort": "name", "format": "csv"}))
    assert gpumetrics.stats.requests == before  # no Prometheus query for the download
    at = csv_rows[0].index("GPU utilization (%)")
    by_name = {row[0]: row for row in csv_rows[1:]}
    for node in ("a100-1", "a100-2", "v100-1", "v100-2", *EXTRA):
        devs = devices[node]
        assert by_name[node][at] == num(round(sum(d["utilization"] for d in devs) / len(devs), 1)), node
    assert NodeGpuFigures.objects.filter(cluster=gpu_org.cluster).count() == 4 + len(EXTRA)

    # The sync stopped reading four rounds ago: the CSV leaves the figures out rather than carry old ones.
    NodePool.objects.filter(cluster=gpu_org.cluster).update(gpu_figures_at=django_now() - datetime.timedelta(minutes=3))
    csv_rows = csv_of(client.get(reverse("node-list"), {"sort": "name", "format": "csv"}))
    assert {row[at] for row in csv_rows[1:]} == {""}

    # A node Prometheus no longer reports loses its stored figures at the next round.
    gpu_org.nodes.append(make_node("a100-3", gpus=4, labels={"gpu-type": "A100"}))  # no exporter series
    gpu_org.load()
    NodeGpuFigures.objects.create(cluster=gpu_org.cluster, node_name="a100-3", gpus=4, utilization=99,
                                  read_at=django_now() - datetime.timedelta(seconds=30))
    gpumetrics.cache_clear()
    pool_services.pool_gpu_figures_refresh(cluster=gpu_org.cluster)
    assert not NodeGpuFigures.objects.filter(node_name="a100-3").exists()
    by_name = {row[0]: row for row in csv_of(client.get(reverse("node-list"), {"sort": "name", "format": "csv"}))[1:]}
    assert by_name["a100-3"][at] == "" and by_name["a100-1"][at] == "60"

    # Prometheus gone: the round stores no node figures (the pools carry the reason), the CSV none either.
    pool_services.cluster_update(actor=None, cluster=gpu_org.cluster, prometheus_url="http://127.0.0.1:9")
    gpumetrics.cache_clear()
    pool_services.pool_gpu_figures_refresh(cluster=gpu_org.cluster)
    assert not NodeGpuFigures.objects.filter(cluster=gpu_org.cluster).exists()
    csv_rows = csv_of(client.get(reverse("node-list"), {"sort": "name", "format": "csv"}))
    assert {row[at] for row in csv_rows[1:]} == {""}

def test_pools_table_shows_utilization_and_idle_allocated_gpus(client, gpu_org, users):
    login(client, users, "sysadmin")
    response = client.get(reverse("pool-list"))
    client.post(reverse("table-columns", args=["pools"]), {"columns": ["name", "gpu_utilization", "idle_gpus"],
                                                           "order": ["name", "gpu_utilization", "idle_gpus"]})
    response = client.get(reverse("pool-list"), {"sort": "name"})
    assert headers(response) == ["Node pool", "Utilization of allocated GPUs (%)", "Idle allocated GPUs"]
    # The header says what idle means: the Idle GPUs page's definition, over the window.
    hover = re.search(r'<th[^>]*title="([^"]*)"[^>]*>Idle allocated GPUs', response.content.decode()).group(1)
    assert "under 5 % for the whole last 0.1 min" in hover and "Idle GPUs page" in hover
    rows = {row[0]: row[1:] for row in table_rows(response)}
    # a100: train-1's 3 GPUs at 80 % and idle-1's 2 at 1 % (under 5 %: idle); default: serve-1's GPU at 50 %.
    assert rows["a100"] == [num(round((3 * 80 + 2 * 1) / 5, 1)), "2"]
    assert rows["default"] == ["50", "0"]
    csv_rows = csv_of(client.get(reverse("pool-list"), {"sort": "name", "format": "csv"}))
    assert csv_rows[1:] == [["a100", "48.4", "2"], ["default", "50", "0"]]


def test_pools_idle_column_counts_a_gpu_only_after_a_whole_window_under_the_threshold(client, gpu_org, exporter,
                                                                                       users, settings):
    emu, prom = exporter
    settings.GPUMETRICS_CACHE_SECONDS = 0
    login(client, users, "sysadmin")
    client.post(reverse("table-columns", args=["pools"]), {"columns": ["name", "idle_gpus"],
                                                           "order": ["name", "idle_gpus"]})

    def idle_in_a100():
        pool_services.pool_gpu_figures_refresh(cluster=gpu_org.cluster)  # the leader's round
        return {row[0]: row[1] for row in table_rows(client.get(reverse("pool-list")))}["a100"]

    emu.set_pod_gpu_utilization("runai-rnd-a", "train-1", 1)  # train-1's 3 GPUs fall under 5 %
    try:
        prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL{pod="train-1"} < 5', count=3)
        changed = time.monotonic()
        shown = idle_in_a100()
        if time.monotonic() - changed < IDLE_WINDOW_SECONDS - 2:  # (a test machine this slow proves nothing)
            assert shown == "2"  # busy a moment ago: only idle-1's 2 GPUs are idle yet
        deadline = time.monotonic() + IDLE_WINDOW_SECONDS + 10
        while (shown := idle_in_a100()) != "5":
            assert time.monotonic() < deadline, f"train-1's GPUs never counted as idle (shown {shown})"
            time.sleep(0.5)
        assert time.monotonic() - changed >= IDLE_WINDOW_SECONDS - 2
    finally:
        emu.set_pod_gpu_utilization("runai-rnd-a", "train-1", 80, 30000)
        prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL{pod="train-1"} == 80', count=3)


def test_node_page_lists_every_gpu_with_the_pod_holding_it(client, gpu_org, exporter, users):
    emu, _ = exporter
    login(client, users, "researcher")  # may see the node page of a node in its cluster
    node = gpu_org.cluster.nodes.get(name="a100-1")
    html = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    assert "<th class=\"num\" title=\"DCGM_FI_PROF_GR_ENGINE_ACTIVE" in html and "Graphics engine active (%)</th>" in html
    rows = node_gpu_rows(html)
    engine = served_engine_active(emu)
    expected = [[str(d["gpu"]), d["uuid"], d["model"], num(d["utilization"]), mib_text(d["fb_used"]),
                 mib_text(d["memory_mib"]),
                 percent(engine[("a100-1", d["gpu"])]), f"{d['namespace']}/{d['pod']}" if d["pod"] else "none"]
                for d in served(emu)["a100-1"]]
    assert rows == expected
    assert [r[7] for r in rows] == ["runai-rnd-a/train-1"] * 3 + ["none"]
    assert [r[6] for r in rows] == ["80"] * 3 + ["0"]  # train-1's GPUs busy at 80 %: the engine 0.8 of the time


def test_api_carries_the_same_figures(api, gpu_org, users):
    client = api(users["sysadmin"])
    nodes = {n["name"]: n for n in client.get("/api/v1/nodes/", {"page_size": 100}).json()["results"]}
    a100 = nodes["a100-1"]
    assert a100["gpu_utilization"] == 60 and a100["allocated_gpu_utilization"] == 80
    assert a100["gpu_memory_used_mib"] == 90000 and a100["gpu_memory_reported_mib"] == 4 * 40960
    assert a100["idle_allocated_gpus"] == 0 and a100["gpu_metrics_unavailable"] is None
    assert nodes["a100-2"]["idle_allocated_gpus"] == 2
    single = client.get(f"/api/v1/nodes/{a100['id']}/").json()
    assert single["gpu_utilization"] == 60
    pools = {p["name"]: p for p in client.get("/api/v1/node-pools/").json()["results"]}
    assert pools["a100"]["allocated_gpu_utilization"] == 48.4 and pools["a100"]["idle_allocated_gpus"] == 2
    assert pools["a100"]["gpu_memory_used_mib"] == 90000 + 4000


def test_api_lists_a_nodes_gpu_devices_as_the_exporter_served_them(api, gpu_org, exporter, users):
    emu, _ = exporter
    node = gpu_org.cluster.nodes.get(name="a100-1")
    url = f"/api/v1/nodes/{node.pk}/gpu-devices/"
    engine = served_engine_active(emu)
    body = api(users["researcher"]).get(url).json()  # may see the nodes of its cluster, like the node page
    assert (body["node"], body["name"], body["gpu_devices_unavailable"]) == (node.pk, "a100-1", None)
    assert body["gpu_devices"] == [
        {"index": d["gpu"], "uuid": d["uuid"], "model": d["model"], "utilization": d["utilization"],
         "memory_used_mib": d["fb_used"], "memory_free_mib": d["memory_mib"] - d["fb_used"],
         "memory_total_mib": d["memory_mib"], "engine_active": engine[("a100-1", d["gpu"])],
         "namespace": d["namespace"], "pod": d["pod"], "container": d["container"]}
        for d in served(emu)["a100-1"]]
    # By hand: train-1 holds three GPUs at 80 % (the engine active 0.8 of the time), the fourth is free.
    assert [(d["pod"], d["utilization"], d["engine_active"]) for d in body["gpu_devices"]] == [
        ("train-1", 80, 0.8)] * 3 + [("", 0, 0)]
    # Restricted like the node page: a user without a role in the cluster does not find the node.
    assert api(users["nobody"]).get(url).status_code == 404
    assert api().get(url).status_code in (401, 403)
    # A node without GPUs, a cluster whose Prometheus is down or unnamed: no devices, the reason.
    gpu_org.nodes.append(make_node("cpu-1"))
    gpu_org.load()
    cpu = gpu_org.cluster.nodes.get(name="cpu-1")
    body = api(users["sysadmin"]).get(f"/api/v1/nodes/{cpu.pk}/gpu-devices/").json()
    assert (body["gpu_devices"], body["gpu_devices_unavailable"]) == ([], "no GPU on this node")
    pool_services.cluster_update(actor=None, cluster=gpu_org.cluster, prometheus_url="http://127.0.0.1:9")
    gpumetrics.cache_clear()
    body = api(users["sysadmin"]).get(url).json()
    assert (body["gpu_devices"], body["gpu_devices_unavailable"]) == ([], "Prometheus unreachable: connection refused")
    pool_services.cluster_update(actor=None, cluster=gpu_org.cluster, prometheus_url="")
    body = api(users["sysadmin"]).get(url).json()
    assert (body["gpu_devices"], body["gpu_devices_unavailable"]) == ([], "no Prometheus configured for this cluster")


def test_an_exporter_without_the_graphics_engine_metric_shows_a_dash(client, api, gpu_org, exporter, users,
                                                                     http_server, prometheus):
    """DCGM_FI_PROF_GR_ENGINE_ACTIVE is a profiling metric some exporters do not serve: the column is "—",
    the API's engine_active null, the other figures as served."""
    emu, _ = exporter

    def answer(request):
        text = "".join(line + "\n" for line in emu.dcgm_metrics().splitlines()
                       if "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in line)
        return 200, "text/plain; version=0.0.4", text.encode()

    prom = prometheus(http_server(answer) + "/metrics")
    prom.wait_for_series("DCGM_FI_DEV_GPU_UTIL", count=16 + 8 * len(EXTRA))
    pool_services.cluster_update(actor=None, cluster=gpu_org.cluster, prometheus_url=prom.url)
    gpumetrics.cache_clear()
    node = gpu_org.cluster.nodes.get(name="a100-1")
    login(client, users, "sysadmin")
    rows = node_gpu_rows(client.get(reverse("node-detail", args=[node.pk])).content.decode())
    assert [(r[3], r[6]) for r in rows] == [("80", "—")] * 3 + [("0", "—")]
    devices = api(users["sysadmin"]).get(f"/api/v1/nodes/{node.pk}/gpu-devices/").json()["gpu_devices"]
    assert [(d["utilization"], d["engine_active"]) for d in devices] == [(80, None)] * 3 + [(0, None)]


def test_query_count_does_not_grow_with_rows(client, gpu_org, users):
    import datetime

    from nodepools.models import NodePool

    login(client, users, "sysadmin")
    counts = []

    def nodes_page(per_page):
        gpumetrics.cache_clear()
        before = gpumetrics.stats.requests
        response = client.get(reverse("node-list"), {"sort": "name", "per_page": per_page})
        rows = table_rows(response)
        counts.append(gpumetrics.stats.requests - before)
        assert len(rows) == min(per_page, 64) and "—" not in [r[headers(response).index("GPU utilization (%)")]
                                                             for r in rows]

    # The leader's round is fresh: the page shows what it stored and asks Prometheus nothing.
    for per_page in (25, 100):
        nodes_page(per_page)
    # The sync stopped reading four rounds ago: the page asks Prometheus, one query whatever its rows.
    NodePool.objects.filter(cluster=gpu_org.cluster).update(gpu_figures_at=django_now() - datetime.timedelta(minutes=3))
    for per_page in (25, 100):
        nodes_page(per_page)
    for n in (1, 6):  # more pools, each with nodes: still one query for the leader's round, none for the page
        for i in range(n):
            pool_services.pool_create(actor=None, cluster=gpu_org.cluster, name=f"p{n}-{i}",
                                      label_key="kubernetes.io/hostname", label_value=EXTRA[10 * i + n])
        gpumetrics.cache_clear()
        before = gpumetrics.stats.requests
        pool_services.pool_gpu_figures_refresh(cluster=gpu_org.cluster)
        counts.append(gpumetrics.stats.requests - before)
        before = gpumetrics.stats.requests
        response = client.get(reverse("pool-list"), {"per_page": 100})
        counts.append(gpumetrics.stats.requests - before)
        assert response.status_code == 200 and f"p{n}-{n - 1}" in response.content.decode()
    assert counts == [0, 0, 1, 1, 1, 0, 1, 0]


def test_prometheus_down_shows_a_dash_with_the_reason(client, org, users):
    pool_services.cluster_update(actor=None, cluster=org.cluster, prometheus_url="http://127.0.0.1:9")
    gpumetrics.cache_clear()
    pool_services.pool_gpu_figures_refresh(cluster=org.cluster)  # the leader's round fails the same way
    login(client, users, "sysadmin")
    for url in (reverse("node-list"), reverse("pool-list")):
        started = time.monotonic()
        response = client.get(url)
        assert response.status_code == 200 and time.monotonic() - started < 2
        assert titles(response.content.decode()) == {"Prometheus unreachable: connection refused"}
    node = org.cluster.nodes.get(name="a100-1")
    html = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    assert 'title="Prometheus unreachable: connection refused"' in html


def test_a_slow_prometheus_never_slows_a_page_past_its_budget(client, org, users, slow_prometheus, settings):
    settings.GPUMETRICS_TIMEOUT = settings.GPUMETRICS_REFRESH_TIMEOUT = 0.3
    pool_services.cluster_update(actor=None, cluster=org.cluster, prometheus_url=slow_prometheus)
    gpumetrics.cache_clear()
    pool_services.pool_gpu_figures_refresh(cluster=org.cluster)  # the leader's round times out the same way
    login(client, users, "sysadmin")
    client.get(reverse("node-list"), {"q": "nothing"})  # warm: templates, sessions
    for url in (reverse("node-list"), reverse("pool-list")):
        gpumetrics.cache_clear()
        started = time.monotonic()
        response = client.get(url)
        elapsed = time.monotonic() - started
        assert response.status_code == 200
        assert titles(response.content.decode()) == {"Prometheus timed out after 0.3 s"}
        assert elapsed < 2.0, f"{url} took {elapsed:.2f} s; Prometheus answers after 3 s"
    response = client.get("/api/v1/nodes/", HTTP_ACCEPT="application/json")
    assert {n["gpu_metrics_unavailable"] for n in response.json()["results"]} == {"Prometheus timed out after 0.3 s"}


def test_a_slow_prometheus_holds_the_node_page_one_budget_for_its_figures_and_devices(client, org, users,
                                                                                     slow_prometheus, settings):
    """The node page reads the node's figures, then its devices, within ONE budget: a Prometheus that
    answers after 3 s holds it about one budget (not two), and the devices show "—" with the reason."""
    settings.GPUMETRICS_TIMEOUT = 1.0
    pool_services.cluster_update(actor=None, cluster=org.cluster, prometheus_url=slow_prometheus)
    node = org.cluster.nodes.get(name="a100-1")
    login(client, users, "sysadmin")
    client.get(reverse("node-list"), {"q": "nothing"})  # warm: templates, sessions
    gpumetrics.cache_clear()
    before = gpumetrics.stats.requests
    started = time.monotonic()
    response = client.get(reverse("node-detail", args=[node.pk]))
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    html = response.content.decode()
    assert titles(html) == {"Prometheus timed out after 1.0 s"}
    assert node_gpu_rows(html) == []
    assert "</span> Prometheus timed out after 1.0 s</td>" in html[html.index('id="node-gpus"'):]
    assert 1.0 <= elapsed < 1.7, f"the node page took {elapsed:.2f} s: its budget is 1 s, two would be 2 s"
    assert gpumetrics.stats.requests - before == 1  # the devices were not asked once the budget was spent


def test_series_without_the_labels_the_console_joins_by(client, gpu_org, exporter, users, http_server, prometheus):
    emu, _ = exporter

    def answer(request):  # an exporter whose series lost Hostname (and the pod labels)
        text = re.sub(r',(Hostname|container|namespace|pod)="[^"]*"', "", emu.dcgm_metrics())
        return 200, "text/plain; version=0.0.4", text.encode()

    prom = prometheus(http_server(answer) + "/metrics")
    prom.wait_for_series("DCGM_FI_DEV_GPU_UTIL", count=16)
    pool_services.cluster_update(actor=None, cluster=gpu_org.cluster, prometheus_url=prom.url)
    gpumetrics.cache_clear()
    login(client, users, "sysadmin")
    response = client.get(reverse("node-list"), {"q": "100"})
    assert titles(response.content.decode()) == {"series lack the Hostname label"}


def test_nodes_without_series_and_clusters_without_prometheus(client, gpu_org, users, settings):
    from nodepools.models import Node

    gpu_org.nodes.append(make_node("a100-3", gpus=4, labels={"gpu-type": "A100"}))  # no exporter series yet
    gpu_org.nodes.append(make_node("cpu-1"))
    gpu_org.load()
    login(client, users, "sysadmin")
    rows = {r[0]: r for r in table_rows(client.get(reverse("node-list"), {"q": "-"}))}
    html = client.get(reverse("node-list"), {"q": "a100-3"}).content.decode()
    assert titles(html) == {"no DCGM series for this node (is its DCGM exporter running?)"}
    html = client.get(reverse("node-list"), {"q": "cpu-1"}).content.decode()
    assert titles(html) == {"no GPU on this node"}
    assert Node.objects.filter(name="a100-3").exists() and "a100-3" in rows


def test_cluster_add_names_the_prometheus(db, tmp_path, api, emulators):
    from django.core.management import CommandError, call_command

    from nodepools.models import Cluster
    from tests.conftest import make_user
    from access.rules import Role
    from projects import services

    kubeconfig = tmp_path / "kc"
    emulators(bookmark_interval=1.0).write_kubeconfig(kubeconfig)  # cluster_add only reads the file
    call_command("cluster_add", "prod-east", "--kubeconfig", str(kubeconfig))
    call_command("cluster_add", "prod-east", "--kubeconfig", str(kubeconfig), "--update",
                 "--prometheus-url", "http://prometheus.monitoring:9090",
                 "--prometheus-label-matchers", 'cluster="prod-east"')
    cluster = Cluster.objects.get(name="prod-east")
    assert cluster.prometheus.url == "http://prometheus.monitoring:9090"
    assert cluster.prometheus.matchers == (("cluster", "=", "prod-east"),)
    with pytest.raises(CommandError, match="prometheus_label_matchers: .*not a label matcher"):
        call_command("cluster_add", "prod-east", "--kubeconfig", str(kubeconfig), "--update",
                     "--prometheus-label-matchers", "cluster=prod-east")
    with pytest.raises(CommandError, match="prometheus_url: Enter the URL of the Prometheus server"):
        call_command("cluster_add", "prod-east", "--kubeconfig", str(kubeconfig), "--update",
                     "--prometheus-url", "prometheus:9090")
    admin = make_user("admin")
    services.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=admin)
    response = api(admin).patch(f"/api/v1/clusters/{cluster.pk}/", {"prometheus_bearer_token_file": "/etc/t",
                                                                     "prometheus_basic_auth_file": "/etc/b"},
                                format="json")
    assert response.status_code == 400
    assert "not both" in str(response.json()["errors"]["prometheus_basic_auth_file"])
    response = api(admin).patch(f"/api/v1/clusters/{cluster.pk}/", {"prometheus_bearer_token_file": "/etc/t"},
                                format="json")
    assert response.status_code == 200 and response.json()["prometheus_bearer_token_file"] == "/etc/t"
    assert Cluster.objects.get(pk=cluster.pk).prometheus.bearer_token_file == "/etc/t"


# The sync's leader runs its tasks in threads of their own on PostgreSQL: they see committed rows only.
@pytest.mark.django_db(transaction=True)
def test_the_sync_leader_reads_the_pools_figures_and_the_page_shows_when_they_go_stale(client, gpu_org, exporter,
                                                                                       users, tmp_path, settings):
    """The figures the pools page shows come from the cluster's sync (its leader's task), not from the page;
    figures older than four rounds are "—" with when they were read."""
    import datetime

    from nodepools.models import NodePool
    from nodepools.sync import ClusterSync, SyncOptions

    emu, _ = exporter
    NodePool.objects.update(gpu_figures=None, gpu_figures_at=None, gpu_figures_reason="")
    login(client, users, "sysadmin")
    client.post(reverse("table-columns", args=["pools"]), {"columns": ["name", "gpu_utilization", "idle_gpus"],
                                                           "order": ["name", "gpu_utilization", "idle_gpus"]})
    html = client.get(reverse("pool-list"), {"sort": "name"}).content.decode()
    assert titles(html) == {"not read yet: the sync reads the GPU figures every 30 s"}

    pool_services.cluster_update(actor=None, cluster=gpu_org.cluster,
                                 kubeconfig_path=str(emu.write_kubeconfig(tmp_path / "kubeconfig")),
                                 kube_context="emulator")
    gpu_org.cluster.refresh_from_db()
    sync = ClusterSync(gpu_org.cluster, SyncOptions(backoff_base=0.05, backoff_max=0.3, batch_delay=0.02, tick=0.05))
    sync.start()
    try:
        assert sync.run_until(lambda: not NodePool.objects.filter(cluster=gpu_org.cluster,
                                                                  gpu_figures_at__isnull=True).exists())
    finally:
        sync.stop()
    rows = {row[0]: row[1:] for row in table_rows(client.get(reverse("pool-list"), {"sort": "name"}))}
    assert rows["a100"] == [num(round((3 * 80 + 2 * 1) / 5, 1)), "2"] and rows["default"] == ["50", "0"]

    NodePool.objects.filter(cluster=gpu_org.cluster).update(
        gpu_figures_at=django_now() - datetime.timedelta(minutes=3))
    html = client.get(reverse("pool-list"), {"sort": "name"}).content.decode()
    [stale] = titles(html)
    assert stale.startswith("last read from Prometheus at ") and stale.endswith("is the sync of this cluster running?")


def django_now():
    from django.utils import timezone

    return timezone.now()


def test_a_pools_page_shows_its_nodes_figures_as_the_sync_read_them_without_asking_prometheus(client, gpu_org,
                                                                                             exporter, users):
    """The nodes tables (the nodes page, a pool's page) read the figures the sync's leader stored in its
    last round, as the CSV does: the same numbers in both, and no Prometheus query while the round is fresh."""
    from nodepools.models import Node
    from tests.pages import text

    emu, _ = exporter
    node = Node.objects.get(cluster=gpu_org.cluster, name="a100-1")
    assert node.pool_id, "the org fixture puts a100-1 in a pool"
    login(client, users, "sysadmin")
    gpumetrics.cache_clear()
    before = gpumetrics.stats.requests
    html = client.get(reverse("pool-detail", args=[node.pool_id])).content.decode()
    assert gpumetrics.stats.requests == before
    row = re.search(r'<tr[^>]*data-node="a100-1"[^>]*>(.*?)</tr>', html, re.S).group(1)
    cells = [text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    devs = served(emu)["a100-1"]
    assert num(round(sum(d["utilization"] for d in devs) / len(devs), 1)) == "60" and "60" in cells
    assert f"{num(round(90000 / 1024, 1))}/160" in cells


def test_changing_the_clusters_prometheus_forgets_the_figures_read_from_the_one_before(client, gpu_org, users):
    from nodepools.models import NodeGpuFigures

    assert NodeGpuFigures.objects.filter(cluster=gpu_org.cluster).exists()
    pool_services.cluster_update(actor=None, cluster=gpu_org.cluster, prometheus_url="http://127.0.0.1:9")
    assert not NodeGpuFigures.objects.filter(cluster=gpu_org.cluster).exists()
    login(client, users, "sysadmin")
    gpumetrics.cache_clear()
    # The nodes page asks the Prometheus named now (down), and says so, rather than show the old one's figures.
    html = client.get(reverse("node-list"), {"q": "a100-1"}).content.decode()
    assert titles(html) == {"Prometheus unreachable: connection refused"}
