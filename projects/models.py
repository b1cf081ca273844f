"""Departments, projects, their quota per node pool, priority lists and role assignments (docs/concepts.md#quota, #roles)."""
from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Case, ExpressionWrapper, F, OuterRef, Q, Subquery, Sum, Value, When
from django.db.models.functions import Cast, Coalesce, Greatest

from access.models import RoleAssignment
from access.rules import RestrictedQuerySet, access_q
from common.words import labelled
from kube.gpu import PLACES as GPU_PLACES  # GPU quotas and limits: GPU-equivalents to the thousandth (1g.10gb = 0.143)
from nodepools.kube import PREEMPTIBLE_BELOW
from nodepools.models import Pod, validate_dns1123_label


class DepartmentQuerySet(RestrictedQuerySet):
    access_level = "department"
    access_paths = {"cluster": ["cluster_id"], "department": ["pk"]}


DISPLAY_NAME_HELP = "How people read it, e.g. R&D (empty: the name)."


class Labelled:
    """A department's or project's label: its display name ("R&D"), else its Kubernetes name ("rnd").
    Pages render it with the `owner_label` filter (ui), exports and messages with `label` / `label_with_name`."""

    @property
    def label(self) -> str:
        return self.display_name or self.name

    @property
    def label_with_name(self) -> str:
        """"R&D (rnd)": the Kubernetes name beside, where an operator needs it; "rnd" when they are one."""
        return labelled(self.display_name, self.name)


def owner_labels(queryset) -> dict[int, str]:
    """{pk: "R&D (rnd)"} of departments or projects: the text of their label in statements and exports."""
    return {pk: labelled(display, name) for pk, name, display in queryset.values_list("pk", "name", "display_name")}


class Department(Labelled, models.Model):
    cluster = models.ForeignKey("nodepools.Cluster", on_delete=models.CASCADE, related_name="departments")
    name = models.CharField(max_length=63, validators=[validate_dns1123_label],
                            help_text="Its Kubernetes name (a DNS label), e.g. rnd.")
    display_name = models.CharField(max_length=100, blank=True, help_text=DISPLAY_NAME_HELP)
    description = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = DepartmentQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="department_unique_name")]

    def audit_scope(self, pk: int) -> tuple[int | None, int | None]:
        return self.cluster_id, pk  # self.pk is None once deleted

    def __str__(self) -> str:
        return self.label


class ProjectQuerySet(RestrictedQuerySet):
    access_level = "project"
    access_paths = {"cluster": ["department__cluster_id"], "department": ["department_id"], "project": ["pk"]}


class Project(Labelled, models.Model):
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="projects")
    # Denormalised from the department so that names are unique per cluster (they name namespaces).
    cluster = models.ForeignKey("nodepools.Cluster", on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=63, validators=[validate_dns1123_label],
                            help_text="Its Kubernetes name (a DNS label), e.g. rnd-vision.")
    display_name = models.CharField(max_length=100, blank=True, help_text=DISPLAY_NAME_HELP)
    description = models.TextField(blank=True)
    allow_over_quota = models.BooleanField(
        default=True, help_text="Let workloads use idle GPUs beyond the deserved quota (preemptible only)."
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="project_unique_name")]

    def audit_scope(self, pk: int) -> tuple[int | None, int | None]:
        return self.cluster_id, self.department_id

    def __str__(self) -> str:
        return self.label

    def clean(self) -> None:
        if self.department_id and self.cluster_id and self.department.cluster_id != self.cluster_id:
            raise ValidationError({"department": "The department belongs to another cluster."})


class ProjectNamespace(models.Model):
    """A Kubernetes namespace owned by a project: its pods are the project's workloads."""

    DEFAULT_PREFIX = "runai-"

    cluster = models.ForeignKey("nodepools.Cluster", on_delete=models.CASCADE, related_name="project_namespaces")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="namespaces")
    name = models.CharField(max_length=63, validators=[validate_dns1123_label])

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="namespace_unique_per_cluster")]

    def __str__(self) -> str:
        return self.name


class Rank(models.IntegerChoices):
    LOWEST = 1, "Lowest"
    LOW = 2, "Low"
    MEDIUM_LOW = 3, "Medium low"
    MEDIUM = 4, "Medium"
    MEDIUM_HIGH = 5, "Medium high"
    HIGH = 6, "High"
    HIGHEST = 7, "Highest"


# What a person may enter as a quota, in words a person uses (forms and API; common/words.py says them).
QUOTA_MAX_GPUS = 1_000_000
QUOTA_MAX_CORES = 1_000_000
QUOTA_MAX_GIB = 1_000_000_000  # about 1 EiB of CPU memory
QUOTA_MAX_WEIGHT = 1_000_000


def _not_negative(label: str):
    return MinValueValidator(0, message=f"{label} cannot be negative.")


_DECIMAL = models.DecimalField(max_digits=14, decimal_places=3)


