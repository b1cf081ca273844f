"""Taking usage snapshots (the only writer of usage history)."""
from __future__ import annotations

import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from nodepools.models import Cluster, Node, NodePool
from projects.models import ProjectNamespace, Quota
from projects.prometheus import prometheus_url
from projects.utilization import cluster_idle_gpus, cluster_pod_gpus
from usage.models import UsageSnapshot

_GPU = Decimal("0.01")
_CPU = Decimal("0.001")


def _dec(value: Any, step: Decimal) -> Decimal | None:
    if value is None:
        return None
    return Decimal(str(value)).quantize(step, rounding=ROUND_HALF_UP)


def _mib(value: Any) -> int | None:
    return None if value is None else int(Decimal(str(value)).to_integral_value(rounding=ROUND_HALF_UP))


def _sum_or_none(values: list) -> Any:
    """Σ, or None (unlimited) when any part is unlimited."""
    return None if any(v is None for v in values) else sum(values, Decimal(0))


class _Gpus:
    """Utilization sums and idle counts per (pool), (pool, department) and (pool, project) key."""

    def __init__(self):
        self.total: dict[tuple, float] = {}
        self.count: dict[tuple, int] = {}
        self.idle: dict[tuple, int] = {}
        self.known_clusters: set[int] = set()

    def add(self, keys, value: float) -> None:
        for key in keys:
            self.total[key] = self.total.get(key, 0.0) + value
            self.count[key] = self.count.get(key, 0) + 1

    def add_idle(self, keys) -> None:
        for key in keys:
            self.idle[key] = self.idle.get(key, 0) + 1

    def figures(self, cluster_id: int, key: tuple) -> dict[str, Any]:
        if cluster_id not in self.known_clusters:
            return {"gpu_utilization": None, "gpu_idle": None}
        count = self.count.get(key, 0)
        return {"gpu_utilization": _dec(self.total[key] / count, _GPU) if count else None,
                "gpu_idle": self.idle.get(key, 0)}


def _gpu_figures(taken: datetime.datetime) -> _Gpus:
    """Per cluster with a Prometheus: the average utilization of each GPU held by a pod over the
    snapshot interval, and the idle GPUs, keyed by the pool of their node and the project of their
    namespace. Three Prometheus queries per cluster; a cluster whose Prometheus does not answer stays unknown."""
    gpus = _Gpus()
    window = datetime.timedelta(seconds=getattr(settings, "USAGE_SNAPSHOT_EVERY", 900))
    for cluster in Cluster.objects.order_by("pk"):
        if not prometheus_url(cluster):
            continue
        samples, reason = cluster_pod_gpus(cluster, window=window, at=taken)
        if reason:
            continue
        idle, reason = cluster_idle_gpus(cluster, now=taken)
        if reason:
            continue
        gpus.known_clusters.add(cluster.pk)
        pools = dict(Node.objects.filter(cluster=cluster).values_list("name", "pool_id"))
        owners = {name: (department, project) for name, department, project in ProjectNamespace.objects.filter(
            project__cluster=cluster).values_list("name", "project__department_id", "project_id")}

        def keys(node: str, namespace: str) -> list[tuple]:
            pool = pools.get(node)
            if pool is None:
                return []
            department, project = owners.get(namespace, (None, None))
            found = [(pool,)]
            if project is not None:
                found += [(pool, "d", department), (pool, "p", project)]
            return found

        for node, namespace, value in samples:
            gpus.add(keys(node, namespace), value)
        for gpu in idle:
            gpus.add_idle(keys(gpu.node, gpu.namespace))
    return gpus


def usage_snapshot_take(*, at: datetime.datetime | None = None) -> int:
    """Store one row per pool, per department and per project in every pool, as of now; returns the count.

    GPU utilization is read from Prometheus first, outside the transaction (no lock held while it answers)."""
    taken = at or timezone.now()
    return _snapshot_store(taken=taken, gpus=_gpu_figures(taken))


