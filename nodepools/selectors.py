"""Reads of clusters, pools, nodes and pods; each takes the user and returns only what it may see."""
from __future__ import annotations

from typing import Any

from nodepools.models import Cluster, Node, NodePool, NodeQuerySet, NodePoolQuerySet, Pod, PodQuerySet


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
    """(GPUs, CPU millis, memory bytes, pod count) of the running pods of each node."""
    from django.db.models import Count, Sum

    rows = (Pod.objects.active().filter(node_id__in=list(node_ids)).order_by().values("node_id")
            .annotate(g=Sum("gpus"), c=Sum("cpu_millis"), m=Sum("memory_bytes"), n=Count("pk")))
    return {r["node_id"]: (r["g"], r["c"], r["m"], r["n"]) for r in rows}


def nodes_attach_usage(nodes: list[Node]) -> list[Node]:
    """Set gpu_allocated, cpu_allocated_millis, memory_allocated_bytes, pod_count, gpu_ready and gpu_free
    on nodes; one grouped query."""
    from decimal import Decimal

    from nodepools.models import NodeStatus

    usage = node_usage(n.pk for n in nodes) if nodes else {}
    for node in nodes:
        gpus, cpu, memory, count = usage.get(node.pk, (Decimal(0), 0, 0, 0))
        node.gpu_allocated, node.cpu_allocated_millis, node.memory_allocated_bytes, node.pod_count = (
            gpus or Decimal(0), cpu or 0, memory or 0, count)
        node.gpu_ready = node.gpu_allocatable if node.status == NodeStatus.READY else 0
        node.gpu_free = max(Decimal(node.gpu_ready) - node.gpu_allocated, Decimal(0))
    return nodes


NODE_TABLE_FIELDS = (
    "name", "cluster_id", "pool_id", "status", "status_reasons", "gpu_product", "gpu_capacity", "gpu_allocatable",
    "gpu_memory_mib", "cpu_allocatable_millis", "memory_allocatable_bytes", "zone", "instance_type", "capacity_type",
    "cluster__name", "pool__name",
)


NODE_USAGE_FIELDS = ("gpu_allocated", "cpu_allocated_millis", "memory_allocated_bytes", "pod_count")


def nodes_annotate_usage(nodes: NodeQuerySet) -> NodeQuerySet:
    """Annotate gpu_allocated, cpu_allocated_millis, memory_allocated_bytes and pod_count on every node
    by one grouped pass over the running pods (a common table expression, via django-cte), left-joined
    to the nodes: never a subquery per node. PostgreSQL inlines it (a hash aggregate, hash-joined);
    nodes without running pods get 0."""
    from decimal import Decimal

    from django.db import models
    from django.db.models import Count, Sum, Value
    from django.db.models.functions import Coalesce
    from django.db.models.sql.constants import LOUTER
    from django_cte import CTE, with_cte

    if "pod_count" in nodes.query.annotations:
        return nodes
    usage = CTE(Pod.objects.active().order_by().values("node_id").annotate(
        g=Sum("gpus"), c=Sum("cpu_millis"), m=Sum("memory_bytes"), n=Count("pk")), name="node_usage")
    nodes = with_cte(usage, select=usage.join(nodes, pk=usage.col.node_id, _join_type=LOUTER))
    gpu, big = models.DecimalField(max_digits=14, decimal_places=3), models.BigIntegerField()
    return nodes.annotate(
        gpu_allocated=Coalesce(usage.col.g, Value(Decimal(0)), output_field=gpu),
        cpu_allocated_millis=Coalesce(usage.col.c, Value(0), output_field=big),
        memory_allocated_bytes=Coalesce(usage.col.m, Value(0), output_field=big),
        pod_count=Coalesce(usage.col.n, Value(0), output_field=models.IntegerField()),
    )


def node_table_list(*, user: Any, sort: str = "") -> NodeQuerySet:
    """Nodes the user may see, with the fields the nodes table shows. Usage columns are filled per page
    by `nodes_attach_usage` (one grouped query); only when the table is sorted by one of them does the
    database compute usage for every row, by `nodes_annotate_usage` (one grouped pass, joined)."""
    from decimal import Decimal

    from django.db import models
    from django.db.models import Case, F, Value, When
    from django.db.models.functions import Cast, Greatest

    from nodepools.models import NodeStatus

    nodes = node_list(user=user).only(*NODE_TABLE_FIELDS)
    key = sort.lstrip("-")
    if key not in USAGE_SORTS:
        return nodes
    ready = Case(When(status=NodeStatus.READY, then=F("gpu_allocatable")), default=Value(0),
                 output_field=models.IntegerField())
    if key == "gpu_devices":
        return nodes.annotate(gpu_ready=ready)
    nodes = nodes_annotate_usage(nodes)
    if key == "gpu_free":
        gpu = models.DecimalField(max_digits=14, decimal_places=3)
        nodes = nodes.annotate(gpu_ready=ready).annotate(
            gpu_free=Greatest(Cast(F("gpu_ready"), gpu) - F("gpu_allocated"), Value(Decimal(0)), output_field=gpu))
    return nodes


