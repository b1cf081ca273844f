"""KAI Scheduler (``schedulerName: kai-scheduler``) and its pod grouper, as pure functions: snapshots of
nodes, pods, PodGroups, Queues, SchedulingShards and PriorityClasses in, decisions out (PodGroups to
create, binds, evictions, unschedulable explanations, queue and PodGroup status).

Written from NVIDIA/KAI-Scheduler's own documentation and the code it describes (pages and files read at
commit 72de64fc8eca, v0.14; the pod grouper at kai-scheduler/KAI-Scheduler d5bc503a1463, v0.17.0-9, the
version of the CRDs in kube/crds/):

- the pod grouper (docs/developer/pod-grouper.md, docs/batch/README.md; pkg/podgrouper/pod_controller.go,
  podgroup/handler.go, podgrouper/plugins/defaultgrouper/default_grouper.go, plugins/job/job_grouper.go,
  plugins/constants/constants.go): every pod with ``schedulerName: kai-scheduler`` gets a
  ``scheduling.run.ai/v2alpha2`` PodGroup and the annotation ``pod-group-name``; the PodGroup takes its top
  owner's labels (and the pod's node-pool label when the owner has none), ``queue`` from the
  ``kai.scheduler/queue`` label of the owner, else of the pod (else ``default-queue``),
  ``priorityClassName`` from a ``priorityClassName`` label of the owner or the pod, else
  ``spec.priorityClassName``, when that PriorityClass exists, else ``train``, and ``minMember: 1``.
  A ``batch/v1`` Job's pods share one PodGroup ``pg-<job name>-<job uid>`` (since v0.15; "Sets MinMember
  to 1 by default - native k8s batch jobs usually do not require gang scheduling", pod-grouper.md) whose
  ``minMember`` is the Job's annotation ``kai.scheduler/batch-min-member`` when it has one — the documented
  way to gang-schedule a batch Job (docs/batch/README.md, "Min Member Override"; a value that is no int32
  gives the pod a Warning ``PodGrouperWarning`` event "invalid min-member annotation value: strconv.ParseInt:
  ..." and no PodGroup); a PodGroup of the legacy name ``pg-<pod name>-<job uid>`` (v0.14 and before: one
  per pod) that exists already is kept, with ``minMember: 1`` (the ``search-legacy-pg`` default); a pod
  without owner gets ``pg-<pod name>-<pod uid>``; a pod without owner that already names its PodGroup in
  ``pod-group-name``, and a pod or owner annotated ``kai.scheduler/skip-podgrouper: "true"``, are left as
  they are (an external PodGroup, any ``minMember``: docs/batch/README.md "External PodGroups"). On an
  existing PodGroup the grouper keeps what "external services are responsible for" (handler.go
  ignoreFields): ``spec.queue``, the node-pool and queue labels, ``markUnschedulable``,
  ``schedulingBackoff``. PodGroups whose owner is gone are deleted, as the garbage collector does through
  their owner reference;
- shards (docs/operator/scheduling-shards.md; pkg/scheduler/conf/scheduler_conf.go): a SchedulingShard
  schedules the nodes, queues and PodGroups labelled ``<nodePoolLabelKey>=<partitionLabelValue>``; a shard
  without ``partitionLabelValue`` those without the label. With no SchedulingShard at all the
  emulator acts as KAI's default shard. The key is KAI's global ``nodePoolLabelKey`` (default
  ``kai.scheduler/node-pool``; the emulator's is configurable and defaults to the console's pool label);
- the cycle (docs/developer/scheduler-concepts.md, action-framework.md; pkg/scheduler/actions): one
  snapshot, then Allocate → Reclaim → Preempt, each taking jobs queue by queue in the proportion plugin's
  queue order (:mod:`kubesim.scheduling.kai_share`) and, inside a queue, by priority then age; a job
  whose gang is not yet running asks for ``minMember`` minus its running pods at once, all or nothing
  (docs/batch/README.md, pkg/scheduler/api/podgroup_info/allocation_info.go), then one pod at a time;
  a job with fewer pods than ``minMember`` is "not ready" and waits;
- placement (pkg/scheduler/plugins/nodeplacement/{pack,spread}.go, resourcetype/resourcetype.go): GPU
  pods by the shard's ``placementStrategy.gpu``, CPU-only pods by ``.cpu`` and onto CPU-only nodes first;
  ``binpack`` takes the fitting node with the least of that resource free, ``spread`` the one with the
  largest free fraction; the node filters are Kubernetes' (:mod:`kubesim.scheduling.fit`);
- the limits a job meets (docs/priority/README.md, docs/queues/README.md;
  pkg/scheduler/plugins/proportion/capacity_policy): ``OverLimit`` and ``NonPreemptibleOverQuota``;
- reclaim (docs/fairness/README.md; actions/reclaim/reclaim.go, proportion/reclaimable): a pending job of
  a queue that stays within its fair share takes resources back from preemptible jobs (priority < 100)
  of other queues, each victim's queue being over its fair share (or over quota while the reclaimer is
  within its own), so that the saturation order among siblings is kept; victims are taken from the most
  served queue first, lowest priority and newest first, an elastic job's pods above ``minMember`` one by
  one, its ``minMember`` core as one piece;
- preempt (actions/preempt/preempt.go): inside one queue, a pending job takes from preemptible jobs of
  lower priority;
- one session (docs/developer/action-framework.md, "Statement"): the actions allocate and evict virtually on
  one snapshot; a pod Allocate placed that a later action of the same cycle takes as a victim is not bound
  and deleted but stays pending (its bind never sent), and every ready job still pending when the actions
  are done has its reason — those no action left one for are tried once more against the cycle's final
  state (limit and non-preemptible quota, then the nodes) — so a waiting PodGroup says why in every cycle;
- what KAI writes (pkg/scheduler/cache/status_updater/default_status_updater.go,
  cache/evictor/default_evictor.go, api/unschedule_info.go, api/common_info/{job_errors,pod_errors}.go):
  a PodGroup that cannot be scheduled gets an ``Unschedulable`` event and a
  ``status.schedulingConditions`` entry of type ``UnschedulableOnNodePool`` with its ``reasons``
  (``OverLimit``, ``NonPreemptibleOverQuota``, ``PodSchedulingErrors``, ``QueueDoesNotExist``); its
  pending pods a Warning ``Unschedulable`` event and ``PodScheduled=False`` (reason ``Unschedulable``); a
  bound pod a ``Scheduled`` event; an evicted pod is deleted — with the scheduler flag
  ``--update-pod-eviction-condition`` (a shard's ``spec.args``; off by default: cmd/scheduler/app/options)
  after the condition ``DisruptionTarget`` (``PreemptionByScheduler``) —, and its PodGroup an ``Evict`` event ("Pod ns/x was
  preempted by workload ns/y." with the queues' figures for a reclaim, "... by higher priority workload
  ..." for a preemption). Queue status (``allocated``, ``allocatedNonPreemptible``, ``requested``; GPU
  devices, CPU millicpus, memory megabytes) and PodGroup ``status.resourcesStatus`` follow the cycle's
  decisions, as KAI's queue and podgroup controllers report them.

- GPU sharing (read at kai-scheduler/KAI-Scheduler d5bc503a1463: docs/gpu-sharing/README.md and its
  gpu-sharing.yaml, gpu-memory.yaml; pkg/common/constants/constants.go; pkg/scheduler/api/node_info/node_info.go, resource_info/
  gpu_resource_requirment.go, plugins/proportion; the binder's binding/resourcereservation): a pod asking
  ``gpu-fraction`` (0 < f <= 1) or ``gpu-memory`` (MiB; its share is memory / the node's
  ``nvidia.com/gpu.memory``, floored to 100 MiB as KAI reads it) and no ``nvidia.com/gpu`` goes onto a shared
  GPU with room (binpack: the first in the placement order; spread: a GPU of its own first), else a free
  GPU of its own; the binder then makes the GPU group's reservation pod (``gpu-reservation-<hash>`` in
  ``kai-resource-reservation``, ``nvidia.com/gpu: 1``, labels ``app: kai-resource-reservation`` and
  ``runai-gpu-group``) and labels the sharer with the group; a reservation pod whose sharers are all gone
  is deleted. The queue counts the fraction (a pending ``gpu-memory`` pod: memory / the smallest GPU
  memory of the cluster, as proportion.go does); no fraction goes onto a MIG node. MIG resources
  (``nvidia.com/mig-<g>g.<mem>gb``) are fitted as extended resources and count ``g`` GPUs each in queues
  and the cluster's total (GetGpusQuota, ResourceVector.TotalGPUs); a MIG job goes only to a MIG node and
  a mixed-strategy MIG node takes MIG jobs only (node_info.go);

Not emulated: consolidation, stale-gang eviction, multi-device fractions (``gpu-fraction-num-devices``),
the GPU index a reservation pod reports (the emulator numbers them), topology, time-based fair share
(no usage database: weights are the plain ``overQuotaWeight`` proportions), minimum runtimes,
pipelining (an evicted pod's resources are free at once here, so the reclaimer is bound in the same cycle).
"""
from __future__ import annotations

