"""The objects a scheduler needs so that the console's pools and quotas act (docs/concepts.md#acting).

Pure functions: a snapshot of one cluster's organisation (`OrgState`, read by `enforcers.selectors`)
in, the Kubernetes objects the enforcer must hold out (plain JSON dicts, as sent to the API server).
Nothing here touches the database or the network, so every mapping rule is tested on its own.

Field names, types and units follow the published CRDs:
- KAI Scheduler `scheduling.run.ai/v2` Queue (NVIDIA/KAI-Scheduler pkg/apis/scheduling/v2/queue_types.go,
  docs/queues/README.md): GPU in devices (fractions allowed; a MIG device counts its compute slices, so a MIG
  pool's quota is in slices: `kai_pool_gpu`), CPU in millicores, memory in megabytes (10^6 bytes); `quota: -1` unlimited, `limit: -1` no limit, `limit: 0` no over-quota;
  `priority` orders over-quota allocation (default 100). `kai.scheduler/v1` SchedulingShard
  (pkg/apis/kai/v1/schedulingshard_types.go): `partitionLabelValue`, `placementStrategy.{gpu,cpu}`, and
  `args` (scheduler flags the operator passes on): `update-pod-eviction-condition: "true"`, so that a pod
  KAI evicts (reclaim, preemption) gets the `DisruptionTarget` condition before its deletion (off by
  default; cmd/scheduler/app/options, cache/evictor/default_evictor.go) and the console's Jobs, whose
  podFailurePolicy ignores such pods, replace it instead of failing.
- Kueue `kueue.x-k8s.io/v1beta2` (kubernetes-sigs/kueue apis/kueue/v1beta2): ResourceFlavor
  `nodeLabels`/`nodeTaints`, Cohort, ClusterQueue `cohortName`, `resourceGroups[].coveredResources`,
  `flavors[].resources[].{nominalQuota,borrowingLimit}` (quantities; a MIG profile's `nvidia.com/mig-<profile>`
  is covered as any other resource, its quota in slices: `kueue_gpu_quotas`), `fairSharing.weight`,
  `namespaceSelector`; LocalQueue `clusterQueue`; WorkloadPriorityClass `value`.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from kube import gpu as kube_gpu
from kube import wellknown
from typing import Any

from kube.quantity import plain_quantity
from nodepools.kube import CONSOLE_POOL_LABEL

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-capacity-console"
POOL_LABEL = CONSOLE_POOL_LABEL
OWNER_LABEL = "console.gpu-capacity.io/owner"  # "department.<name>" or "project.<name>"

KAI_QUEUE = wellknown.KAI_QUEUE
KAI_SHARD = wellknown.KAI_SHARD
KAI_EVICTION_CONDITION_FLAG = "update-pod-eviction-condition"
PRIORITY_CLASS = wellknown.PRIORITY_CLASS
KUEUE_FLAVOR = wellknown.KUEUE_FLAVOR
KUEUE_COHORT = wellknown.KUEUE_COHORT
KUEUE_CLUSTER_QUEUE = wellknown.KUEUE_CLUSTER_QUEUE
KUEUE_LOCAL_QUEUE = wellknown.KUEUE_LOCAL_QUEUE
KUEUE_PRIORITY_CLASS = wellknown.KUEUE_PRIORITY_CLASS

KAI_KINDS = (PRIORITY_CLASS, KAI_SHARD, KAI_QUEUE)
# Kueue mode writes the PriorityClasses too: the console's Jobs name them (`priorityClassName`), an API
# server refuses pods naming a missing one, and Kueue takes a Workload's priority from them.
KUEUE_KINDS = (PRIORITY_CLASS, KUEUE_PRIORITY_CLASS, KUEUE_FLAVOR, KUEUE_COHORT, KUEUE_CLUSTER_QUEUE, KUEUE_LOCAL_QUEUE)
# Namespaced kinds (the others are cluster-scoped).
NAMESPACED = {KUEUE_LOCAL_QUEUE}

# The reference priority classes (docs/concepts.md#workloads): below 100 preemptible, 100 and above in-quota only.
PRIORITY_CLASSES = (
    ("train", 50, "Training: preemptible, may use over-quota GPUs."),
    ("build-preemptible", 75, "Interactive build that may be preempted: may use over-quota GPUs."),
    ("build", 100, "Interactive build: not preemptible, runs within deserved quota only."),
    ("inference", 125, "Inference: not preemptible, runs within deserved quota only."),
)

# Rank (1 Lowest … 7 Highest) → KAI queue priority; Medium low, the console's default, is KAI's
# default priority 100.
RANK_PRIORITY = {1: 80, 2: 90, 3: 100, 4: 110, 5: 120, 6: 130, 7: 140}

GPU_RESOURCE = kube_gpu.GPU_RESOURCE
MIB = 1048576


@dataclass(frozen=True)
class PoolState:
    name: str
    gpu_placement: str = "binpack"
    cpu_placement: str = "binpack"
    # Taints every node of the pool carries (NoSchedule / NoExecute), as Kubernetes taint dicts.
    taints: tuple[dict[str, str], ...] = ()
    # Allocatable totals of the pool's nodes: what "unlimited" deserved CPU / memory means to Kueue.
    cpu_total_millis: int = 0
    memory_total_bytes: int = 0
    storage_total_bytes: int = 0
    # The pool's GPUs in GPU-equivalents, as KAI counts them and per resource (`kube.gpu.pool_gpus`).
    gpus: kube_gpu.PoolGpus = field(default_factory=kube_gpu.PoolGpus)


@dataclass(frozen=True)
class QuotaState:
    """One quota row, in the console's units (GPU devices, CPU cores, memory MiB; None = unlimited)."""

    gpu_deserved: Decimal = Decimal(0)
    cpu_deserved: Decimal | None = None
    memory_deserved_mib: int | None = None
    gpu_limit: Decimal | None = None
    cpu_limit: Decimal | None = None
    memory_limit_mib: int | None = None
    over_quota_weight: int = 2
    rank: int = 3


