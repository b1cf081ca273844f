"""Tables of pools, nodes and pods (django-tables2): every column declared, a default set chosen.

Numbers are shown in the unit their header names, so that the page and its CSV agree.
"""
from __future__ import annotations

from decimal import Decimal

import django_tables2 as tables
import orjson
from django.db.models import FloatField, TextField
from django.db.models.functions import Cast
from django.utils.html import format_html_join

from gpumetrics import idle_threshold, idle_window_seconds
from nodepools import capacity
from nodepools.models import NodeStatus
from nodepools.selectors import (
    NODE_USAGE_FIELDS,
    STORED_GPU_FIGURES,
    node_mig_state,
    nodes_annotate_stored_gpu_figures,
    nodes_annotate_usage,
    nodes_attach_gpu_metrics,
    nodes_attach_usage,
    pools_attach_gpu_metrics,
)
from ui.formats import number as _num
from ui.html import format_html
from ui.paths import path_to
from ui.tables import ConsoleTable
from ui.views import register

GIB = 1024 ** 3
ZERO = Decimal(0)


def _gib(value) -> float:
    return round((value or 0) / GIB, 1)


def _cores(millis) -> float:
    return round((millis or 0) / 1000, 2)


class NumberColumn(tables.Column):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("attrs", {"td": {"class": "num"}, "th": {"class": "num"}})
        super().__init__(*args, **kwargs)

    def render(self, value):
        return _num(value)


def cluster_link(record) -> str:
    """A cluster cell links to that cluster's overview."""
    return path_to("cluster-overview", record.cluster_id)


class PoolStatusColumn(tables.Column):
    def render(self, value):
        return format_html('<span class="status status-{}">{}</span>', value.lower(), value)


class GpuMetricColumn(tables.Column):
    """A figure of the DCGM exporter (through the cluster's Prometheus): the table's `gpu_<name>(record)`
    gives (value, reason); no value is "—" with the reason on hover. Not sortable: it is not stored."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("attrs", {"td": {"class": "num"}, "th": {"class": "num"}})
        kwargs.setdefault("orderable", False)
        kwargs.setdefault("empty_values", ())
        kwargs.setdefault("accessor", "pk")
        super().__init__(*args, **kwargs)

    def render(self, record, table, bound_column):
        value, reason = getattr(table, f"gpu_{bound_column.name}")(record)
        if value is None:
            return format_html('<span class="na" title="{}">—</span>', reason or "no figure")
        return value


def idle_definition() -> str:
    """What "idle" means, for the hover of the idle columns: the Idle GPUs page's definition."""
    minutes = idle_window_seconds() / 60
    return (f"GPUs held by a pod whose utilization stayed under {idle_threshold():g} % for the whole last "
            f"{minutes:g} min (the highest utilization over that window), the same definition as the Idle GPUs "
            "page and the usage snapshots")


def _pct(value):
    return None if value is None else round(value, 1)


def _mib_gib(value):
    return round((value or 0) / 1024, 1)


