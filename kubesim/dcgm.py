"""The NVIDIA DCGM exporter of the emulated GPU nodes: ``GET /dcgm/metrics`` (Prometheus text format).

What a Prometheus scraping every node's ``nvidia-dcgm-exporter`` pod would gather, served from one
endpoint: per GPU device of every GPU node, the exporter's default fields

- ``DCGM_FI_DEV_GPU_UTIL`` (gauge, %), ``DCGM_FI_DEV_FB_USED`` and ``DCGM_FI_DEV_FB_FREE`` (gauge, MiB),
- ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (gauge, ratio 0..1),

with the exporter's label set: ``gpu`` (index), ``UUID``, ``pci_bus_id``, ``device`` (``nvidia<i>``),
``modelName``, ``Hostname`` (the node), ``DCGM_FI_DRIVER_VERSION`` and, for a device allocated to a
pod (its Kubernetes pod-resources mapping), ``container``, ``namespace`` and ``pod``. A device no pod
holds reads 0 and carries no pod labels.

MIG (dcgm-exporter ``internal/pkg/rendermetrics/render_metrics.go``, ``collector/gpu_collector.go``): a MIG
instance is a series of its own, labelled as its GPU plus ``GPU_I_PROFILE`` (the profile, ``1g.10gb``) and
``GPU_I_ID`` (the GPU instance), its memory the profile's. An instance has no ``DCGM_FI_DEV_GPU_UTIL``: DCGM
does not measure it for MIG instances (NVIDIA/dcgm-exporter issues #216 and #430, its maintainers: "not
supported for MIG configurations", use ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, "which is reported for MIG
devices"); its activity is ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (0..1), a profiling (DCP) field the exporter's
default counters (``etc/default-counters.csv``) list and whole GPUs export as well. The instances of the layout the MIG manager
applied (:mod:`kubesim.nvidia`) are held by the pods asking ``nvidia.com/mig-<profile>`` (mixed) or
``nvidia.com/gpu`` (single) in order. A time-sliced or MPS GPU is one device whose replicas its pods
share (its utilization the sum of theirs, labelled with the first); a KAI shared GPU is held by its
reservation pod, as the kubelet's pod-resources report it (the device plugin gave the device to it), its
utilization and memory those of the pods of its ``runai-gpu-group``.

Values follow the emulated workloads, deterministically: the Running pods of a node get its devices
in order (oldest pod first, then namespace and name), as many as they request ``nvidia.com/gpu``
(``kube.requests``: a pod whose quantities are none holds no device and is reported). A
pod's utilization is its annotation ``emulator.gpu-capacity.io/gpu-utilization`` (percent, 0..100)
when present (the demo's idle project, ``set_pod_gpu_utilization`` over the control surface), else a
stable value derived from its name (35..95 %); the memory it holds is the annotation
``emulator.gpu-capacity.io/gpu-memory-used-mib`` when present, else a share of the device's memory
that grows with its utilization. A node is exported while a Running ``app=nvidia-dcgm-exporter`` pod
runs on it, or when the cluster runs no such pod anywhere (an emulator without the GPU operator's
operands); a node whose Ready condition is Unknown (unreachable) is not scraped.
"""

from __future__ import annotations

import hashlib
import uuid
import zlib
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import orjson

import kubesim.nvidia as nvidia
from kube import gpu as kgpu
from kube import requests as kube_requests
from kube.quantity import QuantityError, parse_quantity
from kubesim.reports import unreadable
from kubesim.util import Obj

UTILIZATION_ANNOTATION = "emulator.gpu-capacity.io/gpu-utilization"
MEMORY_USED_ANNOTATION = "emulator.gpu-capacity.io/gpu-memory-used-mib"
DRIVER_VERSION = "550.127.05"
EXPORTER_APP = "nvidia-dcgm-exporter"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_GPU = kube_requests.GPU
_DEFAULT_MEMORY_MIB = 16384

# (field, help) in the order dcgm-exporter's default counters list them.
FIELDS: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."),
)


def gpu_uuid(node: str, index: int) -> str:
    """The stable UUID of device ``index`` of ``node`` (``GPU-xxxxxxxx-...``, as nvidia-smi prints it)."""
    return "GPU-" + str(uuid.UUID(hashlib.md5(f"{node}/{index}".encode()).hexdigest()))