@dataclass(frozen=True)
class ProjectState:
    name: str
    department: str
    namespaces: tuple[str, ...] = ()
    allow_over_quota: bool = True
    # Pool names in the order workloads try them (the project's list, then the cluster's order).
    pool_order: tuple[str, ...] = ()
    quotas: dict[str, QuotaState] = field(default_factory=dict)  # by pool name


@dataclass(frozen=True)
class DepartmentState:
    name: str
    quotas: dict[str, QuotaState] = field(default_factory=dict)  # by pool name


@dataclass(frozen=True)
class OrgState:
    cluster: str
    pools: tuple[PoolState, ...]
    departments: tuple[DepartmentState, ...]
    projects: tuple[ProjectState, ...]
    pool_label: str = POOL_LABEL


# ---------------------------------------------------------------------------------------------------
# Names

def kai_department_queue(department: str, pool: str) -> str:
    # Department, project and pool names are DNS labels (no dots): dotted names cannot collide.
    return f"department.{department}.{pool}"


def kai_project_queue(project: str, pool: str) -> str:
    """The name pods carry in `kai.scheduler/queue` (a label value: at most 63 characters)."""
    return _label_safe(f"{project}.{pool}")


def kueue_local_queue(project: str) -> str:
    return project


def _label_safe(name: str) -> str:
    if len(name) <= 63:
        return name

    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:54].rstrip('.-')}-{digest}"


# ---------------------------------------------------------------------------------------------------
# Units

def _number(value: Decimal | int) -> int | float:
    value = Decimal(value)
    return int(value) if value == value.to_integral_value() else float(value)


def kai_gpu(value: Decimal | None, unlimited: int = -1) -> int | float:
    return unlimited if value is None else _number(value)


HUNDREDTH = Decimal("0.01")


def _scaled(value: Decimal | int, factor: Fraction) -> Decimal:
    """`value` × `factor` to the hundredth (half-even): a quota of k MIG slices, stored as GPU-equivalents to
    the thousandth (k/7 → 0.143 × k), is exactly k again (the error, under 0.0005 a slice, is far below)."""
    exact = Decimal(value) * factor.numerator / factor.denominator
    return exact.quantize(HUNDREDTH, ROUND_HALF_EVEN)