@register
class NodePoolTable(ConsoleTable):
    key = "pools"
    default_columns = (
        "name", "cluster", "status", "label_key", "label_value", "node_count", "gpu_total", "gpu_allocated",
        "gpu_free", "gpu_utilization", "idle_gpus", "workload_count", "gpu_placement",
    )

    name = tables.Column("Node pool", linkify=lambda record: path_to("pool-detail", record.pk))
    cluster = tables.Column("Cluster", accessor="cluster__name", order_by=("cluster__name",), linkify=cluster_link)
    status = PoolStatusColumn("Status", accessor="status", order_by=("ready_node_count", "node_count"))
    label_key = tables.Column("Label key", default="")
    label_value = tables.Column("Label value", default="")
    node_count = NumberColumn("Nodes")
    gpu_placement = tables.Column("GPU placement strategy")
    cpu_placement = tables.Column("CPU placement strategy")
    gpu_total = NumberColumn("Total GPU devices")
    gpu_ready = NumberColumn("Ready GPU devices")
    gpu_memory = NumberColumn("Total GPU memory (GiB)", accessor="gpu_memory_total_mib",
                              order_by=("gpu_memory_total_mib",))
    gpu_allocated = NumberColumn("Allocated GPUs")
    gpu_free = NumberColumn("Free GPUs", accessor="gpu_free")
    cpu_total = NumberColumn("Total CPU (cores)", accessor="cpu_total_millis", order_by=("cpu_total_millis",))
    memory_total = NumberColumn("Total CPU memory (GiB)", accessor="memory_total_bytes",
                                order_by=("memory_total_bytes",))
    cpu_allocated = NumberColumn("Allocated CPU (cores)", accessor="cpu_allocated_millis",
                                 order_by=("cpu_allocated_millis",))
    memory_allocated = NumberColumn("Allocated CPU memory (GiB)", accessor="memory_allocated_bytes",
                                    order_by=("memory_allocated_bytes",))
    # (projects adds "Projects' GPU quota (sum)" here: ConsoleTable.add_column, in its AppConfig.ready())
    workload_count = NumberColumn("Workloads")
    gpu_utilization = GpuMetricColumn("Utilization of allocated GPUs (%)")
    idle_gpus = GpuMetricColumn("Idle allocated GPUs", attrs={
        "td": {"class": "num"}, "th": {"class": "num", "title": lambda **kwargs: idle_definition()}})
    updated = tables.DateTimeColumn(verbose_name="Last updated", format="Y-m-d H:i")
    created = tables.DateTimeColumn(verbose_name="Creation time", format="Y-m-d H:i")

    class Meta(ConsoleTable.Meta):
        row_attrs = {"data-pool": lambda record: record.name}

    # The DCGM exporter's figures as the sync's leader last read them (nodepools.selectors.pools_attach_gpu_metrics):
    # attached by the page's rows hook, else here for every row of the table at once.
    def _gpu(self, record):
        if not hasattr(record, "gpu_metrics"):
            pools_attach_gpu_metrics([row.record for row in self.paginated_rows])
        return getattr(record, "gpu_metrics", None), getattr(record, "gpu_metrics_reason", "not loaded")

    def gpu_gpu_utilization(self, record):
        figures, reason = self._gpu(record)
        if figures is None:
            return None, reason
        if figures.allocated_utilization is None:
            return None, "no allocated GPU reports utilization"
        return _num(_pct(figures.allocated_utilization)), ""

    def gpu_idle_gpus(self, record):
        figures, reason = self._gpu(record)
        return (None, reason) if figures is None else (_num(figures.idle_allocated), "")

    def export_gpu_utilization(self, record):
        figures, _ = self._gpu(record)
        return _pct(figures.allocated_utilization) if figures is not None else None

    def export_idle_gpus(self, record):
        figures, _ = self._gpu(record)
        return figures.idle_allocated if figures is not None else None

    def render_gpu_memory(self, value):
        return _num(round(value / 1024, 1))

    def render_cpu_total(self, value):
        return _num(_cores(value))

    def render_cpu_allocated(self, value):
        return _num(_cores(value))

    def render_memory_total(self, value):
        return _num(_gib(value))

    def render_memory_allocated(self, value):
        return _num(_gib(value))

    def render_gpu_placement(self, record):
        return record.get_gpu_placement_display()

    def render_cpu_placement(self, record):
        return record.get_cpu_placement_display()

    def export_gpu_memory(self, record):
        return round(record.gpu_memory_total_mib / 1024, 1)

    def export_gpu_placement(self, record):
        return record.get_gpu_placement_display()

    def export_cpu_placement(self, record):
        return record.get_cpu_placement_display()

    def export_cpu_total(self, record):
        return _cores(record.cpu_total_millis)

    def export_cpu_allocated(self, record):
        return _cores(record.cpu_allocated_millis)

    def export_memory_total(self, record):
        return _gib(record.memory_total_bytes)

    def export_memory_allocated(self, record):
        return _gib(record.memory_allocated_bytes)


@register
class OverviewPoolTable(NodePoolTable):
    """The overview's pool table: a separate key, so its columns are chosen apart from the pools page."""

    key = "overview"
    default_columns = ("name", "status", "label", "node_count", "gpu_total", "gpu_ready", "gpu_allocated", "gpu_free",
                       "fits_now")

    label = tables.Column("Label", accessor="label", orderable=False, default="—")
    # What fits now ("22 GPUs free: 1×8 · 3×4 · 9×2 · 22×1"): pods of 8, 4, 2, 1 GPUs, each on one node. The
    # overview's view sets `pool.fit` (projects.selectors.pools_attach_fit: it knows the pools' topology).
    fits_now = tables.Column("Fits now (pods×GPUs)", accessor="pk", orderable=False,
                             attrs={"th": {"title": "How many pods of 8, 4, 2 and 1 GPUs fit on the free GPUs now, "
                                                    "each pod on one node (fragmentation)"}})

    def render_fits_now(self, record):
        figures = getattr(record, "fit", None)
        return figures.line() if figures is not None else "—"

    def value_fits_now(self, record):
        return self.render_fits_now(record)

    class Meta(NodePoolTable.Meta):
        pass