import bisect
import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubesim.scheduling import kai_share as ks
import hashlib
import uuid

from kube import gpu as kgpu

from kubesim.scheduling.fit import (CPU, GPU, MEMORY, Cluster, NodeInfo, PodInfo, kai_resource_reason,
                                    resource_reasons, usage)

SCHEDULER_NAME = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
POD_GROUP_ANNOTATION = "pod-group-name"
TOP_OWNER_ANNOTATION = "kai.scheduler/top-owner-metadata"
PRIORITY_LABEL = "priorityClassName"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
MIN_MEMBER_ANNOTATION = "kai.scheduler/batch-min-member"
SKIP_POD_GROUPER_ANNOTATION = "kai.scheduler/skip-podgrouper"
POD_GROUPER = "pod-grouper"
POD_GROUPER_WARNING = "PodGrouperWarning"
DEFAULT_QUEUE = "default-queue"
DEFAULT_PRIORITY_CLASS = "train"
DEFAULT_NODE_POOL = "default"
KAI_NODE_POOL_KEY = "kai.scheduler/node-pool"
NON_PREEMPTIBLE_FROM = 100
POD_GROUP_API = "scheduling.run.ai/v2alpha2"
RESOURCES_WERE_NOT_FOUND = "no nodes with enough resources were found"
DEFAULT_PODGROUP_ERROR = "Unable to schedule podgroup"
POD_SCHEDULING_ERRORS = "PodSchedulingErrors"
MESSAGE_SEPARATOR = ". \n"  # how KAI joins the reasons of a histogram
MIG_RESOURCE_PREFIX = kgpu.MIG_RESOURCE_PREFIX
MIG_STRATEGY_LABEL = kgpu.LABEL_MIG_STRATEGY
# GPU sharing (docs/gpu-sharing/README.md; pkg/common/constants/constants.go; the binder's
# pkg/binder/binding/resourcereservation/resource_reservation.go): the reservation pods live here, one per
# shared GPU, named gpu-reservation-<hash of node/group>, labelled app=kai-resource-reservation and with the
# group; the sharers carry the group label.
RESERVATION_NAMESPACE = kgpu.RESERVATION_NAMESPACE
RESERVATION_APP = "kai-resource-reservation"  # global_config.go ResourceReservationAppLabelValue
RESERVATION_POD_PREFIX = "gpu-reservation"
GPU_GROUP_LABEL = kgpu.GPU_GROUP_LABEL
GPU_INDEX_ANNOTATION = "run.ai/reserve_for_gpu_index"
# node_info.go's fit errors for MIG.
MIG_ON_NON_MIG_NODE = "MIG job cannot be scheduled on non-MIG node"
NON_MIG_ON_MIXED_NODE = "non MIG jobs cant run on a node with MigStrategy='mixed'"


# ---------------------------------------------------------------------------------------------------
# The pod grouper


@dataclass(frozen=True)
class Owner:
    """A pod's top owner as the grouper reads it."""

    api_version: str
    kind: str
    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


def top_owner_metadata(owner: Owner) -> str:
    group, _, version = owner.api_version.rpartition("/")
    return f"name: {owner.name}\nuid: {owner.uid}\ngroup: {group or chr(34) * 2}\nversion: {version}\nkind: {owner.kind}\n"


class GrouperError(ValueError):
    """What the pod grouper could not make of a pod (its message goes into a PodGrouperWarning event)."""


def parse_int32(text: str) -> int:
    """Go's strconv.ParseInt(text, 10, 32), with its errors' words."""
    digits = text[1:] if text[:1] in "+-" else text
    if not digits or not digits.isascii() or not digits.isdigit():
        raise GrouperError(f'strconv.ParseInt: parsing "{text}": invalid syntax')
    value = int(text)
    if not -2**31 <= value < 2**31:
        raise GrouperError(f'strconv.ParseInt: parsing "{text}": value out of range')
    return value


def skips_grouper(annotations: Mapping[str, str]) -> bool:
    return annotations.get(SKIP_POD_GROUPER_ANNOTATION) == "true"


def pod_group_for(pod: PodInfo, owner: Owner, *, priority_classes: Mapping[str, int], node_pool_key: str,
                  queue_label: str = QUEUE_LABEL, existing: Iterable[str] = ()) -> dict[str, Any]:
    """The PodGroup KAI's pod grouper makes for ``pod`` (``owner``: its top owner, the pod itself when it
    has none; ``existing``: the names of the PodGroups of the pod's namespace, for the legacy name).
    Raises :class:`GrouperError` when the Job's min-member annotation is no int32."""
    min_member = 1
    if owner.kind == "Job" and owner.api_version == "batch/v1":
        name = f"pg-{owner.name}-{owner.uid}"
        legacy = f"pg-{pod.name}-{owner.uid}"
        if legacy in existing:
            name = legacy
        elif MIN_MEMBER_ANNOTATION in owner.annotations:
            try:
                min_member = parse_int32(owner.annotations[MIN_MEMBER_ANNOTATION])
            except GrouperError as err:
                raise GrouperError(f"invalid min-member annotation value: {err}") from None
    else:
        name = f"pg-{owner.name}-{owner.uid}"
    labels = dict(owner.labels)
    if node_pool_key and node_pool_key not in labels and node_pool_key in pod.labels:
        labels[node_pool_key] = pod.labels[node_pool_key]
    queue = owner.labels.get(queue_label) or pod.labels.get(queue_label) or DEFAULT_QUEUE
    klass = owner.labels.get(PRIORITY_LABEL) or pod.labels.get(PRIORITY_LABEL) or pod.priority_class
    if klass not in priority_classes:
        klass = DEFAULT_PRIORITY_CLASS
    annotations = dict(owner.annotations)
    annotations[TOP_OWNER_ANNOTATION] = top_owner_metadata(owner)
    spec: dict[str, Any] = {"minMember": min_member, "queue": queue, "priorityClassName": klass}
    preemptibility = owner.labels.get(PREEMPTIBILITY_LABEL) or pod.labels.get(PREEMPTIBILITY_LABEL)
    if preemptibility in ("preemptible", "non-preemptible"):
        spec["preemptibility"] = preemptibility
    return {
        "apiVersion": POD_GROUP_API, "kind": "PodGroup",
        "metadata": {"name": name, "namespace": pod.namespace, "labels": labels, "annotations": annotations,
                     "ownerReferences": [{"apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name,
                                          "uid": owner.uid}]},
        "spec": spec,
    }


