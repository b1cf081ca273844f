"""GPU utilization per workload on the workloads table, its CSV and /api/v1/workloads/, read from a real
Prometheus scraping the emulator's DCGM exporter: the figure of a Job is the average over the GPUs
its running pods hold (pods found by their job-name label); "—" with the reason on hover when there
is none (Prometheus down, no running pod, no GPU series); one Prometheus query per page."""
from __future__ import annotations

import re
import time

import pytest
from django.urls import reverse

import gpumetrics
from kubesim import make_pod
from kubesim.dcgm import MEMORY_USED_ANNOTATION, UTILIZATION_ANNOTATION
from nodepools import services as pool_services
from nodepools.demo_cluster import operand_pods
from tests.pages import csv_of, headers, login, table_rows
from workloads import render
from workloads.sync import jobs_mirror

COLUMN = "GPU utilization (%)"
# (pod, namespace, job, node, GPUs, utilization %, job label key)
PODS = [
    ("train-0", "runai-rnd-a", "train", "a100-1", 2, 80, render.JOB_NAME_LABEL),
    ("train-1", "runai-rnd-a", "train", "a100-2", 1, 20, render.JOB_NAME_LABEL),
    ("lazy-0", "runai-rnd-b", "lazy", "v100-1", 1, 1, "job-name"),  # the legacy label alone
    ("cpu-0", "runai-ops-a", "cpu-only", "v100-2", 0, 0, render.JOB_NAME_LABEL),
]
JOBS = [("train", "runai-rnd-a"), ("lazy", "runai-rnd-b"), ("cpu-only", "runai-ops-a"), ("queued", "runai-rnd-a")]


def job_pod(name, namespace, job, node, gpus, utilization, label):
    requests = {"cpu": "1"} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    return make_pod(name, namespace, node=node, labels={label: job},
                    containers=[{"name": "main", "requests": requests}],
                    annotations={UTILIZATION_ANNOTATION: str(utilization), MEMORY_USED_ANNOTATION: "1000"})


def job(name, namespace):
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": {"template": {"spec": {"containers": [
                {"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}},
            "status": {"active": 1}}


def cluster_pods(nodes):
    return operand_pods(nodes) + [job_pod(*p) for p in PODS]


@pytest.fixture(scope="module")
def exporter(module_emulators):
    """The emulator serving the DCGM exporter of the org's nodes and the jobs' pods, and a real
    Prometheus scraping it every second."""
    from gpumetrics.localprom import LocalPrometheus
    from kubesim import make_node
    from tests.conftest import require_prometheus

    require_prometheus()
    nodes = [
        make_node("v100-1", gpus=4, gpu_product="Tesla-V100-SXM2-16GB", gpu_memory_mib=16384),
        make_node("v100-2", gpus=4, gpu_product="Tesla-V100-SXM2-16GB", gpu_memory_mib=16384),
        make_node("a100-1", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960,
                  labels={"gpu-type": "A100"}),
        make_node("a100-2", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960,
                  labels={"gpu-type": "A100"}),
    ]
    emu = module_emulators(bookmark_interval=1.0)  # KubeEmulator's own, which this module always had
    emu.load(nodes=nodes, pods=cluster_pods(nodes))
    with LocalPrometheus([emu.url + "/dcgm/metrics"]) as prom:
        prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL{pod!=""}', count=4)
        yield emu, prom


@pytest.fixture
def gpu_lab(org, exporter, settings):
    """The org with the exporter's pods and the Jobs mirrored, its cluster naming the Prometheus."""
    _, prom = exporter
    settings.GPUMETRICS_TIMEOUT = 5  # a loaded test machine; the down test needs no budget
    org.pods = cluster_pods(org.nodes)
    org.load()
    jobs_mirror(cluster=org.cluster, jobs=[job(*j) for j in JOBS])
    pool_services.cluster_update(actor=None, cluster=org.cluster, prometheus_url=prom.url)
    gpumetrics.cache_clear()
    return org


def served_utilization(emu) -> dict[str, float]:
    """job -> the average utilization of the GPUs the exporter serves for its pods."""
    jobs = {(ns, pod): job for pod, ns, job, *_ in PODS}
    per_job: dict[str, list[float]] = {}
    for dev in emu.dcgm_devices():
        if dev.get("pod"):
            per_job.setdefault(jobs[(dev["namespace"], dev["pod"])], []).append(dev["utilization"])
    return {j: sum(v) / len(v) for j, v in per_job.items()}


def cells(response) -> dict[str, str]:
    at = headers(response).index(COLUMN)
    return {row[0]: row[at] for row in table_rows(response)}


