"""Taking usage snapshots (the only writer of usage history)."""
from __future__ import annotations

import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from nodepools.models import NodePool
from projects.models import Quota
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


@transaction.atomic
def usage_snapshot_take(*, at: datetime.datetime | None = None) -> int:
    """Store one row per pool, per department and per project in every pool, as of now; returns the count."""
    taken = at or timezone.now()
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
        ))
    UsageSnapshot.objects.bulk_create(rows, batch_size=1000)
    return len(rows)
