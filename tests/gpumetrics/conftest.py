"""Fixtures of the gpumetrics tests: an emulated GPU cluster, tiny HTTP servers standing in for a
slow Prometheus or an exporter with other labels."""
from __future__ import annotations

import pytest

from kubesim import KubeEmulator, make_node, make_pod


def gpu_pod(name: str, namespace: str, node: str, gpus: int, **extra) -> dict:
    return make_pod(name, namespace, node=node, containers=[{"name": "train", "requests": {"nvidia.com/gpu": str(gpus)}}],
                    **extra)


# The idle window of these tests (GPU_IDLE_WINDOW_MINUTES): an allocated GPU is idle when it stayed
# under the threshold that long, and Prometheus holds that much of every series before a test starts.
IDLE_WINDOW_SECONDS = 6


@pytest.fixture(autouse=True)
def _generous_budget(settings):
    """A loaded test machine must not turn a figure into "timed out": tests of the budget set their own."""
    settings.GPUMETRICS_TIMEOUT = 5
    settings.GPU_IDLE_WINDOW_MINUTES = IDLE_WINDOW_SECONDS / 60


def _gpu_sim(emulators) -> KubeEmulator:
    # KubeEmulator's own bookmark interval (1 s), which these tests always had: they read the exporter, no watch.
    emu = emulators(bookmark_interval=1.0)
    emu.add_node(make_node("a100-1", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960))
    emu.add_node(make_node("a100-2", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960))
    emu.add_node(make_node("v100-1", gpus=4, gpu_product="Tesla-V100-SXM2-16GB", gpu_memory_mib=16384))
    emu.add_node(make_node("cpu-1"))
    emu.add_pod(gpu_pod("busy", "team-a", "a100-1", 2, created="2026-01-01T00:00:00Z"))
    emu.add_pod(gpu_pod("idle", "team-b", "a100-1", 1, created="2026-01-01T00:01:00Z"))
    emu.add_pod(gpu_pod("big", "team-a", "a100-2", 4))
    emu.set_pod_gpu_utilization("team-a", "busy", 80, 20000)
    emu.set_pod_gpu_utilization("team-b", "idle", 2, 1000)
    emu.set_pod_gpu_utilization("team-a", "big", 60, 30000)
    return emu


@pytest.fixture(scope="module")
def shared_sim(module_emulators) -> KubeEmulator:
    """`gpu_sim` shared by a module's tests that only read (Prometheus takes ~5 s to scrape a new target)."""
    return _gpu_sim(module_emulators)


@pytest.fixture(scope="module")
def shared_prometheus(shared_sim):
    """A real Prometheus scraping `shared_sim` every second, its series present (module-wide)."""
    from gpumetrics.localprom import LocalPrometheus
    from tests.conftest import require_prometheus

    require_prometheus()
    with LocalPrometheus([shared_sim.url + "/dcgm/metrics"], scrape_interval="1s") as prom:
        prom.wait_for_series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", count=12)
        prom.wait_for_series(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE offset {IDLE_WINDOW_SECONDS}s", count=12)
        yield prom


@pytest.fixture
def gpu_sim(emulators) -> KubeEmulator:
    """Two A100 nodes (4 GPUs each) and a V100 node; pods: busy (2 GPUs, 80 %), idle (1 GPU, 2 %) on
    a100-1; big (4 GPUs, 60 %) on a100-2; nothing on v100-1."""
    return _gpu_sim(emulators)