def model_name(product: str) -> str:
    """NVML's model name from GPU feature discovery's product label (which replaces spaces with '-')."""
    return product.replace("-", " ", 1) if product else "NVIDIA GPU"


def _label_int(value: Any) -> int:
    """A GPU feature discovery label's number (`nvidia.com/gpu.memory`), 0 when it is none."""
    try:
        return int(str(value or "0"))
    except ValueError:
        return 0


def pod_gpu_request(pod: Obj) -> int:
    """GPU devices a pod holds (its effective `nvidia.com/gpu` request, kube.requests). Raises QuantityError."""
    return int(kube_requests.pod_requests(pod).get(_GPU, 0))


def pod_device_requests(pod: Obj) -> dict[str, int]:
    """The devices a pod holds, per device-plugin resource (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``,
    ``nvidia.com/mig-<profile>``). Raises QuantityError."""
    return {name: int(value) for name, value in kube_requests.pod_requests(pod).items()
            if nvidia.is_exposure_resource(name) and value > 0}


def _gpu_container(pod: Obj) -> str:
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        if any(nvidia.is_exposure_resource(name) and value for name, value in asked.items()):
            return str(container.get("name") or "")
    return ""


def _node_devices(meta: Obj, status: Obj) -> tuple[list[tuple[int, str, int, str]], int, int]:
    """What the exporter sees on a node: [(GPU index, MIG profile or "", GPU instance id or 0, the resource a
    pod holds it by)], physical GPUs, replicas per GPU (time-slicing/MPS). MIG instances come from the layout
    the MIG manager applied (``kubesim.nvidia``), numbered per GPU from 1 in the layout's order."""
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    hardware = nvidia.parse_hardware(annotations.get(nvidia.HARDWARE_ANNOTATION, ""))
    capacity = status.get("capacity") or {}
    if hardware is None:
        count = int(parse_quantity(capacity.get(_GPU) or 0))
        return [(i, "", 0, _GPU) for i in range(count)], count, 1
    gpus, product = hardware[0], hardware[1]
    applied = annotations.get(nvidia.APPLIED_ANNOTATION) or nvidia.DISABLED
    slices = nvidia.layout(product, applied) or {}
    strategy = labels.get(nvidia.MIG_STRATEGY_LABEL) or "mixed"
    if slices:
        out = []
        for index in range(gpus):
            instance = 0
            for profile, per_gpu in sorted(slices.items(), key=lambda kv: -(nvidia.parse_profile(kv[0]) or (0, 0))[0]):
                for _ in range(per_gpu):
                    instance += 1
                    out.append((index, profile, instance, _GPU if strategy == "single" else nvidia.mig_resource(profile)))
        return out, gpus, 1
    try:
        replicas = max(1, int(labels.get(nvidia.REPLICAS_LABEL) or 1))
    except ValueError:
        replicas = 1
    resource = nvidia.GPU_SHARED if nvidia.GPU_SHARED in capacity else _GPU
    return [(i, "", 0, resource) for i in range(gpus)], gpus, replicas


def pod_utilization(pod: Obj) -> float:
    """The pod's GPU utilization in %: its annotation, else a stable value from its name (35..95)."""
    meta = pod.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(UTILIZATION_ANNOTATION)
    if raw is not None:
        try:
            return min(100.0, max(0.0, float(raw)))
        except ValueError:
            pass
    return float(35 + zlib.crc32(f"{meta.get('namespace')}/{meta.get('name')}".encode()) % 61)


def pod_memory_used(pod: Obj, total_mib: int, utilization: float) -> int:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(MEMORY_USED_ANNOTATION)
    if raw is not None:
        try:
            return min(total_mib, max(0, int(float(raw))))
        except ValueError:
            pass
    return int(total_mib * (0.15 + 0.6 * utilization / 100))


def _fmt(value: float) -> str:
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6f}".rstrip("0")


