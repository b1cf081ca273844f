"""Reads of clusters, pools, nodes and pods; each takes the user and returns only what it may see."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from datetime import timezone as dt_timezone
from decimal import Decimal
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Case, Count, F, FilteredRelation, Max, Q, Sum, Value, When
from django.db.models.functions import Cast
from django.db.models.fields.json import KeyTextTransform
from django.utils import timezone
from kubernetes import client

import gpumetrics
from access.rules import access_q
from gpumetrics import (
    NOT_CONFIGURED,
    GpuFigures,
    NodeGpuMetrics,
    Unavailable,
    config_from,
    device_metrics,
    node_gpu_metrics,
)
from kube import gpu as kube_gpu
from kube.client import api_error_message
from nodepools import capacity, kube
from nodepools.kube import PREEMPTIBLE_BELOW
from nodepools.memo import fleet_memoised, memoised
from nodepools.models import (
    Cluster,
    Node,
    NodeGpuFigures,
    NodePool,
    NodePoolQuerySet,
    NodeQuerySet,
    NodeStatus,
    Pod,
    PodQuerySet,
)
from nodepools.sync import api_client_for


def cluster_list(*, user: Any):
    return Cluster.objects.restrict(user, "view")


def pool_list(*, user: Any, cluster: Cluster | None = None) -> NodePoolQuerySet:
    """Pools with capacity and allocation annotations (nodes, GPUs total / ready / allocated, ...)."""
    pools = NodePool.objects.restrict(user, "view").select_related("cluster").with_capacity()
    return pools.filter(cluster=cluster) if cluster is not None else pools


def node_list(*, user: Any, cluster: Cluster | None = None) -> NodeQuerySet:
    nodes = Node.objects.restrict(user, "view").select_related("cluster", "pool")
    return nodes.filter(cluster=cluster) if cluster is not None else nodes


def pod_list(*, user: Any, node: Node | None = None) -> PodQuerySet:
    pods = Pod.objects.restrict(user, "view").select_related("project")
    return pods.filter(node=node) if node is not None else pods



# ---------------------------------------------------------------------------------------------------
# Usage for the console's tables, by grouped queries (one pass over pods), never per-row subqueries

USAGE_SORTS = {"gpu_allocated", "gpu_free", "cpu_allocated", "memory_allocated", "pods", "gpu_devices"}


def node_usage(node_ids) -> dict[int, tuple]:
    """(GPUs, CPU millis, memory bytes, pod count) of the running pods of each node (the usage the
    database keeps on the node: `Node.usage_*`)."""
    rows = Node.objects.filter(pk__in=list(node_ids)).values_list("pk", *Node.USAGE_FIELDS)
    return {pk: (g, c, m, n) for pk, g, c, m, n in rows}


def nodes_attach_usage(nodes: list[Node]) -> list[Node]:
    """Set gpu_allocated, cpu_allocated_millis, memory_allocated_bytes, pod_count, gpu_ready and gpu_free
    on nodes, from the usage the database keeps on each node (`Node.usage_*`): one query of those rows
    (the instances may have been read before their pods last changed)."""
    usage = node_usage(n.pk for n in nodes) if nodes else {}
    for node in nodes:
        gpus, cpu, memory, count = usage.get(node.pk, (Decimal(0), 0, 0, 0))
        node.cpu_allocated_millis, node.memory_allocated_bytes, node.pod_count = cpu or 0, memory or 0, count or 0
        capacity.node_attach(node, gpus or Decimal(0))  # gpu_ready, gpu_allocated, gpu_free (one definition)
    return nodes


def nodes_attach_sharing(nodes: list[Node]) -> list[Node]:
    """Set `node.sharing` (`capacity.node_sharing`: MIG slices by profile with what pods use of each, replicas
    and KAI fractions in use) on nodes, from one query of the GPU requests of their active pods."""
    requests: dict[int, list[dict[str, Any]]] = {node.pk: [] for node in nodes}
    if nodes:
        for node_id, record in (Pod.objects.active().filter(node_id__in=list(requests)).exclude(gpu_request={})
                                .order_by().values_list("node_id", "gpu_request")):
            requests[node_id].append(record)
    for node in nodes:
        node.sharing = capacity.node_sharing(node.gpu_sharing, requests.get(node.pk, []), physical=node.gpu_capacity)
    return nodes


@dataclass
class NodeGpuRoom:
    """One node's GPUs by share, as the fit reads them: `ready` (the console calls it Ready), its exposure
    (kube.gpu: whole, mig-mixed, time-slicing, ...); per MIG profile [allocatable slices, slices its active
    pods hold, one slice's share of a GPU (text)]; and the GPUs KAI fractions share on it: the share its
    fractional pods hold on each (grouped by KAI's `runai-gpu-group` label; a fractional pod not grouped yet
    holds a GPU of its own)."""

    ready: bool
    exposure: str = "whole"
    slices: dict[str, list] = field(default_factory=dict)
    shared: list[Decimal] = field(default_factory=list)

    def slices_free(self, profile: str) -> int:
        """Slices of `profile` free on it (none on a node that is not Ready)."""
        allocatable, allocated, _ = self.slices.get(profile, (0, 0, "0"))
        return max(allocatable - allocated, 0) if self.ready else 0


def pool_node_gpu_room(pool: NodePool) -> dict[str, NodeGpuRoom]:
    """Per node name of the pool (only nodes of MIG slices, or with fractional pods), its
    `NodeGpuRoom`: the one reading of free MIG slices that the pool page, "Will it fit?", the fit API and the
    dry run share. Two queries (the nodes not of whole GPUs, the pool's active pods holding MIG slices or
    fractions), kept while the fleet holds still (`fleet_memoised`)."""
    return fleet_memoised(("pool_node_gpu_room", pool.pk), lambda: _read_node_gpu_room(pool))


def _read_node_gpu_room(pool: NodePool) -> dict[str, NodeGpuRoom]:
    rooms: dict[int, tuple[str, NodeGpuRoom]] = {}
    resources: dict[int, dict[str, str]] = {}  # node id -> {resource: profile}
    # The nodes of MIG slices (a time-sliced node's exposure is read with the pool's nodes, `pools_node_room`),
    # their sharing read as text and each distinct one decoded once (a pool's nodes share a handful of layouts).
    mig_nodes = Node.objects.filter(pool=pool, gpu_exposure__in=(kube_gpu.MIG_MIXED, kube_gpu.MIG_SINGLE))
    layouts: dict[str, tuple[str, bool, tuple[tuple[str, int, str, str], ...]]] = {}
    replicated: set[int] = set()  # MIG slices time-sliced too: their pods are counted by what they ask
    for pk, name, text, status in (mig_nodes.order_by()
                                   .values_list("pk", "name", Cast("gpu_sharing", models.TextField()), "status")):
        layout = layouts.get(text)
        if layout is None:
            sharing = (orjson.loads(text) if text else None) or {}
            layout = layouts[text] = (str(sharing.get("exposure") or kube_gpu.WHOLE),
                                      int(sharing.get("replicas") or 1) > 1, tuple(
                (item["profile"], int(item.get("allocatable") or 0), str(item.get("share") or "0"), item["resource"])
                for item in sharing.get("slices") or ()))
        if layout[1]:
            replicated.add(pk)
        room = NodeGpuRoom(capacity.is_ready(status), layout[0])
        for profile, allocatable, share, resource in layout[2]:
            room.slices[profile] = [allocatable, 0, share]
            resources.setdefault(pk, {})[resource] = profile
        rooms[pk] = (name, room)
    active = Pod.objects.active().order_by()
    fractional = kube_gpu.FRACTIONAL_KINDS
    # The slices the active pods of those nodes hold: the units their GPU-time is billed in (kube.gpu.billing_unit:
    # a pod of one MIG profile is billed in slices of it; KAI fractions and mixes in GPU-equivalents), summed per
    # node and profile from the index that covers them (`pod_node_gpu_units`), no pod row read.
    for node_id, unit, units in (active.filter(node__in=mig_nodes)
                                 .exclude(gpu_unit__in=(kube_gpu.UNIT_WHOLE, kube_gpu.UNIT_FRACTION))
                                 .values("node_id", "gpu_unit").annotate(units=Sum("gpu_units"))
                                 .values_list("node_id", "gpu_unit", "units")):
        held_slice = rooms[node_id][1].slices.get(unit)
        if held_slice is not None and node_id not in replicated:
            held_slice[1] += int(units or 0)
    # A pod asking slices of several profiles (or whole GPUs beside slices) is billed in GPU-equivalents, and a
    # replica of a time-sliced slice in its share: their requests, grouped by node and by what they ask, each
    # distinct request decoded once. The few such pods are found in the index first (a KAI fraction asks no
    # resource: it adds nothing here).
    requests: dict[str, dict[str, Any]] = {}
    counted_by_request = (active.filter(node__in=mig_nodes)
                          .filter(Q(gpu_unit=kube_gpu.UNIT_FRACTION) | Q(node_id__in=sorted(replicated))).values("pk"))
    for node_id, text, count in (Pod.objects.filter(pk__in=counted_by_request).order_by()
                                 .values("node_id", text=Cast("gpu_request", models.TextField()))
                                 .annotate(count=Count("pk")).values_list("node_id", "text", "count")):
        record = requests.get(text)
        if record is None:
            record = requests[text] = orjson.loads(text) if text else {}
        held_slices = rooms[node_id][1].slices
        for resource, asked in (record.get("resources") or {}).items():
            profile = resources[node_id].get(resource)
            if profile is not None:
                held_slices[profile][1] += int(kube_gpu.fraction_of(asked)) * count
    # The GPUs KAI fractions share: per node, the share held on each GPU group (a pod not grouped yet holds a
    # GPU of its own), summed by the database.
    groups: dict[int, dict[str, Decimal]] = {}
    for node_id, node_name, status, exposure, group, pod_pk, gpus in (
            active.filter(gpu_kind__in=fractional, node__pool=pool)
            .annotate(group=KeyTextTransform(kube_gpu.GPU_GROUP_LABEL, "labels"))
            .annotate(key=Case(When(group__isnull=True, then=F("pk")), default=Value(0)))
            .values("node_id", "node__name", "node__status", "node__gpu_exposure", "group", "key")
            .annotate(gpus=Sum("gpus")).values_list("node_id", "node__name", "node__status", "node__gpu_exposure",
                                                    "group", "key", "gpus")):
        if node_id not in rooms:
            rooms[node_id] = (node_name, NodeGpuRoom(capacity.is_ready(status), exposure or kube_gpu.WHOLE))
        held = groups.setdefault(node_id, {})
        key = group or f"pod-{pod_pk}"
        held[key] = held.get(key, Decimal(0)) + Decimal(gpus or 0)
    for node_id, held in groups.items():
        rooms[node_id][1].shared = sorted(min(value, Decimal(1)) for value in held.values())
    return {name: room for name, room in rooms.values()}


def pool_gpu_shapes(pool: NodePool) -> dict[str, Any]:
    """A pool's GPUs by how they are shared: per exposure the nodes and physical GPUs; per MIG profile the
    slices published, allocatable and allocated (its pods' requests), free on the nodes the console calls
    Ready (`pool_node_gpu_room`: what pods of one slice of that profile can take now, all at once for a
    gang) and the most free on one node, their memory and share; replicas per GPU seen. One query for the
    nodes, and `pool_node_gpu_room`'s (shared with "Will it fit?" in one request)."""
    exposures: dict[str, dict[str, int]] = {}
    slices: dict[str, dict[str, Any]] = {}
    replicas: set[int] = set()
    layouts: set[str] = set()
    # The pool's nodes grouped by how they share their GPUs (as stored, text) and their physical GPUs: a handful of
    # groups, each decoded once.
    for text, physical, nodes in (Node.objects.filter(pool=pool).order_by()
                                  .values(text=Cast("gpu_sharing", models.TextField()), physical=F("gpu_capacity"))
                                  .annotate(nodes=Count("pk")).values_list("text", "physical", "nodes")):
        sharing = (orjson.loads(text) if text else None) or {}
        if not physical and not sharing:
            continue
        exposure = sharing.get("exposure") or "whole"
        entry = exposures.setdefault(exposure, {"nodes": 0, "gpus": 0})
        entry["nodes"] += nodes
        entry["gpus"] += (physical or 0) * nodes
        if int(sharing.get("replicas") or 1) > 1:
            replicas.add(int(sharing["replicas"]))
        if sharing.get("mig_config"):
            layouts.add(sharing["mig_config"])
        for item in sharing.get("slices") or ():
            row = slices.setdefault(item["profile"], {"profile": item["profile"], "count": 0, "allocatable": 0,
                                                      "allocated": 0, "free": 0, "most_free_on_a_node": 0,
                                                      "memory_mib": item.get("memory_mib"), "share": item.get("share")})
            row["count"] += int(item.get("capacity") or 0) * nodes
            row["allocatable"] += int(item.get("allocatable") or 0) * nodes
    for room in pool_node_gpu_room(pool).values():
        for profile, (_, allocated, _) in room.slices.items():
            row = slices[profile]
            row["allocated"] += allocated
            free = room.slices_free(profile)
            row["free"] += free
            row["most_free_on_a_node"] = max(row["most_free_on_a_node"], free)
    rows = sorted(slices.values(), key=lambda r: (kube_gpu.fraction_of(r["share"] or 0), r["profile"]))
    for row in rows:
        row["share"] = kube_gpu.to_decimal(kube_gpu.fraction_of(row["share"] or 0))
    return {"exposures": dict(sorted(exposures.items())), "slices": rows, "replicas": sorted(replicas),
            "layouts": sorted(layouts)}


NODE_TABLE_FIELDS = (
    "name", "cluster_id", "pool_id", "status", "status_reasons", "gpu_product", "gpu_capacity", "gpu_allocatable",
    "gpu_memory_mib", "gpu_sharing", "mig_config", "mig_config_state", "cpu_allocatable_millis", "memory_allocatable_bytes", "zone", "instance_type", "capacity_type",
    "cluster__name", "pool__name",
)


NODE_USAGE_FIELDS = ("gpu_allocated", "cpu_allocated_millis", "memory_allocated_bytes", "pod_count")


def nodes_annotate_usage(nodes: NodeQuerySet) -> NodeQuerySet:
    """Annotate gpu_allocated, cpu_allocated_millis, memory_allocated_bytes and pod_count on every node: the
    usage the database keeps on the node (`Node.usage_*`, recounted by triggers on the pods table), so that
    sorting by them reads an index and an export reads them with the node, never summing the pods."""
    if "pod_count" in nodes.query.annotations:
        return nodes
    return nodes.annotate(gpu_allocated=F("usage_gpus"), cpu_allocated_millis=F("usage_cpu_millis"),
                          memory_allocated_bytes=F("usage_memory_bytes"), pod_count=F("usage_pods"))


def node_table_list(*, user: Any, sort: str = "") -> NodeQuerySet:
    """Nodes the user may see, with the fields the nodes table shows. Usage columns are filled per page
    by `nodes_attach_usage` (one grouped query); only when the table is sorted by one of them does the
    database compute usage for every row, by `nodes_annotate_usage` (one grouped pass, joined)."""
    nodes = node_list(user=user).only(*NODE_TABLE_FIELDS)
    key = sort.lstrip("-")
    if key not in USAGE_SORTS:
        return nodes
    if key == "gpu_devices":
        return nodes.annotate(gpu_ready=capacity.ready_expr())
    nodes = nodes_annotate_usage(nodes)
    if key == "gpu_free":
        nodes = nodes.annotate(gpu_ready=capacity.ready_expr(), gpu_free=capacity.free_expr())
    return nodes


def pod_usage(pool_ids) -> list[dict[str, Any]]:
    """What running pods use, grouped by (pool, project): one pass over the pods serves the pool
    totals, the quota rows' allocation, the overview chart, the fair share and "Why is it waiting?".
    Keys: pool_id, project_id, gpu, np (GPUs of non-preemptible pods), cpu (millis), mem (bytes), pods.
    Read once per request inside a `nodepools.memo` scope, and kept across requests while the fleet holds still
    (`fleet_memoised`; the rows are shared: do not change them). The sums of `_pod_usage_rows` over the
    schedulers."""
    pool_ids = tuple(sorted(set(pool_ids)))
    return fleet_memoised(("pod_usage", pool_ids), lambda: _over_schedulers(_pod_usage_rows(pool_ids)))


def pod_usage_by_scheduler(pool_ids) -> list[dict[str, Any]]:
    """`pod_usage` split by the scheduler that placed the pods (`Pod.scheduler_name`; "" read as
    default-scheduler): what a scheduler counts against its queues is its own pods' use. Keys: pool_id,
    project_id, scheduler, gpu, np. The same pods as `pod_usage` (`Pod.objects.active()`): summed over the
    schedulers, the same figures (both are read from the same rows, `_pod_usage_rows`)."""
    pool_ids = tuple(sorted(set(pool_ids)))
    return fleet_memoised(("pod_usage_by_scheduler", pool_ids), lambda: [
        {"pool_id": r["pool_id"], "project_id": r["project_id"], "scheduler": r["scheduler"], "gpu": r["gpu"],
         "np": r["np"]} for r in _pod_usage_rows(pool_ids)])


def _pod_usage_rows(pool_ids: tuple[int, ...]) -> list[dict[str, Any]]:
    """The running pods' use grouped by (pool, project, scheduler), in one pass over the pods' covering index
    (`pod_usage_cover`), kept while the fleet holds still. Keys: pool_id, project_id, scheduler, gpu, np, cpu,
    mem, pods."""
    def read() -> list[dict[str, Any]]:
        rows = (Pod.objects.active().filter(node__pool_id__in=list(pool_ids)).order_by()
                .values("node__pool_id", "project_id", "scheduler_name")
                .annotate(gpu=Sum("gpus"), np=Sum("gpus", filter=Q(priority__gte=PREEMPTIBLE_BELOW)),
                          cpu=Sum("cpu_millis"), mem=Sum("memory_bytes"), pods=Count("pk")))
        return [{"pool_id": r["node__pool_id"], "project_id": r["project_id"], "scheduler": r["scheduler_name"],
                 "gpu": r["gpu"], "np": r["np"], "cpu": r["cpu"], "mem": r["mem"], "pods": r["pods"]} for r in rows]

    return fleet_memoised(("pod_usage_rows", pool_ids), read)


_SUMMED = ("gpu", "np", "cpu", "mem", "pods")


def _over_schedulers(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of `_pod_usage_rows` summed over the schedulers, per (pool, project): each sum as the database's
    SUM would give it over the pods of all the schedulers (None where none of them had a value)."""
    out: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        key = (r["pool_id"], r["project_id"])
        found = out.get(key)
        if found is None:
            out[key] = {"project_id": r["project_id"], **{k: r[k] for k in _SUMMED}, "pool_id": r["pool_id"]}
            continue
        for k in _SUMMED:
            value = r[k]
            if value is not None:
                found[k] = value if found[k] is None else found[k] + value
    return list(out.values())


POOL_USAGE_FIELDS = (
    "node_count", "ready_node_count", *capacity.POOL_FIGURES, "cpu_total_millis",
    "memory_total_bytes", "cpu_allocated_millis", "memory_allocated_bytes", "workload_count",
)

# Figures an app above this one adds to every pool row, `{attribute: (figures(pool_ids) -> {pool_id: value},
# default)}`, registered in its AppConfig.ready() (as the sync's informers are): this app never names them.
POOL_FIGURES: dict[str, tuple[Callable[[list[int]], dict[int, Any]], Any]] = {}


def register_pool_figure(attribute: str, figures: Callable[[list[int]], dict[int, Any]], *, default: Any) -> None:
    """`pools_attach_usage` sets `pool.<attribute>` to `figures(ids)[pool.pk]` (one grouped query for every pool),
    `default` for a pool it does not name."""
    POOL_FIGURES[attribute] = (figures, default)


def pool_node_totals() -> dict[str, Any]:
    """The aggregates of a pool's nodes that `pools_attach_usage` sets (node_count ... memory_total_bytes)."""
    ready = Q(status=NodeStatus.READY)
    return {"node_count": Count("pk"), "ready_node_count": Count("pk", filter=ready),
            **capacity.pool_gpu_totals(),
            "cpu_total_millis": Sum("cpu_allocatable_millis"), "memory_total_bytes": Sum("memory_allocatable_bytes")}


def pools_node_totals(pool_ids) -> dict[int, dict[str, Any]]:
    """Per pool id, its nodes' `pool_node_totals` (one grouped query), kept while the fleet holds still."""
    ids = tuple(sorted(set(pool_ids)))
    return fleet_memoised(("pools_node_totals", ids), lambda: {
        r["pool_id"]: r for r in Node.objects.filter(pool_id__in=list(ids)).order_by().values("pool_id")
        .annotate(**pool_node_totals())})


def pools_attach_usage(pools: list[NodePool], usage: list[dict[str, Any]] | None = None,
                       nodes: dict[int, dict[str, Any]] | None = None) -> list[NodePool]:
    """Set the attributes `NodePool.objects.with_capacity()` annotates, and the registered `POOL_FIGURES`, with
    grouped queries over nodes (or the given `pool_node_totals` per pool id), pods (or the given `pod_usage`)
    and one per figure, whatever the number of rows."""
    ids = [p.pk for p in pools]
    if nodes is None:
        nodes = pools_node_totals(ids)
    pods: dict[int, dict[str, Any]] = {}
    for r in usage if usage is not None else pod_usage(ids):
        # (GPUs allocated come from the nodes: `capacity.pool_gpu_totals`, ready nodes apart from the others.)
        total = pods.setdefault(r["pool_id"], {"cpu_allocated_millis": 0, "memory_allocated_bytes": 0,
                                               "workload_count": 0})
        total["cpu_allocated_millis"] += r["cpu"] or 0
        total["memory_allocated_bytes"] += r["mem"] or 0
        # Workloads are the projects' pods; system pods (NVIDIA operands, ...) still use allocation.
        total["workload_count"] += r["pods"] if r["project_id"] else 0
    figures = {name: (compute(ids), default) for name, (compute, default) in POOL_FIGURES.items()}
    defaults = capacity.pool_defaults()
    for pool in pools:
        values = {**nodes.get(pool.pk, {}), **pods.get(pool.pk, {})}
        for name in POOL_USAGE_FIELDS:
            value = values.get(name)
            setattr(pool, name, value if value is not None else defaults.get(name, 0))
        for name, (by_pool, default) in figures.items():
            value = by_pool.get(pool.pk)
            setattr(pool, name, value if value is not None else default)
    return pools


def pool_table_list(*, user: Any, cluster: Cluster | None = None) -> NodePoolQuerySet:
    """Pools the user may see; `pools_attach_usage` adds capacity, allocation and the registered figures."""
    pools = NodePool.objects.restrict(user, "view").select_related("cluster")
    return pools.filter(cluster=cluster) if cluster is not None else pools


# ---------------------------------------------------------------------------------------------------
# Pool membership and what a change of it shifts (before saving: pool create, relabel, node move)

def pool_label_selectors(pools) -> tuple[Any, list[tuple[Any, str, str]]]:
    """(the default pool, [(pool, key, value)] of the others in creation order): the membership rule of
    `services.nodes_assign_pools` and the sync (a node in two pools counts in the first created). A pool
    not saved yet comes last, as it will be created last."""
    late = datetime.max.replace(tzinfo=dt_timezone.utc)
    ordered = sorted(pools, key=lambda p: (p.created or late, p.pk or 2**63))
    default = next((p for p in ordered if p.is_default), None)
    return default, [(p, p.label_key, p.label_value) for p in ordered if not p.is_default]


def _membership(pools, labels_by_node: dict[int, dict]) -> dict[int, int]:
    """node pk -> index in `pools` of the pool it belongs to, by `pool_label_selectors` + kube.resolve_pool."""
    slots = {id(p): i for i, p in enumerate(pools)}
    default, label_selectors = pool_label_selectors(pools)
    result = {}
    for pk, labels in labels_by_node.items():
        pool, _ = kube.resolve_pool(labels, label_selectors)
        result[pk] = slots[id(pool if pool is not None else default)]
    return result


@dataclass
class PoolFlow:
    """Nodes going from one pool to another."""

    source: NodePool
    target: NodePool
    nodes: list[str] = field(default_factory=list)
    node_ids: list[int] = field(default_factory=list)
    gpus: int = 0
    gpus_ready: int = 0
    gpus_allocated: Decimal = Decimal(0)
    workloads: int = 0


@dataclass
class PoolBalance:
    """A pool's ready GPUs before and after a change, against its departments' deserved GPUs."""

    pool: NodePool
    nodes_before: int
    nodes_after: int
    ready_before: int
    ready_after: int
    deserved: Decimal

    @property
    def over_before(self) -> bool:
        return self.deserved > self.ready_before

    @property
    def over_after(self) -> bool:
        return self.deserved > self.ready_after

    @property
    def short_by(self) -> Decimal:
        return self.deserved - self.ready_after


@dataclass
class CapacityPreview:
    """What a change of pool definitions or node labels moves, and the quota it leaves uncovered."""

    flows: list[PoolFlow]
    balances: list[PoolBalance]
    subject: NodePool | None = None  # the pool created or relabelled
    subject_nodes: int = 0
    # node pk -> the labels it would carry (a node move); the others keep theirs. For the apps above that
    # say what else the change does (the places "capacity-preview.consequences" of the template).
    labels_after: dict[int, dict[str, str]] = field(default_factory=dict)

    @property
    def nodes_moved(self) -> int:
        return sum(len(f.nodes) for f in self.flows)

    @property
    def oversubscribed(self) -> list[PoolBalance]:
        return [b for b in self.balances if b.over_after]

    @property
    def subject_empty(self) -> bool:
        return self.subject is not None and not self.subject.is_default and self.subject_nodes == 0

    def as_dict(self) -> dict[str, Any]:
        """For the API (a dry run)."""
        return {
            "nodes_moved": self.nodes_moved,
            "flows": [{"from_pool": f.source.name, "to_pool": f.target.name, "nodes": f.nodes, "gpus": f.gpus,
                       "ready_gpus": f.gpus_ready, "allocated_gpus": str(f.gpus_allocated),
                       "workloads": f.workloads} for f in self.flows],
            "pools": [{"pool": b.pool.name, "nodes_before": b.nodes_before, "nodes_after": b.nodes_after,
                       "ready_gpus_before": b.ready_before, "ready_gpus_after": b.ready_after,
                       "departments_deserved_gpus": str(b.deserved), "oversubscribed": b.over_after}
                      for b in self.balances],
            "empty": self.subject_empty,
        }


def capacity_preview(
    *,
    user: Any,
    cluster: Cluster,
    replace: NodePool | None = None,
    add: NodePool | None = None,
    labels: dict[int, dict[str, str]] | None = None,
) -> CapacityPreview:
    """What would move if pool `replace` (same pk, changed label) or a new unsaved pool `add` were saved,
    or if some nodes carried other `labels` (node pk -> labels): per (from, to) pool the nodes, GPUs
    and running workloads, and per pool concerned its ready GPUs before and after against the sum of
    its departments' deserved GPUs. Membership follows the sync's rule (`pool_label_selectors`)."""
    labels = labels or {}
    before = list(NodePool.objects.filter(cluster=cluster))
    after = [replace if replace is not None and p.pk == replace.pk else p for p in before]
    if add is not None:
        after.append(add)
    # The system itself (user None) sees every node; anyone else what restrict() allows.
    visible = Node.objects.all() if user is None else Node.objects.restrict(user, "view")
    nodes = list(visible.filter(cluster=cluster)
                 .values_list("pk", "name", "labels", "status", "gpu_allocatable"))
    was = _membership(before, {pk: node_labels for pk, _, node_labels, _, _ in nodes})
    will = _membership(after, {pk: labels.get(pk, node_labels) for pk, _, node_labels, _, _ in nodes})
    n_slots = len(after)
    count_before, count_after = [0] * n_slots, [0] * n_slots
    ready_before, ready_after = [0] * n_slots, [0] * n_slots
    moved: dict[tuple[int, int], list[tuple[int, str, int, int]]] = {}
    for pk, name, _, status, gpus in nodes:
        ready = capacity.node_figures(status, gpus, 0)["gpu_ready"]
        a, b = was[pk], will[pk]
        count_before[a] += 1
        ready_before[a] += ready
        count_after[b] += 1
        ready_after[b] += ready
        if a != b:
            moved.setdefault((a, b), []).append((pk, name, gpus, ready))
    node_ids = [n[0] for group in moved.values() for n in group]
    usage = {r["node_id"]: r for r in Pod.objects.active().filter(node_id__in=node_ids).order_by()
             .values("node_id").annotate(g=Sum("gpus"), w=Count("pk", filter=Q(project__isnull=False)))}
    flows = []
    for (a, b), group in sorted(moved.items(), key=lambda item: (after[item[0][0]].name, after[item[0][1]].name)):
        flow = PoolFlow(source=after[a], target=after[b])
        for pk, name, gpus, ready in sorted(group, key=lambda n: n[1]):
            flow.nodes.append(name)
            flow.node_ids.append(pk)
            flow.gpus += gpus
            flow.gpus_ready += ready
            flow.gpus_allocated += (usage.get(pk) or {}).get("g") or Decimal(0)
            flow.workloads += (usage.get(pk) or {}).get("w") or 0
        flows.append(flow)
    concerned = {a for a, _ in moved} | {b for _, b in moved}
    subject = add if add is not None else replace
    slot = next((i for i, p in enumerate(after) if p is subject), None)
    if slot is not None:
        concerned.add(slot)
    deserved = dict(NodePool.objects.filter(pk__in=[after[i].pk for i in concerned if after[i].pk]).annotate(
        d=Sum("quotas__gpu_deserved", filter=Q(quotas__department__isnull=False))).values_list("pk", "d"))
    balances = [
        PoolBalance(pool=after[i], nodes_before=count_before[i], nodes_after=count_after[i],
                    ready_before=ready_before[i], ready_after=ready_after[i],
                    deserved=deserved.get(after[i].pk) or Decimal(0))
        for i in sorted(concerned, key=lambda i: (not after[i].is_default, after[i].name))
    ]
    return CapacityPreview(flows=flows, balances=balances, subject=subject,
                           subject_nodes=count_after[slot] if slot is not None else 0, labels_after=labels)


def node_live_object(*, node: Node) -> dict[str, Any]:
    """The Node object as its cluster has it now (raw JSON); raises what the client raises."""
    with api_client_for(node.cluster) as api_client:
        response = client.CoreV1Api(api_client).read_node(node.name, _preload_content=False,
                                                          _request_timeout=(5, 15))
        return orjson.loads(response.data)


def pool_labels_of(cluster: Cluster) -> list[tuple[str, str]]:
    """(key, value) of every pool of the cluster but the default."""
    return list(NodePool.objects.filter(cluster=cluster, is_default=False).values_list("label_key", "label_value"))


@dataclass
class NodeMovePreview:
    """What moving a node to a pool does: its label changes, the GPU types it joins, the capacity shift."""

    node: Node
    pool: NodePool
    resource_version: str
    plan: Any  # kube.LabelMovePlan
    capacity: CapacityPreview
    gpu_type: str
    pool_gpu_types: list[str]

    @property
    def overwrites(self) -> list:
        return [c for c in self.plan.changes if c.overwrites]

    @property
    def gpu_type_differs(self) -> bool:
        return bool(self.pool_gpu_types) and self.gpu_type not in self.pool_gpu_types


def node_move_preview(*, user: Any, node: Node, pool: NodePool, live: dict[str, Any] | None = None) -> NodeMovePreview:
    """Read the Node from its cluster and say what moving it to `pool` would do (nothing is written).
    Raises ValidationError (naming the node and the cluster's message) when the Node cannot be read."""
    if live is None:
        try:
            live = node_live_object(node=node)
        except Exception as exc:
            raise ValidationError(
                {"pool": f"Could not move node '{node.name}' to pool '{pool.name}': {api_error_message(exc)}"}
            ) from None
    metadata = live.get("metadata") or {}
    labels = dict(metadata.get("labels") or {})
    target = None if pool.is_default else (pool.label_key, pool.label_value)
    plan = kube.plan_label_move(labels, metadata.get("annotations") or {}, target, pool_labels_of(node.cluster))
    capacity = capacity_preview(user=user, cluster=node.cluster, labels={node.pk: plan.labels})
    pool_gpu_types = sorted(set(
        Node.objects.restrict(user, "view").filter(pool=pool).exclude(pk=node.pk).exclude(gpu_product="")
        .values_list("gpu_product", flat=True)))
    return NodeMovePreview(
        node=node, pool=pool, resource_version=str(metadata.get("resourceVersion") or ""), plan=plan,
        capacity=capacity, gpu_type=labels.get(kube_gpu.LABEL_GPU_PRODUCT, ""), pool_gpu_types=pool_gpu_types,
    )


# ---------------------------------------------------------------------------------------------------
# GPU utilization and memory from the DCGM exporter, through each cluster's Prometheus (gpumetrics):
# one query per cluster and page whatever the number of rows, within the page's budget (gpumetrics'
# timeout, shared by the clusters of the page); no figure is "—" with the reason.

NO_GPU = "no GPU on this node"
POOL_WITHOUT_GPU_NODES = "no GPU nodes in this pool"
NO_BUDGET = gpumetrics.NO_BUDGET


class GpuBudget(gpumetrics.Budget):
    """What is left of a page's time budget for Prometheus (GPUMETRICS_TIMEOUT seconds unless given),
    shared by its queries: a page makes one and hands it to each read (the node page: its figures, then
    its devices)."""


def cluster_prometheus(cluster_ids) -> dict[int, Any]:
    """cluster id -> its PrometheusConfig (None when it names no Prometheus); one query."""
    fields = ("name", "prometheus_url", "prometheus_bearer_token_file", "prometheus_basic_auth_file",
              "prometheus_label_matchers")
    return {c.pk: config_from(c) for c in Cluster.objects.filter(pk__in=set(cluster_ids)).only(*fields)}


def _per_cluster(configs: dict[int, Any], cluster_id: int, budget: GpuBudget, call):
    config = configs.get(cluster_id)
    if config is None:
        return NOT_CONFIGURED
    if budget.spent():  # what spent it (e.g. this cluster's Prometheus timing out) is the reason
        return Unavailable(budget.spent_reason(cluster_id))
    result = call(config, budget.left())
    if isinstance(result, Unavailable):
        budget.note(cluster_id, result.reason)
    return result


def node_gpu_metrics_by_cluster(nodes_by_cluster: dict[int, list[str] | None], *, budget: GpuBudget | None = None,
                                idle: bool = True) -> dict[int, Any]:
    """cluster id -> gpumetrics.node_gpu_metrics of those node names (None: all its nodes) or Unavailable
    (`idle=False` where no idle count is shown: the nodes table and its CSV)."""
    budget = budget or GpuBudget()
    configs = cluster_prometheus(nodes_by_cluster)
    return {cid: _per_cluster(configs, cid, budget, lambda c, left: node_gpu_metrics(c, names, timeout=left, idle=idle))
            for cid, names in nodes_by_cluster.items()}


def node_gpu_figures(node_metrics: dict[int, Any], cluster_id: int, name: str, gpu_capacity: int):
    """(GpuFigures or None, reason) of one node from `node_gpu_metrics_by_cluster`'s answer."""
    if not gpu_capacity:
        return None, NO_GPU
    result = node_metrics.get(cluster_id)
    if result is None:
        return None, "not loaded"
    if not result:
        return None, result.reason
    figures = result.get(name)
    return figures, "" if figures is not None else result.missing_reason


def nodes_attach_gpu_metrics(nodes: list[Node], *, budget: GpuBudget | None = None, idle: bool = True,
                             stored: bool = False) -> list[Node]:
    """Set `gpu_metrics` (gpumetrics.GpuFigures or None) and `gpu_metrics_reason` (why None) on nodes
    (`idle=False`: without the idle count, which the nodes table does not show).

    `stored=True` (the tables of nodes: the nodes page, a pool's page): a node of a cluster whose last round
    of the sync's leader is fresh (`node_gpu_figures_fresh`: at most a few rounds old, not failed) gets the
    figures that round stored, the ones the CSV carries, and its page asks Prometheus nothing; only the
    nodes of the other clusters (no sync running, its last round failed) are asked of Prometheus now."""
    gpu_nodes = [node for node in nodes if node.gpu_capacity]
    kept: dict[tuple[int, str], GpuFigures] = {}
    fresh: set[int] = set()
    if stored and gpu_nodes:
        fresh = set(node_gpu_figures_fresh({node.cluster_id for node in gpu_nodes}))
        names = {node.name for node in gpu_nodes if node.cluster_id in fresh}
        if names:
            kept = {(row.cluster_id, row.node_name): GpuFigures(**{f: getattr(row, f) for f in NodeGpuFigures.FIGURES})
                    for row in NodeGpuFigures.objects.filter(cluster_id__in=fresh, node_name__in=names)}
    wanted: dict[int, list[str]] = {}
    for node in gpu_nodes:
        if node.cluster_id not in fresh:
            wanted.setdefault(node.cluster_id, []).append(node.name)
    metrics = node_gpu_metrics_by_cluster(wanted, budget=budget, idle=idle) if wanted else {}
    for node in nodes:
        if node.gpu_capacity and node.cluster_id in fresh:
            figures = kept.get((node.cluster_id, node.name))
            node.gpu_metrics, node.gpu_metrics_reason = figures, "" if figures else NodeGpuMetrics.missing_reason
        else:
            node.gpu_metrics, node.gpu_metrics_reason = node_gpu_figures(metrics, node.cluster_id, node.name,
                                                                         node.gpu_capacity)
    return nodes


def pool_gpu_figures_every() -> float:
    """Seconds between two reads of the pools' GPU figures by the sync's leader (GPUMETRICS_POOLS_EVERY)."""
    return float(getattr(settings, "GPUMETRICS_POOLS_EVERY", 30))


def pool_gpu_figures_stale_after() -> float:
    """Seconds after which a pool's stored GPU figures are too old to show: four missed reads, at least a minute."""
    return max(60.0, 4 * pool_gpu_figures_every())


def _stored_figures_reason(config: Any, read_at, reason: str, now) -> str:
    """Why figures the sync's leader stored at `read_at` (or failed to read: `reason`) cannot be shown
    now; empty when they can."""
    if config is None:
        return NOT_CONFIGURED.reason
    if read_at is None:
        return f"not read yet: the sync reads the GPU figures every {pool_gpu_figures_every():g} s"
    if (now - read_at).total_seconds() > pool_gpu_figures_stale_after():
        at = timezone.localtime(read_at)
        return f"last read from Prometheus at {at:%Y-%m-%d %H:%M:%S %Z}: is the sync of this cluster running?"
    return reason


def pool_gpu_figures(pool: NodePool, config: Any, now=None):
    """(GpuFigures or None, reason) of a pool from what the sync's leader stored (no Prometheus query)."""
    reason = _stored_figures_reason(config, pool.gpu_figures_at, pool.gpu_figures_reason, now or timezone.now())
    if reason or not pool.gpu_figures:
        return None, reason or "not read yet"
    return GpuFigures(**pool.gpu_figures), ""


def node_gpu_figures_fresh(cluster_ids) -> list[int]:
    """The clusters among `cluster_ids` whose GPU nodes' figures the sync's leader stored in its last round
    (NodeGpuFigures), that round recent and not failed: the figures the CSV of every node carries, which
    would otherwise wait seconds for Prometheus to sum a whole fleet. Two queries, none of Prometheus."""
    configs = cluster_prometheus(cluster_ids)
    rounds: dict[int, tuple[Any, str]] = {cid: (None, "") for cid in configs}
    for cid, read_at, reason in (NodePool.objects.filter(cluster_id__in=list(configs)).values("cluster_id")
                                 .annotate(at=Max("gpu_figures_at"), why=Max("gpu_figures_reason"))
                                 .values_list("cluster_id", "at", "why")):
        rounds[cid] = (read_at, "" if reason == POOL_WITHOUT_GPU_NODES else reason)
    now = timezone.now()
    return [cid for cid, config in configs.items() if not _stored_figures_reason(config, *rounds[cid], now)]


STORED_GPU_FIGURES = ("utilization", "memory_used_mib", "memory_total_mib")


def nodes_annotate_stored_gpu_figures(nodes: NodeQuerySet, cluster_ids) -> NodeQuerySet:
    """Annotate `stored_gpu_<figure>` (STORED_GPU_FIGURES) on every node: a GPU node's figures as the sync's
    leader stored them (NodeGpuFigures, joined by cluster and node name, in the same query) when its cluster
    is one of `cluster_ids` (`node_gpu_figures_fresh`), else None. A node without GPUs has none, whatever
    is stored under its name."""
    cluster_ids = list(cluster_ids)
    if not cluster_ids:  # (an empty IN would empty the whole query)
        return nodes.annotate(**{f"stored_gpu_{name}": Value(None, output_field=models.FloatField())
                                 for name in STORED_GPU_FIGURES})
    stored = FilteredRelation("cluster__node_gpu_figures", condition=Q(
        cluster__node_gpu_figures__node_name=F("name"), cluster__node_gpu_figures__cluster_id__in=cluster_ids,
        gpu_capacity__gt=0))
    return nodes.annotate(stored_gpu_figures=stored).annotate(
        **{f"stored_gpu_{name}": F(f"stored_gpu_figures__{name}") for name in STORED_GPU_FIGURES})


def pools_attach_gpu_metrics(pools: list[NodePool]) -> list[NodePool]:
    """Set `gpu_metrics` (gpumetrics.GpuFigures summed over the pool's nodes, or None) and
    `gpu_metrics_reason` on pools, from the figures the sync's leader read (`pool_gpu_figures_refresh`):
    one query of the clusters' Prometheus settings, none of Prometheus."""
    configs = cluster_prometheus({pool.cluster_id for pool in pools})
    now = timezone.now()
    for pool in pools:
        pool.gpu_metrics, pool.gpu_metrics_reason = pool_gpu_figures(pool, configs.get(pool.cluster_id), now)
    return pools


def node_gpu_devices(node: Node, *, budget: GpuBudget | None = None):
    """The node's GPU devices from its cluster's DCGM exporter (gpumetrics.GpuDevice list) or Unavailable."""
    if not node.gpu_capacity:
        return Unavailable(NO_GPU)
    budget = budget or GpuBudget()
    configs = cluster_prometheus([node.cluster_id])
    return _per_cluster(configs, node.cluster_id, budget, lambda c, left: device_metrics(c, node.name, timeout=left))


NO_DEVICE_SERIES = "no DCGM series for this node (is its DCGM exporter running?)"


def node_gpu_device_list(node: Node, *, budget: GpuBudget | None = None) -> tuple[list[Any], str]:
    """(the node's GPU devices, why there are none): what the node page and the API show."""
    devices = node_gpu_devices(node, budget=budget)
    if not devices:
        return [], getattr(devices, "reason", "") or NO_DEVICE_SERIES
    return list(devices), ""


# ---------------------------------------------------------------------------------------------------
# A pool's GPU shape: the MIG layout and device plugin configuration the console sets on its GPU nodes

SHAPE_LABELS = {"mig_config": kube_gpu.LABEL_MIG_CONFIG, "device_plugin_config": kube_gpu.LABEL_DEVICE_PLUGIN_CONFIG}
MIG_IN_PROGRESS = ("pending", "rebooting")
MIG_FAILED = "failed"


@dataclass
class EvictedPod:
    """A GPU pod NVIDIA's MIG manager drains from its node before it changes the node's layout."""

    namespace: str
    name: str
    node: str
    project: str  # "" for a pod of no project (a system pod)
    gpus: Decimal


@dataclass
class ShapeNode:
    """One GPU node of the pool: the labels the shape changes on it ({label: (now, asked)}), or why it is
    left as it is, and the GPU pods the change drains."""

    node: Node
    changes: dict[str, tuple[str, str]] = field(default_factory=dict)
    skipped: str = ""
    evicted: list[EvictedPod] = field(default_factory=list)


@dataclass
class GpuShapePreview:
    """What setting a pool's GPU shape does (nothing written): the nodes whose labels change, the pods
    evicted, what may go wrong."""

    pool: NodePool
    mig_config: str
    device_plugin_config: str
    nodes: list[ShapeNode]
    warnings: list[str]

    @property
    def written(self) -> list[ShapeNode]:
        return [n for n in self.nodes if n.changes]

    @property
    def skipped(self) -> list[ShapeNode]:
        return [n for n in self.nodes if n.skipped]

    @property
    def evicted(self) -> list[EvictedPod]:
        return [pod for n in self.nodes for pod in n.evicted]

    @property
    def evicted_gpus(self) -> Decimal:
        return sum((pod.gpus for pod in self.evicted), Decimal(0))

    @property
    def key(self) -> str:
        """What a confirmation counts for: the shape asked and, per node, the labels it changes and the pods
        it evicts (a pod started since the preview needs the preview again)."""
        parts = [self.mig_config, self.device_plugin_config]
        for n in self.written:
            parts.append(n.node.name + "=" + ",".join(f"{k}:{v[1]}" for k, v in sorted(n.changes.items())))
            parts.extend(f"{p.namespace}/{p.name}" for p in n.evicted)
        return "|".join(parts)


def _seen(manager, user: Any):
    """The rows the user may see; every row for `None`, the system itself (a service called by a command)."""
    return manager.all() if user is None else manager.restrict(user, "view")


def _mig_capable(node: Node) -> bool:
    return str((node.labels or {}).get(kube_gpu.LABEL_MIG_CAPABLE, "")).lower() == "true"


def pool_gpu_shape_preview(*, user: Any, pool: NodePool, mig_config: str, device_plugin_config: str) -> GpuShapePreview:
    """What setting `mig_config` (nvidia.com/mig.config; "" leaves it) and `device_plugin_config`
    (nvidia.com/device-plugin.config; "" leaves it) on the pool's GPU nodes does, read from the mirror: on each
    node whose layout label would change, NVIDIA's MIG manager drains the node's GPU pods (named with their
    project and GPUs) before it cuts the GPUs anew; a node that does not report `nvidia.com/mig.capable=true`
    is left as it is. The device plugin's configuration evicts nothing (the plugin restarts)."""
    nodes = list(_seen(Node.objects, user).filter(pool=pool, is_gpu_node=True).order_by("name"))
    asked = {"mig_config": mig_config, "device_plugin_config": device_plugin_config}
    rows, warnings = [], []
    drained: list[int] = []
    for node in nodes:
        row = ShapeNode(node=node)
        labels = node.labels or {}
        for name, value in asked.items():
            if not value:
                continue
            label = SHAPE_LABELS[name]
            if name == "mig_config" and not _mig_capable(node):
                row.skipped = (f"its GPUs ({node.gpu_product or 'unknown'}) are not MIG-capable: it does not report "
                               f"{kube_gpu.LABEL_MIG_CAPABLE}=true; its MIG layout is left as it is")
                continue
            if labels.get(label) != value:
                row.changes[label] = (str(labels.get(label, "")), value)
        if kube_gpu.LABEL_MIG_CONFIG in row.changes:
            drained.append(node.pk)
        rows.append(row)
    if drained:
        by_node = {row.node.pk: row for row in rows}
        pods = (_seen(Pod.objects, user).active().filter(node_id__in=drained)
                .filter(Q(gpus__gt=0) | ~Q(gpu_request={})).order_by("namespace", "name")
                .values_list("node_id", "namespace", "name", "project__name", "gpus"))
        for node_id, namespace, name, project, gpus in pods:
            row = by_node[node_id]
            row.evicted.append(EvictedPod(namespace=namespace, name=name, node=row.node.name, project=project or "",
                                          gpus=gpus))
    if mig_config:
        products = sorted({r.node.gpu_product for r in rows if not r.skipped and r.node.gpu_product})
        if not mig_config.startswith(kube_gpu.MIG_CONFIG_ALL_PREFIX):
            warnings.append(f"{mig_config} is a custom layout: the MIG manager's configuration must define it, "
                            f"else the nodes report {kube_gpu.LABEL_MIG_CONFIG_STATE}=failed.")
        else:
            for product in products:
                known = kube_gpu.mig_layouts(product)
                if mig_config not in known:
                    warnings.append(f"The MIG manager's default configuration has no layout {mig_config} for "
                                    f"{product} (it has {', '.join(known)}): its nodes report failed unless your "
                                    "MIG manager's configuration defines it.")
        single = [r.node.name for r in rows if kube_gpu.LABEL_MIG_CONFIG in r.changes
                  and r.node.mig_strategy == kube_gpu.MIG_STRATEGY_SINGLE]
        if single and mig_config == kube_gpu.MIG_CONFIG_BALANCED:
            warnings.append(f"{mig_config} cuts each GPU into several profiles, which the MIG strategy single of "
                            f"{', '.join(single)} cannot publish: those nodes report failed.")
    return GpuShapePreview(pool=pool, mig_config=mig_config, device_plugin_config=device_plugin_config,
                           nodes=rows, warnings=warnings)


def pool_mig_layouts(*, user: Any, pool: NodePool) -> list[str]:
    """The MIG layouts to offer for a pool: those of the MIG manager's default configuration for the GPUs of
    its MIG-capable nodes (kube.gpu.mig_layouts), in their order, plus the pool's own and its nodes' now."""
    products, current = [], []
    for product, labels in (Node.objects.restrict(user, "view").filter(pool=pool, is_gpu_node=True)
                            .order_by("gpu_product").values_list("gpu_product", "labels")):
        labels = labels or {}
        if str(labels.get(kube_gpu.LABEL_MIG_CAPABLE, "")).lower() == "true" and product not in products:
            products.append(product)
        if labels.get(kube_gpu.LABEL_MIG_CONFIG):
            current.append(labels[kube_gpu.LABEL_MIG_CONFIG])
    layouts: list[str] = []
    for name in [*(n for p in products for n in kube_gpu.mig_layouts(p)), *current, pool.mig_config]:
        if name and name not in layouts:
            layouts.append(name)
    return layouts


class _MigStateWords:
    state: str

    @property
    def in_progress(self) -> bool:
        return self.state in MIG_IN_PROGRESS

    @property
    def failed(self) -> bool:
        return self.state == MIG_FAILED

    @property
    def done(self) -> bool:
        return self.state == "success"


@dataclass
class NodeMigState(_MigStateWords):
    """Where NVIDIA's MIG manager is with a node: the layout asked (its label), the state it reports, the
    slices it publishes now."""

    node: Node
    asked: str
    state: str
    applied: str  # the slices published now, in a few words


@dataclass
class MigStateGroup(_MigStateWords):
    """The nodes of a pool in one MIG state: the same layout asked, state reported and slices published."""

    asked: str
    state: str
    applied: str
    count: int


# A pool's page lists each node's MIG state up to this many nodes; past it, the nodes by state, and one by one
# only those still applying their layout or that failed (at most as many).
MIG_NODES_LISTED = 50


@dataclass
class PoolMigNodes:
    """The MIG state of a pool's nodes asked a layout: `listed` one by one (every node of a small pool; of a
    large one those not done), `groups` by state (a large pool only), `total` nodes."""

    listed: list[NodeMigState]
    groups: list[MigStateGroup]
    total: int

    def __bool__(self) -> bool:
        return self.total > 0

    @property
    def more(self) -> int:
        """Nodes not done that are not listed."""
        return sum(g.count for g in self.groups if not g.done) - len(self.listed) if self.groups else 0


def _mig_applied(sharing: dict[str, Any] | None, gpu_capacity: int | None) -> str:
    """The slices a node publishes now, in a few words."""
    sharing = sharing or {}
    slices = [f"{s.get('capacity', 0)} × {s.get('profile')}" for s in sharing.get("slices") or ()
              if int(s.get("capacity") or 0)]
    if slices:
        return ", ".join(slices)
    if sharing.get("exposure") in (kube_gpu.MIG_SINGLE, kube_gpu.MIG_MIXED):
        return "no MIG slices published"
    return f"{gpu_capacity} whole GPU{'s' if gpu_capacity != 1 else ''}" if gpu_capacity else "no GPUs published"


def node_mig_state(node: Node) -> NodeMigState | None:
    """The node's MIG layout as asked and as applied (None for a node that no layout was asked of)."""
    asked, state = node.mig_config or "", node.mig_config_state or ""
    if not asked:
        return None
    return NodeMigState(node=node, asked=asked, state=state, applied=_mig_applied(node.gpu_sharing, node.gpu_capacity))


def pool_gpu_shape_nodes(*, user: Any, pool: NodePool) -> PoolMigNodes:
    """The MIG state of the GPU nodes of the pool asked a layout (by name): each of them in a pool of at most
    MIG_NODES_LISTED such nodes; in a larger one, the nodes by state (failed first, then those applying, then
    the most nodes; counted by the database, each distinct sharing decoded once) and one by one the first
    MIG_NODES_LISTED not done."""
    nodes = (Node.objects.restrict(user, "view").filter(pool=pool, is_gpu_node=True, mig_config__isnull=False)
             .exclude(mig_config="").order_by("name"))
    fields = ("pk", "name", "gpu_sharing", "gpu_capacity", "mig_config", "mig_config_state")
    counts: dict[tuple[str, str, str], int] = {}
    for asked, state, text, physical, count in (
            nodes.order_by().values("mig_config", "mig_config_state", "gpu_capacity",
                                    text=Cast("gpu_sharing", models.TextField()))
            .annotate(count=Count("pk")).values_list("mig_config", "mig_config_state", "text", "gpu_capacity", "count")):
        key = (asked, state or "", _mig_applied(orjson.loads(text) if text else None, physical))
        counts[key] = counts.get(key, 0) + count
    total = sum(counts.values())
    if total <= MIG_NODES_LISTED:
        states = [s for s in map(node_mig_state, nodes.only(*fields)) if s is not None]
        return PoolMigNodes(listed=states, groups=[], total=len(states))
    groups = sorted((MigStateGroup(asked, state, applied, count) for (asked, state, applied), count in counts.items()),
                    key=lambda g: (not g.failed, not g.in_progress, -g.count, g.asked, g.state, g.applied))
    not_done = nodes.filter(Q(mig_config_state__isnull=True) | ~Q(mig_config_state="success")).only(*fields)
    listed = [s for s in map(node_mig_state, not_done[:MIG_NODES_LISTED]) if s is not None]
    return PoolMigNodes(listed=listed, groups=groups, total=total)


def nodes_mig_in_flight(*, user: Any, nodes: NodeQuerySet | None = None) -> list[NodeMigState]:
    """The nodes whose MIG manager reports pending, rebooting or failed (the node list's notice), the first 50
    by name. Of every node the user may see (`nodes` not given): kept while the fleet holds still (the database
    reads every node's state in name order to find the few that are not done)."""
    def read(nodes: NodeQuerySet) -> list[NodeMigState]:
        found = nodes.filter(mig_config_state__in=[*MIG_IN_PROGRESS, MIG_FAILED]).order_by("name")[:50]
        return [s for s in map(node_mig_state, found) if s is not None]

    if nodes is not None:
        return read(nodes)
    return fleet_memoised(("nodes_mig_in_flight", node_access_key(user)), lambda: read(node_list(user=user)))


def pool_conflict_nodes(*, user: Any, pool: NodePool) -> list[Node]:
    """The nodes of the pool's cluster the user may see whose labels match this pool and another (their
    `pool_conflicts` name it), by name: a pass over the cluster's nodes, kept while the fleet holds still."""
    def read() -> list[Node]:
        found = (node_list(user=user).filter(cluster_id=pool.cluster_id)
                 .filter(pool_conflicts__icontains=f'"{pool.name}"').order_by("name"))
        return [n for n in found if pool.name in n.pool_conflicts]

    return fleet_memoised(("pool_conflict_nodes", pool.pk, pool.name, node_access_key(user)), read)


def node_filter_values(*, user: Any) -> dict[str, list[str]]:
    """The GPU types and zones of the nodes the user may see, for the node list's dropdowns: one pass over every
    node, kept while the fleet holds still."""
    def read() -> dict[str, list[str]]:
        pairs = list(node_list(user=user).order_by().values_list("gpu_product", "zone").distinct())
        return {"gpu_product": sorted({p for p, _ in pairs}), "zone": sorted({z for _, z in pairs})}

    return fleet_memoised(("node_filter_values", node_access_key(user)), read)


def node_access_key(user: Any):
    """Which nodes the user may see, as (part of) the key of what is kept of them across requests
    (`fleet_memoised`): the same for every user who sees the same nodes."""
    return access_q(user, NodeQuerySet, "node.view")