def allocation_sums() -> dict[str, tuple[object, models.Field, bool]]:
    """What a quota row's allocation sums over its owner's active pods in its pool, by annotation name: (the
    pod's expression, its output field, non-preemptible pods only). CPU in cores, memory in MiB, like the quota.
    The one definition `QuotaQuerySet.with_allocation` and `Quota.allocation` both read."""
    flt = models.FloatField()
    cores = ExpressionWrapper(F("cpu_millis") / Value(1000.0), output_field=flt)
    mib = ExpressionWrapper(F("memory_bytes") / Value(1048576.0), output_field=flt)
    return {
        "gpu_allocated": (F("gpus"), _DECIMAL, False), "gpu_non_preemptible": (F("gpus"), _DECIMAL, True),
        "cpu_allocated": (cores, flt, False), "cpu_non_preemptible": (cores, flt, True),
        "memory_allocated_mib": (mib, flt, False), "memory_non_preemptible_mib": (mib, flt, True),
    }


class QuotaQuerySet(RestrictedQuerySet):
    access_level = "project"
    access_paths = {
        "cluster": ["pool__cluster_id"],
        "department": ["department_id", "project__department_id"],
        "project": ["project_id"],
    }

    def restrict(self, user, action: str = "view"):
        # A department's own row and a project's row are governed by different permissions: a
        # department administrator sets the quota of its projects, not its own.

        if action == "view":
            return super().restrict(user, action)
        return self.filter(
            (Q(project__isnull=True) & access_q(user, type(self), f"department_quota.{action}"))
            | (Q(project__isnull=False) & access_q(user, type(self), f"project_quota.{action}"))
        )

    def with_allocation(self) -> "QuotaQuerySet":
        """Annotate what the owner's running pods use in the row's pool, computed by the database.

        gpu/cpu/memory `_allocated`, `_non_preemptible` and `_over_quota` (allocated above deserved;
        none where the deserved quota is unlimited). CPU in cores, memory in MiB, like the quota.
        (`Quota.allocation()`: the same sums for one row, in one aggregate query.)
        """
        active = Pod.objects.active().order_by()
        by_project = active.filter(project_id=OuterRef("project_id"), node__pool_id=OuterRef("pool_id")).values("project_id")
        by_department = active.filter(
            project__department_id=OuterRef("department_id"), node__pool_id=OuterRef("pool_id")
        ).values("project__department_id")

        def usage(expr, output, non_preemptible=False):
            def sub(qs):
                if non_preemptible:
                    qs = qs.filter(priority__gte=PREEMPTIBLE_BELOW)
                return Subquery(qs.annotate(v=Sum(expr)).values("v"), output_field=output)

            return Coalesce(
                Case(When(project__isnull=False, then=sub(by_project)), default=sub(by_department), output_field=output),
                Value(0),
                output_field=output,
            )

        qs = self.annotate(**{name: usage(expr, output, non_preemptible)
                              for name, (expr, output, non_preemptible) in allocation_sums().items()})
        decimal, flt = _DECIMAL, models.FloatField()
        return qs.annotate(
            gpu_over_quota=Greatest(F("gpu_allocated") - F("gpu_deserved"), Value(0), output_field=decimal),
            cpu_over_quota=Case(
                When(cpu_deserved__isnull=True, then=Value(0.0)),
                default=Greatest(F("cpu_allocated") - Cast("cpu_deserved", flt), Value(0.0)),
                output_field=flt,
            ),
            memory_over_quota_mib=Case(
                When(memory_deserved_mib__isnull=True, then=Value(0.0)),
                default=Greatest(F("memory_allocated_mib") - Cast("memory_deserved_mib", flt), Value(0.0)),
                output_field=flt,
            ),
        )

    def for_departments(self):
        return self.filter(project__isnull=True)