@transaction.atomic
def _snapshot_store(*, taken: datetime.datetime, gpus: _Gpus) -> int:
    rows: list[UsageSnapshot] = []
    departments_by_pool: dict[int, list[Quota]] = {}
    for quota in Quota.objects.with_allocation().select_related("project", "pool").order_by():
        project = quota.project
        if project is None:
            departments_by_pool.setdefault(quota.pool_id, []).append(quota)
        rows.append(UsageSnapshot(
            taken=taken,
            kind=UsageSnapshot.Kind.PROJECT if project else UsageSnapshot.Kind.DEPARTMENT,
            cluster_id=quota.pool.cluster_id,
            pool_id=quota.pool_id,
            department_id=project.department_id if project else quota.department_id,
            project_id=project.pk if project else None,
            gpu_deserved=_dec(quota.gpu_deserved, _GPU),
            gpu_allocated=_dec(quota.gpu_allocated, _GPU),
            gpu_over_quota=_dec(quota.gpu_over_quota, _GPU),
            cpu_deserved=_dec(quota.cpu_deserved, _CPU),
            cpu_allocated=_dec(quota.cpu_allocated, _CPU),
            cpu_over_quota=_dec(quota.cpu_over_quota, _CPU),
            memory_deserved_mib=quota.memory_deserved_mib,
            memory_allocated_mib=_mib(quota.memory_allocated_mib),
            memory_over_quota_mib=_mib(quota.memory_over_quota_mib),
            **gpus.figures(quota.pool.cluster_id, (quota.pool_id, "p", project.pk) if project
                           else (quota.pool_id, "d", quota.department_id)),
        ))
    for pool in NodePool.objects.with_capacity().order_by():
        departments = departments_by_pool.get(pool.pk, [])
        rows.append(UsageSnapshot(
            taken=taken,
            kind=UsageSnapshot.Kind.POOL,
            cluster_id=pool.cluster_id,
            pool_id=pool.pk,
            gpu_capacity=_dec(pool.gpu_ready, _GPU),
            gpu_deserved=_dec(_sum_or_none([q.gpu_deserved for q in departments]), _GPU),
            gpu_allocated=_dec(pool.gpu_allocated, _GPU),
            gpu_over_quota=_dec(sum((Decimal(str(q.gpu_over_quota)) for q in departments), Decimal(0)), _GPU),
            cpu_capacity=_dec(Decimal(pool.cpu_total_millis) / 1000, _CPU),
            cpu_deserved=_dec(_sum_or_none([q.cpu_deserved for q in departments]), _CPU),
            cpu_allocated=_dec(Decimal(pool.cpu_allocated_millis) / 1000, _CPU),
            cpu_over_quota=_dec(sum((Decimal(str(q.cpu_over_quota)) for q in departments), Decimal(0)), _CPU),
            memory_capacity_mib=pool.memory_total_bytes // 1048576,
            memory_deserved_mib=_mib(_sum_or_none([q.memory_deserved_mib for q in departments])),
            memory_allocated_mib=pool.memory_allocated_bytes // 1048576,
            memory_over_quota_mib=_mib(sum((Decimal(str(q.memory_over_quota_mib)) for q in departments), Decimal(0))),
            **gpus.figures(pool.cluster_id, (pool.pk,)),
        ))
    UsageSnapshot.objects.bulk_create(rows, batch_size=1000)
    return len(rows)


def usage_snapshots_expire(*, before: datetime.datetime, batch: int = 5000) -> int:
    """Delete the snapshots taken before `before`, a batch per transaction (short ones: the pages and the
    next snapshot never wait on a long delete). Returns how many went."""
    deleted = 0
    while True:
        ids = list(UsageSnapshot.objects.filter(taken__lt=before).order_by().values_list("pk", flat=True)[:batch])
        if not ids:
            return deleted
        with transaction.atomic():
            deleted += UsageSnapshot.objects.filter(pk__in=ids).delete()[0]


def usage_retention_apply(*, now: datetime.datetime | None = None, batch: int | None = None) -> int:
    """Snapshots older than USAGE_RETENTION_DAYS (default 14) go, RETENTION_BATCH rows per transaction."""
    now = now or timezone.now()
    days = float(getattr(settings, "USAGE_RETENTION_DAYS", 14))
    return usage_snapshots_expire(before=now - datetime.timedelta(days=days),
                                  batch=int(batch or getattr(settings, "RETENTION_BATCH", 5000)))
