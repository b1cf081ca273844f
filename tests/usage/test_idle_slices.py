"""MIG slices measured like GPUs, from a real Prometheus scraping the emulator's DCGM exporter (one series per
MIG instance, GPU_I_PROFILE and GPU_I_ID, labelled with the pod holding it; as NVIDIA's exporter, its activity
in DCGM_FI_PROF_GR_ENGINE_ACTIVE and no DCGM_FI_DEV_GPU_UTIL): a slice's utilization is its pod's (its graphics
engine activity × 100), on the project and department pages, the workloads' hook, the pools' figures and in
the ledger's hour; a busy slice is not idle, an idle slice is found like an idle GPU, and the Idle GPUs page,
its CSV and API say its profile and instance, its GPU-hours wasted its share of a GPU. Whole GPUs beside them
read DCGM_FI_DEV_GPU_UTIL as before."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from kubesim import make_node, make_pod
from kubesim.dcgm import UTILIZATION_ANNOTATION
from ledger import services
from ledger.models import LedgerEntry
from ledger.utilization import hour_utilization
from nodepools.demo_cluster import operand_pods
from projects.utilization import cluster_idle_gpus
from tests.pages import csv_of

IDLE_WINDOW_SECONDS = 6
A100_80 = "NVIDIA-A100-SXM4-80GB"


def slice_pod(name, project, profile, utilization):
    return make_pod(name, f"runai-{project}", node="mig-1", phase="Running",
                    containers=[{"name": "main", "requests": {"cpu": "1", f"nvidia.com/mig-{profile}": "1"}}],
                    annotations={UTILIZATION_ANNOTATION: str(utilization)})


def whole_pod(name, project, utilization):
    return make_pod(name, f"runai-{project}", node="whole-1", phase="Running",
                    containers=[{"name": "main", "requests": {"cpu": "1", "nvidia.com/gpu": "1"}}],
                    annotations={UTILIZATION_ANNOTATION: str(utilization)})


def objects():
    """One A100 80GB cut all-balanced (3g.40gb, 2g.20gb, 2 × 1g.10gb) in pool a100: rnd-a's `embed` holds a
    1g.10gb slice at 2 %, rnd-b's `chat` the 3g.40gb at 80 %. Beside it, whole-1 (2 whole A100s, pool a100):
    rnd-a's `train` at 60 % (GPU 1), ops-a's `parked` at 1 % (GPU 0: namespaces in order)."""
    nodes = [make_node("mig-1", gpus=1, gpu_product=A100_80, mig_config="all-balanced", labels={"gpu-type": "A100"}),
             make_node("whole-1", gpus=2, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960,
                       labels={"gpu-type": "A100"})]
    return nodes, operand_pods(nodes) + [slice_pod("embed", "rnd-a", "1g.10gb", 2),
                                         slice_pod("chat", "rnd-b", "3g.40gb", 80),
                                         whole_pod("train", "rnd-a", 60), whole_pod("parked", "ops-a", 1)]


@pytest.fixture(scope="module")
def exporter(module_emulators):
    from gpumetrics.localprom import LocalPrometheus
    from tests.conftest import require_prometheus

    require_prometheus()
    nodes, pods = objects()
    emu = module_emulators(bookmark_interval=1.0)  # KubeEmulator's own, which this module always had
    emu.load(nodes=nodes, pods=pods)
    with LocalPrometheus([emu.url + "/dcgm/metrics"]) as prom:
        prom.wait_for_series('DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_PROFILE!=""}', count=4)
        # A window of samples first (and a step of the since-when reading, 5 s, more): idle means "under
        # the threshold for the whole window", since it began to report.
        prom.wait_for_series(f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{GPU_I_PROFILE!=""}} offset {IDLE_WINDOW_SECONDS + 10}s',
                             count=4, timeout=60)
        prom.wait_for_series(f'DCGM_FI_DEV_GPU_UTIL{{Hostname="whole-1"}} offset {IDLE_WINDOW_SECONDS + 10}s',
                             count=2, timeout=60)
        yield emu, prom


@pytest.fixture
def mig_org(org, exporter, settings):
    import gpumetrics

    emu, prom = exporter
    settings.GPUMETRICS_TIMEOUT = 5
    settings.GPU_IDLE_WINDOW_MINUTES = IDLE_WINDOW_SECONDS / 60
    settings.GPU_IDLE_LOOKBACK_HOURS = 60 / 3600
    gpumetrics.cache_clear()
    nodes, pods = objects()
    org.nodes += nodes
    org.pods += pods
    org.load()
    org.cluster.prometheus_url = prom.url
    org.cluster.save()
    return org


def test_an_idle_slice_is_found_like_an_idle_gpu_and_says_its_profile(mig_org):
    gpus, reason = cluster_idle_gpus(mig_org.cluster)
    assert reason == ""
    # The busy 3g.40gb (its graphics engine 80 % active) is not idle; the slices no pod holds are not
    # "allocated" idle ones; the whole GPU at 1 % is idle as before, the one at 60 % not.
    assert sorted((g.pod, g.mig_profile, g.gpu_instance, g.index, g.node) for g in gpus) == [
        ("embed", "1g.10gb", "3", "0", "mig-1"), ("parked", "", "", "0", "whole-1")]
    idle = next(g for g in gpus if g.pod == "embed")
    assert idle.share == pytest.approx(1 / 7) and idle.device == "0 (MIG 1g.10gb, instance 3)"
    # GPU-hours wasted are GPU-equivalent hours: its idle hours × 1/7.
    assert idle.gpu_hours_wasted == Decimal(str(round(idle.idle_hours / 7, 2)))


def test_the_idle_gpus_page_csv_and_api_say_the_slice_s_profile(mig_org, users, client):
    client.force_login(users["sysadmin"])
    page = client.get("/usage/idle-gpus/").content.decode()
    assert "embed" in page and "0 (MIG 1g.10gb, instance 3)" in page and "chat" not in page
    rows = csv_of(client.get("/usage/idle-gpus/", {"format": "csv", "columns": "all"}))
    assert len(rows) == 3  # the header, the idle slice, the idle whole GPU
    line = next(dict(zip(rows[0], row)) for row in rows[1:] if dict(zip(rows[0], row))["Pod"] == "embed")
    assert (line["Pod"], line["Project"], line["Node pool"], line["GPU"], line["GPU model"]) == (
        "embed", "rnd-a", "a100", "0 (MIG 1g.10gb, instance 3)", "NVIDIA A100-SXM4-80GB")
    api = client.get("/api/v1/idle-gpus").json()
    results = sorted((r["pod"], r["gpu"], r["mig_profile"], r["gpu_instance"]) for r in api["results"])
    assert results == [("embed", "0", "1g.10gb", "3"), ("parked", "0", "", "")]


def test_a_slice_s_utilization_is_its_pod_s_in_the_ledger_s_hour(mig_org):
    org = mig_org
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    hour = now - dt.timedelta(seconds=3598)  # an hour ending now: what Prometheus holds is in it
    utilization, reason = hour_utilization(org.cluster, hour)
    assert reason == ""
    embed, chat = utilization[("runai-rnd-a", "embed")], utilization[("runai-rnd-b", "chat")]
    assert (embed.utilization, chat.utilization) == (pytest.approx(2.0), pytest.approx(80.0))
    assert (embed.idle_share, chat.idle_share) == (1.0, 0.0)
    train, parked = utilization[("runai-rnd-a", "train")], utilization[("runai-ops-a", "parked")]
    assert (train.utilization, parked.utilization) == (pytest.approx(60.0), pytest.approx(1.0))
    assert (train.idle_share, parked.idle_share) == (0.0, 1.0)
    # Closed with that reading, the ledger's slice lines carry it: embed's slice-hour idle, chat's busy.
    hour = services.hour_floor(now) - dt.timedelta(hours=1)
    from nodepools.models import PodLifetime

    PodLifetime.objects.filter(cluster_id=org.cluster.pk).update(started=hour - dt.timedelta(hours=1))
    services.ledger_hour_close(cluster=org.cluster, hour=hour, utilization=utilization)
    entries = {e.gpu_unit: e for e in LedgerEntry.objects.filter(hour=hour, gpu_unit__in=["1g.10gb", "3g.40gb"])}
    assert entries["1g.10gb"].project_id == org.rnd_a.pk and entries["1g.10gb"].unit_seconds == 3600
    assert entries["1g.10gb"].idle_gpu_seconds == entries["1g.10gb"].gpu_seconds == Decimal("0.143") * 3600
    assert entries["1g.10gb"].gpu_utilization == Decimal("2.0")
    assert (entries["3g.40gb"].idle_gpu_seconds, entries["3g.40gb"].gpu_utilization) == (0, Decimal("80.0"))


def test_a_busy_slice_reads_its_engine_activity_on_every_surface_and_whole_gpus_their_gpu_util(mig_org, users,
                                                                                               client):
    import gpumetrics
    from projects.utilization import cluster_pod_gpus, owner_namespaces, owner_utilization, pod_gpu_utilization

    org = mig_org
    cid = org.cluster.pk
    # The workloads' hook: a slice's pod reads its instance's GR_ENGINE_ACTIVE × 100, a whole GPU's pod GPU_UTIL.
    values, reasons = pod_gpu_utilization([type("P", (), {"cluster_id": cid, "namespace": ns, "name": name})()
                                           for ns, name in (("runai-rnd-a", "embed"), ("runai-rnd-b", "chat"),
                                                            ("runai-rnd-a", "train"), ("runai-ops-a", "parked"))])
    assert reasons == {}
    assert values == {(cid, "runai-rnd-a", "embed"): pytest.approx(2), (cid, "runai-rnd-b", "chat"): pytest.approx(80),
                      (cid, "runai-rnd-a", "train"): pytest.approx(60), (cid, "runai-ops-a", "parked"): pytest.approx(1)}
    # Projects and departments: rnd-b's one slice at 80 %; rnd-a's slice (2 %) and whole GPU (60 %) averaged.
    rnd_b = owner_utilization(cluster=org.cluster, namespaces=owner_namespaces(project=org.rnd_b))
    assert (rnd_b.percent, rnd_b.gpus) == (pytest.approx(80), 1)
    rnd = owner_utilization(cluster=org.cluster, namespaces=owner_namespaces(department=org.rnd))
    assert (rnd.percent, rnd.gpus) == (pytest.approx((2 + 80 + 60) / 3), 3)
    client.force_login(users["sysadmin"])
    part = client.get(f"/projects/{org.rnd_a.pk}/utilization/").content.decode()
    assert '<span id="utilization-now"' in part and ">31 %</span>" in part
    api = client.get(f"/api/v1/projects/{org.rnd_b.pk}/utilization/").json()
    assert api["gpu_utilization"] == pytest.approx(80, abs=0.1) and api["gpus"] == 1
    assert api["series"] and all(p["gpu_utilization"] == pytest.approx(80, abs=0.1) for p in api["series"])
    # The usage snapshots' reading: every held GPU and slice with its average.
    rows, reason = cluster_pod_gpus(org.cluster, window=dt.timedelta(seconds=5))
    assert reason == "" and sorted(rows) == [("mig-1", "runai-rnd-a", pytest.approx(2)),
                                             ("mig-1", "runai-rnd-b", pytest.approx(80)),
                                             ("whole-1", "runai-ops-a", pytest.approx(1)),
                                             ("whole-1", "runai-rnd-a", pytest.approx(60))]
    # The pools' and nodes' figures: the MIG node's 4 instances (2 held, 1 of them idle), the whole node's 2 GPUs.
    gpumetrics.cache_clear()
    nodes = gpumetrics.node_gpu_metrics(org.cluster, ["mig-1", "whole-1"])
    mig, whole = nodes.get("mig-1"), nodes.get("whole-1")
    assert (mig.gpus, mig.allocated, mig.idle_allocated) == (4, 2, 1)
    assert (mig.utilization, mig.allocated_utilization) == (pytest.approx(82 / 4), pytest.approx(41))
    assert (whole.gpus, whole.allocated, whole.idle_allocated) == (2, 2, 1)
    assert whole.allocated_utilization == pytest.approx(30.5)
