"""How the console reads Kubernetes objects into its own terms: node facts and not-ready reasons, the
resources it accounts (`Resources`), pool membership and moves between pools.

Pure functions over the JSON the API server sends (dicts), with no Django import (docs/concepts.md#not-ready, #workloads).
Kubernetes' own rules — quantities, label syntax, a pod's effective requests, the API's refusals — are the
package `kube` (`kube.quantity`, `kube.labels`, `kube.requests`, `kube.client`); this module only turns
their answers into the console's figures.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Decimal
from typing import Any, Iterable, Mapping

from kube import gpu as kube_gpu
from kube import requests as kube_requests
from kube import wellknown

GPU_RESOURCE = kube_requests.GPU
STORAGE_RESOURCE = kube_requests.EPHEMERAL_STORAGE

# The console's own pool label: stamped on every node from the membership the console computes (when
# an enforcer is on), so that a scheduler selects a pool by one key, whatever label defines the pool.
CONSOLE_POOL_LABEL = "console.gpu-capacity.io/node-pool"


@dataclass(frozen=True)
class Resources:
    """An amount of the resources the console accounts: CPU millicores, memory bytes, GPUs, and
    ephemeral storage bytes (`ephemeral-storage`, held against K8_STORAGE rules)."""

    cpu_millis: int = 0
    memory_bytes: int = 0
    gpus: Decimal = Decimal(0)
    storage_bytes: int = 0

    def __add__(self, other: "Resources") -> "Resources":
        return Resources(
            self.cpu_millis + other.cpu_millis, self.memory_bytes + other.memory_bytes, self.gpus + other.gpus,
            self.storage_bytes + other.storage_bytes,
        )

    @classmethod
    def from_amounts(cls, amounts: Mapping[str, Decimal]) -> "Resources":
        """From amounts per resource name (kube.requests): CPU cores and bytes rounded up to whole units."""
        def whole(amount: Decimal | None, scale: int = 1) -> int:
            return int((amount * scale).to_integral_value(rounding=ROUND_CEILING)) if amount is not None else 0

        return cls(
            cpu_millis=whole(amounts.get(kube_requests.CPU), 1000),
            memory_bytes=whole(amounts.get(kube_requests.MEMORY)),
            gpus=amounts.get(GPU_RESOURCE, Decimal(0)),
            storage_bytes=whole(amounts.get(STORAGE_RESOURCE)),
        )

    @classmethod
    def from_map(cls, resources: Mapping[str, Any] | None) -> "Resources":
        """From a ResourceList (`{name: quantity}`, e.g. a Node's allocatable). Raises QuantityError."""
        return cls.from_amounts(kube_requests.resource_list(resources or {}, "resources"))


def pod_resources(pod: Mapping[str, Any]) -> Resources:
    """The pod's effective requests (kube.requests.pod_requests, docs/concepts.md#workloads) in the console's units; GPUs in
    GPU-equivalents as on a whole-GPU node (kube.gpu.pod_gpu_request: MIG slices their share, KAI fractions
    their value; `pod_gpu_request` with `kube.gpu.demand_on` prices them on a node)."""
    return pod_resources_and_request(pod)[0]


def pod_resources_and_request(pod: Mapping[str, Any]) -> tuple[Resources, dict[str, Any]]:
    """(`pod_resources`, the pod's GPU request as stored: `kube.gpu.request_record`)."""
    amounts = kube_requests.pod_requests(pod)
    demand = kube_gpu.pod_gpu_request(pod, requests=amounts)
    resources = Resources.from_amounts(amounts)
    return replace(resources, gpus=demand.gpus), kube_gpu.request_record(demand)


def gpu_priced(record: Mapping[str, Any] | None, node: kube_gpu.NodeGpus | None = None) -> tuple[Decimal, str, Decimal]:
    """A pod's GPU request as stored (`Pod.gpu_request`) on `node` (None: not known): (GPU-equivalents, the
    unit its GPU-time is billed in, how many of that unit) — `Pod.gpus`, `gpu_unit`, `gpu_units`."""
    demand = kube_gpu.demand_on(kube_gpu.request_from_record(record), node)
    unit = kube_gpu.billing_unit(demand, node)
    return demand.gpus, unit.unit, unit.units


def gpu_sharing(inventory: kube_gpu.NodeGpus) -> dict[str, Any]:
    """How a node shares its GPUs, as the console stores it (`Node.gpu_sharing`)."""
    return kube_gpu.sharing_record(inventory)


FINISHED_PHASES = ("Succeeded", "Failed")


def pod_times(pod: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(started, finished) of a pod's allocation as RFC 3339 texts (docs/concepts.md#gpu-hours).

    Started: when it was bound to its node (the PodScheduled=True condition's lastTransitionTime), else
    status.startTime, else its creation; None while unbound. Finished: for a Succeeded or Failed pod,
    the latest `finishedAt` of its containers' terminated states; None while it counts (or when the
    kubelet reported no time: the sync then takes the moment it saw the phase)."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    if not spec.get("nodeName"):
        return None, None
    started = None
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled":
            if condition.get("status") == "True":
                started = condition.get("lastTransitionTime") or None
            break
    started = started or status.get("startTime") or (pod.get("metadata") or {}).get("creationTimestamp") or None
    finished = None
    if status.get("phase") in FINISHED_PHASES:
        for container in status.get("containerStatuses") or ():
            terminated = ((container or {}).get("state") or {}).get("terminated") or {}
            at = terminated.get("finishedAt")
            if isinstance(at, str) and at and (finished is None or at > finished):  # RFC 3339 UTC sorts as text
                finished = at
    return (started if isinstance(started, str) else None), finished


PREEMPTIBLE_BELOW = 100
# The label Kubernetes' Job controller sets on a Job's pods (workloads.render.JOB_NAME_LABEL).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# The label Kubernetes before 1.27 set alone (it sets both since): `Pod.job_name` reads it when the other is absent.
LEGACY_JOB_NAME_LABEL = "job-name"


def is_preemptible(priority: int | None) -> bool:
    return (priority or 0) < PREEMPTIBLE_BELOW


def pod_scheduling_message(pod: Mapping[str, Any]) -> str:
    """The scheduler's words while a pod cannot be placed: the PodScheduled condition's message when its
    status is False ("0/30 nodes are available: …"), else ""."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled":
            if condition.get("status") == "False":
                return str(condition.get("message") or "")
            return ""
    return ""


def pod_is_ready(pod: Mapping[str, Any]) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


# ---------------------------------------------------------------------------------------------------
# Nodes

class NodeReason:
    """The reasons a node is not ready (docs/concepts.md#not-ready), in the order the main reason is chosen."""

    NODE_UNREACHABLE = "Node unreachable"
    KUBELET_NOT_READY = "Kubelet not ready"
    NETWORK_UNAVAILABLE = "Network unavailable"
    MEMORY_PRESSURE = "Memory pressure"
    DISK_PRESSURE = "Disk pressure"
    PID_PRESSURE = "PID pressure"
    SCHEDULING_DISABLED = "Scheduling disabled"
    UNDRAINED_MIGRATED = "Undrained migrated node"
    MISSING_TOOLKIT = "Missing NVIDIA container toolkit"
    MISSING_DCGM = "Missing NVIDIA DCGM exporter"

    ORDER = [
        NODE_UNREACHABLE, KUBELET_NOT_READY, NETWORK_UNAVAILABLE, MEMORY_PRESSURE, DISK_PRESSURE,
        PID_PRESSURE, SCHEDULING_DISABLED, UNDRAINED_MIGRATED, MISSING_TOOLKIT, MISSING_DCGM,
    ]


_PRESSURE_CONDITIONS = {
    "MemoryPressure": NodeReason.MEMORY_PRESSURE,
    "DiskPressure": NodeReason.DISK_PRESSURE,
    "PIDPressure": NodeReason.PID_PRESSURE,
    "NetworkUnavailable": NodeReason.NETWORK_UNAVAILABLE,
}

# NVIDIA GPU operator operands: pod label `app=...` and the node label that disables them on purpose.
TOOLKIT_APP = "nvidia-container-toolkit-daemonset"
DCGM_APP = "nvidia-dcgm-exporter"
OPERANDS = {
    TOOLKIT_APP: (kube_gpu.LABEL_DEPLOY_TOOLKIT, NodeReason.MISSING_TOOLKIT),
    DCGM_APP: (kube_gpu.LABEL_DEPLOY_DCGM_EXPORTER, NodeReason.MISSING_DCGM),
}


@dataclass
class NodeFacts:
    """What the console stores of a Node object."""

    name: str
    uid: str
    labels: dict[str, str]
    taints: list[dict[str, Any]]
    unschedulable: bool
    conditions: list[dict[str, Any]]
    capacity: Resources
    allocatable: Resources
    gpu_product: str
    gpu_memory_mib: int | None
    gpu_family: str
    gpu_count_label: int | None
    mig_strategy: str
    zone: str
    instance_type: str
    capacity_type: str
    is_gpu_node: bool
    created: str | None
    resource_version: str
    condition_reasons: list[str] = field(default_factory=list)
    gpus: kube_gpu.NodeGpus = field(default_factory=kube_gpu.NodeGpus)


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def node_condition_reasons(node: Mapping[str, Any]) -> list[str]:
    """Reasons that come from the Node object alone (conditions and cordon), ordered by importance."""
    reasons = set()
    ready_seen = False
    for condition in (node.get("status") or {}).get("conditions") or []:
        ctype, status = condition.get("type"), condition.get("status")
        if ctype == "Ready":
            ready_seen = True
            if status == "False":
                reasons.add(NodeReason.KUBELET_NOT_READY)
            elif status != "True":
                reasons.add(NodeReason.NODE_UNREACHABLE)
        elif ctype in _PRESSURE_CONDITIONS and status == "True":
            reasons.add(_PRESSURE_CONDITIONS[ctype])
    if not ready_seen:
        reasons.add(NodeReason.NODE_UNREACHABLE)
    if (node.get("spec") or {}).get("unschedulable"):
        reasons.add(NodeReason.SCHEDULING_DISABLED)
    return sort_reasons(reasons)


def sort_reasons(reasons: Iterable[str]) -> list[str]:
    return sorted(set(reasons), key=NodeReason.ORDER.index)


def missing_operand_reasons(labels: Mapping[str, str], is_gpu_node: bool, ready_operand_apps: set[str]) -> list[str]:
    """NVIDIA operand pods a GPU node lacks; an operand disabled by its deploy label is not missing."""
    if not is_gpu_node:
        return []
    missing = []
    for app, (deploy_label, reason) in OPERANDS.items():
        if labels.get(deploy_label) == "false":
            continue
        if app not in ready_operand_apps:
            missing.append(reason)
    return missing


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    """Read a Node object. Raises KeyError/QuantityError/TypeError on a malformed one."""
    metadata = node["metadata"]
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels = dict(metadata.get("labels") or {})
    capacity = Resources.from_map(status.get("capacity"))
    allocatable = Resources.from_map(status.get("allocatable") or status.get("capacity"))
    inventory = kube_gpu.node_gpus(labels, status.get("capacity") or {},
                                   status.get("allocatable") or status.get("capacity") or {})
    # GPUs counted as kube.gpu reads them: physical devices and GPU-equivalents, whatever the exposure.
    capacity = replace(capacity, gpus=Decimal(inventory.physical))
    allocatable = replace(allocatable, gpus=kube_gpu.to_decimal(inventory.allocatable))
    return NodeFacts(
        name=metadata["name"],
        uid=metadata.get("uid") or "",
        labels=labels,
        taints=list(spec.get("taints") or []),
        unschedulable=bool(spec.get("unschedulable")),
        conditions=list(status.get("conditions") or []),
        capacity=capacity,
        allocatable=allocatable,
        gpu_product=inventory.product,  # the model, without -MIG-<profile> or -SHARED
        gpu_memory_mib=inventory.memory_mib,
        gpu_family=labels.get(kube_gpu.LABEL_GPU_FAMILY, ""),
        gpu_count_label=_int_or_none(labels.get(kube_gpu.LABEL_GPU_COUNT)),
        mig_strategy=labels.get(kube_gpu.LABEL_MIG_STRATEGY, ""),
        zone=labels.get(wellknown.ZONE_LABEL, ""),
        instance_type=labels.get(wellknown.INSTANCE_TYPE_LABEL, ""),
        capacity_type=labels.get(wellknown.KARPENTER_CAPACITY_TYPE_LABEL, ""),
        is_gpu_node=labels.get(kube_gpu.LABEL_GPU_PRESENT) == "true" or inventory.physical > 0,
        created=metadata.get("creationTimestamp"),
        resource_version=str(metadata.get("resourceVersion") or ""),
        condition_reasons=node_condition_reasons(node),
        gpus=inventory,
    )


def resolve_pool(labels: Mapping[str, str], pools: Iterable[tuple[Any, str, str]]) -> tuple[Any, list[Any]]:
    """Which pool a node belongs to (docs/concepts.md#pools).

    `pools` are (pool, label_key, label_value) in creation order, without the default pool. Returns
    (the first matching pool or None for the default pool, every matching pool when more than one).
    """
    matches = [pool for pool, key, value in pools if key in labels and labels[key] == value]
    if not matches:
        return None, []
    return matches[0], (matches if len(matches) > 1 else [])


# ---------------------------------------------------------------------------------------------------
# Moving a node between pools without losing its own labels

PREVIOUS_LABELS_ANNOTATION = "console.gpu-capacity.io/previous-labels"


@dataclass
class LabelChange:
    """One label a move changes (`old`/`new` None: absent)."""

    key: str
    old: str | None
    new: str | None
    console_set: bool = False  # the old value was set by an earlier move, not the node's own

    @property
    def overwrites(self) -> bool:
        """The move replaces or removes a value of the node's own (which the annotation keeps)."""
        return self.old is not None and not self.console_set


@dataclass
class LabelMovePlan:
    labels: dict[str, str]
    annotation: str | None  # the new annotation value; None: no annotation
    changes: list[LabelChange]
    saved: dict[str, str | None]  # key -> the node's own value kept for restoring later
    patch: dict[str, Any]  # metadata labels/annotations patch (merge semantics: None removes)


def previous_labels(annotations: Mapping[str, str] | None) -> dict[str, str | None]:
    """The console's record of the node's own label values (an unreadable record counts as empty)."""
    raw = (annotations or {}).get(PREVIOUS_LABELS_ANNOTATION)
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): (v if isinstance(v, str) else None) for k, v in data.items()}


def plan_label_move(
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None,
    target: tuple[str, str] | None,
    pool_labels: Iterable[tuple[str, str]],
) -> LabelMovePlan:
    """The labels (and the console's annotation) that put a node in `target` (key, value), or in the
    default pool (None), keeping every value the node had of its own.

    Values the console overwrote or removed before are first restored from the annotation (a value
    someone else changed since, to one no pool selects, is left as it is); then the target's label is
    set and the labels of other pools the node still matches are removed. Every value replaced or
    removed that was the node's own is kept in the annotation, so that leaving the pool restores it.
    `pool_labels` are the (key, value) of every non-default pool of the cluster.
    """
    pool_labels = list(pool_labels)
    selected = set(pool_labels)
    saved = previous_labels(annotations)
    new = dict(labels)
    restored: set[str] = set()
    for key, original in saved.items():
        current = new.get(key)
        if current is not None and (key, current) not in selected:
            continue  # changed by someone else since: theirs wins, forget ours
        if original is None:
            new.pop(key, None)
        else:
            new[key] = original
        restored.add(key)
    keep: dict[str, str | None] = {}
    if target is not None:
        key, value = target
        if new.get(key) != value:
            keep[key] = new.get(key)
            new[key] = value
    for key, value in pool_labels:
        if (target is None or key != target[0]) and new.get(key) == value:
            keep.setdefault(key, value)
            del new[key]
    annotation = json.dumps(keep, sort_keys=True, separators=(",", ":")) if keep else None
    changes = []
    for key in sorted(set(labels) | set(new)):
        old, value = labels.get(key), new.get(key)
        if old != value:
            changes.append(LabelChange(key=key, old=old, new=value, console_set=key in restored))
    patch: dict[str, Any] = {}
    label_patch = {c.key: c.new for c in changes}
    if label_patch:
        patch["labels"] = label_patch
    if annotation != (annotations or {}).get(PREVIOUS_LABELS_ANNOTATION):
        patch["annotations"] = {PREVIOUS_LABELS_ANNOTATION: annotation}
    return LabelMovePlan(labels=new, annotation=annotation, changes=changes, saved=keep, patch=patch)
