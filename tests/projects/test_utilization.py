"""GPU utilization on the project and department pages: the figures agree with what the emulator's DCGM
exporter served (scraped by a real Prometheus), the 24 h / 7 d chart, the per-pod hook of the
workloads table, and "—" with the reason when Prometheus is down or names no series."""
import json
import re
import urllib.request

import pytest

from projects.utilization import pod_gpu_utilization


def served_utilization(emu) -> dict[tuple[str, str], list[float]]:
    """{(namespace, pod): [utilization of each GPU]} as the exporter serves it now."""
    with urllib.request.urlopen(emu.url + "/dcgm/metrics", timeout=5) as response:
        text = response.read().decode()
    out: dict[tuple[str, str], list[float]] = {}
    for line in text.splitlines():
        if line.startswith("DCGM_FI_DEV_GPU_UTIL{"):
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', line))
            if labels.get("pod"):
                out.setdefault((labels["namespace"], labels["pod"]), []).append(float(line.rsplit(" ", 1)[1]))
    return out


@pytest.fixture
def served(org, prometheus, settings, emulators):
    """The org's nodes and pods in the emulator, whose exporter a real Prometheus scrapes every second:
    rnd-a trains on 2 A100s at 80 %, rnd-b serves on 1 at 30 %, ops-a holds a V100 at 2 %."""
    settings.GPUMETRICS_TIMEOUT = 5  # a loaded test machine must not turn a figure into "timed out"
    org.run("train", org.rnd_a, "a100-1", gpus=2)
    org.run("serve", org.rnd_b, "a100-2", gpus=1)
    org.run("hold", org.ops_a, "v100-1", gpus=1)
    emu = emulators(bookmark_interval=1.0)  # KubeEmulator's own, which this test always had
    for node in org.nodes:
        emu.add_node(node)
    for pod in org.pods:
        emu.add_pod(pod)
    emu.set_pod_gpu_utilization("runai-rnd-a", "train", 80, 20000)
    emu.set_pod_gpu_utilization("runai-rnd-b", "serve", 30, 10000)
    emu.set_pod_gpu_utilization("runai-ops-a", "hold", 2, 1000)
    prom = prometheus(emu.url + "/dcgm/metrics")
    prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL{pod!=""}', count=4)
    org.cluster.prometheus_url = prom.url
    org.cluster.save()
    return org, emu


def shown(page: str) -> str:
    return re.search(r'<span id="utilization-now"[^>]*>(.*?)</span>', page).group(1)


def chart(page: str) -> dict:
    return json.loads(re.search(r'<script id="utilization-chart-data" type="application/json">(.*?)</script>',
                                page, re.S).group(1))


def test_project_and_department_figures_agree_with_the_exporter(client, users, served):
    org, emu = served
    exported = served_utilization(emu)
    rnd_a = exported[("runai-rnd-a", "train")]
    rnd = rnd_a + exported[("runai-rnd-b", "serve")]
    assert rnd_a == [80, 80] and len(rnd) == 3
    client.force_login(users["rnd_viewer"])
    # The page asks for its utilization section after loading (Prometheus does not hold the page back).
    page = client.get(f"/projects/{org.rnd_a.pk}/").content.decode()
    assert f'hx-get="/projects/{org.rnd_a.pk}/utilization/" hx-trigger="load"' in page
    part = client.get(f"/projects/{org.rnd_a.pk}/utilization/").content.decode()
    assert shown(part) == f"{sum(rnd_a) / len(rnd_a):.0f} %" and "over 2 GPUs" in part
    page = client.get(f"/departments/{org.rnd.pk}/").content.decode()
    assert f'hx-get="/departments/{org.rnd.pk}/utilization/" hx-trigger="load"' in page
    part = client.get(f"/departments/{org.rnd.pk}/utilization/").content.decode()
    assert shown(part) == f"{sum(rnd) / len(rnd):.0f} %" == "63 %" and "over 3 GPUs" in part
    # The section asks for its chart in turn: the last 24 hours end at the figure the exporter serves.
    assert f'hx-get="/departments/{org.rnd.pk}/utilization-chart/" hx-trigger="load"' in part
    part = client.get(f"/departments/{org.rnd.pk}/utilization-chart/").content.decode()
    figure = chart(part)
    assert figure["unit"] == "%" and "department rnd, last 24 hours" in figure["title"]
    assert figure["series"][0]["values"][-1] == pytest.approx(sum(rnd) / len(rnd), abs=0.1)
    assert len(figure["x"]) <= 300
    part = client.get(f"/departments/{org.rnd.pk}/utilization-chart/", {"period": "7d"}).content.decode()
    assert "last 7 days" in chart(part)["title"] and '<strong aria-current="true">Last 7 days</strong>' in part
    # Another department's figures are not found.
    assert client.get(f"/departments/{org.ops.pk}/utilization-chart/").status_code == 404
    assert client.get(f"/departments/{org.ops.pk}/utilization/").status_code == 404


