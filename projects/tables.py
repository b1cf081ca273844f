"""Tables of departments, projects and members (django-tables2)."""
from __future__ import annotations

import django_tables2 as tables
from django.urls import reverse

from nodepools.tables import NumberColumn, cluster_link
from ui.tables import ConsoleTable
from ui.views import register


@register
class DepartmentTable(ConsoleTable):
    key = "departments"
    default_columns = ("name", "cluster", "project_count", "gpu_deserved", "gpu_allocated", "description")

    name = tables.Column("Department", linkify=lambda record: reverse("department-detail", args=[record.pk]))
    cluster = tables.Column("Cluster", accessor="cluster__name", order_by=("cluster__name",), linkify=cluster_link)
    description = tables.Column("Description", default="")
    project_count = NumberColumn("Projects")
    gpu_deserved = NumberColumn("Deserved GPUs (all pools)")
    gpu_allocated = NumberColumn("Allocated GPUs")
    created = tables.DateTimeColumn(verbose_name="Creation time", format="Y-m-d H:i")

    class Meta(ConsoleTable.Meta):
        row_attrs = {"data-department": lambda record: record.name}


@register
class ProjectTable(ConsoleTable):
    key = "projects"
    default_columns = ("name", "department", "cluster", "namespaces", "gpu_deserved", "gpu_allocated",
                       "workload_count", "allow_over_quota")

    name = tables.Column("Project", linkify=lambda record: reverse("project-detail", args=[record.pk]))
    department = tables.Column("Department", accessor="department__name", order_by=("department__name",),
                               linkify=lambda record: reverse("department-detail", args=[record.department_id]))
    cluster = tables.Column("Cluster", accessor="cluster__name", order_by=("cluster__name",), linkify=cluster_link)
    namespaces = tables.Column("Namespaces", accessor="pk", orderable=False)
    description = tables.Column("Description", default="")
    gpu_deserved = NumberColumn("Deserved GPUs (all pools)")
    gpu_allocated = NumberColumn("Allocated GPUs")
    workload_count = NumberColumn("Workloads")
    allow_over_quota = tables.BooleanColumn(verbose_name="Over-quota allowed")
    created = tables.DateTimeColumn(verbose_name="Creation time", format="Y-m-d H:i")

    class Meta(ConsoleTable.Meta):
        row_attrs = {"data-project": lambda record: record.name}

    def render_namespaces(self, record):
        return ", ".join(ns.name for ns in record.namespaces.all())

    def export_namespaces(self, record):
        return [ns.name for ns in record.namespaces.all()]