def kai_pool_gpu(pool: PoolState):
    """The unit of KAI's `gpu` quota and limit in `pool`, from the console's GPU-equivalents.

    KAI's queues count a MIG device by its compute (GPU-instance) slices — `nvidia.com/mig-1g.10gb` is 1 GPU,
    `3g.40gb` 3 (KAI Scheduler docs/queues/README.md: quotas in GPUs; pkg/scheduler/api/common_info/resources/
    mig.go) —, so the seven slices of an A100 are 7 GPUs to KAI and 1 GPU-equivalent to the console. In a pool
    whose GPUs are MIG the quota is the GPU-equivalents × the pool's KAI GPUs per GPU-equivalent
    (`kube.gpu.PoolGpus.kai_per_equivalent`: 7 for A100s, 4 for A30s), to the hundredth; whole, time-sliced
    and fractional GPUs (KAI `gpu-fraction`, `gpu-memory`) are GPU-equivalents as they are. -1 (unlimited)
    stays -1."""
    factor = pool.gpus.kai_per_equivalent()
    if factor == 1:
        return kai_gpu

    def unit(value: Decimal | None, unlimited: int = -1) -> int | float:
        return unlimited if value is None else _number(_scaled(value, factor))

    return unit


def kai_cpu(cores: Decimal | None, unlimited: int = -1) -> int:
    return unlimited if cores is None else int((Decimal(cores) * 1000).to_integral_value(ROUND_FLOOR))


def kai_memory(mib: int | None, unlimited: int = -1) -> int:
    """MiB → megabytes (10^6 bytes), rounded down so that the guarantee never exceeds what was set."""
    return unlimited if mib is None else int(mib) * MIB // 1_000_000


# ---------------------------------------------------------------------------------------------------
# Common

def _meta(name: str, state: OrgState, *, namespace: str | None = None, labels: dict[str, str] | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY, **(labels or {})}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _obj(kind: tuple[str, str, str, str], metadata: dict, **body: Any) -> dict:
    group, version, _, name = kind
    api_version = f"{group}/{version}" if group else version
    return {"apiVersion": api_version, "kind": name, "metadata": metadata, **body}


def key_of(obj: dict) -> tuple[str, str, str, str]:
    """(apiVersion, kind, namespace, name): what identifies an object across desired and actual."""
    meta = obj.get("metadata") or {}
    return obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace") or "", meta.get("name", "")


# ---------------------------------------------------------------------------------------------------
# KAI Scheduler

def _kai_resource(deserved, limit, weight: int, unit, allow_over_quota: bool) -> dict[str, Any]:
    quota = unit(deserved)
    if not allow_over_quota:
        top = quota  # over-quota off: the limit is the deserved quota
    else:
        top = unit(limit)
    return {"quota": quota, "limit": top, "overQuotaWeight": weight}


def _kai_resources(q: QuotaState, allow_over_quota: bool = True, pool: PoolState | None = None) -> dict[str, Any]:
    gpu_unit = kai_pool_gpu(pool) if pool is not None else kai_gpu
    return {
        "gpu": _kai_resource(q.gpu_deserved, q.gpu_limit, q.over_quota_weight, gpu_unit, allow_over_quota),
        "cpu": _kai_resource(q.cpu_deserved, q.cpu_limit, q.over_quota_weight, kai_cpu, allow_over_quota),
        "memory": _kai_resource(q.memory_deserved_mib, q.memory_limit_mib, q.over_quota_weight, kai_memory,
                                allow_over_quota),
    }


def priority_classes(state: OrgState) -> list[dict]:
    return [
        _obj(PRIORITY_CLASS, _meta(name, state), value=value, globalDefault=False, description=description,
             preemptionPolicy="PreemptLowerPriority")
        for name, value, description in PRIORITY_CLASSES
    ]