def test_pod_gpu_utilization_hook_for_the_workloads_table(served):
    from nodepools.models import Pod

    org, emu = served
    values, reasons = pod_gpu_utilization(Pod.objects.filter(cluster=org.cluster))
    assert reasons == {}
    assert values == {(org.cluster.pk, "runai-rnd-a", "train"): pytest.approx(80),
                      (org.cluster.pk, "runai-rnd-b", "serve"): pytest.approx(30),
                      (org.cluster.pk, "runai-ops-a", "hold"): pytest.approx(2)}


def test_without_prometheus_the_figure_is_a_dash_with_the_reason(client, users, org):
    client.force_login(users["rnd_viewer"])
    part = client.get(f"/departments/{org.rnd.pk}/utilization/").content.decode()
    assert '<span id="utilization-now" title="no Prometheus configured for this cluster">—</span>' in part


def test_series_without_the_pod_labels_give_a_reason(client, users, org, prometheus, tmp_path):
    """A real Prometheus whose DCGM series carry no namespace/pod labels (the exporter's Kubernetes mapping
    off): nothing can be joined to the project's namespaces."""
    import time

    from kubesim.dcgm_history import Gpu, create_blocks, write_openmetrics

    end = time.time() - 15
    write_openmetrics(tmp_path / "s.om", [Gpu("a100-1", 0, "NVIDIA A100-SXM4-40GB", 40960, lambda t: 50)],
                      start=end - 600, end=end, interval=15)
    create_blocks(tmp_path / "s.om", tmp_path / "tsdb")
    prom = prometheus(tsdb_dir=str(tmp_path / "tsdb"))
    prom.wait_for_series("DCGM_FI_DEV_GPU_UTIL")
    org.run("train", org.rnd_a, "a100-1", gpus=1)
    org.cluster.prometheus_url = prom.url
    org.cluster.save()
    client.force_login(users["researcher"])
    part = client.get(f"/projects/{org.rnd_a.pk}/utilization/").content.decode()
    assert shown(part) == "—" and "lack the namespace/pod labels" in part


def test_a_slow_prometheus_costs_the_page_one_timeout_at_most(client, users, org, settings):
    """Prometheus answering after 2 s with a 0.3 s budget: the page does not ask it; its utilization
    section shows "—" with "timed out", and the chart does not wait a second time."""
    import http.server
    import threading
    import time

    import gpumetrics

    class Slow(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            time.sleep(2)
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"status":"success","data":{"resultType":"vector","result":[]}}')
            except OSError:
                pass

        do_GET = do_POST

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings.GPUMETRICS_TIMEOUT = 0.3
        gpumetrics.cache_clear()
        org.cluster.prometheus_url = f"http://127.0.0.1:{server.server_address[1]}"
        org.cluster.save()
        org.run("train", org.rnd_a, "a100-1", gpus=1)
        client.force_login(users["researcher"])
        before = gpumetrics.stats.requests
        page = client.get(f"/projects/{org.rnd_a.pk}/").content.decode()
        assert gpumetrics.stats.requests == before and "reading it from Prometheus" in page
        started = time.monotonic()
        part = client.get(f"/projects/{org.rnd_a.pk}/utilization/").content.decode()
        elapsed = time.monotonic() - started
        assert shown(part) == "—" and "Prometheus timed out after 0.3 s" in part
        assert "No chart: Prometheus timed out" in part and "utilization-chart/" not in part
        assert gpumetrics.stats.requests - before == 1 and elapsed < 1.5
    finally:
        server.shutdown()
        server.server_close()
        gpumetrics.cache_clear()


def test_since_when_reads_the_step_after_the_last_busy_one():
    from projects.utilization import since_when

    assert since_when([(100, 1), (200, 0), (300, 2)], threshold=5) == (100, True)  # idle since its first point
    assert since_when([(100, 50), (200, 3), (300, 2)], threshold=5) == (200, False)
    assert since_when([(300, 2), (100, 50), (200, 5)], threshold=5) == (300, False)  # 5 % is not under 5 %
    assert since_when([(100, 1), (200, 70)], threshold=5) == (None, False)  # busy at the end: not idle
    assert since_when([], threshold=5) == (None, False)


