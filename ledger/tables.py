"""The ledger's hourly rows and the rates as tables (columns chosen per user; the page's CSV is the view)."""
from __future__ import annotations

import django_tables2 as tables

from kube.gpu import unit_label
from ledger.models import Kind
from ledger.selectors import TEN_THOUSANDTH, gib_hours, hours
from nodepools.models import Cluster
from ui.html import format_html
from ui.paths import path_to
from ui.tables import ConsoleTable
from ui.views import register
from usage.tables import OwnerColumn

NUM = {"td": {"class": "num"}, "th": {"class": "num"}}


def owner_name(record, field: str) -> str:
    """A row's pool, department or project by name; '#id (deleted)' once it is gone; '' if it has none."""
    pk = getattr(record, f"{field}_id")
    if pk is None:
        return ""
    obj = getattr(record, field)
    if obj is None:
        return f"#{pk} (deleted)"
    return getattr(obj, "label_with_name", obj.name)  # a department or project: "R&D (rnd)"


def _attach_cluster_names(rows) -> None:
    """Rows keep the cluster's id only (the ledger outlives a deleted cluster): one query names them."""
    ids = {row.cluster_id for row in rows}
    names = dict(Cluster.objects.filter(pk__in=ids).values_list("pk", "name")) if ids else {}
    for row in rows:
        row.cluster_name = names.get(row.cluster_id, f"#{row.cluster_id} (deleted)")


class HoursColumn(tables.Column):
    """An exact integral in seconds shown in hours (to 1/10,000 of an hour: a row is one hour)."""

    def __init__(self, verbose_name, field: str, **kwargs):
        self.field = field
        super().__init__(verbose_name, accessor=field, attrs=NUM, **kwargs)

    def render(self, value):
        return hours(value, TEN_THOUSANDTH)


class KindColumn(tables.Column):
    def render(self, value, record):
        return record.get_kind_display()


@register
class LedgerEntryTable(ConsoleTable):
    key = "ledger"
    enrich = staticmethod(_attach_cluster_names)
    default_columns = ("hour", "kind", "pool", "gpu_model", "department", "project", "gpu_hours", "over_quota_hours",
                       "idle_hours", "gpu_utilization", "cpu_core_hours", "memory_gib_hours")

    hour = tables.DateTimeColumn(format="Y-m-d H:i", verbose_name="Hour (UTC)")
    kind = KindColumn("Kind")
    recorded = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="Recorded (UTC)")
    cluster = tables.Column("Cluster", accessor="cluster_name", order_by=("cluster_id",))
    pool = OwnerColumn("Node pool", "pool")
    gpu_model = tables.Column("GPU model")
    gpu_unit = tables.Column("Unit", empty_values=())
    unit_hours = HoursColumn("Unit-hours", "unit_seconds")
    department = OwnerColumn("Department", "department")
    project = OwnerColumn("Project", "project")
    gpu_hours = HoursColumn("GPU-hours", "gpu_seconds")
    over_quota_hours = HoursColumn("Over-quota GPU-hours", "over_quota_gpu_seconds")
    non_preemptible_hours = HoursColumn("Non-preemptible GPU-hours", "non_preemptible_gpu_seconds")
    idle_hours = HoursColumn("Idle GPU-hours", "idle_gpu_seconds")
    gpu_utilization = tables.Column("GPU utilization (%)", empty_values=(), orderable=False, attrs=NUM)
    cpu_core_hours = HoursColumn("CPU-core-hours", "cpu_core_seconds")
    memory_gib_hours = tables.Column("Memory-GiB-hours", accessor="memory_byte_seconds", attrs=NUM)
    gpu_seconds = tables.Column("GPU-seconds (exact)", attrs=NUM)

    class Meta(ConsoleTable.Meta):
        row_attrs = {"class": lambda record: "correction" if record.kind == Kind.CORRECTION else ""}

    def render_gpu_utilization(self, record):
        return record.gpu_utilization if record.gpu_utilization is not None else "—"

    def render_gpu_unit(self, value):
        return unit_label(value or "")

    def export_gpu_unit(self, record):
        return unit_label(record.gpu_unit or "")

    def render_memory_gib_hours(self, value):
        return gib_hours(value, TEN_THOUSANDTH)

    def export_kind(self, record):
        return record.get_kind_display()

    def export_pool(self, record):
        return owner_name(record, "pool")

    def export_department(self, record):
        return owner_name(record, "department")

    def export_project(self, record):
        return owner_name(record, "project")

    def export_gpu_hours(self, record):
        return hours(record.gpu_seconds, TEN_THOUSANDTH)

    def export_over_quota_hours(self, record):
        return hours(record.over_quota_gpu_seconds, TEN_THOUSANDTH)

    def export_non_preemptible_hours(self, record):
        return hours(record.non_preemptible_gpu_seconds, TEN_THOUSANDTH)

    def export_idle_hours(self, record):
        return hours(record.idle_gpu_seconds, TEN_THOUSANDTH)

    def export_gpu_utilization(self, record):
        return record.gpu_utilization

    def export_cpu_core_hours(self, record):
        return hours(record.cpu_core_seconds, TEN_THOUSANDTH)

    def export_memory_gib_hours(self, record):
        return gib_hours(record.memory_byte_seconds, TEN_THOUSANDTH)


@register
class RateTable(ConsoleTable):
    key = "rates"
    default_columns = ("gpu_model", "mig_profile", "pool", "valid_from", "gpu_hour", "cpu_core_hour", "memory_gib_hour",
                       "currency", "description")

    gpu_model = tables.Column("GPU model")
    mig_profile = tables.Column("MIG profile", default="Whole GPU")
    pool = tables.Column("Node pool", accessor="pool__name", default="Every pool", order_by=("pool__name",))
    valid_from = tables.DateColumn(format="Y-m-d", verbose_name="Valid from")
    gpu_hour = tables.Column("Price per GPU-hour (MIG profile: per slice-hour)", attrs=NUM)
    cpu_core_hour = tables.Column("Price per CPU-core-hour", default="—", attrs=NUM)
    memory_gib_hour = tables.Column("Price per memory-GiB-hour", default="—", attrs=NUM)
    currency = tables.Column("Currency")
    description = tables.Column("Description", default="")
    updated = tables.DateTimeColumn(format="Y-m-d H:i", verbose_name="Updated (UTC)")

    def __init__(self, *args, can_change: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.can_change = can_change

    def render_gpu_model(self, value, record):
        if not self.can_change:
            return value
        return format_html('<a href="{}">{}</a>', path_to("rate-edit", record.pk), value)

    def export_pool(self, record):
        return record.pool.name if record.pool_id and record.pool else "Every pool"