def kai_objects(state: OrgState) -> list[dict]:
    """PriorityClasses; a SchedulingShard per pool; per pool a department Queue and a Queue per project."""
    objects = priority_classes(state)
    departments = {d.name: d for d in state.departments}
    for pool in state.pools:
        partition = {state.pool_label: pool.name}
        objects.append(_obj(KAI_SHARD, _meta(pool.name, state), spec={
            "partitionLabelValue": pool.name,
            "placementStrategy": {"gpu": pool.gpu_placement, "cpu": pool.cpu_placement},
            "args": {KAI_EVICTION_CONDITION_FLAG: "true"},
        }))
        for department in state.departments:
            q = department.quotas.get(pool.name, QuotaState())
            objects.append(_obj(KAI_QUEUE, _meta(kai_department_queue(department.name, pool.name), state, labels={
                **partition, OWNER_LABEL: f"department.{department.name}"}), spec={
                "displayName": f"{department.name} in {pool.name}",
                "priority": RANK_PRIORITY.get(q.rank, 100),
                "resources": _kai_resources(q, pool=pool),
            }))
        for project in state.projects:
            if project.department not in departments:
                continue
            q = project.quotas.get(pool.name, QuotaState())
            objects.append(_obj(KAI_QUEUE, _meta(kai_project_queue(project.name, pool.name), state, labels={
                **partition, OWNER_LABEL: f"project.{project.name}"}), spec={
                "displayName": f"{project.name} in {pool.name}",
                "parentQueue": kai_department_queue(project.department, pool.name),
                "priority": RANK_PRIORITY.get(q.rank, 100),
                "resources": _kai_resources(q, project.allow_over_quota, pool),
            }))
    return objects


# ---------------------------------------------------------------------------------------------------
# Kueue

# ephemeral-storage is covered too: a Job asking for storage (USER_STORAGE) asks Kueue for it, and a
# resource no flavor covers is never admitted ("resource ephemeral-storage unavailable in ClusterQueue").
STORAGE_RESOURCE = "ephemeral-storage"
COVERED = (GPU_RESOURCE, "cpu", "memory", STORAGE_RESOURCE)
# Over-quota work is reclaimable (docs/concepts.md#over-quota): a ClusterQueue whose own nominal quota is lent out takes it
# back from any borrower in its cohort, and within a queue a higher priority preempts a lower one.
# Kueue's default (Never) would leave a lender waiting behind borrowers for good.
PREEMPTION = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}


def _kueue_quota(nominal: Decimal | int, limit: Decimal | int | None, allow_over_quota: bool,
                 unit=plain_quantity) -> dict[str, str]:
    """nominalQuota = deserved; borrowingLimit = limit − deserved, none when unlimited, 0 when over-quota is off."""
    out = {"nominalQuota": unit(nominal)}
    if not allow_over_quota:
        out["borrowingLimit"] = "0"
    elif limit is not None:
        out["borrowingLimit"] = unit(max(Decimal(limit) - Decimal(nominal), Decimal(0)))
    return out


