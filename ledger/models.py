"""The GPU-hours ledger (docs/concepts.md#gpu-hours): where the GPU-hours went, hour by hour, and what they cost.

- `LedgerEntry`: one row per closed hour × cluster × pool × GPU model × unit × project (pods of no project: a
  row without project; the unit the GPUs are billed in, `gpu_unit`: whole GPUs, a MIG profile, replicas of a
  time-sliced GPU, GPU-equivalents of fractions), written by the sync's leader as the hour closes (`kind` closing) and, when a
  late event changes a closed hour, a row of its own with the difference (`kind` correction). Amounts
  are exact integrals in seconds (`gpu_seconds` = Σ GPUs × seconds, a fraction of a GPU by its fraction),
  so that every sum is exact, and `unit_seconds` the same in the row's unit (slice-seconds of a MIG
  profile, replica-seconds); pages show hours.
- `LedgerDay`: the same, summed per day (closings and corrections apart), kept in the same transaction as
  the hours: statements read days; hourly rows expire after LEDGER_HOURLY_RETENTION_DAYS, days stay.
- `StatementRevision`: when a month's statement was issued (its month closed) and revised (a correction
  changed its figures after), for statement numbers and issue times.
- `ClosedHour`, `LedgerState`: which hours of a cluster are closed (when, corrected when), where the
  ledger starts and how far late events were looked for.
- `DeservedHistory`: each project's deserved GPUs per pool over time, so that over-quota is measured
  against the quota of the time.
- `Rate`: a price per GPU-hour of a GPU model (optionally of one pool), in a currency, from a date on;
  optional CPU-core-hour and memory-GiB-hour prices; or, with `mig_profile`, the price per slice-hour of one
  MIG profile of that model (without one a slice costs the model's price × its share of the GPU).

Rows keep plain ids without foreign-key constraints (like the usage history), so that the ledger outlives
a deleted project, pool or cluster.
"""
from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from access.rules import RestrictedQuerySet, access_q, user_grants
from kube.gpu import MIG_RESOURCE_PREFIX, compute_slices, parse_mig_profile

SECONDS = dict(max_digits=24, decimal_places=3)  # GPU- and core-seconds: Decimal(GPUs, 3 places) × seconds
BYTE_SECONDS = dict(max_digits=34, decimal_places=0)  # memory bytes × seconds


class _OwnerRows:  # access rule of ledger rows: like the quota of their project (no project: the cluster's)
    access_level = "project"
    access_paths = {"cluster": ["cluster_id"], "department": ["department_id"], "project": ["project_id"]}


class LedgerQuerySet(models.QuerySet):
    def restrict(self, user, action: str = "view"):
        if action != "view":
            return self.none()  # the ledger is written by the sync's leader only
        return self.filter(access_q(user, _OwnerRows, "quota.view"))


class Kind(models.IntegerChoices):
    CLOSING = 0, "Hour closed"
    CORRECTION = 1, "Correction"


class Amounts(models.Model):
    """The figures of a ledger row (exact integrals, see the module)."""

    gpu_seconds = models.DecimalField(default=Decimal(0), **SECONDS)
    # The same GPU-time in the row's unit (`Row.gpu_unit`): slice-seconds, replica-seconds, GPU-seconds.
    unit_seconds = models.DecimalField(default=Decimal(0), **SECONDS)
    over_quota_gpu_seconds = models.DecimalField(default=Decimal(0), **SECONDS)
    non_preemptible_gpu_seconds = models.DecimalField(default=Decimal(0), **SECONDS)
    idle_gpu_seconds = models.DecimalField(default=Decimal(0), **SECONDS)
    # Idle is measured where Prometheus said a pod's idle share: `idle_measured_gpu_seconds` are the GPU-seconds
    # it said it of (idle ≤ idle-measured ≤ GPU-seconds); a statement's idle hours of a line with none are
    # "not measured", never 0.
    idle_measured_gpu_seconds = models.DecimalField(default=Decimal(0), **SECONDS)
    # Utilization: of `measured_gpu_seconds` (GPU-seconds whose utilization Prometheus reported), the
    # utilization-weighted part; the average utilization is busy / measured.
    measured_gpu_seconds = models.DecimalField(default=Decimal(0), **SECONDS)
    busy_gpu_seconds = models.DecimalField(default=Decimal(0), **SECONDS)
    cpu_core_seconds = models.DecimalField(default=Decimal(0), **SECONDS)
    memory_byte_seconds = models.DecimalField(default=Decimal(0), **BYTE_SECONDS)

    AMOUNTS = ("gpu_seconds", "unit_seconds", "over_quota_gpu_seconds", "non_preemptible_gpu_seconds", "idle_gpu_seconds",
               "idle_measured_gpu_seconds", "measured_gpu_seconds", "busy_gpu_seconds", "cpu_core_seconds", "memory_byte_seconds")

    class Meta:
        abstract = True

    @property
    def gpu_utilization(self) -> Decimal | None:
        """Average utilization (%) of the allocated GPUs, or None when Prometheus reported none."""
        if not self.measured_gpu_seconds:
            return None
        return (self.busy_gpu_seconds * 100 / self.measured_gpu_seconds).quantize(Decimal("0.1"))