def test_idle_promql_pins_the_idle_test_to_the_end_and_keeps_the_clusters_matchers(org):
    from projects.utilization import idle_queries
    import datetime

    org.cluster.prometheus_url = "http://prometheus.example:9090"
    org.cluster.prometheus_label_matchers = 'cluster="lab"'
    idle, history = idle_queries(org.cluster, threshold=5, window=datetime.timedelta(minutes=30), step=60,
                                 now=datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc))
    # A whole GPU's DCGM_FI_DEV_GPU_UTIL, or a MIG instance's DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100 (the exporter
    # does not measure GPU_UTIL for instances), each series under its own range function, in one query.
    gpu = 'DCGM_FI_DEV_GPU_UTIL{pod!="", cluster="lab", GPU_I_PROFILE=""}'
    mig = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{pod!="", cluster="lab", GPU_I_PROFILE!=""}'
    assert idle == (f'(max_over_time({gpu}[1800s] @ 1767225600.000) or '
                    f'max_over_time({mig}[1800s] @ 1767225600.000) * 100) < 5')
    assert history == (f'(max_over_time({gpu}[60s]) or max_over_time({mig}[60s]) * 100) and on (Hostname, UUID, gpu, '
                       f'namespace, pod) ((max_over_time({gpu}[1800s] @ end()) or '
                       f'max_over_time({mig}[1800s] @ end()) * 100) < 5)')


def test_api_carries_project_and_department_utilization_now_and_over_the_period(api, users, served):
    import datetime

    org, emu = served
    exported = served_utilization(emu)
    rnd_a = exported[("runai-rnd-a", "train")]
    rnd = rnd_a + exported[("runai-rnd-b", "serve")]
    client = api(users["rnd_viewer"])
    body = client.get(f"/api/v1/projects/{org.rnd_a.pk}/utilization/").json()
    assert body["gpu_utilization"] == pytest.approx(sum(rnd_a) / len(rnd_a), abs=0.1) == 80
    assert (body["gpus"], body["unavailable"], body["period"], body["series_unavailable"]) == (2, None, "24h", None)
    times = [datetime.datetime.fromisoformat(p["time"].replace("Z", "+00:00")) for p in body["series"]]
    now = datetime.datetime.now(datetime.timezone.utc)
    assert times == sorted(times) and now - datetime.timedelta(hours=24, minutes=5) <= times[0] <= now
    assert 1 <= len(times) <= 300 and body["series"][-1]["gpu_utilization"] == pytest.approx(80, abs=0.1)
    body = client.get(f"/api/v1/departments/{org.rnd.pk}/utilization/", {"period": "7d"}).json()
    assert body["gpu_utilization"] == pytest.approx(sum(rnd) / len(rnd), abs=0.1) and body["gpus"] == 3
    assert body["period"] == "7d" and body["series_unavailable"] is None
    assert body["series"][-1]["gpu_utilization"] == pytest.approx(sum(rnd) / len(rnd), abs=0.1)
    # The department page shows the same figure.
    client_page = api(users["rnd_viewer"])
    assert shown(client_page.get(f"/departments/{org.rnd.pk}/utilization/").content.decode()) == "63 %"
    # Only what the user may see: another department and its project are not found; a bad period is refused.
    assert client.get(f"/api/v1/departments/{org.ops.pk}/utilization/").status_code == 404
    assert client.get(f"/api/v1/projects/{org.ops_a.pk}/utilization/").status_code == 404
    response = client.get(f"/api/v1/projects/{org.rnd_a.pk}/utilization/", {"period": "1y"})
    assert response.status_code == 400 and "period" in response.json()["errors"]


def test_api_utilization_is_restricted_like_the_pages_and_gives_the_reason_without_prometheus(api, client, users,
                                                                                             org):
    import gpumetrics
    from gpumetrics.localprom import _free_port

    unnamed = "no Prometheus configured for this cluster"
    owners = [("projects", o) for o in (org.rnd_a, org.rnd_b, org.ops_a)] + [("departments", o)
                                                                              for o in (org.rnd, org.ops)]
    for name, user in users.items():
        client.force_login(user)
        for kind, owner in owners:
            page = client.get(f"/{kind}/{owner.pk}/utilization/").status_code
            response = api(user).get(f"/api/v1/{kind}/{owner.pk}/utilization/")
            assert response.status_code == page, (name, kind, owner.name)
            if page == 200:
                assert response.json() == {"gpu_utilization": None, "gpus": 0, "unavailable": unnamed,
                                           "period": "24h", "series": [], "series_unavailable": unnamed}
    assert api(users["nobody"]).get(f"/api/v1/projects/{org.rnd_a.pk}/utilization/").status_code == 404
    assert api(users["rnd_viewer"]).get(f"/api/v1/departments/{org.ops.pk}/utilization/").status_code == 404
    # Prometheus down: the reason, and the series is not asked a second time.
    gpumetrics.cache_clear()
    org.cluster.prometheus_url = f"http://127.0.0.1:{_free_port('127.0.0.1')}"
    org.cluster.save()
    before = gpumetrics.stats.requests
    body = api(users["researcher"]).get(f"/api/v1/projects/{org.rnd_a.pk}/utilization/", {"period": "7d"}).json()
    down = "Prometheus unreachable: connection refused"
    assert (body["gpu_utilization"], body["unavailable"], body["series"], body["series_unavailable"]) == (
        None, down, [], down)
    assert gpumetrics.stats.requests - before == 1
