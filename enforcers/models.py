"""Which scheduler enforces a cluster's quotas, what the console last wrote there, what the cluster
refused, and what the scheduler reports back about its queues."""
from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Exists, OuterRef, Q, Value
from django.db.models.functions import Concat

from access.rules import RestrictedQuerySet, access_q
from projects.models import Department, Project


class Enforcer(models.TextChoices):
    NONE = "none", "None (the console records quota only)"
    KAI = "kai", "KAI Scheduler"
    KUEUE = "kueue", "Kueue"


class EnforcementQuerySet(RestrictedQuerySet):
    access_level = "cluster"
    access_paths = {"cluster": ["cluster_id"]}


class _ClusterWideScope(RestrictedQuerySet):
    """Grants over a whole cluster (or the system) only: what no department or project owns."""

    access_level = "project"  # no fallback from narrower scopes to the cluster
    access_paths = {"cluster": ["cluster_id"]}


class OwnedByQuotaQuerySet(EnforcementQuerySet):
    """Rows of a department's or a project's quota (`owner` "department.<name>" / "project.<name>"): seen by
    whoever may see that department or project (their `restrict(user, action)`, the one access rule); rows
    of no owner only by roles over the whole cluster. A researcher sees its projects' queues; a department
    viewer its department's and its projects'."""

    def restrict(self, user: Any, action: str = "view") -> "OwnedByQuotaQuerySet":
        permission = f"{self.model._meta.model_name}.{action}"
        cluster_wide = access_q(user, _ClusterWideScope, permission)
        if cluster_wide == Q():  # a system grant: every row (an empty Q would vanish in the OR below)
            return self.all()
        projects = (Project.objects.restrict(user, action).filter(department__cluster_id=OuterRef("cluster_id"))
                    .annotate(owner_key=Concat(Value("project."), "name")).filter(owner_key=OuterRef("owner")))
        departments = (Department.objects.restrict(user, action).filter(cluster_id=OuterRef("cluster_id"))
                       .annotate(owner_key=Concat(Value("department."), "name")).filter(owner_key=OuterRef("owner")))
        return self.filter(cluster_wide | Exists(projects) | Exists(departments))


class Enforcement(models.Model):
    """A cluster's enforcer setting (one row per cluster; no row = none)."""

    cluster = models.OneToOneField("nodepools.Cluster", on_delete=models.CASCADE, related_name="enforcement")
    enforcer = models.CharField(max_length=8, choices=Enforcer, default=Enforcer.NONE)
    # When the console last brought the cluster in step (all owned objects as desired), and the last
    # error of a reconcile round that could not finish (the cluster unreachable, ...).
    last_reconciled = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    updated = models.DateTimeField(auto_now=True)

    objects = EnforcementQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.get_enforcer_display()} on {self.cluster_id}"

    def audit_scope(self, pk: int) -> tuple[int | None, int | None]:
        return self.cluster_id, None


class AppliedObject(models.Model):
    """An object the console wrote to a cluster: what it asserted (hash of its owned fields) and the
    resourceVersion the API server gave that write. A later copy with another resourceVersion whose
    owned fields differ was changed by someone else: drift, put back and recorded."""

    cluster = models.ForeignKey("nodepools.Cluster", on_delete=models.CASCADE, related_name="+")
    api_version = models.CharField(max_length=128)
    kind = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    owned_hash = models.CharField(max_length=64)
    resource_version = models.CharField(max_length=64, blank=True)
    updated = models.DateTimeField(auto_now=True)

    objects = EnforcementQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "api_version", "kind", "namespace", "name"],
                                               name="applied_object_unique")]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"

    def audit_scope(self, pk: int) -> tuple[int | None, int | None]:
        return self.cluster_id, None


class RefusedWrite(models.Model):
    """A write of the console's the API server refused (422 and the like), naming the field; shown on
    the cluster page and on the quota cell it came from until a later write of that object succeeds."""

    cluster = models.ForeignKey("nodepools.Cluster", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253)
    status = models.PositiveSmallIntegerField()
    field = models.CharField(max_length=255, blank=True)
    message = models.TextField()
    # The quota row the object carries (KAI queue / Kueue ClusterQueue), to show the error in its cell.
    pool = models.ForeignKey("nodepools.NodePool", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    owner = models.CharField(max_length=80, blank=True)  # "department.<name>" / "project.<name>"
    when = models.DateTimeField(auto_now=True)

    objects = OwnedByQuotaQuerySet.as_manager()

    class Meta:
        ordering = ["-when"]
        constraints = [models.UniqueConstraint(fields=["cluster", "kind", "namespace", "name"],
                                               name="refused_write_unique")]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.message}"


class SchedulerQueue(models.Model):
    """What the scheduler reports about one of its queues (KAI Queue status, Kueue ClusterQueue
    status), mirrored by the sync like nodes: in the console's units (GPU devices, CPU cores, MiB)."""

    cluster = models.ForeignKey("nodepools.Cluster", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=32)  # Queue / ClusterQueue
    name = models.CharField(max_length=253)
    pool = models.ForeignKey("nodepools.NodePool", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    owner = models.CharField(max_length=80, blank=True)
    gpu_allocated = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    gpu_allocated_non_preemptible = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    gpu_requested = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    gpu_borrowed = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    pending_workloads = models.IntegerField(null=True, blank=True)
    status = models.JSONField(default=dict, blank=True)
    updated = models.DateTimeField(auto_now=True)

    objects = OwnedByQuotaQuerySet.as_manager()

    class Meta:
        ordering = ["kind", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "kind", "name"], name="scheduler_queue_unique")]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"
