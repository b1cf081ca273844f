"""gpumetrics through a real Prometheus scraping the emulator's DCGM exporter: figures agree with
what the exporter served; down, slow and unlabelled Prometheus give a reason in time; one query
per call whatever the number of rows."""
from __future__ import annotations

import re
import time

import pytest

import gpumetrics
from gpumetrics import PrometheusConfig, Unavailable
from gpumetrics.localprom import backfill_openmetrics
from kubesim import make_node

from tests.gpumetrics.conftest import IDLE_WINDOW_SECONDS, gpu_pod


@pytest.fixture
def prom(shared_prometheus):
    gpumetrics.cache_clear()
    return shared_prometheus


@pytest.fixture
def config(prom):
    return PrometheusConfig(url=prom.url, name="lab")


def test_node_figures_agree_with_what_the_exporter_served(shared_sim, config):
    gpu_sim = shared_sim
    served = {}
    for dev in gpu_sim.dcgm_devices():
        served.setdefault(dev["node"], []).append(dev)
    got = gpumetrics.node_gpu_metrics(config, ["a100-1", "a100-2", "v100-1", "cpu-1"])
    assert not isinstance(got, Unavailable), got
    for node, devs in served.items():
        figures = got.get(node)
        assert figures.gpus == len(devs) == 4
        assert figures.utilization == pytest.approx(sum(d["utilization"] for d in devs) / 4)
        assert figures.memory_used_mib == sum(d["fb_used"] for d in devs)
        assert figures.memory_total_mib == sum(d["memory_mib"] for d in devs)
    a100 = got.get("a100-1")
    assert a100.utilization == pytest.approx((80 + 80 + 2 + 0) / 4)
    assert a100.allocated == 3 and a100.allocated_utilization == pytest.approx((80 + 80 + 2) / 3)
    assert a100.idle_allocated == 1  # the idle pod's GPU, under 5 %
    assert a100.memory_used_mib == 20000 * 2 + 1000
    assert a100.engine_active == pytest.approx(a100.utilization / 100)
    assert got.get("v100-1").allocated == 0 and got.get("v100-1").allocated_utilization is None
    assert got.get("cpu-1") is None  # no GPU, no series


def test_group_figures_sum_their_nodes(config):
    got = gpumetrics.group_gpu_metrics(config, {"a100": ["a100-1", "a100-2"], "v100": ["v100-1"], "empty": []})
    a100 = got.get("a100")
    assert (a100.gpus, a100.allocated, a100.idle_allocated) == (8, 7, 1)
    assert a100.allocated_utilization == pytest.approx((80 * 2 + 2 + 60 * 4) / 7)
    assert a100.memory_used_mib == 20000 * 2 + 1000 + 30000 * 4
    assert got.get("v100").gpus == 4 and got.get("v100").allocated == 0
    assert got.get("empty").gpus == 0


def test_devices_of_a_node_with_the_pod_holding_each(shared_sim, config):
    gpu_sim = shared_sim
    served = [d for d in gpu_sim.dcgm_devices() if d["node"] == "a100-1"]
    got = gpumetrics.device_metrics(config, "a100-1")
    assert [(d.index, d.uuid, d.model, d.utilization, d.memory_used_mib, d.memory_total_mib, d.namespace, d.pod)
            for d in got] == [
        (d["gpu"], d["uuid"], d["model"], d["utilization"], d["fb_used"], d["memory_mib"], d["namespace"], d["pod"])
        for d in served]
    assert [d.pod for d in got] == ["busy", "busy", "idle", ""]


def test_pod_figures(config):
    got = gpumetrics.pod_gpu_metrics(config, [("team-a", "busy"), ("team-b", "idle"), ("team-a", "big"),
                                              ("team-b", "busy"), ("team-z", "gone")])
    assert set(got) == {("team-a", "busy"), ("team-b", "idle"), ("team-a", "big")}
    assert got[("team-a", "busy")].gpus == 2 and got[("team-a", "busy")].utilization == 80
    assert got[("team-b", "idle")].utilization == 2 and got[("team-b", "idle")].memory_used_mib == 1000