def pod_usage(pool_ids) -> list[dict[str, Any]]:
    """What running pods use, grouped by (pool, project): one pass over the pods serves the pool
    totals, the quota rows' allocation and the overview chart. Keys: pool_id, project_id, gpu, cpu
    (millis), mem (bytes), pods."""
    from django.db.models import Count, Sum

    rows = (Pod.objects.active().filter(node__pool_id__in=list(pool_ids)).order_by()
            .values("node__pool_id", "project_id")
            .annotate(gpu=Sum("gpus"), cpu=Sum("cpu_millis"), mem=Sum("memory_bytes"), pods=Count("pk")))
    return [{**r, "pool_id": r.pop("node__pool_id")} for r in rows]


POOL_USAGE_FIELDS = (
    "node_count", "ready_node_count", "gpu_total", "gpu_ready", "gpu_memory_total_mib", "cpu_total_millis",
    "memory_total_bytes", "gpu_allocated", "cpu_allocated_millis", "memory_allocated_bytes", "workload_count",
    "projects_gpu_quota",
)


def pools_attach_usage(pools: list[NodePool], usage: list[dict[str, Any]] | None = None) -> list[NodePool]:
    """Set the attributes `NodePool.objects.with_capacity()` annotates (and projects_gpu_quota) with three
    grouped queries over nodes, pods (or the given `pod_usage`) and quotas, whatever the number of rows."""
    from decimal import Decimal

    from django.db.models import Count, F, Q, Sum
    from django.db.models.functions import Coalesce

    from nodepools.models import NodeStatus

    ids = [p.pk for p in pools]
    ready = Q(status=NodeStatus.READY)
    nodes = {r["pool_id"]: r for r in Node.objects.filter(pool_id__in=ids).order_by().values("pool_id").annotate(
        node_count=Count("pk"), ready_node_count=Count("pk", filter=ready), gpu_total=Sum("gpu_allocatable"),
        gpu_ready=Sum("gpu_allocatable", filter=ready),
        gpu_memory_total_mib=Sum(F("gpu_allocatable") * Coalesce("gpu_memory_mib", 0)),
        cpu_total_millis=Sum("cpu_allocatable_millis"), memory_total_bytes=Sum("memory_allocatable_bytes"))}
    pods: dict[int, dict[str, Any]] = {}
    for r in usage if usage is not None else pod_usage(ids):
        total = pods.setdefault(r["pool_id"], {"gpu_allocated": Decimal(0), "cpu_allocated_millis": 0,
                                               "memory_allocated_bytes": 0, "workload_count": 0})
        total["gpu_allocated"] += r["gpu"] or 0
        total["cpu_allocated_millis"] += r["cpu"] or 0
        total["memory_allocated_bytes"] += r["mem"] or 0
        # Workloads are the projects' pods; system pods (NVIDIA operands, ...) still use allocation.
        total["workload_count"] += r["pods"] if r["project_id"] else 0
    # Projects' deserved GPUs, through the quota rows' relation to their pool (declared by projects).
    quota = dict(NodePool.objects.filter(pk__in=ids).order_by().annotate(
        v=Sum("quotas__gpu_deserved", filter=Q(quotas__project__isnull=False))).values_list("pk", "v"))
    for pool in pools:
        values = {**nodes.get(pool.pk, {}), **pods.get(pool.pk, {})}
        for name in POOL_USAGE_FIELDS[:-1]:
            value = values.get(name)
            setattr(pool, name, value if value is not None else (Decimal(0) if name == "gpu_allocated" else 0))
        pool.projects_gpu_quota = quota.get(pool.pk) or Decimal(0)
    return pools


def pool_table_list(*, user: Any, cluster: Cluster | None = None) -> NodePoolQuerySet:
    """Pools the user may see; `pools_attach_usage` adds capacity, allocation and projects' quota."""
    pools = NodePool.objects.restrict(user, "view").select_related("cluster")
    return pools.filter(cluster=cluster) if cluster is not None else pools
