"""The emulator's DCGM exporter (``GET /dcgm/metrics``) on shared GPUs, as NVIDIA's dcgm-exporter publishes
them (internal/pkg/rendermetrics/render_metrics.go): one series per MIG instance with ``GPU_I_PROFILE`` and
``GPU_I_ID`` (so that idle slices can be found like idle GPUs), its activity in ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``
and no ``DCGM_FI_DEV_GPU_UTIL`` (not measured for MIG instances), the physical GPUs of a time-sliced node."""
from __future__ import annotations

import re
import urllib.request

from kubesim import KubeEmulator, make_node, make_pod

SAMPLE = re.compile(r'^(\w+)\{(.*)\} (\S+)$')


def samples(sim: KubeEmulator, field: str) -> list[tuple[dict[str, str], float]]:
    with urllib.request.urlopen(sim.url + "/dcgm/metrics", timeout=10) as response:
        text = response.read().decode()
    out = []
    for line in text.splitlines():
        found = SAMPLE.match(line)
        if found and found.group(1) == field:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', found.group(2)))
            out.append((labels, float(found.group(3))))
    return out


def test_each_mig_instance_is_a_series_of_its_own_with_its_profile_and_instance(sim: KubeEmulator) -> None:
    sim.add_node(make_node("mig-1", gpus=2, mig_config="all-balanced"))  # per GPU: 3g.40gb, 2g.20gb, 2 × 1g.10gb
    sim.add_pod(make_pod("chat", "ml", node="mig-1", phase="Running",
                         containers=[{"name": "server", "requests": {"nvidia.com/mig-3g.40gb": 1}}],
                         annotations={"emulator.gpu-capacity.io/gpu-utilization": "80"}))
    sim.add_pod(make_pod("embed", "ml", node="mig-1", phase="Running",
                         containers=[{"name": "server", "requests": {"nvidia.com/mig-1g.10gb": 1}}],
                         annotations={"emulator.gpu-capacity.io/gpu-utilization": "3"}))
    # Per instance, DCGM_FI_PROF_GR_ENGINE_ACTIVE (0..1) says how busy it is; DCGM_FI_DEV_GPU_UTIL is not served.
    assert samples(sim, "DCGM_FI_DEV_GPU_UTIL") == []
    engine = samples(sim, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert len(engine) == 8  # 2 GPUs × 4 instances
    profiles = sorted((s["gpu"], s["GPU_I_PROFILE"], s["GPU_I_ID"]) for s, _ in engine)
    assert profiles == [("0", "1g.10gb", "3"), ("0", "1g.10gb", "4"), ("0", "2g.20gb", "2"), ("0", "3g.40gb", "1"),
                        ("1", "1g.10gb", "3"), ("1", "1g.10gb", "4"), ("1", "2g.20gb", "2"), ("1", "3g.40gb", "1")]
    held = {s["pod"]: (s["GPU_I_PROFILE"], value) for s, value in engine if s.get("pod")}
    assert held == {"chat": ("3g.40gb", 0.8), "embed": ("1g.10gb", 0.03)}
    idle = [(s, value) for s, value in engine if not s.get("pod")]
    assert len(idle) == 6 and all(s["modelName"] == "NVIDIA A100-SXM4-80GB" and value == 0 for s, value in idle)
    free = {(s["gpu"], s["GPU_I_ID"]): value for s, value in samples(sim, "DCGM_FI_DEV_FB_FREE")}
    used = {(s["gpu"], s["GPU_I_ID"]): value for s, value in samples(sim, "DCGM_FI_DEV_FB_USED")}
    assert free[("0", "2")] + used[("0", "2")] == 20480  # a 2g.20gb instance's memory
    assert free[("0", "1")] + used[("0", "1")] == 40960


def test_a_whole_gpu_has_no_mig_labels_and_a_time_sliced_node_exports_its_physical_gpus(sim: KubeEmulator) -> None:
    sim.add_node(make_node("whole", gpus=1))
    sim.add_node(make_node("sliced", gpus=2, gpu_replicas=4))  # allocatable nvidia.com/gpu: 8
    for i in range(5):
        sim.add_pod(make_pod(f"notebook-{i}", "ml", node="sliced", phase="Running",
                             containers=[{"name": "lab", "requests": {"nvidia.com/gpu": 1}}],
                             annotations={"emulator.gpu-capacity.io/gpu-utilization": "10"},
                             created=f"2025-01-01T00:0{i}:00Z"))
    util = samples(sim, "DCGM_FI_DEV_GPU_UTIL")
    whole = [s for s, _ in util if s["Hostname"] == "whole"]
    assert len(whole) == 1 and "GPU_I_PROFILE" not in whole[0] and "GPU_I_ID" not in whole[0]
    # A whole GPU serves both fields, as the exporter's default counters list them.
    assert [s["Hostname"] for s, _ in samples(sim, "DCGM_FI_PROF_GR_ENGINE_ACTIVE") if s["Hostname"] == "whole"] == ["whole"]
    sliced = {s["gpu"]: (s.get("pod"), value) for s, value in util if s["Hostname"] == "sliced"}
    # 2 physical GPUs, not 8 replicas: the first four notebooks share GPU 0, the fifth is on GPU 1.
    assert sliced == {"0": ("notebook-0", 40.0), "1": ("notebook-4", 10.0)}


def test_a_kai_shared_gpu_is_held_by_its_reservation_pod_and_busy_with_its_sharers_work(manual_sim: KubeEmulator,
                                                                                       manual_api) -> None:
    from kubernetes import client

    emu = manual_sim
    emu.add_node(make_node("gpu-1", gpus=2))
    client.CustomObjectsApi(manual_api).create_cluster_custom_object("scheduling.run.ai", "v2", "queues", {
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "team"},
        "spec": {"resources": {"gpu": {"quota": 1, "limit": -1}, "cpu": {"quota": -1, "limit": -1},
                               "memory": {"quota": -1, "limit": -1}}}})
    for name, busy in (("notebook-a", "30"), ("notebook-b", "25")):
        client.CoreV1Api(manual_api).create_namespaced_pod("ml", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": "team"},
                         "annotations": {"gpu-fraction": "0.5", "emulator.gpu-capacity.io/gpu-utilization": busy}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "lab", "image": "jupyter"}]}})
    for _ in range(3):
        emu.tick()
        emu.clock.advance(1)
    util = {s["gpu"]: (s.get("namespace"), s.get("pod", ""), value) for s, value in samples(emu, "DCGM_FI_DEV_GPU_UTIL")}
    namespace, pod, value = util["0"]
    assert namespace == "kai-resource-reservation" and pod.startswith("gpu-reservation-")
    assert value == 55.0  # 30 % + 25 % of the two halves
    assert util["1"] == (None, "", 0.0)  # the other GPU: nobody's