def test_a_gpu_is_idle_once_under_the_threshold_for_the_whole_window(shared_sim, prom, config, settings):
    """The Idle GPUs page's definition: utilization under the threshold for the whole idle window
    (here IDLE_WINDOW_SECONDS), not merely now."""
    settings.GPUMETRICS_CACHE_SECONDS = 0
    assert gpumetrics.node_gpu_metrics(config, ["a100-2"]).get("a100-2").idle_allocated == 0
    shared_sim.set_pod_gpu_utilization("team-a", "big", 1)
    try:
        prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL{pod="big"} < 5', count=4)
        changed = time.monotonic()
        figures = gpumetrics.node_gpu_metrics(config, ["a100-2"]).get("a100-2")
        assert figures.utilization == 1  # under the threshold now...
        if time.monotonic() - changed < IDLE_WINDOW_SECONDS - 2:  # (a test machine this slow proves nothing)
            assert figures.idle_allocated == 0  # ...but busy a moment ago, within the window: not idle yet
        deadline = time.monotonic() + IDLE_WINDOW_SECONDS + 10
        while gpumetrics.node_gpu_metrics(config, ["a100-2"]).get("a100-2").idle_allocated != 4:
            assert time.monotonic() < deadline, "the 4 GPUs never became idle after the window"
            time.sleep(0.5)
        assert time.monotonic() - changed >= IDLE_WINDOW_SECONDS - 2  # idle only once the window has passed
        group = gpumetrics.group_gpu_metrics(config, {"a100": ["a100-1", "a100-2"]}).get("a100")
        assert group.idle_allocated == 1 + 4
    finally:
        shared_sim.set_pod_gpu_utilization("team-a", "big", 60, 30000)
        prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL{pod="big"} == 60', count=4)


def test_answers_are_cached_for_a_few_seconds(config, settings):
    settings.GPUMETRICS_CACHE_SECONDS = 5
    before = gpumetrics.stats.requests
    for _ in range(3):
        gpumetrics.node_gpu_metrics(config, ["a100-1"])
    assert gpumetrics.stats.requests - before == 1


def test_one_query_whatever_the_number_of_rows(gpu_sim, prometheus, settings):
    settings.GPUMETRICS_CACHE_SECONDS = 0
    for i in range(60):
        gpu_sim.add_node(make_node(f"extra-{i:02d}", gpus=8))
    prom = prometheus(gpu_sim.url + "/dcgm/metrics")
    prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL{Hostname=~"extra-.*"}', count=480)
    config = PrometheusConfig(url=prom.url)
    counts = []
    for n in (1, 10, 60):
        names = [f"extra-{i:02d}" for i in range(n)]
        before = gpumetrics.stats.requests
        nodes = gpumetrics.node_gpu_metrics(config, names)
        groups = gpumetrics.group_gpu_metrics(config, {k: names[k::3] for k in range(3)})
        counts.append(gpumetrics.stats.requests - before)
        assert len(nodes.by_node) == n and sum(groups.get(k).gpus for k in range(3)) == 8 * n
    assert counts == [2, 2, 2]


def test_extra_label_matchers_select_the_clusters_series(prom):
    assert gpumetrics.node_gpu_metrics(
        PrometheusConfig(url=prom.url, matchers=(("job", "=", "dcgm-exporter"),)), ["a100-1"]).get("a100-1").gpus == 4
    other = gpumetrics.node_gpu_metrics(PrometheusConfig(url=prom.url, matchers=(("job", "=", "other"),)), ["a100-1"])
    assert other == Unavailable("no DCGM series for this cluster")


def test_prometheus_down_is_a_reason_not_an_error(settings):
    settings.GPUMETRICS_TIMEOUT = 0.5
    started = time.monotonic()
    got = gpumetrics.node_gpu_metrics(PrometheusConfig(url="http://127.0.0.1:9"), ["a100-1"])
    assert got == Unavailable("Prometheus unreachable: connection refused")
    assert time.monotonic() - started < 0.6


