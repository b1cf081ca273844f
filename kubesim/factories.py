"""Factories of realistic Node and Pod objects and of generated GPU fleets (pure functions).

Also the node lifecycle controller's rule (taints follow spec.unschedulable and conditions).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
import random
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import kubesim.nvidia as nvidia
from kubesim.util import Obj, _gc_paused, _status_str, _timestamp
from kube import gpu as kgpu

_GPU = kgpu.GPU_RESOURCE


_GPU_PRODUCTS: dict[str, tuple[int, str]] = {
    "NVIDIA-A100-SXM4-80GB": (81920, "ampere"),
    "NVIDIA-A100-SXM4-40GB": (40960, "ampere"),
    "NVIDIA-A100-PCIE-40GB": (40960, "ampere"),
    "NVIDIA-A10G": (23028, "ampere"),
    "NVIDIA-H100-80GB-HBM3": (81559, "hopper"),
    "NVIDIA-H200": (143771, "hopper"),
    "NVIDIA-B200": (183359, "blackwell"),
    "NVIDIA-L4": (23034, "ada-lovelace"),
    "NVIDIA-L40S": (46068, "ada-lovelace"),
    "Tesla-T4": (15360, "turing"),
    "Tesla-V100-SXM2-16GB": (16384, "volta"),
}
_FAMILY_HINTS = (
    ("GB200", "blackwell"),
    ("B200", "blackwell"),
    ("B100", "blackwell"),
    ("H100", "hopper"),
    ("H200", "hopper"),
    ("L40", "ada-lovelace"),
    ("L4", "ada-lovelace"),
    ("A100", "ampere"),
    ("A10", "ampere"),
    ("A30", "ampere"),
    ("A40", "ampere"),
    ("T4", "turing"),
    ("V100", "volta"),
)
DEFAULT_GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"

_CONDITION_REASONS = {
    ("Ready", "True"): ("KubeletReady", "kubelet is posting ready status"),
    ("Ready", "False"): ("KubeletNotReady", "container runtime network not ready"),
    ("Ready", "Unknown"): ("NodeStatusUnknown", "Kubelet stopped posting node status."),
    ("MemoryPressure", "False"): ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("MemoryPressure", "True"): ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
    ("DiskPressure", "False"): ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("DiskPressure", "True"): ("KubeletHasDiskPressure", "kubelet has disk pressure"),
    ("PIDPressure", "False"): ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("PIDPressure", "True"): ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
    ("NetworkUnavailable", "False"): ("RouteCreated", "RouteController created a route"),
    ("NetworkUnavailable", "True"): ("NoRouteCreated", "RouteController failed to create a route"),
}
_NODE_CONDITION_TYPES = ("NetworkUnavailable", "MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
_DEFAULT_IMAGE = "registry.example.com/ml/workload:1.0"


def _ip(seed: str, prefix: int) -> str:
    h = zlib.crc32(seed.encode())
    return f"10.{prefix}.{(h >> 8) & 0xFF}.{max(h & 0xFF, 2)}"


def _gpu_family(product: str) -> str:
    if product in _GPU_PRODUCTS:
        return _GPU_PRODUCTS[product][1]
    upper = product.upper()
    return next((family for hint, family in _FAMILY_HINTS if hint in upper), "unknown")


def _node_condition(ctype: str, status: str, ts: str, reason: str = "", message: str = "") -> Obj:
    default_reason, default_message = _CONDITION_REASONS.get((ctype, status), ("", ""))
    return {
        "type": ctype,
        "status": status,
        "lastHeartbeatTime": ts,
        "lastTransitionTime": ts,
        "reason": reason or default_reason,
        "message": message or default_message,
    }


def _sync_node_taints(node: Obj, now: str | None = None) -> None:
    """Emulate the node lifecycle controller: taints follow spec.unschedulable and conditions (a new
    NoExecute or unschedulable taint is stamped ``timeAdded`` = ``now``, default the wall clock)."""
    spec = node.setdefault("spec", {})
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    wanted: list[tuple[str, str]] = []
    if spec.get("unschedulable"):
        wanted.append(("node.kubernetes.io/unschedulable", "NoSchedule"))
    ready = conditions.get("Ready", "True")
    if ready == "False":
        wanted += [("node.kubernetes.io/not-ready", "NoSchedule"), ("node.kubernetes.io/not-ready", "NoExecute")]
    elif ready == "Unknown":
        wanted += [("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")]
    if conditions.get("MemoryPressure") == "True":
        wanted.append(("node.kubernetes.io/memory-pressure", "NoSchedule"))
    if conditions.get("DiskPressure") == "True":
        wanted.append(("node.kubernetes.io/disk-pressure", "NoSchedule"))
    if conditions.get("PIDPressure") == "True":
        wanted.append(("node.kubernetes.io/pid-pressure", "NoSchedule"))
    managed = {
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/pid-pressure",
    }
    taints = [
        t for t in spec.get("taints") or [] if t.get("key") not in managed or (t["key"], t.get("effect")) in wanted
    ]
    present = {(t.get("key"), t.get("effect")) for t in taints}
    for key, effect in wanted:
        if (key, effect) not in present:
            taint: Obj = {"key": key, "effect": effect}
            if effect == "NoExecute" or key == "node.kubernetes.io/unschedulable":
                taint["timeAdded"] = now or _timestamp(None)
            taints.append(taint)
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)


def make_node(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    gpus: int = 0,
    gpu_product: str | None = None,
    gpu_memory_mib: int | None = None,
    cpu: str = "64",
    memory: str = "512Gi",
    ready: bool | str = True,
    unschedulable: bool = False,
    conditions: Mapping[str, bool | str] | Sequence[Mapping[str, Any]] | None = None,
    taints: Sequence[Mapping[str, Any]] | None = None,
    zone: str | None = None,
    instance_type: str | None = None,
    capacity_type: str | None = None,
    created: dt.datetime | str | None = None,
    annotations: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
    mig_config: str | None = None,
    mig_strategy: str | None = None,
    gpu_replicas: int = 1,
    sharing_strategy: str | None = None,
    rename_shared: bool = False,
) -> Obj:
    """Build a realistic core/v1 Node (no uid/resourceVersion: the emulator assigns those).

    GPU nodes (``gpus > 0``) get ``nvidia.com/gpu`` capacity/allocatable and
    the NVIDIA GPU feature discovery labels.  Allocatable equals capacity for
    cpu, memory and GPUs (``pods`` is 110) unless ``allocatable`` overrides
    entries.  ``conditions`` is either ``{type: status}`` or a list of full
    condition dicts (merged by type over the defaults).  Taints for
    unschedulable / not-ready / pressure are added as the node lifecycle
    controller would; ``taints`` adds more.

    How the GPUs are exposed follows NVIDIA's device plugin and GPU feature discovery
    (:func:`kubesim.nvidia.exposure`): whole (the default); ``mig_config`` (a MIG manager layout such as
    ``all-1g.10gb`` or ``all-balanced``) with ``mig_strategy`` ``mixed`` (default: one
    ``nvidia.com/mig-<profile>`` resource per profile, ``nvidia.com/gpu: 0``) or ``single``
    (``nvidia.com/gpu`` counts the slices); ``gpu_replicas`` > 1 for time-slicing (or ``sharing_strategy``
    ``mps``), ``rename_shared`` advertising ``nvidia.com/gpu.shared``. The physical GPUs stay noted in the
    annotation :data:`kubesim.nvidia.HARDWARE_ANNOTATION` (the MIG manager republishes from it).
    """
    ts = _timestamp(created)
    node_labels: dict[str, str] = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
    }
    if zone:
        node_labels["topology.kubernetes.io/zone"] = zone
        node_labels["topology.kubernetes.io/region"] = zone[:-1] if zone[-1:].isalpha() else zone
    if instance_type:
        node_labels["node.kubernetes.io/instance-type"] = instance_type
    if capacity_type:
        node_labels["karpenter.sh/capacity-type"] = capacity_type
    capacity = {
        "cpu": str(cpu),
        "ephemeral-storage": "1073741824Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": str(memory),
        "pods": "110",
    }
    hardware: dict[str, str] = {}
    if gpus > 0:
        product = gpu_product or DEFAULT_GPU_PRODUCT
        mem = gpu_memory_mib if gpu_memory_mib is not None else _GPU_PRODUCTS.get(product, (0, ""))[0]
        family = _gpu_family(product)
        gpu_labels, gpu_resources = nvidia.exposure(
            gpus=gpus, product=product, memory_mib=mem, family=family, mig_config=mig_config,
            mig_strategy=mig_strategy, replicas=gpu_replicas, sharing_strategy=sharing_strategy,
            rename_shared=rename_shared)
        node_labels.update(gpu_labels)
        capacity.update(gpu_resources)
        hardware[nvidia.HARDWARE_ANNOTATION] = nvidia.hardware_note(gpus, product, mem, family)
        if nvidia.layouts_for(product):
            hardware[nvidia.APPLIED_ANNOTATION] = mig_config or nvidia.DISABLED
    node_labels.update(labels or {})
    alloc = dict(capacity)
    alloc["ephemeral-storage"] = "989560464Ki"
    alloc.update(allocatable or {})

    statuses = {ctype: "False" for ctype in _NODE_CONDITION_TYPES}
    statuses["Ready"] = _status_str(ready)
    extra_conditions: dict[str, Obj] = {}
    if isinstance(conditions, Mapping):
        statuses.update({k: _status_str(v) for k, v in conditions.items()})
    elif conditions:
        for cond in conditions:
            statuses[cond["type"]] = _status_str(cond.get("status", "True"))
            extra_conditions[cond["type"]] = dict(cond)
    node_conditions = []
    for ctype, status in statuses.items():
        cond = _node_condition(ctype, status, ts)
        cond.update({k: v for k, v in extra_conditions.get(ctype, {}).items() if k != "status"})
        cond["status"] = status
        node_conditions.append(cond)

    digest = hashlib.sha1(name.encode()).hexdigest()
    internal_ip = _ip(name, 0)
    node: Obj = {
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                **hardware,
                **(annotations or {}),
            },
            "creationTimestamp": ts,
        },
        "spec": {
            "podCIDR": f"10.244.{zlib.crc32(name.encode()) & 0xFF}.0/24",
            "providerID": f"emulator:///{zone or 'zone-a'}/{name}",
        },
        "status": {
            "capacity": capacity,
            "allocatable": alloc,
            "conditions": node_conditions,
            "addresses": [
                {"type": "InternalIP", "address": internal_ip},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": digest[:32],
                "systemUUID": str(uuid.UUID(digest[:32])),
                "bootID": str(uuid.UUID(hashlib.md5(name.encode()).hexdigest())),
                "kernelVersion": "6.1.0-27-cloud-amd64",
                "osImage": "Ubuntu 22.04.5 LTS",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.31.4",
                "kubeProxyVersion": "v1.31.4",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }
    if unschedulable:
        node["spec"]["unschedulable"] = True
    if taints:
        node["spec"]["taints"] = [dict(t) for t in taints]
    _sync_node_taints(node, ts)
    return node


def _container_spec(spec: Mapping[str, Any]) -> Obj:
    resources = dict(spec.get("resources") or {})
    requests = {k: str(v) for k, v in (spec.get("requests") or resources.get("requests") or {}).items()}
    limits = {k: str(v) for k, v in (spec.get("limits") or resources.get("limits") or {}).items()}
    # Extended resources (GPUs) must have limits == requests on a real API server.
    for res in set(requests) | set(limits):
        if "/" in res and not res.startswith("hugepages"):
            requests[res] = limits[res] = limits.get(res) or requests[res]
    out: Obj = {"name": spec.get("name", "main"), "image": spec.get("image", _DEFAULT_IMAGE)}
    res_out: Obj = {}
    if limits:
        res_out["limits"] = limits
    if requests:
        res_out["requests"] = requests
    out["resources"] = res_out
    out["imagePullPolicy"] = "IfNotPresent"
    return out


def _qos_class(containers: Sequence[Mapping[str, Any]]) -> str:
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or req.get(r, lim[r]) != lim[r]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _pod_status(
    namespace: str,
    name: str,
    spec: Mapping[str, Any],
    phase: str,
    ready: bool,
    start: str,
    now: str | None = None,
    scheduling_message: str = "",
) -> Obj:
    """A status consistent with phase/readiness/node, as the kubelet would report it (an unbound pod:
    PodScheduled=False, Unschedulable, with the scheduler's ``scheduling_message`` when given)."""
    now = now or start
    node = spec.get("nodeName")
    containers = spec.get("containers") or []
    status: Obj = {"phase": phase}
    if not node:
        condition: Obj = {
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": start,
            "reason": "Unschedulable",
        }
        if scheduling_message:
            condition["message"] = scheduling_message
        status["conditions"] = [condition]
        status["qosClass"] = _qos_class(containers)
        return status
    running = phase == "Running"
    is_ready = running and ready
    terminated = phase in ("Succeeded", "Failed")

    def cond(ctype: str, ok: bool, reason: str | None = None) -> Obj:
        c: Obj = {"type": ctype, "status": "True" if ok else "False", "lastProbeTime": None, "lastTransitionTime": now}
        if not ok and reason:
            c["reason"] = reason
        return c

    not_ready_reason = "PodCompleted" if terminated else "ContainersNotReady"
    status["conditions"] = [
        cond("Initialized", True),
        cond("Ready", is_ready, not_ready_reason),
        cond("ContainersReady", is_ready, not_ready_reason),
        cond("PodScheduled", True),
    ]
    status["hostIP"] = _ip(node, 0)
    if not terminated:
        pod_ip = _ip(f"{namespace}/{name}", 128)
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    status["startTime"] = start
    statuses = []
    for c in containers:
        digest = hashlib.sha256(f"{namespace}/{name}/{c.get('name')}".encode()).hexdigest()
        if phase == "Pending":
            state: Obj = {"waiting": {"reason": "ContainerCreating"}}
        elif terminated:
            code = 0 if phase == "Succeeded" else 1
            state = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": start,
                    "finishedAt": now,
                    "containerID": f"containerd://{digest}",
                }
            }
        else:
            state = {"running": {"startedAt": start}}
        statuses.append(
            {
                "name": c.get("name"),
                "state": state,
                "ready": is_ready,
                "restartCount": 0,
                "image": c.get("image", _DEFAULT_IMAGE),
                "imageID": "",
                "containerID": f"containerd://{digest}" if phase != "Pending" else "",
                "started": running,
            }
        )
    status["containerStatuses"] = statuses
    status["qosClass"] = _qos_class(containers)
    return status