class NodeStatusColumn(tables.Column):
    """"Not ready (Memory pressure) +1": the main reason in the cell and, when there are more, every
    reason in a disclosure a keyboard reaches (a <details>, no script); the title repeats them for the mouse."""

    def render(self, value, record):
        reasons = record.status_reasons or []
        badge = format_html('<span class="status status-{}" title="{}">{}</span>', record.status,
                            "\n".join(reasons) if reasons else record.get_status_display(), record.status_text)
        if record.status != NodeStatus.NOT_READY or len(reasons) < 2:
            return badge
        more = len(reasons) - 1
        items = format_html_join("", "<li>{}</li>", ((r,) for r in reasons))
        return format_html(
            '<details class="reasons-popover"><summary aria-label="{}: {} not-ready reasons">{} '
            '<span class="more">+{}</span></summary><ul class="reasons">{}</ul></details>',
            record.status_text, len(reasons), badge, more, items)


def _attach_node_usage(nodes):
    nodes_attach_usage(nodes)
    # The page's rows only: what the sync's leader stored in its last round (the CSV's figures; no Prometheus
    # query) where that round is fresh, else one Prometheus query per cluster within the page's budget (no
    # idle count: the table does not show one, and its window is the dearest part of the query).
    return nodes_attach_gpu_metrics(nodes, idle=False, stored=True)


