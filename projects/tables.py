"""Tables of departments, projects and members (django-tables2)."""
from __future__ import annotations

from decimal import Decimal

import django_tables2 as tables

from nodepools.tables import NumberColumn, cluster_link
from ui.paths import path_to
from ui.tables import ConsoleTable
from ui.templatetags.console_ui import owner_label
from ui.views import register

from projects.selectors import owners_attach_pool_gpus  # noqa: I001 (kept apart from the lines above)


def per_pool(record, figure: str) -> str:
    """"a100-40gb 20 · default 0": GPUs of different pools are never added into one number."""
    return " · ".join(f"{g.pool} {Decimal(getattr(g, figure)).normalize():f}" for g in getattr(record, "pool_gpus", []))


class PerPoolColumn(tables.Column):
    """Deserved or allocated GPUs per pool (`owners_attach_pool_gpus`, the tables' enrich hook), the same
    text on the page and in the CSV."""

    def __init__(self, *args, figure: str, **kwargs):
        self.figure = figure
        kwargs.setdefault("orderable", False)
        kwargs.setdefault("empty_values", ())
        super().__init__(*args, accessor="pk", **kwargs)

    def render(self, record):
        return per_pool(record, self.figure)


@register
class DepartmentTable(ConsoleTable):
    key = "departments"
    enrich = owners_attach_pool_gpus
    default_columns = ("name", "cluster", "project_count", "gpu_deserved", "gpu_allocated", "description")

    name = tables.Column("Department", linkify=lambda record: path_to("department-detail", record.pk))
    cluster = tables.Column("Cluster", accessor="cluster__name", order_by=("cluster__name",), linkify=cluster_link)
    description = tables.Column("Description", default="")
    project_count = NumberColumn("Projects")
    gpu_deserved = PerPoolColumn("Deserved GPUs per pool", figure="deserved")
    gpu_allocated = PerPoolColumn("Allocated GPUs per pool", figure="allocated")
    created = tables.DateTimeColumn(verbose_name="Creation time", format="Y-m-d H:i")

    class Meta(ConsoleTable.Meta):
        row_attrs = {"data-department": lambda record: record.name}

    def render_name(self, record):
        return owner_label(record)

    def export_name(self, record):
        return record.label_with_name

    def export_gpu_deserved(self, record):
        return per_pool(record, "deserved")

    def export_gpu_allocated(self, record):
        return per_pool(record, "allocated")


@register
class ProjectTable(ConsoleTable):
    key = "projects"
    enrich = owners_attach_pool_gpus
    default_columns = ("name", "department", "cluster", "namespaces", "gpu_deserved", "gpu_allocated",
                       "workload_count", "allow_over_quota")

    name = tables.Column("Project", linkify=lambda record: path_to("project-detail", record.pk))
    department = tables.Column("Department", accessor="department__name", order_by=("department__name",),
                               linkify=lambda record: path_to("department-detail", record.department_id))
    cluster = tables.Column("Cluster", accessor="cluster__name", order_by=("cluster__name",), linkify=cluster_link)
    namespaces = tables.Column("Namespaces", accessor="pk", orderable=False)
    description = tables.Column("Description", default="")
    gpu_deserved = PerPoolColumn("Deserved GPUs per pool", figure="deserved")
    gpu_allocated = PerPoolColumn("Allocated GPUs per pool", figure="allocated")
    workload_count = NumberColumn("Workloads")
    allow_over_quota = tables.BooleanColumn(verbose_name="Over-quota allowed")
    created = tables.DateTimeColumn(verbose_name="Creation time", format="Y-m-d H:i")

    class Meta(ConsoleTable.Meta):
        row_attrs = {"data-project": lambda record: record.name}

    def render_name(self, record):
        return owner_label(record)

    def export_name(self, record):
        return record.label_with_name

    def render_department(self, record):
        return owner_label(record.department)

    def export_department(self, record):
        return record.department.label_with_name

    def render_namespaces(self, record):
        return ", ".join(ns.name for ns in record.namespaces.all())

    def export_namespaces(self, record):
        return [ns.name for ns in record.namespaces.all()]

    def export_gpu_deserved(self, record):
        return per_pool(record, "deserved")

    def export_gpu_allocated(self, record):
        return per_pool(record, "allocated")
