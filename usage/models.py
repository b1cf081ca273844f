"""Usage history: deserved, allocated and over-quota GPU / CPU / memory per pool and owner over time.

One row per (time, pool, owner): the owner is a department, a project, or nobody for the pool's own
row (its capacity, the sum of its departments' deserved quota, and its allocation). Rows keep plain
ids without foreign-key constraints, so that the history outlives a deleted project or pool.
"""
from __future__ import annotations

from django.db import models
from django.db.models import Q

from access.rules import access_q


class _PoolRows:  # access rule of a pool's own rows: like the pool (anyone with a role in the cluster)
    access_level = "cluster"
    access_paths = {"cluster": ["cluster_id"]}


class _OwnerRows:  # access rule of a department's or project's rows: like their quota
    access_level = "project"
    access_paths = {"cluster": ["cluster_id"], "department": ["department_id"], "project": ["project_id"]}


class UsageSnapshotQuerySet(models.QuerySet):
    def restrict(self, user, action: str = "view") -> "UsageSnapshotQuerySet":
        if action != "view":
            return self.none()  # history is never changed through the console
        return self.filter(
            (Q(kind=UsageSnapshot.Kind.POOL) & access_q(user, _PoolRows, "nodepool.view"))
            | (~Q(kind=UsageSnapshot.Kind.POOL) & access_q(user, _OwnerRows, "quota.view"))
        )


class UsageSnapshot(models.Model):
    class Kind(models.IntegerChoices):
        POOL = 0, "Pool"
        DEPARTMENT = 1, "Department"
        PROJECT = 2, "Project"

    taken = models.DateTimeField(db_index=True)
    kind = models.PositiveSmallIntegerField(choices=Kind)
    cluster_id = models.BigIntegerField()
    pool = models.ForeignKey("nodepools.NodePool", null=True, on_delete=models.DO_NOTHING, db_constraint=False,
                             related_name="+")
    # A project's rows carry its department too, so that a department's members read them.
    department = models.ForeignKey("projects.Department", null=True, blank=True, on_delete=models.DO_NOTHING,
                                   db_constraint=False, related_name="+")
    project = models.ForeignKey("projects.Project", null=True, blank=True, on_delete=models.DO_NOTHING,
                                db_constraint=False, related_name="+")
    # GPUs (GPU-equivalents to the thousandth, as the quotas). Pool rows: capacity = Ready GPUs; deserved = Σ departments' deserved.
    gpu_capacity = models.DecimalField(max_digits=10, decimal_places=3, null=True, blank=True)
    gpu_deserved = models.DecimalField(max_digits=10, decimal_places=3)
    gpu_allocated = models.DecimalField(max_digits=10, decimal_places=3)
    gpu_over_quota = models.DecimalField(max_digits=10, decimal_places=3)
    # CPU in cores; null deserved = unlimited.
    cpu_capacity = models.DecimalField(max_digits=10, decimal_places=3, null=True, blank=True)
    cpu_deserved = models.DecimalField(max_digits=10, decimal_places=3, null=True, blank=True)
    cpu_allocated = models.DecimalField(max_digits=10, decimal_places=3)
    cpu_over_quota = models.DecimalField(max_digits=10, decimal_places=3)
    # Memory in MiB; null deserved = unlimited.
    memory_capacity_mib = models.BigIntegerField(null=True, blank=True)
    memory_deserved_mib = models.BigIntegerField(null=True, blank=True)
    memory_allocated_mib = models.BigIntegerField()
    memory_over_quota_mib = models.BigIntegerField()
    # GPU utilization (DCGM exporter, through the cluster's Prometheus) of the GPUs allocated to the row's
    # pods: the average (%) over the interval before the snapshot, and how many of them were idle (under
    # the idle threshold for the idle window). Null: unknown (no Prometheus, or it did not answer).
    gpu_utilization = models.DecimalField(max_digits=5, decimal_places=2, null=True, blank=True)
    gpu_idle = models.PositiveIntegerField(null=True, blank=True)

    objects = UsageSnapshotQuerySet.as_manager()

    class Meta:
        ordering = ["taken", "pool_id", "kind", "department_id", "project_id"]
        indexes = [
            models.Index(fields=["pool", "kind", "taken"]),
            models.Index(fields=["department", "taken"]),
            models.Index(fields=["project", "taken"]),
        ]

    def __str__(self) -> str:
        return f"{self.taken:%Y-%m-%d %H:%M} {self.get_kind_display()} pool={self.pool_id}"