def keep_external_fields(group: dict[str, Any], current: Mapping[str, Any], *, node_pool_key: str,
                         queue_label: str = QUEUE_LABEL) -> dict[str, Any]:
    """The PodGroup the grouper writes over an existing one: what "external services are responsible for"
    stays as it is (handler.go ignoreFields) — ``spec.queue``, the node-pool label (never added afterwards)
    and the queue label."""
    group = copy.deepcopy(group)
    spec = current.get("spec") or {}
    if spec.get("queue"):
        group["spec"]["queue"] = spec["queue"]
    labels = group["metadata"].setdefault("labels", {})
    old = (current.get("metadata") or {}).get("labels") or {}
    if node_pool_key:
        if node_pool_key in old:
            labels[node_pool_key] = old[node_pool_key]
        else:
            labels.pop(node_pool_key, None)
    if queue_label in old:
        labels[queue_label] = old[queue_label]
    return group


def owner_of(pod: PodInfo, jobs: Mapping[str, Owner]) -> Owner | None:
    """The pod's top owner: its Job (by uid), the pod itself without owner, None while the owner is gone."""
    if pod.owner is None:
        return Owner("v1", "Pod", pod.name, pod.uid, pod.labels, {})
    api_version, kind, name, uid = pod.owner
    if kind == "Job":
        return jobs.get(uid)
    return Owner(api_version, kind, name, uid)


# ---------------------------------------------------------------------------------------------------
# Snapshot objects


@dataclass
class Group:
    """A PodGroup in one cycle."""

    namespace: str
    name: str
    uid: str
    queue: str
    min_member: int
    priority: int
    preemptible: bool
    labels: dict[str, str]
    created: str
    pods: list[PodInfo] = field(default_factory=list)
    fit_errors: list[tuple[str, str, dict | None]] = field(default_factory=list)
    task_errors: dict[tuple[str, str], str] = field(default_factory=dict)
    node_pool: str = DEFAULT_NODE_POOL

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    def pending(self) -> list[PodInfo]:
        return sorted((p for p in self.pods if not p.node and p.active and not p.terminating),
                      key=lambda p: (p.created, p.name))

    def running(self) -> list[PodInfo]:
        return [p for p in self.pods if p.node and p.active]

    def alive(self) -> int:
        return sum(1 for p in self.pods if p.active)

    def batch(self) -> list[PodInfo]:
        """The pods to place next: up to ``minMember`` at once while the gang is not running, then one."""
        pending = self.pending()
        running = len(self.running())
        count = self.min_member - running if running < self.min_member else min(len(pending), 1)
        return pending[:count]


def group_from(obj: Mapping[str, Any], *, priority_classes: Mapping[str, int], default_priority: int,
               node_pool_key: str) -> Group:
    md, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    klass = spec.get("priorityClassName") or ""
    priority = priority_classes.get(klass, default_priority)
    preemptibility = spec.get("preemptibility") or ""
    preemptible = priority < NON_PREEMPTIBLE_FROM if not preemptibility else preemptibility == "preemptible"
    labels = dict(md.get("labels") or {})
    return Group(namespace=md.get("namespace") or "default", name=md.get("name", ""), uid=md.get("uid", ""),
                 queue=spec.get("queue") or "", min_member=max(int(spec.get("minMember") or 1), 1),
                 priority=priority, preemptible=preemptible, labels=labels,
                 created=md.get("creationTimestamp") or "",
                 node_pool=labels.get(node_pool_key) or DEFAULT_NODE_POOL if node_pool_key else DEFAULT_NODE_POOL)


def mig_gpus(name: str) -> int:
    """The GPUs KAI counts for one device of a MIG resource: its compute slices, ``nvidia.com/mig-3g.40gb`` -> 3
    (pkg/scheduler/api/common_info/resources/mig.go ExtractGpuAndMemoryFromMigResourceName, used by
    resource_info/gpu_resource_requirment.go GetGpusQuota); 0 for any other resource."""
    if not name.startswith(MIG_RESOURCE_PREFIX):
        return 0
    parsed = kgpu.parse_mig_profile(name)
    return parsed.gpu_slices if parsed else 0


def kai_amounts(requests: Mapping[str, float]) -> dict[str, float]:
    """CPU, memory and GPUs as KAI's queues count them: ``nvidia.com/gpu`` plus each MIG device's slices."""
    gpu = requests.get(GPU, 0.0)
    for name, value in requests.items():
        if name.startswith(MIG_RESOURCE_PREFIX):
            gpu += mig_gpus(name) * value
    return ks.quantities(cpu=requests.get(CPU, 0.0), memory=requests.get(MEMORY, 0.0), gpu=gpu)


def pod_amounts(pod: PodInfo) -> dict[str, float]:
    """A pod's amounts for its queue: its requests, and the share of a GPU a ``gpu-fraction`` / ``gpu-memory``
    pod holds (docs/gpu-sharing/README.md; proportion.go counts a memory request as memory / GPU memory)."""
    amounts = kai_amounts(pod.requests)
    if pod.gpu_share:
        amounts[ks.GPU] += pod.gpu_share
    return amounts


def _sum(pods: Sequence[PodInfo]) -> dict[str, float]:
    total = ks.quantities()
    for pod in pods:
        for r, v in pod_amounts(pod).items():
            total[r] += v
    return total


# ---------------------------------------------------------------------------------------------------
# Decisions


@dataclass(frozen=True)
class Bind:
    namespace: str
    name: str
    node: str
    node_pool: str
    gpu_group: str = ""  # a shared-GPU pod's GPU group (its reservation pod's)


def reservation_pod_name(node: str, group: str) -> str:
    """The binder's deterministic name of a GPU group's reservation pod (resource_reservation.go)."""
    return f"{RESERVATION_POD_PREFIX}-{hashlib.sha256(f'{node}/{group}'.encode()).hexdigest()[:16]}"


