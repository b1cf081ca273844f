"""Reads of usage history, each taking the user: rows, CSV lines and chart series."""
from __future__ import annotations

import datetime
from typing import Any, Iterator

from django.db.models import Sum
from django.utils import timezone

from nodepools.models import Cluster
from usage.models import UsageSnapshot

CSV_HEADER = [
    "Time (UTC)", "Cluster", "Node pool", "Kind", "Department", "Project",
    "GPU capacity (Ready)", "GPU deserved", "GPU allocated", "GPU over-quota",
    "CPU capacity (cores)", "CPU deserved (cores)", "CPU allocated (cores)", "CPU over-quota (cores)",
    "Memory capacity (MiB)", "Memory deserved (MiB)", "Memory allocated (MiB)", "Memory over-quota (MiB)",
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
        ]


def gpu_series(*, user: Any, pool: Any = None, department: Any = None, days: int = 7) -> list[dict]:
    """Points (taken, capacity, deserved, allocated, over_quota) of GPUs over the last `days`, oldest first.

    A pool: its own rows. A department: its rows summed over pools. Neither: every pool the user may
    see, summed.
    """
    since = timezone.now() - datetime.timedelta(days=days)
    rows = UsageSnapshot.objects.restrict(user, "view").filter(taken__gte=since)
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