@register
class NodeTable(ConsoleTable):
    key = "nodes"
    enrich = staticmethod(_attach_node_usage)
    default_columns = (
        "name", "status", "pool", "gpu_product", "gpu_devices", "gpu_allocated", "gpu_free", "gpu_utilization",
        "gpu_memory_used", "cpu", "memory", "pods", "zone",
    )

    name = tables.Column("Node", linkify=lambda record: path_to("node-detail", record.pk))
    status = NodeStatusColumn("Status", accessor="status", order_by=("status",),
                              attrs={"td": {"class": "status-cell"}})
    pool = tables.Column("Node pool", accessor="pool__name", order_by=("pool__name",), default="—",
                         linkify=lambda record: path_to("pool-detail", record.pool_id) if record.pool_id else None)
    cluster = tables.Column("Cluster", accessor="cluster__name", order_by=("cluster__name",), linkify=cluster_link)
    gpu_product = tables.Column("GPU type", default="—")
    gpu_devices = tables.Column("Ready/total GPU devices", accessor="gpu_ready", order_by=("gpu_ready", "gpu_capacity"),
                                attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    gpu_memory = NumberColumn("GPU memory (GiB)", accessor="gpu_memory_mib", order_by=("gpu_memory_mib",))
    gpu_allocated = NumberColumn("Allocated GPUs")
    gpu_free = NumberColumn("Free GPU devices")
    cpu = NumberColumn("CPU (cores)", accessor="cpu_allocatable_millis", order_by=("cpu_allocatable_millis",))
    memory = NumberColumn("CPU memory (GiB)", accessor="memory_allocatable_bytes", order_by=("memory_allocatable_bytes",))
    cpu_allocated = NumberColumn("Allocated CPU (cores)", accessor="cpu_allocated_millis",
                                 order_by=("cpu_allocated_millis",))
    memory_allocated = NumberColumn("Allocated CPU memory (GiB)", accessor="memory_allocated_bytes",
                                    order_by=("memory_allocated_bytes",))
    pods = NumberColumn("Pods", accessor="pod_count", order_by=("pod_count",))
    zone = tables.Column("Zone", default="—")
    instance_type = tables.Column("Instance type", default="—")
    capacity_type = tables.Column("Capacity type", default="—")
    gpu_utilization = GpuMetricColumn("GPU utilization (%)")
    gpu_memory_used = GpuMetricColumn("Used/total GPU memory (GiB)")
    # The layout NVIDIA's MIG manager was asked (nvidia.com/mig.config) and where it is with it
    # (nvidia.com/mig.config.state): pending, rebooting, success, failed.
    mig_layout = tables.Column("MIG layout", accessor="mig_config", orderable=False, empty_values=())

    class Meta(ConsoleTable.Meta):
        row_attrs = {"data-node": lambda record: record.name}

    def render_mig_layout(self, record):
        state = node_mig_state(record)
        if state is None:
            return "—"
        css = "status-failed" if state.failed else "status-pending" if state.in_progress else (
            "status-ready" if state.done else "status-unknown")
        return format_html('<code>{}</code> <span class="status {} mig-state">{}</span>', state.asked, css,
                           state.state or "not reported")

    def __init__(self, *args, gpu_figures_clusters=(), **kwargs):
        """`gpu_figures_clusters`: the clusters whose stored GPU figures the CSV carries
        (nodepools.selectors.node_gpu_figures_fresh, read by the view before the rows stream)."""
        super().__init__(*args, **kwargs)
        self.gpu_figures_clusters = list(gpu_figures_clusters)

    # The DCGM exporter's figures of a page's rows, attached by `enrich` (nodes_attach_gpu_metrics: the sync's
    # leader's last round where it is fresh). The CSV's rows carry the same stored figures, joined in their
    # query (`export_values`).
    def _gpu(self, record):
        return getattr(record, "gpu_metrics", None), getattr(record, "gpu_metrics_reason", "not loaded")

    def gpu_gpu_utilization(self, record):
        figures, reason = self._gpu(record)
        if figures is None or figures.utilization is None:
            return None, reason
        return _num(_pct(figures.utilization)), ""

    def gpu_gpu_memory_used(self, record):
        figures, reason = self._gpu(record)
        if figures is None:
            return None, reason
        return f"{_num(_mib_gib(figures.memory_used_mib))}/{_num(_mib_gib(figures.memory_total_mib))}", ""

    # The stored figures of a node, None when there are none (no GPU, no row stored, a cluster's round too old).
    def export_gpu_utilization(self, row):
        return _pct(row["stored_gpu_utilization"])

    def export_gpu_memory_used_gib(self, row):
        used = row["stored_gpu_memory_used_mib"]
        return None if used is None else _mib_gib(used)

    def export_gpu_memory_total_gib(self, row):
        total = row["stored_gpu_memory_total_mib"]
        return None if total is None else _mib_gib(total)

    def render_gpu_devices(self, record):
        return f"{_num(record.gpu_ready)}/{_num(record.gpu_capacity)}"

    def render_gpu_memory(self, record):
        # The node's GPU memory in all (devices x memory per device), like the CSV's.
        if not record.gpu_memory_mib:
            return "—"
        return _num(round(record.gpu_capacity * record.gpu_memory_mib / 1024, 1))

    def render_cpu(self, value):
        return _num(_cores(value))

    def render_cpu_allocated(self, value):
        return _num(_cores(value))

    def render_memory(self, value):
        return _num(_gib(value))

    def render_memory_allocated(self, value):
        return _num(_gib(value))

    # The CSV of every node reads plain rows (`values()`), not model instances, with the usage of every node
    # and its stored GPU figures joined in the same query: see ui.tables, nodepools.selectors.nodes_annotate_usage
    # and nodes_annotate_stored_gpu_figures.
    export_fields = (
        "name", "status", "pool__name", "cluster__name", "gpu_product", "gpu_capacity", "gpu_allocatable",
        "gpu_memory_mib", "cpu_allocatable_millis", "memory_allocatable_bytes", "zone", "instance_type",
        "capacity_type", "mig_config", "mig_config_state",
    )

    # The cells that depend only on these fields of the row (their getters read no other): written once per
    # distinct value (ui.tables).
    export_depends = {
        "status": ("status", "status_reasons_text"), "gpu_ready": ("status", "gpu_allocatable"),
        "gpu_total": ("gpu_capacity",), "gpu_memory": ("gpu_capacity", "gpu_memory_mib"),
        "gpu_allocated": ("gpu_allocated_float",), "gpu_free": ("status", "gpu_allocatable", "gpu_allocated_float"),
        "cpu": ("cpu_allocatable_millis",), "memory": ("memory_allocatable_bytes",),
        "cpu_allocated": ("cpu_allocated_millis",), "memory_allocated": ("memory_allocated_bytes",),
        "pods": ("pod_count",),
        "gpu_utilization": ("stored_gpu_utilization",), "gpu_memory_used_gib": ("stored_gpu_memory_used_mib",),
        "gpu_memory_total_gib": ("stored_gpu_memory_total_mib",),
        "mig_config": ("mig_config",), "mig_config_state": ("mig_config_state",),
    }

    def export_values(self, queryset):
        # Every reason of a not-ready node (a spreadsheet has no popover), not just the main one: read as the
        # stored JSON text, decoded only for a node that is not ready (decoding "[]" for every node of a
        # fleet was a third of the export's time).
        # The allocated GPUs as a float (at most 3 decimals, written the same as the Decimal), not a Decimal
        # made per row.
        nodes = nodes_annotate_stored_gpu_figures(nodes_annotate_usage(queryset), self.gpu_figures_clusters)
        return nodes.annotate(
            status_reasons_text=Cast("status_reasons", TextField()),
            gpu_allocated_float=Cast("usage_gpus", FloatField())).values(
            *self.export_fields, "status_reasons_text", "gpu_allocated_float",
            *(name for name in NODE_USAGE_FIELDS if name != "gpu_allocated"),
            *(f"stored_gpu_{name}" for name in STORED_GPU_FIGURES))

    def export_status(self, row):
        status = row["status"]
        if status != NodeStatus.NOT_READY:
            return node_status_text(status, [])
        text = row["status_reasons_text"]
        return node_status_text(status, (orjson.loads(text) if text else None) or [], every_reason=True)

    # "4/4" in one cell reads as a date in a spreadsheet: the CSV has the two numbers in two columns.
    csv_parts = {"mig_layout": (("mig_config", "MIG layout asked"), ("mig_config_state", "MIG layout state")),
                 "gpu_devices": (("gpu_ready", "Ready GPU devices"), ("gpu_total", "Total GPU devices")),
                 "gpu_memory_used": (("gpu_memory_used_gib", "Used GPU memory (GiB)"),
                                     ("gpu_memory_total_gib", "Total GPU memory reported (GiB)"))}

    def export_mig_config(self, row):
        return row["mig_config"] or None

    def export_mig_config_state(self, row):
        return row["mig_config_state"] or None

    def export_gpu_ready(self, row):
        return capacity.node_figures(row["status"], row["gpu_allocatable"], 0)["gpu_ready"]

    def export_gpu_total(self, row):
        return row["gpu_capacity"]

    def export_gpu_allocated(self, row):
        return row["gpu_allocated_float"]

    def export_gpu_free(self, row):
        return capacity.node_free(row["status"], row["gpu_allocatable"], Decimal(repr(row["gpu_allocated_float"] or 0)))

    def export_gpu_memory(self, row):
        if not row["gpu_memory_mib"]:
            return None
        return round(row["gpu_capacity"] * row["gpu_memory_mib"] / 1024, 1)

    def export_cpu(self, row):
        return _cores(row["cpu_allocatable_millis"])

    def export_memory(self, row):
        return _gib(row["memory_allocatable_bytes"])

    def export_cpu_allocated(self, row):
        return _cores(row["cpu_allocated_millis"])

    def export_memory_allocated(self, row):
        return _gib(row["memory_allocated_bytes"])

    def export_pods(self, row):
        return row["pod_count"]


def node_status_text(status: str, reasons: list[str], *, every_reason: bool = False) -> str:
    """Like `Node.status_text`, from the stored values; `every_reason` names them all, not just the main one."""
    if status == NodeStatus.NOT_READY:
        if not reasons:
            return "Not ready"
        return f"Not ready ({'; '.join(reasons) if every_reason else reasons[0]})"
    return NodeStatus(status).label


@register
class PodTable(ConsoleTable):
    key = "node-pods"
    default_columns = ("name", "namespace", "project", "phase", "priority", "gpus", "cpu", "memory")

    name = tables.Column("Pod")
    namespace = tables.Column("Namespace")
    project = tables.Column("Project", accessor="project__name", order_by=("project__name",), default="—")
    phase = tables.Column("Phase")
    priority = NumberColumn("Priority")
    priority_class = tables.Column("Priority class", default="—")
    gpus = NumberColumn("GPUs")
    cpu = NumberColumn("CPU (cores)", accessor="cpu_millis", order_by=("cpu_millis",))
    memory = NumberColumn("Memory (GiB)", accessor="memory_bytes", order_by=("memory_bytes",))
    ready = tables.BooleanColumn(verbose_name="Ready")

    def render_cpu(self, value):
        return _num(_cores(value))

    def render_memory(self, value):
        return _num(_gib(value))

    def export_cpu(self, record):
        return _cores(record.cpu_millis)

    def export_memory(self, record):
        return _gib(record.memory_bytes)
