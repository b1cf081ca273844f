"""MIG slices measured like GPUs, from a real Prometheus scraping the emulator's DCGM exporter (one series per
MIG instance, GPU_I_PROFILE and GPU_I_ID, labelled with the pod holding it): a slice's utilization is its
pod's, in the ledger's hour too; an idle slice is found like an idle GPU, and the Idle GPUs page, its CSV and
API say its profile and instance, its GPU-hours wasted its share of a GPU."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from kubesim import KubeEmulator, make_node, make_pod
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


def objects():
    """One A100 80GB cut all-balanced (3g.40gb, 2g.20gb, 2 × 1g.10gb) in pool a100: rnd-a's `embed` holds a
    1g.10gb slice at 2 %, rnd-b's `chat` the 3g.40gb at 80 %."""
    nodes = [make_node("mig-1", gpus=1, gpu_product=A100_80, mig_config="all-balanced", labels={"gpu-type": "A100"})]
    return nodes, operand_pods(nodes) + [slice_pod("embed", "rnd-a", "1g.10gb", 2),
                                         slice_pod("chat", "rnd-b", "3g.40gb", 80)]


@pytest.fixture(scope="module")
def exporter():
    from gpumetrics.localprom import LocalPrometheus
    from tests.conftest import require_prometheus

    require_prometheus()
    nodes, pods = objects()
    emu = KubeEmulator()
    emu.start()
    emu.load(nodes=nodes, pods=pods)
    try:
        with LocalPrometheus([emu.url + "/dcgm/metrics"]) as prom:
            prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL{GPU_I_PROFILE!=""}', count=4)
            # A window of samples first (and a step of the since-when reading, 5 s, more): idle means "under
            # the threshold for the whole window", since it began to report.
            prom.wait_for_series(f'DCGM_FI_DEV_GPU_UTIL{{GPU_I_PROFILE!=""}} offset {IDLE_WINDOW_SECONDS + 10}s',
                                 count=4, timeout=60)
            yield emu, prom
    finally:
        emu.stop()


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
    # The busy 3g.40gb is not idle; the slices no pod holds are not "allocated" idle ones.
    assert [(g.pod, g.mig_profile, g.gpu_instance, g.index, g.node) for g in gpus] == [
        ("embed", "1g.10gb", "3", "0", "mig-1")]
    idle = gpus[0]
    assert idle.share == pytest.approx(1 / 7) and idle.device == "0 (MIG 1g.10gb, instance 3)"
    # GPU-hours wasted are GPU-equivalent hours: its idle hours × 1/7.
    assert idle.gpu_hours_wasted == Decimal(str(round(idle.idle_hours / 7, 2)))


def test_the_idle_gpus_page_csv_and_api_say_the_slice_s_profile(mig_org, users, client):
    client.force_login(users["sysadmin"])
    page = client.get("/usage/idle-gpus/").content.decode()
    assert "embed" in page and "0 (MIG 1g.10gb, instance 3)" in page and "chat" not in page
    rows = csv_of(client.get("/usage/idle-gpus/", {"format": "csv", "columns": "all"}))
    line = dict(zip(rows[0], rows[1]))
    assert len(rows) == 2
    assert (line["Pod"], line["Project"], line["Node pool"], line["GPU"], line["GPU model"]) == (
        "embed", "rnd-a", "a100", "0 (MIG 1g.10gb, instance 3)", "NVIDIA A100-SXM4-80GB")
    api = client.get("/api/v1/idle-gpus").json()
    [result] = api["results"]
    assert (result["pod"], result["gpu"], result["mig_profile"], result["gpu_instance"]) == ("embed", "0", "1g.10gb", "3")


def test_a_slice_s_utilization_is_its_pod_s_in_the_ledger_s_hour(mig_org):
    org = mig_org
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    hour = now - dt.timedelta(seconds=3598)  # an hour ending now: what Prometheus holds is in it
    utilization, reason = hour_utilization(org.cluster, hour)
    assert reason == ""
    embed, chat = utilization[("runai-rnd-a", "embed")], utilization[("runai-rnd-b", "chat")]
    assert (embed.utilization, chat.utilization) == (pytest.approx(2.0), pytest.approx(80.0))
    assert (embed.idle_share, chat.idle_share) == (1.0, 0.0)
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