def titles(response) -> dict[str, str]:
    """workload -> the hover of its utilization cell when it shows "—"."""
    html = response.content.decode()
    out = {}
    for name, row in re.findall(r'<tr[^>]*data-workload="([^"]+)"[^>]*>(.*?)</tr>', html, re.S):
        found = re.search(r'<span class="na" title="([^"]*)">—</span>', row)
        if found:
            out[name] = found.group(1)
    return out


def test_table_csv_and_api_agree_with_what_the_exporter_served(client, api, gpu_lab, exporter, users):
    emu, _ = exporter
    served = served_utilization(emu)
    assert served == {"train": pytest.approx((80 * 2 + 20) / 3), "lazy": 1}  # per GPU, not per pod
    login(client, users, "sysadmin")
    gpumetrics.cache_clear()
    before = gpumetrics.stats.requests
    response = client.get(reverse("workload-list"), {"sort": "name"})
    assert gpumetrics.stats.requests - before == 1  # one query for the page, whatever its rows
    assert COLUMN in headers(response)  # a default column
    shown = cells(response)
    assert shown["train"] == "60" and shown["lazy"] == "1"
    assert float(shown["train"]) == pytest.approx(served["train"])
    assert shown["cpu-only"] == shown["queued"] == "—"
    assert titles(response) == {
        "cpu-only": "no GPU of its pods reports utilization (none held, or the exporter lacks the namespace/pod "
                    "labels)",
        "queued": "no running pod: the workload holds no GPU now"}

    rows = csv_of(client.get(reverse("workload-list"), {"sort": "name", "format": "csv"}))
    at = rows[0].index(COLUMN)
    assert {r[0]: r[at] for r in rows[1:]} == {"train": "60", "lazy": "1", "cpu-only": "", "queued": ""}

    gpumetrics.cache_clear()
    before = gpumetrics.stats.requests
    listed = {w["name"]: w for w in api(users["sysadmin"]).get("/api/v1/workloads/").json()["results"]}
    assert gpumetrics.stats.requests - before == 1
    assert listed["train"]["gpu_utilization"] == 60 and listed["train"]["gpu_metrics_unavailable"] is None
    assert listed["lazy"]["gpu_utilization"] == 1
    assert listed["queued"]["gpu_utilization"] is None
    assert listed["queued"]["gpu_metrics_unavailable"] == "no running pod: the workload holds no GPU now"
    single = api(users["sysadmin"]).get(f"/api/v1/workloads/{listed['train']['id']}/").json()
    assert single["gpu_utilization"] == 60


def test_a_researcher_sees_the_figure_of_their_project_only(client, gpu_lab, users):
    login(client, users, "researcher")  # researcher on rnd-a
    shown = cells(client.get(reverse("workload-list")))
    assert shown == {"train": "60", "queued": "—"}


def test_prometheus_down_shows_a_dash_with_the_reason(client, api, gpu_lab, users):
    pool_services.cluster_update(actor=None, cluster=gpu_lab.cluster, prometheus_url="http://127.0.0.1:9")
    gpumetrics.cache_clear()
    login(client, users, "sysadmin")
    started = time.monotonic()
    response = client.get(reverse("workload-list"))
    assert response.status_code == 200 and time.monotonic() - started < 2
    assert set(cells(response).values()) == {"—"}
    assert titles(response) == {
        "train": "Prometheus unreachable: connection refused", "lazy": "Prometheus unreachable: connection refused",
        "cpu-only": "Prometheus unreachable: connection refused",
        "queued": "no running pod: the workload holds no GPU now"}
    listed = {w["name"]: w for w in api(users["sysadmin"]).get("/api/v1/workloads/").json()["results"]}
    assert listed["train"]["gpu_utilization"] is None
    assert listed["train"]["gpu_metrics_unavailable"] == "Prometheus unreachable: connection refused"


def test_a_slow_prometheus_never_slows_the_page_past_its_budget(client, gpu_lab, users, slow_prometheus, settings):
    settings.GPUMETRICS_TIMEOUT = 0.3
    pool_services.cluster_update(actor=None, cluster=gpu_lab.cluster, prometheus_url=slow_prometheus)
    login(client, users, "sysadmin")
    client.get(reverse("workload-list"), {"q": "nothing"})  # warm: templates, sessions
    gpumetrics.cache_clear()
    started = time.monotonic()
    response = client.get(reverse("workload-list"))
    # The slow one answers after 3 s: a page back before that did not wait for it (its 0.3 s timeout said so
    # below); the rest of the margin is the page's own cost on a busy machine.
    assert response.status_code == 200 and time.monotonic() - started < 2.9
    assert titles(response)["train"] == "Prometheus timed out after 0.3 s"