def new_gpu_group(node: str, pod: PodInfo) -> str:
    """A new shared GPU's group name (KAI draws a UUID; here one derived from the node and its first pod)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kai-gpu-group/{node}/{pod.namespace}/{pod.name}/{pod.uid}"))


def gpu_share_on(pod: PodInfo, node: NodeInfo) -> float:
    """The portion of one of the node's GPUs the pod asks (node_info.go getResourceGpuPortion): its
    fraction, or its memory over the node's GPU memory (0: the node's memory is unknown)."""
    if pod.gpu_fraction:
        return pod.gpu_fraction
    if pod.gpu_memory and node.gpu_memory:
        return pod.gpu_memory / node.gpu_memory
    return 0.0


@dataclass(frozen=True)
class Eviction:
    namespace: str
    name: str
    group: tuple[str, str]
    message: str
    action: str  # "reclaim" / "preempt"
    preemptor: tuple[str, str]
    gang_size: int
    # The shard's scheduler runs with --update-pod-eviction-condition: DisruptionTarget before the deletion.
    condition: bool = False


@dataclass(frozen=True)
class Unschedulable:
    group: tuple[str, str]
    node_pool: str
    message: str
    reasons: list[dict[str, Any]]
    pod_messages: dict[tuple[str, str], str]
    has_running: bool


@dataclass
class Decisions:
    binds: list[Bind] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)
    not_ready: list[tuple[tuple[str, str], str]] = field(default_factory=list)
    fair_shares: dict[str, dict[str, float]] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------
# Placement


class Placement:
    """The nodes of one shard in the order its placement strategy prefers them, kept sorted as pods land."""

    def __init__(self, cluster: Cluster, members: Sequence[int], gpu_strategy: str, cpu_strategy: str) -> None:
        self.cluster = cluster
        self.members = list(members)
        self.gpu_spread = gpu_strategy == "spread"
        self.cpu_spread = cpu_strategy == "spread"
        self.gpu_nodes = [i for i in self.members if cluster.nodes[i].allocatable.get(GPU, 0.0) > 0]
        self.gpu_keys: dict[int, tuple] = {}
        self.cpu_keys: dict[int, tuple] = {}
        self.gpu_order: list[tuple] = []
        self.cpu_order: list[tuple] = []
        for i in self.gpu_nodes:
            self.gpu_keys[i] = self._gpu_key(i)
        for i in self.members:
            self.cpu_keys[i] = self._cpu_key(i)
        self.gpu_order = sorted(self.gpu_keys.values())
        self.cpu_order = sorted(self.cpu_keys.values())
        self.generation = 0  # moves with every pod placed or taken away
        self.fit_errors: dict[tuple, str] = {}
        # Shared GPUs: per node, GPU group -> the portion its sharers hold; per sharer, its (group, share).
        self.shared: dict[int, dict[str, float]] = {}
        self.assigned: dict[tuple[str, str], tuple[str, float]] = {}
        self._choice: dict[tuple[str, str], tuple[str, float]] = {}

    def add_sharer(self, i: int, pod: PodInfo) -> None:
        """A bound pod on a shared GPU (from the snapshot): its group holds its share."""
        share = gpu_share_on(pod, self.cluster.nodes[i])
        pod.gpu_share = share
        groups = self.shared.setdefault(i, {})
        groups[pod.gpu_group] = groups.get(pod.gpu_group, 0.0) + share
        self.assigned[pod.key] = (pod.gpu_group, share)

    def _sharing_node(self, i: int) -> bool:
        """KAI puts no fraction on a MIG node (node_info.go: mixed takes MIG jobs only, single whole GPUs)."""
        node = self.cluster.nodes[i]
        return node.labels.get(MIG_STRATEGY_LABEL) not in ("single", "mixed") or not any(
            k.startswith(MIG_RESOURCE_PREFIX) or "-MIG-" in node.labels.get("nvidia.com/gpu.product", "")
            for k in node.allocatable)

    def _shared_room(self, i: int, pod: PodInfo) -> tuple[str, float] | None:
        """Where on node ``i`` the sharer fits: (an existing group, or "" for a GPU of its own, its share)."""
        if not self._sharing_node(i):
            return None
        share = gpu_share_on(pod, self.cluster.nodes[i])
        if share <= 0 or share > 1 + 1e-9:
            return None
        fitting = [(used, group) for group, used in (self.shared.get(i) or {}).items() if used + share <= 1 + 1e-9]
        if fitting:
            # binpack: the fullest shared GPU that fits; spread: the emptiest.
            return (min(fitting) if self.gpu_spread else max(fitting))[1], share
        if self.cluster.free[i].get(GPU, 0.0) >= 1 - 1e-9 and self.cluster.free_pods[i] >= 2:
            return "", share
        return None

    def _place_shared(self, pod: PodInfo) -> int | None:
        """A shared GPU with room (binpack: the first node in order that has one; spread: a GPU of its own
        first), else a free GPU of its own, which a new reservation pod will hold."""
        cluster = self.cluster
        static = cluster.static_reasons(pod)
        in_group: tuple[int, str, float] | None = None
        own: tuple[int, float] | None = None
        for key in self.gpu_order:
            i = key[-1]
            if cluster.static(pod, static, i) is not None or not cluster.fits(i, pod.requests):
                continue
            room = self._shared_room(i, pod)
            if room is None:
                continue
            group, share = room
            if group and in_group is None:
                in_group = (i, group, share)
            elif not group and own is None:
                own = (i, share)
            if (in_group if not self.gpu_spread else own) is not None:
                break
        if in_group is not None and (not self.gpu_spread or own is None):
            i, group, share = in_group
        elif own is not None:
            i, share = own
            group = new_gpu_group(cluster.nodes[i].name, pod)
        else:
            return None
        self._choice[pod.key] = (group, share)
        return i

    def _take_shared(self, i: int, pod: PodInfo, sign: int) -> None:
        groups = self.shared.setdefault(i, {})
        if sign > 0:
            group, share = self._choice.pop(pod.key)
            if group not in groups:
                self.cluster.assume(i, {GPU: 1.0})  # the reservation pod holds the whole GPU
                groups[group] = 0.0
            groups[group] += share
            self.assigned[pod.key] = (group, share)
            pod.gpu_group, pod.gpu_share = group, share
            return
        group, share = self.assigned.pop(pod.key)
        left = groups.get(group, 0.0) - share
        if left <= 1e-9:
            groups.pop(group, None)
            self.cluster.assume(i, {GPU: 1.0}, -1)  # nobody shares it any more: the whole GPU is free
        else:
            groups[group] = left
        self._choice[pod.key] = (group, share)  # taken again (a victim kept): the same group

    def _gpu_key(self, i: int) -> tuple:
        node = self.cluster.nodes[i]
        free = self.cluster.free[i].get(GPU, 0.0)
        if self.gpu_spread:
            return (-free / node.allocatable.get(GPU, 1.0), node.name, i)
        return (free, node.name, i)

    def _cpu_key(self, i: int) -> tuple:
        node = self.cluster.nodes[i]
        # resourcetype.go: a node with GPUs (whole or MIG: node_info.go IsCPUOnlyNode) after the CPU-only ones.
        has_gpu = 1 if node.allocatable.get(GPU, 0.0) > 0 or any(
            name.startswith(MIG_RESOURCE_PREFIX) and value > 0 for name, value in node.allocatable.items()) else 0
        free = self.cluster.free[i].get(CPU, 0.0)
        if self.cpu_spread:
            capacity = node.allocatable.get(CPU, 0.0)
            return (has_gpu, -free / capacity if capacity else 0.0, node.name, i)
        return (has_gpu, free, node.name, i)

    def update(self, i: int) -> None:
        for keys, order, make in ((self.gpu_keys, self.gpu_order, self._gpu_key),
                                  (self.cpu_keys, self.cpu_order, self._cpu_key)):
            old = keys.get(i)
            if old is None:
                continue
            at = bisect.bisect_left(order, old)
            if at < len(order) and order[at] == old:
                del order[at]
            new = keys[i] = make(i)
            bisect.insort(order, new)

    def candidates(self, requests: Mapping[str, float]) -> Iterator[int]:
        """Node indices in the strategy's order of preference (only nodes that may have room)."""
        gpu = requests.get(GPU, 0.0)
        if gpu > 0:
            if self.gpu_spread:
                for key in list(self.gpu_order):
                    yield key[-1]
            else:
                start = bisect.bisect_left(self.gpu_order, (gpu - 1e-9,))
                for key in self.gpu_order[start:]:
                    yield key[-1]
            return
        cpu = requests.get(CPU, 0.0)
        for section in (0, 1):
            if self.cpu_spread:
                lo = bisect.bisect_left(self.cpu_order, (section,))
            else:
                lo = bisect.bisect_left(self.cpu_order, (section, cpu - 1e-9))
            hi = bisect.bisect_left(self.cpu_order, (section + 1,))
            for key in self.cpu_order[lo:hi]:
                yield key[-1]

    def place(self, pod: PodInfo) -> int | None:
        if pod.shares_gpu:
            return self._place_shared(pod)
        cluster = self.cluster
        static = cluster.static_reasons(pod)
        for i in self.candidates(pod.requests):
            if cluster.static(pod, static, i) is None and cluster.fits(i, pod.requests) and \
                    self._mig_reason(i, pod) is None:
                return i
        return None

    def _mig_reason(self, i: int, pod: PodInfo) -> str | None:
        """node_info.go's MIG rules: a MIG job only on a MIG node; a mixed-strategy MIG node takes MIG jobs only
        (its uncut GPUs included); ``None``: no objection."""
        node = self.cluster.nodes[i]
        mig_node = any(k.startswith(MIG_RESOURCE_PREFIX) and v > 0 for k, v in node.allocatable.items())
        mig_job = any(k.startswith(MIG_RESOURCE_PREFIX) and v > 0 for k, v in pod.requests.items())
        if mig_job and not mig_node:
            return MIG_ON_NON_MIG_NODE
        if mig_node and not mig_job and pod.requests.get(GPU, 0.0) > 0 and \
                node.labels.get(MIG_STRATEGY_LABEL) == "mixed":
            return NON_MIG_ON_MIXED_NODE
        return None

    def take(self, i: int, pod: PodInfo, sign: int = 1) -> None:
        if pod.shares_gpu:
            self._take_shared(i, pod, sign)
        self.cluster.assume(i, pod.requests, sign)
        self.update(i)
        self.generation += 1

    def fit_error(self, pod: PodInfo) -> str:
        """KAI's TasksFitErrors message over this shard's nodes (the same for pods of one shape until a pod
        lands or leaves)."""
        key = (pod.filter_key, tuple(sorted(pod.requests.items())), pod.gpu_fraction, pod.gpu_memory, self.generation)
        found = self.fit_errors.get(key)
        if found is not None:
            return found
        cluster = self.cluster
        static = cluster.static_reasons(pod)
        reasons: dict[str, int] = {}
        for i in self.members:
            reason = cluster.static(pod, static, i)
            found_reasons = [reason] if reason is not None else resource_reasons(
                pod.requests, cluster.free[i], cluster.free_pods[i], kai=True)
            if reason is None and not found_reasons and pod.shares_gpu and self._shared_room(i, pod) is None:
                found_reasons = [kai_resource_reason(GPU)]
            if reason is None and not pod.shares_gpu and self._mig_reason(i, pod) is not None:
                found_reasons = [self._mig_reason(i, pod)]
            for reason in found_reasons:
                reasons[reason] = reasons.get(reason, 0) + 1
        message = RESOURCES_WERE_NOT_FOUND
        if reasons:
            message += ": " + MESSAGE_SEPARATOR.join(sorted(f"{count} {reason}" for reason, count in reasons.items())) + "."
        self.fit_errors[key] = message
        return message


