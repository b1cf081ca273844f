"""Reads of usage history, each taking the user: rows, CSV lines and chart series."""
from __future__ import annotations

import datetime
from typing import Any, Iterator

from django.db.models import Sum
from django.utils import timezone

from nodepools.models import Cluster, Pod
from projects.utilization import idle_gpus
from usage.models import UsageSnapshot

CSV_HEADER = [
    "Time (UTC)", "Cluster", "Node pool", "Kind", "Department", "Project",
    "GPU capacity (Ready)", "GPU deserved", "GPU allocated", "GPU over-quota",
    "CPU capacity (cores)", "CPU deserved (cores)", "CPU allocated (cores)", "CPU over-quota (cores)",
    "Memory capacity (MiB)", "Memory deserved (MiB)", "Memory allocated (MiB)", "Memory over-quota (MiB)",
    "GPU utilization (%)", "Idle GPUs",
]


def snapshot_list(*, user: Any):
    return UsageSnapshot.objects.restrict(user, "view").select_related("pool", "department", "project")


def _name(obj: Any, pk: Any) -> str:
    if pk is None:
        return ""
    return obj.name if obj is not None else f"#{pk} (deleted)"


def csv_rows(snapshots) -> Iterator[list]:
    clusters = dict(Cluster.objects.values_list("pk", "name"))
    unlimited = "unlimited"
    for row in snapshots.iterator(chunk_size=2000):
        yield [
            row.taken, clusters.get(row.cluster_id, f"#{row.cluster_id} (deleted)"), _name(row.pool, row.pool_id),
            row.get_kind_display(), _name(row.department, row.department_id), _name(row.project, row.project_id),
            row.gpu_capacity, row.gpu_deserved, row.gpu_allocated, row.gpu_over_quota,
            row.cpu_capacity, unlimited if row.cpu_deserved is None and row.kind != 0 else row.cpu_deserved,
            row.cpu_allocated, row.cpu_over_quota,
            row.memory_capacity_mib,
            unlimited if row.memory_deserved_mib is None and row.kind != 0 else row.memory_deserved_mib,
            row.memory_allocated_mib, row.memory_over_quota_mib,
            "" if row.gpu_utilization is None else row.gpu_utilization, "" if row.gpu_idle is None else row.gpu_idle,
        ]


def gpu_series(*, user: Any, pool: Any = None, department: Any = None, days: int = 7,
               start: datetime.datetime | None = None, end: datetime.datetime | None = None) -> list[dict]:
    """Points (taken, capacity, deserved, allocated, over_quota) of GPUs over the last `days` (or from
    `start` to before `end`), oldest first.

    A pool: its own rows. A department: its rows summed over pools. Neither: every pool the user may
    see, summed.
    """
    since = start if start is not None else (end or timezone.now()) - datetime.timedelta(days=days)
    rows = UsageSnapshot.objects.restrict(user, "view").filter(taken__gte=since)
    if end is not None:
        rows = rows.filter(taken__lt=end)
    if pool is not None:
        rows = rows.filter(kind=UsageSnapshot.Kind.POOL, pool=pool)
    elif department is not None:
        rows = rows.filter(kind=UsageSnapshot.Kind.DEPARTMENT, department=department)
    else:
        rows = rows.filter(kind=UsageSnapshot.Kind.POOL)
    return list(
        rows.order_by().values("taken").annotate(
            capacity=Sum("gpu_capacity"), deserved=Sum("gpu_deserved"), allocated=Sum("gpu_allocated"),
            over_quota=Sum("gpu_over_quota"),
        ).order_by("taken")
    )


# ---------------------------------------------------------------------------------------------------
# Idle allocated GPUs

class IdleGpuRow:
    """One idle GPU — or idle MIG slice, which says its profile — joined to the console's pod (and so to its
    project, department, node and pool); GPU-hours wasted in GPU-equivalents (a slice's share of them)."""

    def __init__(self, gpu, pod):
        self.gpu = gpu
        self.pod = pod
        self.cluster = pod.cluster
        self.project = pod.project
        self.department = pod.project.department if pod.project else None
        self.namespace = pod.namespace
        self.pod_name = pod.name
        self.node = gpu.node or pod.node_name
        self.pool = pod.node.pool if pod.node is not None and pod.node.pool_id else None
        self.gpu_index = gpu.index
        self.mig_profile = gpu.mig_profile  # a MIG instance's profile ("" a whole GPU)
        self.gpu_instance = gpu.gpu_instance
        self.device = gpu.device  # "0", or "0 (MIG 1g.10gb, instance 3)"
        self.share = gpu.share
        self.uuid = gpu.uuid
        self.model = gpu.model
        self.since = gpu.since
        self.since_before = gpu.since_before
        self.idle_hours = round(gpu.idle_hours, 2)
        self.gpu_hours_wasted = gpu.gpu_hours_wasted

    @property
    def project_name(self) -> str:
        return self.project.name if self.project else ""

    @property
    def department_name(self) -> str:
        return self.department.name if self.department else ""

    @property
    def department_label(self) -> str:
        """"R&D (rnd)", as pages and exports show a department (the API keeps `department`: the name)."""
        return self.department.label_with_name if self.department else ""

    @property
    def project_label(self) -> str:
        return self.project.label_with_name if self.project else ""


def idle_gpu_pods(*, user: Any):
    """The pods whose GPUs may be listed: those the user may see that hold GPUs."""
    return Pod.objects.restrict(user, "view").filter(gpus__gt=0)


def idle_gpu_rows(pods, *, now=None) -> tuple[list[IdleGpuRow], dict[str, str]]:
    """Idle GPUs (projects.utilization) held by `pods` (restricted and filtered): two Prometheus queries
    per cluster those pods run in, whatever their number; ordered by project, then longest idle first.
    Returns (rows, {cluster name: reason} for clusters whose figures could not be had)."""
    cluster_ids = set(pods.order_by().values_list("cluster_id", flat=True).distinct())
    clusters = list(Cluster.objects.filter(pk__in=cluster_ids))
    gpus, reasons = idle_gpus(clusters, now=now)
    names = {c.pk: c.name for c in clusters}
    rows: list[IdleGpuRow] = []
    if gpus:
        keys = {(g.cluster_id, g.namespace, g.pod) for g in gpus}
        matched = pods.filter(namespace__in={k[1] for k in keys}, name__in={k[2] for k in keys}).select_related(
            "cluster", "project__department", "node__pool")
        by_key = {(p.cluster_id, p.namespace, p.name): p for p in matched}
        for gpu in gpus:
            pod = by_key.get((gpu.cluster_id, gpu.namespace, gpu.pod))
            if pod is not None:
                rows.append(IdleGpuRow(gpu, pod))
    rows.sort(key=lambda r: (r.department_name, r.project_name, r.since, r.namespace, r.pod_name, r.gpu_index))
    return rows, {names[pk]: reason for pk, reason in reasons.items()}


def idle_summary(rows: list[IdleGpuRow]) -> list[dict[str, Any]]:
    """Per project (department, project): idle GPUs and GPU-hours wasted, most wasted first."""
    groups: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = (row.cluster.name, row.department_label, row.project_label)
        group = groups.setdefault(key, {"cluster": key[0], "department": key[1], "project": row.project,
                                        "project_name": key[2], "gpus": 0, "gpu_hours": 0})
        group["gpus"] += 1
        group["gpu_hours"] += row.gpu_hours_wasted
    return sorted(groups.values(), key=lambda g: (-g["gpu_hours"], g["department"], g["project_name"]))