def make_pod(
    name: str,
    namespace: str = "default",
    *,
    node: str | None = None,
    phase: str = "Running",
    containers: Sequence[Mapping[str, Any]] | None = None,
    init_containers: Sequence[Mapping[str, Any]] | None = None,
    overhead: Mapping[str, str] | None = None,
    priority: int | None = None,
    priority_class: str | None = None,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    created: dt.datetime | str | None = None,
    annotations: Mapping[str, str] | None = None,
    scheduling_message: str = "",
) -> Obj:
    """Build a realistic core/v1 Pod (no uid/resourceVersion: the emulator assigns those).

    ``containers``/``init_containers`` are ``[{"name", "requests", "limits",
    "image"?}]`` (a ``resources`` dict is accepted too); resource values may be
    ints.  GPU (extended resource) requests are mirrored into limits as the API
    server requires.  The status (conditions, containerStatuses, IPs,
    qosClass) is derived from ``phase``, ``ready`` and ``node``; an unbound pod carries the
    scheduler's ``scheduling_message`` (e.g. ``0/30 nodes are available: 30 Insufficient nvidia.com/gpu.``)
    in its PodScheduled=False condition when given.
    """
    ts = _timestamp(created)
    specs = [_container_spec(c) for c in (containers or [{"name": "main"}])]
    spec: Obj = {"containers": specs}
    if init_containers:
        spec["initContainers"] = [_container_spec(c) for c in init_containers]
    spec.update(
        {
            "restartPolicy": "Never" if phase in ("Succeeded", "Failed") else "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        }
    )
    if any(kgpu.GPU_RESOURCE in (c["resources"].get("requests") or {}) for c in specs):
        spec["tolerations"].append({"key": kgpu.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    if node:
        spec["nodeName"] = node
    spec["priority"] = int(priority) if priority is not None else 0
    if priority_class:
        spec["priorityClassName"] = priority_class
    if overhead:
        spec["overhead"] = {k: str(v) for k, v in overhead.items()}
    metadata: Obj = {"name": name, "namespace": namespace, "creationTimestamp": ts}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"metadata": metadata, "spec": spec, "status": _pod_status(namespace, name, spec, phase, ready, ts,
                                                                     scheduling_message=scheduling_message)}


_POOLS = (
    # (pool, product, gpus, instance type, capacity type, cpu, memory)
    ("a100-train", "NVIDIA-A100-SXM4-80GB", 8, "p4de.24xlarge", "on-demand", "96", "1152Gi"),
    ("h100-train", "NVIDIA-H100-80GB-HBM3", 8, "p5.48xlarge", "on-demand", "192", "2048Gi"),
    ("a100-spot", "NVIDIA-A100-SXM4-40GB", 8, "p4d.24xlarge", "spot", "96", "1152Gi"),
    ("l4-inference", "NVIDIA-L4", 4, "g6.12xlarge", "on-demand", "48", "192Gi"),
    ("t4-batch", "Tesla-T4", 1, "g4dn.xlarge", "spot", "4", "16Gi"),
    ("cpu-general", None, 0, "m7i.4xlarge", "on-demand", "16", "64Gi"),
)
# With ``shared=True``, pools whose GPUs are shared (kubesim.nvidia): an A100 80GB pool in MIG mixed
# ``all-balanced``, an H100 pool in MIG single ``all-1g.10gb`` and an L4 pool time-sliced 4 ways.
_SHARED_POOLS = (
    ("a100-mig", "NVIDIA-A100-SXM4-80GB", 8, "p4de.24xlarge", "on-demand", "96", "1152Gi",
     {"mig_config": "all-balanced", "mig_strategy": "mixed"}),
    ("h100-mig", "NVIDIA-H100-80GB-HBM3", 8, "p5.48xlarge", "on-demand", "192", "2048Gi",
     {"mig_config": "all-1g.10gb", "mig_strategy": "single"}),
    ("l4-shared", "NVIDIA-L4", 4, "g6.12xlarge", "on-demand", "48", "192Gi", {"gpu_replicas": 4}),
)
_NAMESPACES = ("ml-training", "inference", "research", "batch", "data-eng", "kube-system")
_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


def generate_cluster(nodes: int = 40, pods: int | None = None, *, seed: int = 0,
                     shared: bool = False) -> tuple[list[Obj], list[Obj]]:
    """A deterministic, plausible GPU fleet: ``nodes`` nodes across six pools and ``pods`` pods (with
    ``shared``, nine pools: three share their GPUs — MIG mixed, MIG single, time-slicing — and their pods
    ask slices and replicas).

    Pods (default: 8 per node) are spread over nodes, request whole GPUs
    without over-committing a node, and a few are Pending (unscheduled) or
    Succeeded.  Useful for the demo and for benchmarks (5,000 nodes / 150,000
    pods take a few seconds).  See :func:`iter_cluster` to stream the pods.
    """
    with _gc_paused():
        node_objs, pod_iter = iter_cluster(nodes, pods, seed=seed, shared=shared)
        return node_objs, list(pod_iter)


def iter_cluster(nodes: int = 40, pods: int | None = None, *, seed: int = 0,
                 shared: bool = False) -> tuple[list[Obj], Iterator[Obj]]:
    """Like :func:`generate_cluster` (same objects), but the pods come from a lazy iterator.

    ``emu.load(nodes=nodes, pods=pod_iter)`` then never holds all pod dicts at
    once, which keeps a 150,000-pod emulator process near 450 MiB instead of
    over 1 GiB (freed dicts leave the allocator's arenas fragmented).
    """
    rng = random.Random(seed)
    created = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    node_objs: list[Obj] = []
    free_gpus: list[dict[str, int]] = []
    pools = [(*p, {}) for p in _POOLS] + (list(_SHARED_POOLS) if shared else [])
    for i in range(nodes):
        pool, product, gpus, itype, ctype, cpu, mem, exposure = pools[i % len(pools)]
        node_objs.append(
            make_node(
                f"{pool}-{i:05d}",
                labels={"karpenter.sh/nodepool": pool},
                gpus=gpus,
                gpu_product=product,
                cpu=cpu,
                memory=mem,
                zone=_ZONES[i % len(_ZONES)],
                instance_type=itype,
                capacity_type=ctype,
                created=created + dt.timedelta(minutes=i),
                ready=rng.random() > 0.02,
                **exposure,
            )
        )
        allocatable = node_objs[-1]["status"]["allocatable"]
        free_gpus.append({name: int(value) for name, value in allocatable.items()
                          if nvidia.is_exposure_resource(name) and int(value) > 0}
                         if exposure else {_GPU: gpus})
    node_names = [n["metadata"]["name"] for n in node_objs]
    shared_nodes = frozenset(i for i in range(nodes) if pools[i % len(pools)][-1])
    return node_objs, _iter_pods(nodes * 8 if pods is None else pods, node_names, free_gpus, rng, created,
                                 shared_nodes)


def _iter_pods(
    count: int, node_names: list[str], free_gpus: list[dict[str, int]], rng: random.Random, created: dt.datetime,
    shared_nodes: frozenset[int] = frozenset(),
) -> Iterator[Obj]:
    for j in range(count):
        ns = _NAMESPACES[j % len(_NAMESPACES)]
        name = f"job-{j:06d}"
        labels = {"app": name[:9], "team": ns}
        roll = rng.random()
        if not node_names or roll < 0.02:
            containers = [{"name": "main", "requests": {"cpu": "4", "memory": "16Gi", kgpu.GPU_RESOURCE: 1}}]
            yield make_pod(name, ns, phase="Pending", containers=containers, labels=labels, created=created)
            continue
        n = rng.randrange(len(node_names))
        free = free_gpus[n]
        if n not in shared_nodes:
            resource, gpu = _GPU, min(rng.choice((1, 1, 2, 4, 8)), free.get(_GPU, 0))  # never over-commit
        else:  # a shared node: one slice or one replica of what is left
            left = sorted(name for name, value in free.items() if value > 0)
            resource, gpu = (rng.choice(left), 1) if left else (_GPU, 0)
        if gpu:
            free[resource] -= gpu
        requests: dict[str, Any] = {"cpu": str(rng.choice((1, 2, 4, 8))), "memory": f"{rng.choice((4, 8, 16, 32))}Gi"}
        if gpu:
            requests[resource] = gpu
        yield make_pod(
            name,
            ns,
            node=node_names[n],
            phase="Succeeded" if roll > 0.97 else "Running",
            containers=[{"name": "main", "requests": requests, "limits": dict(requests)}],
            priority=rng.choice((0, 0, 1000, 100000)),
            labels=labels,
            created=created,
        )