# ---------------------------------------------------------------------------------------------------
# Job order


def _job_key(group: Group) -> tuple:
    return (-group.priority, group.created, group.namespace, group.name)


class JobsByQueue:
    """Pending jobs, handed out queue by queue in KAI's queue order (top level first, then down the tree)."""

    def __init__(self, queues: Mapping[str, ks.Queue], groups: Sequence[Group], total: Mapping[str, float],
                 victims: bool = False) -> None:
        self.queues = queues
        self.total = total
        self.victims = victims
        self.jobs: dict[str, list[Group]] = {}
        self._keys: dict[str, tuple] = {}
        self._memo_jobs: dict[str, bool] = {}
        self._memo_heads: dict[str, Group | None] = {}
        for group in groups:
            self.jobs.setdefault(group.queue, []).append(group)
        for jobs in self.jobs.values():
            jobs.sort(key=_job_key, reverse=victims)

    def push(self, group: Group) -> None:
        jobs = self.jobs.setdefault(group.queue, [])
        jobs.append(group)
        jobs.sort(key=_job_key, reverse=self.victims)

    def _has_jobs(self, name: str) -> bool:
        found = self._memo_jobs.get(name)
        if found is None:
            found = self._memo_jobs[name] = bool(self.jobs.get(name)) or any(
                self._has_jobs(c) for c in self.queues[name].children)
        return found

    def _head(self, name: str) -> Group | None:
        """The job the queue would hand out next (for a parent queue: its best child's)."""
        if name in self._memo_heads:
            return self._memo_heads[name]
        jobs = self.jobs.get(name)
        if jobs:
            head = jobs[0]
        else:
            best = self._best([c for c in self.queues[name].children if self._has_jobs(c)])
            head = self._head(best) if best else None
        self._memo_heads[name] = head
        return head

    def _key(self, name: str) -> tuple:
        """The queue's place in the order; recomputed only when its allocation or its next job changed."""
        q = self.queues[name]
        head = None if self.victims else self._head(name)
        shares = q.shares
        signature = (id(head), shares[ks.GPU].allocated, shares[ks.CPU].allocated, shares[ks.MEMORY].allocated)
        found = self._keys.get(name)
        if found is None or found[0] != signature:
            found = self._keys[name] = (signature, self._compute_key(name, head))
        return found[1]

    def _compute_key(self, name: str, head: Group | None) -> tuple:
        q = self.queues[name]
        job = _sum(head.batch()) if head else ks.quantities()
        allocated = q.allocated()
        with_job = {k: v + job.get(k, 0.0) for k, v in allocated.items()}
        over = ks.less(q.fair_share(), allocated)
        starved = ks.less_equal(with_job, q.deserved())
        violates = any(q.shares[k].allocatable() == 0 and with_job[k] > 0 for k in ks.RESOURCES)
        return (over, not starved, -q.priority, violates, round(q.dominant_share(self.total, job), 9),
                round(q.dominant_share(self.total), 9), q.created, q.name)

    def _best(self, names: Sequence[str]) -> str | None:
        """The queue served first; as victims, the queue that would be served last gives first."""
        if not names:
            return None
        if len(names) == 1:
            return names[0]
        return (max if self.victims else min)(names, key=self._key)

    def pop(self) -> Group | None:
        self._memo_jobs: dict[str, bool] = {}
        self._memo_heads: dict[str, Group | None] = {}
        level = [name for name, q in self.queues.items() if not q.parent or q.parent not in self.queues]
        while True:
            level = [name for name in level if self._has_jobs(name)]
            best = self._best(level)
            if best is None:
                return None
            if self.jobs.get(best):
                return self.jobs[best].pop(0)
            level = list(self.queues[best].children)


class _Failures:
    """Jobs that found no victims, per queue: a later job of the queue asking at least as much (of pods of
    the same shape, at no higher priority) would find none either (KAI's MinimalJobRepresentatives)."""

    def __init__(self) -> None:
        self.by_queue: dict[str, list[tuple[bytes, int, dict[str, float]]]] = {}

    def covers(self, group: Group, batch: list[PodInfo], requested: Mapping[str, float]) -> bool:
        shape = b"|".join(sorted({p.filter_key for p in batch}))
        return any(shape == s and group.priority <= priority and all(requested[r] >= v[r] for r in ks.RESOURCES)
                   for s, priority, v in self.by_queue.get(group.queue, ()))

    def add(self, group: Group, batch: list[PodInfo], requested: Mapping[str, float]) -> None:
        shape = b"|".join(sorted({p.filter_key for p in batch}))
        self.by_queue.setdefault(group.queue, []).append((shape, group.priority, dict(requested)))


# ---------------------------------------------------------------------------------------------------
# Messages


def fit_errors_message(errors: Sequence[tuple[str, str, dict | None]]) -> str:
    """JobFitErrorsToMessage."""
    reason = errors[0][0] if len(errors) == 1 else DEFAULT_PODGROUP_ERROR
    counts: dict[str, int] = {}
    for _, message, _ in errors:
        counts[message] = counts.get(message, 0) + 1
    parts = sorted(f"{n} {m}" if n > 1 else m for m, n in counts.items())
    return f"{reason}: {MESSAGE_SEPARATOR.join(parts)}." if parts else reason


def _resource_text(values: Mapping[str, float]) -> str:
    return (f"GPU: {ks.humanize(values.get(ks.GPU, 0.0))}, CPU: {ks.humanize(values.get(ks.CPU, 0.0), 1000)} (cores), "
            f"memory: {ks.humanize(values.get(ks.MEMORY, 0.0), 1e9)} (GB)")