def _link(model: str) -> models.ForeignKey:
    """A pool, department or project a row names; the row outlives it (no constraint, nothing cascades)."""
    return models.ForeignKey(model, null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
                             related_name="+")


class Row(Amounts):
    """Whose the amounts are: cluster × pool × GPU model × project (and the project's department)."""

    kind = models.PositiveSmallIntegerField(choices=Kind, default=Kind.CLOSING)
    cluster_id = models.BigIntegerField()
    pool = _link("nodepools.NodePool")
    gpu_model = models.CharField("GPU model", max_length=128, blank=True)
    gpu_unit = models.CharField("unit", max_length=32, blank=True,
                                help_text="What the GPUs are billed in: empty for whole GPUs, a MIG profile (1g.10gb), "
                                          "replica:<n> (a GPU time-sliced n ways) or fraction (GPU-equivalents).")
    department = _link("projects.Department")
    project = _link("projects.Project")

    class Meta:
        abstract = True


class LedgerEntry(Row):
    """One hour × cluster × pool × GPU model × project: a closing, or a correction (the difference a late
    event made, recorded when it came)."""

    hour = models.DateTimeField(help_text="Start of the hour (UTC).")
    recorded = models.DateTimeField()

    objects = LedgerQuerySet.as_manager()

    class Meta:
        ordering = ["hour", "cluster_id", "pool_id", "gpu_model", "department_id", "project_id", "kind", "pk"]
        verbose_name_plural = "ledger entries"
        indexes = [
            models.Index(fields=["hour"], name="ledger_entry_hour"),
            models.Index(fields=["cluster_id", "hour"], name="ledger_entry_cluster_hour"),
            models.Index(fields=["department", "hour"], name="ledger_entry_department_hour"),
            models.Index(fields=["project", "hour"], name="ledger_entry_project_hour"),
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:00} {self.get_kind_display()} pool={self.pool_id} project={self.project_id}"


