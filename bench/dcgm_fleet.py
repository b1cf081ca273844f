"""An hour of DCGM-exporter samples of a generated fleet (kubesim.generate_cluster), held by a REAL
Prometheus, for bench/pages.py: every node given `gpus_per_node` GPUs (5,000 nodes x 8 = 40,000), the
Running pods holding devices in order as the emulator's exporter assigns them, and a `cluster` label
per fleet (one Prometheus for several clusters, told apart by the clusters' extra label matchers).

Utilization is deterministic: about one GPU a pod holds in seven idles (0-3 %), the others vary
between 20 and 95 %; an unheld GPU reads 0.
"""
from __future__ import annotations

import math
import random
import tempfile
import time
from pathlib import Path
from typing import Iterable

from kubesim.dcgm_history import Gpu, create_blocks, write_openmetrics
from kube import gpu as kube_gpu

GPU = kube_gpu.GPU_RESOURCE
DEFAULT_PRODUCT = "NVIDIA-A100-SXM4-80GB"
MEMORY_MIB = {"NVIDIA-A100-SXM4-80GB": 81920, "NVIDIA-H100-80GB-HBM3": 81559, "NVIDIA-A100-SXM4-40GB": 40960,
              "NVIDIA-L4": 23034, "Tesla-T4": 15360}


def widen(node_objs: list[dict], gpus_per_node: int) -> None:
    """Give every node `gpus_per_node` GPUs (capacity, allocatable and GPU feature discovery's labels)."""
    for node in node_objs:
        labels = node["metadata"].setdefault("labels", {})
        product = labels.get("nvidia.com/gpu.product") or DEFAULT_PRODUCT
        labels.update({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
                       "nvidia.com/gpu.count": str(gpus_per_node),
                       "nvidia.com/gpu.memory": str(MEMORY_MIB.get(product, 81920))})
        for key in ("capacity", "allocatable"):
            node["status"][key][GPU] = str(gpus_per_node)


def _pod_gpus(pod: dict) -> int:
    """Devices of nvidia.com/gpu the pod holds; a pod holding MIG slices or replicas (any other GPU
    resource) counts as 1: on a shared node it is one of the device's holders."""
    total, shared = 0, False
    for container in pod["spec"].get("containers", []):
        resources = container.get("resources") or {}
        total += int(str((resources.get("limits") or {}).get(GPU) or (resources.get("requests") or {}).get(GPU) or 0))
        shared = shared or any(kube_gpu.is_gpu_resource(k) and k != GPU for k in (resources.get("requests") or {}))
    return total or int(shared)


class _Util:
    """Utilization of one GPU at time t: idle (0-3 %) or a busy wave between 20 and 95 %."""

    __slots__ = ("idle", "base", "phase")

    def __init__(self, rng: random.Random, held: bool):
        self.idle = not held or rng.random() < 1 / 7
        self.base = rng.uniform(20, 95)
        self.phase = rng.uniform(0, 2 * math.pi)

    def __call__(self, t: float) -> float:
        if self.idle:
            return (t // 60 + self.phase * 10) % 4
        return max(20.0, min(95.0, self.base + 15 * math.sin(t / 600 + self.phase)))


def fleet_gpus(node_objs: list[dict], pod_objs: Iterable[dict], *, cluster: str, seed: int = 1) -> list[Gpu]:
    rng = random.Random(seed)
    holders: dict[str, list[tuple[str, str, int]]] = {}
    for pod in pod_objs:
        node = pod["spec"].get("nodeName")
        gpus = _pod_gpus(pod) if node and pod["status"].get("phase") == "Running" else 0
        if gpus:
            holders.setdefault(node, []).append((pod["metadata"]["namespace"], pod["metadata"]["name"], gpus))
    out = []
    for node in node_objs:
        name = node["metadata"]["name"]
        inventory = kube_gpu.node_gpus(node["metadata"].get("labels"), node["status"].get("capacity"))
        # A shared node's exporter reports its physical devices (MIG slices or replicas are not devices).
        count = (inventory.physical if inventory.exposure not in (kube_gpu.NONE, kube_gpu.WHOLE)
                 else int(node["status"]["allocatable"].get(GPU, 0)))
        product = node["metadata"]["labels"].get("nvidia.com/gpu.product", DEFAULT_PRODUCT)
        devices: list[tuple[str, str]] = []
        for namespace, pod, gpus in holders.get(name, []):
            if count != int(node["status"]["allocatable"].get(GPU, 0)):
                gpus = 1  # a shared node: one device each for its holders, in order (time-sliced: 4 per GPU)
            devices += [(namespace, pod)] * gpus
        for index in range(count):
            namespace, pod = devices[index] if index < len(devices) else ("", "")
            gpu = Gpu(name, index, product.replace("-", " ", 1), MEMORY_MIB.get(product, 81920),
                      _Util(rng, bool(pod)), namespace=namespace, pod=pod)
            gpu.extra = f'cluster="{cluster}"'
            out.append(gpu)
    return out


def backfill(gpus: list[Gpu], *, seconds: float = 3600, interval: float = 30, ahead: float = 0,
             workdir: Path | None = None, log=print) -> Path:
    """Blocks of the last `seconds` of samples (GPU_UTIL, FB_USED, FB_FREE) of `gpus`, and of the next
    `ahead` seconds (so that a benchmark running that long after the backfill still reads current
    samples: an instant query sees only the last 5 minutes); returns the TSDB dir."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="bench-dcgm-"))
    source = workdir / "samples.om"
    end = time.time() + ahead
    started = time.perf_counter()
    count = write_openmetrics(source, gpus, start=end - ahead - seconds, end=end, interval=interval,
                              metrics=("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"))
    log(f"wrote {count:,} samples of {len(gpus):,} GPUs ({source.stat().st_size / 2**20:,.0f} MiB) in "
        f"{time.perf_counter() - started:.0f}s")
    started = time.perf_counter()
    create_blocks(source, workdir / "tsdb")
    source.unlink()
    log(f"promtool created the blocks in {time.perf_counter() - started:.0f}s")
    return workdir / "tsdb"