def reclaim_message(victim: PodInfo, preemptor: Group, reclaimee: ks.Queue, reclaimer: ks.Queue) -> str:
    def details(q: ks.Queue) -> str:
        return (f"{q.display} uses <{_resource_text(q.allocated())}> with a quota of <{_resource_text(q.deserved())}>, "
                f"fair-share of <{_resource_text(q.fair_share())}> and queue priority of <{q.priority}>.")

    return (f"Pod {victim.namespace}/{victim.name} was preempted by workload {preemptor.namespace}/{preemptor.name}."
            f"\n{details(reclaimee)}\n{details(reclaimer)}")


def preempt_message(victim: PodInfo, preemptor: Group) -> str:
    return (f"Pod {victim.namespace}/{victim.name} was preempted by higher priority workload "
            f"{preemptor.namespace}/{preemptor.name}")


def status_list(values: Mapping[str, float]) -> dict[str, str]:
    """A queue's or PodGroup's status figures: GPU devices, CPU millicpus, memory megabytes."""
    def text(value: float) -> str:
        out = f"{round(value, 3):.3f}".rstrip("0").rstrip(".")
        return "0" if out in ("", "-0") else out

    return {kgpu.GPU_RESOURCE: text(values.get(ks.GPU, 0.0)), "cpu": text(values.get(ks.CPU, 0.0)),
            "memory": text(values.get(ks.MEMORY, 0.0) / ks.MB)}


# ---------------------------------------------------------------------------------------------------
# The cycle


@dataclass
class Snapshot:
    nodes: list[NodeInfo]
    pods: list[PodInfo]
    pod_groups: list[Mapping[str, Any]]
    queues: list[Mapping[str, Any]]
    shards: list[Mapping[str, Any]]
    priority_classes: dict[str, int]
    default_priority: int = 0
    node_pool_key: str = KAI_NODE_POOL_KEY
    # What is free on each node (allocatable minus the requests of every active pod bound there, whatever
    # its scheduler) and how many more pods fit; None: computed from ``pods``.
    free: dict[str, dict[str, float]] | None = None
    free_pods: dict[str, float] | None = None
    # Per node, what the active pods of other schedulers bound there request (KAI leaves it out of the
    # resources it divides); None: computed from ``pods``, which then holds every pod.
    other_used: dict[str, dict[str, float]] | None = None


def _in_partition(labels: Mapping[str, str], key: str, value: str) -> bool:
    if not key:
        return True
    if value:
        return labels.get(key) == value
    return key not in labels


#: strconv.ParseBool's true (how the scheduler reads a boolean flag).
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
EVICTION_CONDITION_FLAG = "update-pod-eviction-condition"


def shards_of(snapshot: Snapshot) -> list[tuple[str, str, str, str, bool]]:
    """(name, partition value, gpu strategy, cpu strategy, eviction condition) of each shard; KAI's default
    shard if none. The last is the scheduler flag ``--update-pod-eviction-condition`` (default false), which
    the operator passes from the shard's ``spec.args`` (resources_for_shard.go buildArgsList)."""
    out: list[tuple[str, str, str, str, bool]] = []
    seen: set[str] = set()
    for shard in sorted(snapshot.shards, key=lambda s: (s.get("metadata") or {}).get("name", "")):
        spec = shard.get("spec") or {}
        value = spec.get("partitionLabelValue") or ""
        if value in seen:
            continue
        seen.add(value)
        placement = spec.get("placementStrategy") or {}
        args = spec.get("args") or {}
        condition = isinstance(args, dict) and str(args.get(EVICTION_CONDITION_FLAG, "false")) in _TRUE
        out.append(((shard.get("metadata") or {}).get("name", ""), value, placement.get("gpu") or "binpack",
                    placement.get("cpu") or "binpack", condition))
    return out or [("default", "", "binpack", "binpack", False)]


def cycle(snapshot: Snapshot) -> Decisions:
    """One scheduling cycle of every shard."""
    decisions = Decisions()
    if snapshot.free is None or snapshot.free_pods is None:
        used, counts = usage(snapshot.pods)
        cluster = Cluster(snapshot.nodes, used, counts)
    else:
        cluster = Cluster.from_free(snapshot.nodes, snapshot.free, snapshot.free_pods)
    by_group: dict[tuple[str, str], list[PodInfo]] = {}
    other: dict[str, dict[str, float]] = {}
    for pod in snapshot.pods:
        if pod.scheduler == SCHEDULER_NAME:
            group_name = pod.annotations.get(POD_GROUP_ANNOTATION)
            if group_name:
                # A copy: the cycle moves pods (bound, evicted) without touching the caller's snapshot.
                by_group.setdefault((pod.namespace, group_name), []).append(copy.copy(pod))
        elif snapshot.other_used is None and pod.node and pod.active and pod.namespace != RESERVATION_NAMESPACE:
            into = other.setdefault(pod.node, {})
            for r, v in pod.requests.items():
                into[r] = into.get(r, 0.0) + v
    other_used = {node: kai_amounts(values) for node, values in (
        other if snapshot.other_used is None else snapshot.other_used).items()}
    # A pending gpu-memory pod counts memory / the smallest GPU memory of the cluster (proportion.go
    # MinNodeGPUMemoryMiB); a bound one its share of its node's GPU (Placement.add_sharer).
    memories = [n.gpu_memory for n in cluster.nodes if n.gpu_memory > 0]
    for pods in by_group.values():
        for pod in pods:
            if pod.gpu_memory and not pod.node:
                pod.gpu_share = pod.gpu_memory / min(memories) if memories else 0.0
    key = snapshot.node_pool_key
    for _name, value, gpu_strategy, cpu_strategy, condition in shards_of(snapshot):
        members = [i for i, n in enumerate(cluster.nodes) if _in_partition(n.labels, key, value)]
        queues = {}
        for obj in snapshot.queues:
            md = obj.get("metadata") or {}
            if _in_partition(md.get("labels") or {}, key, value):
                queues[md.get("name", "")] = ks.queue_from_spec(md.get("name", ""), obj.get("spec") or {},
                                                                created=md.get("creationTimestamp") or "")
        ks.link(queues)
        groups: list[Group] = []
        for obj in snapshot.pod_groups:
            md = obj.get("metadata") or {}
            if not _in_partition(md.get("labels") or {}, key, value):
                continue
            group = group_from(obj, priority_classes=snapshot.priority_classes,
                               default_priority=snapshot.default_priority, node_pool_key=key)
            group.pods = by_group.get(group.key, [])
            groups.append(group)
        _Shard(cluster, members, queues, groups, gpu_strategy, cpu_strategy, other_used, decisions,
               eviction_condition=condition).run()
    return decisions


