"""The usage history table: every value of a snapshot row is a column; the user chooses and orders
them (saved through the `ui` app) and the page's CSV holds the chosen columns in their order."""
from __future__ import annotations

import django_tables2 as tables

from nodepools.models import Cluster
from ui.formats import number
from ui.tables import ConsoleTable
from ui.views import register
from usage.models import UsageSnapshot

NUM = {"td": {"class": "num"}, "th": {"class": "num"}}


def _attach_cluster_names(rows) -> None:
    """Rows keep the cluster's id only (history outlives a deleted cluster): one query names them."""
    ids = {row.cluster_id for row in rows}
    names = dict(Cluster.objects.filter(pk__in=ids).values_list("pk", "name")) if ids else {}
    for row in rows:
        row.cluster_name = names.get(row.cluster_id, f"#{row.cluster_id} (deleted)")


def _owner(obj, pk) -> str | None:
    """A pool's, department's or project's name; '#id (deleted)' once it is gone; None if the row has none."""
    if pk is None:
        return None
    if obj is None:
        return f"#{pk} (deleted)"
    return getattr(obj, "label_with_name", obj.name)  # a department or project: "R&D (rnd)"


class OwnerColumn(tables.Column):
    """The name of the row's pool, department or project, or '#id (deleted)' when the row outlived it."""

    def __init__(self, verbose_name, field: str, **kwargs):
        self.field = field
        super().__init__(verbose_name, accessor=f"{field}__name", order_by=(f"{field}__name",), empty_values=(),
                         default="—", **kwargs)

    def render(self, record):
        return _owner(getattr(record, self.field), getattr(record, f"{self.field}_id")) or "—"


class UnlimitedColumn(tables.Column):
    """A deserved value where empty means unlimited (department and project rows; pool rows have none)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("empty_values", ())
        kwargs.setdefault("attrs", NUM)
        super().__init__(*args, **kwargs)

    def render(self, value, record):
        return unlimited(value, record) if value is not None or record.kind != UsageSnapshot.Kind.POOL else "—"


def unlimited(value, record):
    return "unlimited" if value is None and record.kind != UsageSnapshot.Kind.POOL else value


def gib(mib):
    """Snapshots keep memory in MiB (the compliance CSV carries those); the table shows GiB."""
    return None if mib is None else round(mib / 1024, 1)


class GibColumn(tables.Column):
    """Memory stored in MiB, shown and exported in GiB (one decimal); `unlimited_when_empty` for deserved
    values, where empty means unlimited on department and project rows."""

    def __init__(self, *args, unlimited_when_empty: bool = False, **kwargs):
        self.unlimited_when_empty = unlimited_when_empty
        kwargs.setdefault("attrs", NUM)
        if unlimited_when_empty:
            kwargs.setdefault("empty_values", ())
        else:
            kwargs.setdefault("default", "—")
        super().__init__(*args, **kwargs)

    def value_of(self, value, record):
        if self.unlimited_when_empty and value is None:
            return unlimited(None, record)
        return gib(value)

    def render(self, value, record):
        shown = self.value_of(value, record)
        return "—" if shown is None else number(shown) if not isinstance(shown, str) else shown


@register
class UsageSnapshotTable(ConsoleTable):
    key = "usage"
    enrich = staticmethod(_attach_cluster_names)
    default_columns = ("taken", "kind", "pool", "department", "project", "gpu_capacity", "gpu_deserved",
                       "gpu_allocated", "gpu_over_quota", "cpu_allocated", "memory_allocated_mib")

    taken = tables.DateTimeColumn(format="Y-m-d H:i", verbose_name="Time (UTC)")
    cluster = tables.Column("Cluster", accessor="cluster_name", order_by=("cluster_id",))
    pool = OwnerColumn("Node pool", "pool")
    kind = tables.Column("Kind")
    department = OwnerColumn("Department", "department")
    project = OwnerColumn("Project", "project")
    gpu_capacity = tables.Column("GPU capacity (Ready)", default="—", attrs=NUM)
    gpu_deserved = tables.Column("GPU deserved", attrs=NUM)
    gpu_allocated = tables.Column("GPU allocated", attrs=NUM)
    gpu_over_quota = tables.Column("GPU over-quota", attrs=NUM)
    cpu_capacity = tables.Column("CPU capacity (cores)", default="—", attrs=NUM)
    cpu_deserved = UnlimitedColumn("CPU deserved (cores)")
    cpu_allocated = tables.Column("CPU allocated (cores)", attrs=NUM)
    cpu_over_quota = tables.Column("CPU over-quota (cores)", attrs=NUM)
    memory_capacity_mib = GibColumn("Memory capacity (GiB)")
    memory_deserved_mib = GibColumn("Memory deserved (GiB)", unlimited_when_empty=True)
    memory_allocated_mib = GibColumn("Memory allocated (GiB)")
    memory_over_quota_mib = GibColumn("Memory over-quota (GiB)")
    gpu_utilization = tables.Column("GPU utilization (%)", default="—", attrs=NUM)
    gpu_idle = tables.Column("Idle GPUs", default="—", attrs=NUM)

    def export_kind(self, record):
        return record.get_kind_display()

    def export_pool(self, record):
        return _owner(record.pool, record.pool_id)

    def export_department(self, record):
        return _owner(record.department, record.department_id)

    def export_project(self, record):
        return _owner(record.project, record.project_id)

    def export_cpu_deserved(self, record):
        return unlimited(record.cpu_deserved, record)

    def export_memory_capacity_mib(self, record):
        return gib(record.memory_capacity_mib)

    def export_memory_deserved_mib(self, record):
        value = record.memory_deserved_mib
        return unlimited(None, record) if value is None else gib(value)

    def export_memory_allocated_mib(self, record):
        return gib(record.memory_allocated_mib)

    def export_memory_over_quota_mib(self, record):
        return gib(record.memory_over_quota_mib)


class SinceColumn(tables.Column):
    """When the GPU became idle; "before …" when it has been idle for longer than the lookback."""

    def render(self, value, record):
        text = f"{value:%Y-%m-%d %H:%M}"
        return f"before {text}" if record.since_before else text


@register
class IdleGpuTable(ConsoleTable):
    key = "idle-gpus"
    default_columns = ("department", "project", "namespace", "pod", "node", "gpu_index", "model", "since",
                       "idle_hours", "gpu_hours_wasted")

    cluster = tables.Column("Cluster", accessor="cluster__name")
    department = tables.Column("Department", accessor="department_label", default="—")
    project = tables.Column("Project", accessor="project_label", default="—")
    namespace = tables.Column("Namespace")
    pod = tables.Column("Pod", accessor="pod_name")
    node = tables.Column("Node")
    pool = tables.Column("Node pool", accessor="pool__name", default="—")
    gpu_index = tables.Column("GPU", attrs=NUM)  # a MIG slice: "0 (MIG 1g.10gb, instance 3)"
    uuid = tables.Column("GPU UUID")
    model = tables.Column("GPU model", default="—")
    since = SinceColumn("Idle since (UTC)")
    idle_hours = tables.Column("Idle for (hours)", attrs=NUM)
    gpu_hours_wasted = tables.Column("GPU-hours wasted", attrs=NUM)

    def render_gpu_index(self, record):
        return record.device

    def export_gpu_index(self, record):
        return record.device

    def export_since(self, record):
        return f"{'before ' if record.since_before else ''}{record.since:%Y-%m-%dT%H:%M:%SZ}"

    def export_pool(self, record):
        return record.pool.name if record.pool else ""