def test_a_slow_prometheus_times_out_in_the_budget(slow_prometheus, settings):
    settings.GPUMETRICS_TIMEOUT = 0.3
    started = time.monotonic()
    got = gpumetrics.node_gpu_metrics(PrometheusConfig(url=slow_prometheus), ["a100-1"])
    assert got == Unavailable("Prometheus timed out after 0.3 s")
    assert time.monotonic() - started < 0.6
    # The failure is cached too: the next page does not wait again.
    started = time.monotonic()
    assert gpumetrics.node_gpu_metrics(PrometheusConfig(url=slow_prometheus), ["a100-1"]) == got
    assert time.monotonic() - started < 0.05


def test_series_without_the_hostname_label(shared_sim, http_server, prometheus):
    """An exporter configured without Hostname (e.g. DCGM_EXPORTER_KUBERNETES off, relabelled away)."""
    def answer(request):
        text = re.sub(r',Hostname="[^"]*"', "", shared_sim.dcgm_metrics())
        return 200, "text/plain; version=0.0.4", text.encode()

    prom = prometheus(http_server(answer) + "/metrics")
    prom.wait_for_series("DCGM_FI_DEV_GPU_UTIL", count=12)
    got = gpumetrics.node_gpu_metrics(PrometheusConfig(url=prom.url), ["a100-1"])
    assert got == Unavailable("series lack the Hostname label")
    assert gpumetrics.device_metrics(PrometheusConfig(url=prom.url), "a100-1") == got


def test_not_a_prometheus(http_server):
    url = http_server(lambda request: (200, "text/html", b"<html>hello</html>"))
    got = gpumetrics.node_gpu_metrics(PrometheusConfig(url=url), ["a100-1"])
    assert isinstance(got, Unavailable) and "without JSON" in got.reason


def test_bearer_token_and_basic_auth_files(http_server, tmp_path):
    seen = []

    def answer(request):
        seen.append(request.headers.get("Authorization"))
        return 401, "application/json", b'{"status":"error","error":"unauthorized"}'

    url = http_server(answer)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    got = gpumetrics.node_gpu_metrics(PrometheusConfig(url=url, bearer_token_file=str(token)), ["a"])
    assert got == Unavailable("Prometheus refused the credentials (HTTP 401)")
    basic = tmp_path / "basic"
    basic.write_text("console:pw\n")
    gpumetrics.node_gpu_metrics(PrometheusConfig(url=url, basic_auth_file=str(basic)), ["a"])
    assert seen == ["Bearer s3cret", "Basic Y29uc29sZTpwdw=="]
    missing = gpumetrics.node_gpu_metrics(PrometheusConfig(url=url, bearer_token_file=str(tmp_path / "nope")), ["a"])
    assert missing.reason.startswith("cannot read the bearer token file")


def test_parse_matchers():
    assert gpumetrics.parse_matchers('cluster="prod", env=~"a|b" ,x!="y"') == [
        ("cluster", "=", "prod"), ("env", "=~", "a|b"), ("x", "!=", "y")]
    for bad in ('cluster=prod', 'cluster="a" env="b"', '1x="a"', 'x=~"("'):
        with pytest.raises(ValueError):
            gpumetrics.parse_matchers(bad)


def test_backfilled_hour_is_queryable(shared_sim, prometheus, tmp_path):
    now = time.time()
    tsdb = tmp_path / "tsdb"
    backfill_openmetrics(str(tsdb), shared_sim.dcgm_metrics(), start=now - 3600, end=now - 120, step=60)
    prom = prometheus(tsdb_dir=str(tsdb))
    rows = gpumetrics.query_range(PrometheusConfig(url=prom.url), 'avg(DCGM_FI_DEV_GPU_UTIL{Hostname="a100-1"})',
                                  start=now - 3600, end=now - 120, step=300, timeout=5)
    assert len(rows) == 1 and len(rows[0]["values"]) >= 11
    assert [v for _, v in rows[0]["values"]] == [pytest.approx((80 + 80 + 2) / 4)] * len(rows[0]["values"])