class _Shard:
    def __init__(self, cluster: Cluster, members: list[int], queues: dict[str, ks.Queue], groups: list[Group],
                 gpu_strategy: str, cpu_strategy: str, other_used: Mapping[str, Mapping[str, float]],
                 decisions: Decisions, *, eviction_condition: bool = False) -> None:
        self.cluster = cluster
        self.eviction_condition = eviction_condition
        self.queues = queues
        self.groups = groups
        self.decisions = decisions
        self.placement = Placement(cluster, members, gpu_strategy, cpu_strategy)
        self.total = ks.quantities()
        for i in members:
            node = cluster.nodes[i]
            if not node.ready:
                continue
            for r, v in kai_amounts(node.allocatable).items():
                self.total[r] += v
            for r, v in (other_used.get(node.name) or {}).items():
                self.total[r] -= v
        self.bound_now: dict[tuple[str, str], Bind] = {}  # pods this cycle allocated, by key
        self.valid: list[Group] = []
        for group in groups:
            for pod in group.pods:
                if pod.shares_gpu and pod.node and pod.active and pod.gpu_group and pod.node in cluster.index:
                    self.placement.add_sharer(cluster.index[pod.node], pod)
        for group in groups:
            if group.queue not in queues:
                group.fit_errors.append(("QueueDoesNotExist", f"Queue '{group.queue}' does not exist", None))
                continue
            self.valid.append(group)
            for pod in group.pods:
                if not pod.active:
                    continue
                ks.add_usage(queues, group.queue, pod_amounts(pod), allocated=bool(pod.node),
                             non_preemptible=not group.preemptible)
        ks.set_fair_shares(self.total, queues)

    # -- actions

    def run(self) -> None:
        ready = []
        for group in self.valid:
            if not group.pending():
                continue
            if group.alive() < group.min_member:
                alive = group.alive()
                self.decisions.not_ready.append((group.key, "Job is not ready for scheduling. Waiting for "
                                                 f"{group.min_member} pods, currently {alive} exist, 0 are gated"))
                continue
            ready.append(group)
        self.allocate(ready)
        waiting = [g for g in ready if g.pending()]
        self.reclaim(waiting)
        waiting = [g for g in waiting if g.pending()]
        self.preempt(waiting)
        self.explain(ready)
        self.report()

    def allocate(self, groups: list[Group]) -> None:
        jobs = JobsByQueue(self.queues, groups, self.total)
        while (group := jobs.pop()) is not None:
            batch = group.batch()
            if not batch:
                continue
            requested = _sum(batch)
            verdict = ks.capacity_verdict(self.queues, group.queue, requested, group.preemptible)
            if verdict is not None:
                group.fit_errors.append((verdict.reason, verdict.message, verdict.details))
                continue
            placed = self._place(group, batch)
            if placed is None:
                continue
            self._commit(group, placed)
            if group.pending():
                jobs.push(group)

    def _place(self, group: Group, batch: list[PodInfo]) -> list[tuple[PodInfo, int]] | None:
        placed: list[tuple[PodInfo, int]] = []
        for index, pod in enumerate(batch):
            if pod.error:
                group.task_errors[pod.key] = pod.error
                node = None
            else:
                node = self.placement.place(pod)
            if node is None:
                if not pod.error:
                    group.task_errors[pod.key] = self.placement.fit_error(pod)
                self._task_failed(group, pod, index, len(group.running()))
                for done, i in placed:
                    self.placement.take(i, done, -1)
                return None
            self.placement.take(node, pod)
            placed.append((pod, node))
        return placed

    def _task_failed(self, group: Group, pod: PodInfo, schedulable: int, running: int) -> None:
        error = group.task_errors.get(pod.key, "Unable to schedule pod")
        if group.min_member <= 1 or running >= group.min_member:
            message = f"Resources were not found for pod {pod.namespace}/{pod.name} due to: {error}"
        else:
            message = (f"Resources were found for {schedulable} pods while {group.min_member} are required for gang "
                       f"scheduling. Additional pods cannot be scheduled due to: {error}")
        group.fit_errors.append((POD_SCHEDULING_ERRORS, message, None))

    def _commit(self, group: Group, placed: list[tuple[PodInfo, int]]) -> None:
        for pod, i in placed:
            pod.node = self.cluster.nodes[i].name
            ks.add_usage(self.queues, group.queue, pod_amounts(pod), allocated=True,
                         non_preemptible=not group.preemptible, request=False)
            bind = Bind(pod.namespace, pod.name, pod.node, group.node_pool, pod.gpu_group if pod.shares_gpu else "")
            self.decisions.binds.append(bind)
            self.bound_now[pod.key] = bind
        group.fit_errors.clear()
        group.task_errors.clear()

    def _evict(self, victims: list[tuple[Group, list[PodInfo]]], preemptor: Group, action: str) -> None:
        reclaimer_queue = self.queues[preemptor.queue]
        for group, pods in victims:
            for pod in pods:
                bind = self.bound_now.pop(pod.key, None)
                if bind is not None:
                    # Allocated earlier in this cycle, not bound yet: the session's allocation is taken back
                    # (Statement.Evict of a pod the session allocated), the pod stays pending and its bind is
                    # never sent; explain() then gives its PodGroup the reason it waits.
                    self.decisions.binds.remove(bind)
                    ks.add_usage(self.queues, group.queue, pod_amounts(pod), allocated=True,
                                 non_preemptible=not group.preemptible, request=False, sign=-1.0)
                    pod.node = ""
                    continue
                if action == "reclaim":
                    # The two queues' figures: siblings' own, else their parents' (actions/utils/action.go).
                    reclaimee_queue = self.queues[group.queue]
                    if reclaimee_queue.parent == reclaimer_queue.parent:
                        mine, theirs = reclaimer_queue, reclaimee_queue
                    else:
                        mine = self.queues.get(reclaimer_queue.parent, reclaimer_queue)
                        theirs = self.queues.get(reclaimee_queue.parent, reclaimee_queue)
                    message = reclaim_message(pod, preemptor, theirs, mine)
                else:
                    message = preempt_message(pod, preemptor)
                self.decisions.evictions.append(Eviction(pod.namespace, pod.name, group.key, message, action,
                                                         preemptor.key, len(pods), self.eviction_condition))
                ks.add_usage(self.queues, group.queue, pod_amounts(pod), allocated=True,
                             non_preemptible=not group.preemptible, sign=-1.0)
                pod.phase = "Failed"  # gone: neither counted nor placed again this cycle

    def _victim_units(self, candidates: Iterable[Group]) -> Iterator[tuple[Group, list[PodInfo]]]:
        for group in candidates:
            running = sorted(group.running(), key=lambda p: (p.created, p.name))
            core, elastic = running[:group.min_member], running[group.min_member:]
            for pod in reversed(elastic):
                yield group, [pod]
            if core:
                yield group, core

    def _solve(self, preemptor: Group, batch: list[PodInfo], candidates: Iterable[Group], action: str) -> bool:
        """Take victims one unit at a time until the batch fits (and, for reclaim, the move is fair)."""
        requested = _sum(batch)
        chosen: list[tuple[Group, list[PodInfo]]] = []
        freed: list[tuple[PodInfo, int]] = []
        for unit in self._victim_units(candidates):
            group, pods = unit
            if action == "reclaim":
                by_queue: dict[str, list[dict[str, float]]] = {}
                for g, ps in chosen + [unit]:
                    by_queue.setdefault(g.queue, []).append(_sum(ps))
                if not ks.reclaimable(self.queues, preemptor.queue, requested, preemptor.preemptible, by_queue):
                    continue
            chosen.append(unit)
            for pod in pods:
                i = self.cluster.index[pod.node]
                self.placement.take(i, pod, -1)
                freed.append((pod, i))
            if self._capacity_after(preemptor, requested, chosen) is not None:
                continue
            placed = self._place_quietly(batch)
            if placed is not None:
                self._evict(chosen, preemptor, action)
                self._commit(preemptor, placed)
                return True
        for pod, i in freed:
            self.placement.take(i, pod)
        return False

    def _capacity_after(self, preemptor: Group, requested: Mapping[str, float],
                        units: list[tuple[Group, list[PodInfo]]]) -> ks.Verdict | None:
        """The job's limit and quota verdict once the victims are gone."""
        for group, pods in units:
            ks.add_usage(self.queues, group.queue, _sum(pods), allocated=True, request=False,
                         non_preemptible=not group.preemptible, sign=-1.0)
        verdict = ks.capacity_verdict(self.queues, preemptor.queue, requested, preemptor.preemptible)
        for group, pods in units:
            ks.add_usage(self.queues, group.queue, _sum(pods), allocated=True, request=False,
                         non_preemptible=not group.preemptible)
        return verdict

    def _place_quietly(self, batch: list[PodInfo]) -> list[tuple[PodInfo, int]] | None:
        placed: list[tuple[PodInfo, int]] = []
        for pod in batch:
            i = None if pod.error else self.placement.place(pod)
            if i is None:
                for done, j in placed:
                    self.placement.take(j, done, -1)
                return None
            self.placement.take(i, pod)
            placed.append((pod, i))
        return placed

    def _take_back(self, groups: list[Group], action: str, may_try, candidates_of) -> None:
        """Reclaim or Preempt: jobs in queue order, each trying to free room by evicting the victims
        ``candidates_of(job, requested)`` yields."""
        jobs = JobsByQueue(self.queues, groups, self.total)
        failed = _Failures()
        while (group := jobs.pop()) is not None:
            batch = group.batch()
            if not batch:
                continue
            requested = _sum(batch)
            if failed.covers(group, batch, requested):
                continue  # a job of its queue no larger failed already (KAI's "smallest failed job")
            if not may_try(group, requested):
                continue
            if self._solve(group, batch, candidates_of(group, requested), action):
                if group.pending():
                    jobs.push(group)
            else:
                failed.add(group, batch, requested)

    def reclaim(self, groups: list[Group]) -> None:
        def candidates(group: Group, requested: Mapping[str, float]) -> Iterator[Group]:
            givers: dict[str, bool] = {}

            def may_give(queue: str) -> bool:
                if queue not in givers:
                    mine, theirs = ks.leveled(self.queues, group.queue, queue)
                    givers[queue] = ks.fits_reclaim_strategy(requested, mine, theirs, theirs.allocated())
                return givers[queue]

            order = JobsByQueue(self.queues, [g for g in self.valid if g.queue != group.queue and g.preemptible
                                              and g.running() and may_give(g.queue)], self.total, victims=True)
            return iter(order.pop, None)

        self._take_back(groups, "reclaim", lambda group, requested: ks.can_reclaim(
            self.queues, group.queue, requested, group.preemptible), candidates)

    def preempt(self, groups: list[Group]) -> None:
        def candidates(group: Group, _requested: Mapping[str, float]) -> Iterator[Group]:
            return iter(sorted((g for g in self.valid if g.queue == group.queue and g.preemptible
                                and g.priority < group.priority and g.running() and g is not group),
                               key=_job_key, reverse=True))

        self._take_back(groups, "preempt", lambda group, requested: ks.non_preemptible_over_quota(
            self.queues, group.queue, requested, group.preemptible) is None, candidates)

    def explain(self, groups: list[Group]) -> None:
        """Every ready job still pending at the end of the cycle has KAI's reason: one that no action tried
        (or whose allocation a later action of the cycle took back, e.g. an in-queue preemption of a job
        allocated by this cycle's Allocate) is tried once more against the cycle's final state, as the next
        cycle's Allocate would (the queue's limit and non-preemptible quota first, then the nodes), so its
        PodGroup's condition and its pods' ``PodScheduled=False`` say why it waits in every cycle
        (docs/developer/action-framework.md: the actions run one after another on one session; a statement
        evicts or allocates only virtually until committed)."""
        for group in groups:
            if not group.pending() or group.fit_errors or group.task_errors:
                continue
            batch = group.batch()
            if not batch:
                continue
            verdict = ks.capacity_verdict(self.queues, group.queue, _sum(batch), group.preemptible)
            if verdict is not None:
                group.fit_errors.append((verdict.reason, verdict.message, verdict.details))
                continue
            running = len(group.running())
            placed: list[tuple[PodInfo, int]] = []
            for index, pod in enumerate(batch):
                i = None if pod.error else self.placement.place(pod)
                if i is None:
                    group.task_errors[pod.key] = pod.error or self.placement.fit_error(pod)
                    self._task_failed(group, pod, index, running)
                    break
                self.placement.take(i, pod)
                placed.append((pod, i))
            for pod, i in placed:
                self.placement.take(i, pod, -1)

    # -- status

    def report(self) -> None:
        for group in self.groups:
            pending = group.pending()
            if pending and group.alive() >= group.min_member and (group.fit_errors or group.task_errors):
                errors = group.fit_errors or [(POD_SCHEDULING_ERRORS, DEFAULT_PODGROUP_ERROR, None)]
                message = fit_errors_message(errors)
                reasons = [{"reason": r, "message": m, **({"details": d} if d else {})} for r, m, d in errors]
                pod_messages = {p.key: group.task_errors.get(p.key) or message for p in pending}
                self.decisions.unschedulable.append(Unschedulable(
                    group.key, group.node_pool, message, reasons, pod_messages, bool(group.running())))
        for name, q in self.queues.items():
            self.decisions.fair_shares[name] = q.fair_share()