def kueue_gpu_quotas(pool: PoolState, q: QuotaState, allow_over_quota: bool,
                     mig_resources: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The GPU resources of a flavor (`nvidia.com/gpu`, then `mig_resources`), from the console's quota.

    A pool without MIG: `nvidia.com/gpu` is the GPU-equivalents as they are (a MIG resource another pool of the
    ClusterQueue publishes: 0). A pool whose GPUs are MIG: Kueue counts each extended resource by itself
    (Kueue's concepts, "Cluster Queue": a `nominalQuota` per flavor and covered resource, MIG profiles'
    `nvidia.com/mig-<profile>` among them), so each resource gets the owner's share of the pool's units of it
    — units × deserved ÷ the pool's GPU-equivalents, to the hundredth, rounded down to whole slices (or
    devices) —, and the borrowing limit is the same share of the limit less the nominal quota."""
    resources = (GPU_RESOURCE, *mig_resources)
    if not pool.gpus.mig or not pool.gpus.equivalents:
        return [{"name": GPU_RESOURCE, **_kueue_quota(q.gpu_deserved, q.gpu_limit, allow_over_quota)}] + [
            {"name": name, **_kueue_quota(0, None, allow_over_quota)} for name in mig_resources]
    out = []
    for name in resources:
        share = Fraction(pool.gpus.units.get(name, 0)) / pool.gpus.equivalents
        nominal = int(_scaled(q.gpu_deserved, share).to_integral_value(ROUND_FLOOR))
        limit = None if q.gpu_limit is None else int(_scaled(q.gpu_limit, share).to_integral_value(ROUND_FLOOR))
        out.append({"name": name, **_kueue_quota(nominal, limit, allow_over_quota)})
    return out


def _flavor_quotas(pool: PoolState, q: QuotaState, allow_over_quota: bool,
                   mig_resources: tuple[str, ...] = ()) -> dict[str, Any]:
    # Kueue has no "unlimited" nominal quota: unlimited deserved CPU / memory is the whole pool.
    cpu = q.cpu_deserved if q.cpu_deserved is not None else Decimal(pool.cpu_total_millis) / 1000
    memory_bytes = (q.memory_deserved_mib * MIB) if q.memory_deserved_mib is not None else pool.memory_total_bytes
    memory_limit = q.memory_limit_mib * MIB if q.memory_limit_mib is not None else None
    cpu_limit = q.cpu_limit
    if q.cpu_deserved is None:
        cpu_limit = None
    if q.memory_deserved_mib is None:
        memory_limit = None
    gpu, *mig = kueue_gpu_quotas(pool, q, allow_over_quota, mig_resources)
    return {"name": pool.name, "resources": [
        gpu,
        {"name": "cpu", **_kueue_quota(cpu, cpu_limit, allow_over_quota)},
        {"name": "memory", **_kueue_quota(memory_bytes, memory_limit, allow_over_quota)},
        # The console sets no storage quota: the pool's whole allocatable storage, nothing to borrow.
        {"name": STORAGE_RESOURCE, **_kueue_quota(pool.storage_total_bytes, None, allow_over_quota)},
        *mig,
    ]}


def kueue_objects(state: OrgState) -> list[dict]:
    """PriorityClasses and WorkloadPriorityClasses; a ResourceFlavor per pool; a Cohort per department; a
    ClusterQueue per project (flavors in its pool order, reclaim within the cohort) and a LocalQueue in each
    of its namespaces."""
    objects = priority_classes(state) + [
        _obj(KUEUE_PRIORITY_CLASS, _meta(name, state), value=value, description=description)
        for name, value, description in PRIORITY_CLASSES
    ]
    pools = {p.name: p for p in state.pools}
    for pool in state.pools:
        spec: dict[str, Any] = {"nodeLabels": {state.pool_label: pool.name}}
        if pool.taints:
            spec["nodeTaints"] = [dict(t) for t in pool.taints]
        objects.append(_obj(KUEUE_FLAVOR, _meta(pool.name, state), spec=spec))
    departments = {d.name for d in state.departments}
    for department in state.departments:
        objects.append(_obj(KUEUE_COHORT, _meta(department.name, state), spec={}))
    for project in state.projects:
        if project.department not in departments:
            continue
        order = [name for name in project.pool_order if name in pools]
        order += [p.name for p in state.pools if p.name not in order]
        first = project.quotas.get(order[0], QuotaState()) if order else QuotaState()
        # Every flavor of a resource group lists the group's covered resources: the MIG profiles of any of the
        # project's pools (0 in a pool that has none).
        mig = tuple(sorted({name for pool_name in order for name in pools[pool_name].gpus.mig_resources()}))
        spec = {
            "cohortName": project.department,
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(project.namespaces)}
            ]},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": dict(PREEMPTION),
            # One weight per ClusterQueue: the project's over-quota weight in its first pool.
            "fairSharing": {"weight": str(first.over_quota_weight)},
            "resourceGroups": [{
                "coveredResources": [*COVERED, *mig],
                "flavors": [_flavor_quotas(pools[name], project.quotas.get(name, QuotaState()),
                                           project.allow_over_quota, mig) for name in order],
            }] if order else [],
        }
        objects.append(_obj(KUEUE_CLUSTER_QUEUE, _meta(project.name, state, labels={
            OWNER_LABEL: f"project.{project.name}"}), spec=spec))
        for namespace in sorted(project.namespaces):
            objects.append(_obj(KUEUE_LOCAL_QUEUE, _meta(kueue_local_queue(project.name), state, namespace=namespace,
                                                         labels={OWNER_LABEL: f"project.{project.name}"}),
                                spec={"clusterQueue": project.name}))
    return objects


def desired_objects(enforcer: str, state: OrgState) -> list[dict]:
    if enforcer == "kai":
        return kai_objects(state)
    if enforcer == "kueue":
        return kueue_objects(state)
    return []