class LedgerDay(Row):
    """A day's sum of the hourly rows of one cluster × pool × GPU model × project, closings and
    corrections apart; kept beyond the hourly rows' retention."""

    day = models.DateField()

    objects = LedgerQuerySet.as_manager()

    class Meta:
        ordering = ["day", "cluster_id", "pool_id", "gpu_model", "department_id", "project_id", "kind"]
        indexes = [
            models.Index(fields=["cluster_id", "day"], name="ledger_day_cluster_day"),
            models.Index(fields=["department", "day"], name="ledger_day_department_day"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.get_kind_display()} pool={self.pool_id} project={self.project_id}"


class ClosedHour(models.Model):
    """An hour of a cluster the ledger has closed (and when a late event last corrected it)."""

    cluster_id = models.BigIntegerField()
    hour = models.DateTimeField()
    closed_at = models.DateTimeField()
    corrected_at = models.DateTimeField(null=True, blank=True)
    pods = models.PositiveIntegerField(default=0, help_text="Pods counted when it closed.")

    class Meta:
        ordering = ["cluster_id", "hour"]
        constraints = [models.UniqueConstraint(fields=["cluster_id", "hour"], name="closed_hour_unique")]

    def __str__(self) -> str:
        return f"cluster {self.cluster_id} {self.hour:%Y-%m-%d %H:00}"


class StatementRevision(models.Model):
    """A revision of a month's statement of a cluster (`department_id` None: the cluster's statement), as
    issued: revision 1 of the cluster's when the month's last hour closed (every department's revision 1 is
    that one), and a revision more each time a correction changed its figures after that (the one written
    at `issued_at`). A statement of a month not closed yet is provisional and has none."""

    cluster_id = models.BigIntegerField()
    department_id = models.BigIntegerField(null=True, blank=True)
    month = models.DateField(help_text="The month's first day.")
    revision = models.PositiveIntegerField()
    issued_at = models.DateTimeField()

    class Meta:
        ordering = ["cluster_id", "month", "department_id", "revision"]
        constraints = [
            models.UniqueConstraint(fields=["cluster_id", "department_id", "month", "revision"],
                                    condition=Q(department_id__isnull=False), name="statement_revision_unique"),
            models.UniqueConstraint(fields=["cluster_id", "month", "revision"], condition=Q(department_id__isnull=True),
                                    name="statement_revision_cluster_unique"),
        ]

    def __str__(self) -> str:
        return f"cluster {self.cluster_id} department {self.department_id} {self.month:%Y-%m} R{self.revision}"


class LedgerState(models.Model):
    """Per cluster: the first hour the ledger covers, the end of the last closed hour, and up to when
    pods' lifetimes were looked at for late changes."""

    cluster_id = models.BigIntegerField(unique=True)
    started = models.DateTimeField()
    closed_until = models.DateTimeField()
    scanned_until = models.DateTimeField()

    def __str__(self) -> str:
        return f"cluster {self.cluster_id}: closed until {self.closed_until:%Y-%m-%d %H:%M}"


class DeservedHistory(models.Model):
    """A project's deserved GPUs in a pool from `since` on (recorded when its quota changes)."""

    pool_id = models.BigIntegerField()
    project_id = models.BigIntegerField()
    gpu_deserved = models.DecimalField(max_digits=10, decimal_places=3)  # as the quota (projects.Quota)
    since = models.DateTimeField()

    class Meta:
        ordering = ["pool_id", "project_id", "since", "pk"]
        indexes = [models.Index(fields=["pool_id", "project_id", "since"], name="deserved_history_lookup")]

    def __str__(self) -> str:
        return f"pool {self.pool_id} project {self.project_id}: {self.gpu_deserved} from {self.since:%Y-%m-%d %H:%M}"


# ---------------------------------------------------------------------------------------------------
# Rates

CURRENCY = RegexValidator(r"^[A-Z]{3}$", "A currency is its ISO 4217 code: three capital letters, e.g. EUR or USD.")


class RateQuerySet(RestrictedQuerySet):
    access_level = "cluster"
    access_paths = {"cluster": ["pool__cluster_id"]}

    def restrict(self, user, action: str = "view"):
        # Every holder of a role reads the prices (statements show costs); only system administrators
        # (`rate.*`, granted by no other role) set them.
        if action == "view":
            return self.all() if user_grants(user) else self.none()
        return self.filter(access_q(user, type(self), f"rate.{action}"))


def _not_negative(label: str):
    return MinValueValidator(0, message=f"{label} cannot be negative.")


class Rate(models.Model):
    """A price per GPU-hour of one GPU model (as its nodes report it, `nvidia.com/gpu.product`), for every
    pool or one pool, from `valid_from` (a UTC date) until the next rate of the same model and pool.
    A pool's own rate wins over the model's rate for every pool."""

    gpu_model = models.CharField("GPU model", max_length=128,
                                 help_text="As the nodes report it (nvidia.com/gpu.product), e.g. NVIDIA-A100-SXM4-80GB.")
    pool = models.ForeignKey("nodepools.NodePool", null=True, blank=True, on_delete=models.DO_NOTHING,
                             db_constraint=False, related_name="+",
                             help_text="Only this pool (empty: every pool).")
    mig_profile = models.CharField("MIG profile", max_length=32, blank=True,
                                   help_text="Only slices of this MIG profile of the model, e.g. 1g.10gb: the price is "
                                             "then per slice-hour (empty: whole GPUs; a slice without a rate of its "
                                             "own costs the model's price × its share of the GPU).")
    currency = models.CharField(max_length=3, validators=[CURRENCY])
    valid_from = models.DateField("valid from", help_text="The first day (UTC) it applies to.")
    gpu_hour = models.DecimalField("price per GPU-hour", max_digits=12, decimal_places=4,
                                   validators=[_not_negative("The price per GPU-hour")])
    cpu_core_hour = models.DecimalField("price per CPU-core-hour", max_digits=12, decimal_places=6, null=True,
                                        blank=True, validators=[_not_negative("The price per CPU-core-hour")],
                                        help_text="Optional.")
    memory_gib_hour = models.DecimalField("price per memory-GiB-hour", max_digits=12, decimal_places=6, null=True,
                                          blank=True, validators=[_not_negative("The price per memory-GiB-hour")],
                                          help_text="Optional.")
    description = models.CharField(max_length=200, blank=True)
    version = models.PositiveIntegerField(default=1, editable=False)
    updated = models.DateTimeField(auto_now=True)

    objects = RateQuerySet.as_manager()

    class Meta:
        ordering = ["gpu_model", "mig_profile", "pool_id", "valid_from"]
        constraints = [
            models.UniqueConstraint(fields=["gpu_model", "mig_profile", "valid_from"], condition=Q(pool__isnull=True),
                                    name="rate_unique_model_profile_date"),
            models.UniqueConstraint(fields=["gpu_model", "mig_profile", "pool", "valid_from"],
                                    condition=Q(pool__isnull=False), name="rate_unique_model_profile_pool_date"),
        ]

    def __str__(self) -> str:
        where = f" in pool {self.pool.name}" if self.pool_id and self.pool else ""
        if self.mig_profile:
            return (f"{self.gpu_model} MIG {self.mig_profile}{where} from {self.valid_from}: "
                    f"{self.gpu_hour} {self.currency}/slice-hour")
        return f"{self.gpu_model}{where} from {self.valid_from}: {self.gpu_hour} {self.currency}/GPU-hour"

    def audit_scope(self, pk):
        return None, None

    def clean(self) -> None:
        if self.mig_profile:
            profile = parse_mig_profile(self.mig_profile)
            if profile is None or self.mig_profile.startswith(("mig-", MIG_RESOURCE_PREFIX)):
                raise ValidationError({"mig_profile": f"{self.mig_profile!r} is not a MIG profile: give it as "
                                                      "<slices>g.<memory>gb, e.g. 1g.10gb or 3g.40gb."})
            slices = compute_slices(self.gpu_model)
            if profile.compute_slices > slices:
                raise ValidationError({"mig_profile": f"A GPU of {self.gpu_model or 'this model'} has {slices} compute "
                                                      f"slices: a {self.mig_profile} slice (of {profile.compute_slices}) "
                                                      "does not fit it."})
        clash = Rate.objects.filter(gpu_model=self.gpu_model, mig_profile=self.mig_profile, pool_id=self.pool_id,
                                    valid_from=self.valid_from)
        if clash.exclude(pk=self.pk).exists():
            where = "this pool" if self.pool_id else "every pool"
            what = f"{self.gpu_model} MIG {self.mig_profile}" if self.mig_profile else self.gpu_model
            raise ValidationError({"valid_from": f"{what} already has a rate for {where} from {self.valid_from}: "
                                                 "change that one, or choose another date."})
        other = Rate.objects.exclude(pk=self.pk).exclude(currency=self.currency).values_list("currency", flat=True).first()
        if other and self.currency:
            raise ValidationError({"currency": f"Rates are in {other}: a rate in {self.currency} could not be added to "
                                               "them in a statement's totals. Give it in " + other + "."})