class Quota(models.Model):
    """Deserved resources, limit, over-quota weight and rank of one department or project in one pool.

    Empty CPU / memory fields mean unlimited. `version` grows with every write, so that an edit made
    from a stale copy is detected (optimistic concurrency) instead of silently overwriting.
    """

    pool = models.ForeignKey("nodepools.NodePool", on_delete=models.CASCADE, related_name="quotas")
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.CASCADE, related_name="quotas")
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="quotas")
    gpu_deserved = models.DecimalField(
        "deserved GPUs", max_digits=10, decimal_places=GPU_PLACES, default=Decimal(0), validators=[_not_negative("GPU quota")]
    )
    cpu_deserved = models.DecimalField(
        "deserved CPU (cores)", max_digits=10, decimal_places=3, null=True, blank=True,
        validators=[_not_negative("CPU quota")], help_text="Empty: unlimited.",
    )
    memory_deserved_mib = models.BigIntegerField(
        "deserved CPU memory (MiB)", null=True, blank=True, validators=[_not_negative("Memory quota")],
        help_text="Empty: unlimited.",
    )
    gpu_limit = models.DecimalField(
        "GPU limit", max_digits=10, decimal_places=GPU_PLACES, null=True, blank=True, validators=[_not_negative("GPU limit")],
        help_text="The most it may use including over-quota. Empty: unlimited.",
    )
    cpu_limit = models.DecimalField(
        "CPU limit (cores)", max_digits=10, decimal_places=3, null=True, blank=True,
        validators=[_not_negative("CPU limit")],
    )
    memory_limit_mib = models.BigIntegerField(
        "CPU memory limit (MiB)", null=True, blank=True, validators=[_not_negative("Memory limit")]
    )
    over_quota_weight = models.PositiveIntegerField(
        default=2, help_text="Share of idle capacity, relative to the others of the same rank."
    )
    rank = models.PositiveSmallIntegerField(choices=Rank, default=Rank.MEDIUM_LOW)
    version = models.PositiveIntegerField(default=1, editable=False)
    updated = models.DateTimeField(auto_now=True)

    objects = QuotaQuerySet.as_manager()

    class Meta:
        ordering = ["pool__cluster__name", "pool__created", "department__name", "project__name"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(department__isnull=False) & Q(project__isnull=True))
                | (Q(department__isnull=True) & Q(project__isnull=False)),
                name="quota_department_xor_project",
            ),
            models.UniqueConstraint(
                fields=["pool", "department"], condition=Q(department__isnull=False), name="quota_unique_department"
            ),
            models.UniqueConstraint(
                fields=["pool", "project"], condition=Q(project__isnull=False), name="quota_unique_project"
            ),
        ]

    def audit_scope(self, pk: int) -> tuple[int | None, int | None]:
        """(cluster id, department id) of this row, for the audit trail."""
        department_id = self.department_id or (self.project.department_id if self.project_id else None)
        return self.pool.cluster_id, department_id

    def __str__(self) -> str:
        return f"{self.owner} in {self.pool}"

    @property
    def owner(self) -> Department | Project:
        return self.project if self.project_id else self.department

    @property
    def owner_kind(self) -> str:
        return "project" if self.project_id else "department"

    def allocation(self) -> dict[str, Decimal | float]:
        """`with_allocation`'s sums for this row alone (allocated and non-preemptible GPUs, cores and MiB), by one
        aggregate query over its owner's active pods in its pool (building the annotated query costs more than the
        sums: a quota write reads this)."""
        owner = {"project_id": self.project_id} if self.project_id else {"project__department_id": self.department_id}
        pods = Pod.objects.active().filter(node__pool_id=self.pool_id, **owner).order_by()
        found = pods.aggregate(**{
            name: Sum(expr, filter=Q(priority__gte=PREEMPTIBLE_BELOW) if non_preemptible else None, output_field=output)
            for name, (expr, output, non_preemptible) in allocation_sums().items()})
        return {name: value or 0 for name, value in found.items()}

    def clean(self) -> None:
        errors = {}
        for deserved, limit, label in (
            ("gpu_deserved", "gpu_limit", "GPU"),
            ("cpu_deserved", "cpu_limit", "CPU"),
            ("memory_deserved_mib", "memory_limit_mib", "memory"),
        ):
            low, high = getattr(self, deserved), getattr(self, limit)
            # A value that failed its own field's validation is still the raw input: skip it.
            if isinstance(high, (int, Decimal)) and isinstance(low, (int, Decimal)) and high < low:
                errors[limit] = f"The {label} limit ({high}) cannot be lower than the deserved {label} quota ({low})."
        if errors:
            raise ValidationError(errors)


class PriorityEntry(models.Model):
    """One place in an ordered node pool priority list of a project (or of a department, as a seed)."""

    department = models.ForeignKey(
        Department, null=True, blank=True, on_delete=models.CASCADE, related_name="priority_entries"
    )
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="priority_entries")
    pool = models.ForeignKey("nodepools.NodePool", on_delete=models.CASCADE, related_name="priority_entries")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(department__isnull=False) & Q(project__isnull=True))
                | (Q(department__isnull=True) & Q(project__isnull=False)),
                name="priority_department_xor_project",
            ),
            models.UniqueConstraint(fields=["project", "pool"], condition=Q(project__isnull=False), name="priority_project_pool"),
            models.UniqueConstraint(
                fields=["department", "pool"], condition=Q(department__isnull=False), name="priority_department_pool"
            ),
        ]


# This app's relations on the kinds of the floors below it, declared from here so that those floors never
# name a kind of this app (the columns predate the move; the migrations are unchanged). Declared as the
# models load, before any app's ready() and before any form, filter or serializer reads these models.
# A pod belongs to the project owning its namespace (the sync fills the column by a join: nodepools'
# sync/writer.py LINKS); it outlives its project, unattributed.
Pod.add_to_class(
    "project", models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="pods"))
# The scope of a department- or project-scoped role assignment.
RoleAssignment.add_to_class(
    "department", models.ForeignKey(Department, null=True, blank=True, on_delete=models.CASCADE,
                                    related_name="role_assignments"))
RoleAssignment.add_to_class(
    "project", models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE,
                                 related_name="role_assignments"))