# ---------------------------------------------------------------------------------------------------
# What KAI's podgroup and queue controllers report


def controller_status(pod_groups: Sequence[Mapping[str, Any]], pods: Sequence[PodInfo],
                      queues: Sequence[Mapping[str, Any]], *, priority_classes: Mapping[str, int],
                      default_priority: int = 0, node_gpu_memory: Mapping[str, float] | None = None,
                      ) -> tuple[dict[tuple[str, str], dict], dict[str, dict]]:
    """PodGroup ``status.resourcesStatus`` (pkg/podgroupcontroller: ``requested`` of its pending and running
    pods, ``allocated`` of those bound, ``allocatedNonPreemptible`` for a non-preemptible group) and Queue
    ``status`` (pkg/queuecontroller/controllers/resource_updater: a queue sums its PodGroups by
    ``spec.queue``, a parent its children; ``childQueues``), whatever the shard."""
    by_group: dict[tuple[str, str], list[PodInfo]] = {}
    for pod in pods:
        name = pod.annotations.get(POD_GROUP_ANNOTATION)
        if pod.scheduler == SCHEDULER_NAME and name and pod.active:
            if pod.gpu_memory:  # a gpu-memory pod: its share of its node's GPU (or of the smallest one)
                memories = node_gpu_memory or {}
                base = memories.get(pod.node) if pod.node else min(memories.values(), default=0.0)
                pod.gpu_share = pod.gpu_memory / base if base else 0.0
            by_group.setdefault((pod.namespace, name), []).append(pod)
    empty = ks.quantities
    sums: dict[str, dict[str, dict[str, float]]] = {}
    group_status: dict[tuple[str, str], dict] = {}
    for obj in pod_groups:
        group = group_from(obj, priority_classes=priority_classes, default_priority=default_priority,
                           node_pool_key="")
        figures = {"allocated": empty(), "allocatedNonPreemptible": empty(), "requested": empty()}
        for pod in by_group.get(group.key, []):
            for r, v in pod_amounts(pod).items():
                figures["requested"][r] += v
                if pod.node:
                    figures["allocated"][r] += v
                    if not group.preemptible:
                        figures["allocatedNonPreemptible"][r] += v
        status = {"allocated": status_list(figures["allocated"]), "requested": status_list(figures["requested"])}
        if not group.preemptible:
            status["allocatedNonPreemptible"] = status_list(figures["allocatedNonPreemptible"])
        group_status[group.key] = status
        into = sums.setdefault(group.queue, {k: empty() for k in figures})
        for kind, values in figures.items():
            for r, v in values.items():
                into[kind][r] += v
    parents = {(q.get("metadata") or {}).get("name", ""): (q.get("spec") or {}).get("parentQueue") or ""
               for q in queues}
    totals: dict[str, dict[str, dict[str, float]]] = {name: {k: empty() for k in
                                                            ("allocated", "allocatedNonPreemptible", "requested")}
                                                     for name in parents}
    for queue, figures in sums.items():
        seen: set[str] = set()
        while queue in parents and queue not in seen:
            seen.add(queue)
            for kind, values in figures.items():
                for r, v in values.items():
                    totals[queue][kind][r] += v
            queue = parents[queue]
    queue_status = {}
    for name, figures in totals.items():
        queue_status[name] = {kind: status_list(values) for kind, values in figures.items()}
        queue_status[name]["childQueues"] = sorted(n for n, parent in parents.items() if parent == name)
    return group_status, queue_status