def _labels(pairs: list[tuple[str, str]]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return ",".join(f'{k}="{esc(v)}"' for k, v in pairs)


def devices(nodes: list[Obj], pods: list[Obj],
            report: Callable[[Obj, object], None] = lambda obj, error: None) -> list[dict[str, Any]]:
    """Every exported GPU device or MIG instance: ``{"node", "gpu", "uuid", "model", "memory_mib",
    "utilization", "fb_used", "namespace", "pod", "container", "mig_profile", "gpu_instance", "labels"}``
    (what the exporter serves, as data). A pod or node whose GPU quantity is none holds or has no device,
    and goes to `report`."""
    exporter_nodes: set[str] = set()
    any_exporter = False
    by_node: dict[str, list[Obj]] = defaultdict(list)
    held: dict[int, dict[str, int]] = {}
    sharers: dict[str, list[Obj]] = defaultdict(list)  # KAI GPU group -> its running fraction pods
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if not node or status.get("phase") != "Running":
            continue
        pod_md = pod.get("metadata") or {}
        group = (pod_md.get("labels") or {}).get(kgpu.GPU_GROUP_LABEL)
        if group and pod_md.get("namespace") != kgpu.RESERVATION_NAMESPACE:
            sharers[group].append(pod)
        if ((pod.get("metadata") or {}).get("labels") or {}).get("app") == EXPORTER_APP:
            any_exporter = True
            exporter_nodes.add(node)
        try:
            held[id(pod)] = pod_device_requests(pod)
        except QuantityError as exc:
            report(pod, exc)
            continue
        if held[id(pod)]:
            by_node[node].append(pod)
    out: list[dict[str, Any]] = []
    for node in nodes:
        meta, status = node.get("metadata") or {}, node.get("status") or {}
        name = meta.get("name") or ""
        try:
            slots, physical, replicas = _node_devices(meta, status)
        except QuantityError as exc:
            report({"kind": "Node", **node}, f"status.capacity[{_GPU}]: {exc}")
            continue
        if physical <= 0 or not slots or (any_exporter and name not in exporter_nodes):
            continue
        if any(c.get("type") == "Ready" and c.get("status") == "Unknown" for c in status.get("conditions") or []):
            continue
        labels = meta.get("labels") or {}
        hardware = nvidia.parse_hardware((meta.get("annotations") or {}).get(nvidia.HARDWARE_ANNOTATION, ""))
        memory = (hardware[2] if hardware else 0) or _label_int(labels.get("nvidia.com/gpu.memory")) or _DEFAULT_MEMORY_MIB
        model = model_name(hardware[1] if hardware else labels.get("nvidia.com/gpu.product") or "")
        # Per resource, the pods holding its devices in order (oldest first), one entry per device/replica.
        holders: dict[str, list[Obj]] = defaultdict(list)
        for pod in sorted(by_node.get(name, ()), key=lambda p: (
                (p.get("metadata") or {}).get("creationTimestamp") or "", p["metadata"].get("namespace") or "",
                p["metadata"].get("name") or "")):
            for resource, count in held[id(pod)].items():
                holders[resource].extend([pod] * count)
        taken: dict[str, int] = defaultdict(int)
        for index, profile, instance, resource in slots:
            sharing: list[Obj] = []
            for _ in range(replicas):  # time-slicing/MPS: the replicas of one GPU, handed out in order
                at = taken[resource]
                taken[resource] += 1
                if at < len(holders[resource]):
                    sharing.append(holders[resource][at])
            pod = sharing[0] if sharing else None
            size = nvidia.profile_memory_mib(profile) if profile else memory
            dev: dict[str, Any] = {"node": name, "gpu": index, "uuid": gpu_uuid(name, index), "model": model,
                                   "memory_mib": size, "utilization": 0.0, "fb_used": 0,
                                   "namespace": "", "pod": "", "container": "", "mig_profile": profile,
                                   "gpu_instance": instance if profile else None}
            if pod is not None:
                pod_md = pod.get("metadata") or {}
                if pod_md.get("namespace") == kgpu.RESERVATION_NAMESPACE:
                    # A KAI shared GPU: the reservation pod holds it; what runs on it is its sharers' work.
                    working = sharers.get((pod_md.get("labels") or {}).get(kgpu.GPU_GROUP_LABEL, ""), [])
                else:
                    working = sharing
                util = min(100.0, sum(pod_utilization(p) for p in working))
                dev.update(utilization=util, fb_used=min(size, sum(pod_memory_used(p, size, pod_utilization(p))
                                                                   for p in working)),
                           namespace=pod["metadata"].get("namespace") or "", pod=pod["metadata"].get("name") or "",
                           container=_gpu_container(pod))
            pairs = [("gpu", str(index)), ("UUID", dev["uuid"]), ("pci_bus_id", f"00000000:{0x10 + index:02X}:00.0"),
                     ("device", f"nvidia{index}"), ("modelName", model)]
            if profile:
                pairs += [("GPU_I_PROFILE", profile), ("GPU_I_ID", str(instance))]
            pairs += [("Hostname", name), ("DCGM_FI_DRIVER_VERSION", DRIVER_VERSION)]
            if pod is not None:
                pairs += [("container", dev["container"]), ("namespace", dev["namespace"]), ("pod", dev["pod"])]
            dev["labels"] = _labels(pairs)
            out.append(dev)
    return out


def render(devs: list[dict[str, Any]]) -> bytes:
    """The exposition text of ``devices()``: # HELP / # TYPE then one sample per device, per field (a MIG
    instance: every field but ``DCGM_FI_DEV_GPU_UTIL``)."""
    lines: list[str] = []
    for field, help_text in FIELDS:
        lines.append(f"# HELP {field} {help_text}")
        lines.append(f"# TYPE {field} gauge")
        for dev in devs:
            if field == "DCGM_FI_DEV_GPU_UTIL":
                if dev["mig_profile"]:
                    continue  # not measured for a MIG instance: its GR_ENGINE_ACTIVE says how busy it is
                value: float = dev["utilization"]
            elif field == "DCGM_FI_DEV_FB_FREE":
                value = dev["memory_mib"] - dev["fb_used"]
            elif field == "DCGM_FI_DEV_FB_USED":
                value = dev["fb_used"]
            else:
                value = round(dev["utilization"] / 100, 6)
            lines.append(f"{field}{{{dev['labels']}}} {_fmt(value)}")
    return ("\n".join(lines) + "\n").encode()


class DcgmMixin:
    """Part of :class:`kubesim.KubeEmulator`: the DCGM exporter's view of the emulated GPUs."""

    _dcgm_cache: tuple[int, list[dict[str, Any]], bytes] | None = None

    def _dcgm_state(self) -> tuple[list[dict[str, Any]], bytes]:
        with self._lock:  # type: ignore[attr-defined]
            rv = self._rv  # type: ignore[attr-defined]
            cached = self._dcgm_cache
            if cached is not None and cached[0] == rv:
                return cached[1], cached[2]
            nodes_store = self._stores["nodes"]  # type: ignore[attr-defined]
            pods_store = self._stores["pods"]  # type: ignore[attr-defined]
            node_data = [nodes_store.entries[k][0] for k in nodes_store.keys]
            pod_data = [pods_store.entries[k][0] for k in pods_store.keys]
        nodes = [orjson.loads(b) for b in node_data]
        pods = [orjson.loads(b) for b in pod_data]
        devs = devices(nodes, pods, lambda obj, error: unreadable(self, obj, error, "dcgm-exporter"))
        text = render(devs)
        with self._lock:  # type: ignore[attr-defined]
            self._dcgm_cache = (rv, devs, text)
        return devs, text

    def dcgm_metrics(self) -> str:
        """The text ``GET /dcgm/metrics`` serves (Prometheus exposition format)."""
        return self._dcgm_state()[1].decode()

    def dcgm_devices(self) -> list[dict[str, Any]]:
        """Every exported GPU device as data (node, gpu index, uuid, model, utilization, fb_used, pod...)."""
        return [{k: v for k, v in d.items() if k != "labels"} for d in self._dcgm_state()[0]]

    def set_pod_gpu_utilization(self, namespace: str, name: str, utilization: float,
                                memory_used_mib: int | None = None) -> Obj:
        """Set what the exporter reports for a pod's GPUs (its annotations; ``None`` memory: derived)."""
        annotations: dict[str, Any] = {UTILIZATION_ANNOTATION: _fmt(float(utilization)),
                                       MEMORY_USED_ANNOTATION: None if memory_used_mib is None else str(int(memory_used_mib))}
        return self.update_pod(namespace, name, {"metadata": {"annotations": annotations}})  # type: ignore[attr-defined]
