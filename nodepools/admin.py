from django.contrib import admin
from django.db import models

from common.admin import ReadOnlyAdmin
from common.parsing import JSON_ADMIN_FIELDS
from nodepools.models import Cluster, DataVersion, Node, NodeGpuFigures, NodePool, Pod, PodLifetime


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "connection_state", "last_full_sync", "limit_projects_to_department_quota", "prometheus_url"]
    search_fields = ["name"]
    fieldsets = [
        (None, {"fields": ["name", "description", "limit_projects_to_department_quota"]}),
        ("Access", {"fields": ["kubeconfig_path", "kube_context", "in_cluster"]}),
        ("GPU metrics (DCGM exporter through Prometheus)", {"fields": [
            "prometheus_url", "prometheus_bearer_token_file", "prometheus_basic_auth_file",
            "prometheus_label_matchers"]}),
        ("State", {"fields": ["connection_state", "last_error", "last_full_sync"]}),
    ]


@admin.register(NodePool)
class NodePoolAdmin(admin.ModelAdmin):
    formfield_overrides = {models.JSONField: JSON_ADMIN_FIELDS}  # bounded (common/parsing.py)
    list_display = ["name", "cluster", "label_key", "label_value", "gpu_placement", "cpu_placement", "gpu_limit"]
    list_filter = ["cluster"]
    search_fields = ["name", "label_key", "label_value"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    formfield_overrides = {models.JSONField: JSON_ADMIN_FIELDS}  # bounded (common/parsing.py)
    list_display = ["name", "cluster", "pool", "status", "gpu_product", "gpu_allocatable", "zone"]
    list_filter = ["cluster", "status", "gpu_product"]
    search_fields = ["name"]
    list_select_related = ["cluster", "pool"]


@admin.register(NodeGpuFigures)
class NodeGpuFiguresAdmin(admin.ModelAdmin):
    """What the sync's leader last read from Prometheus per GPU node: looked at, never edited."""

    list_display = ["node_name", "cluster", "gpus", "utilization", "memory_used_mib", "memory_total_mib", "read_at"]
    list_filter = ["cluster"]
    search_fields = ["node_name"]
    list_select_related = ["cluster"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Pod)
class PodAdmin(admin.ModelAdmin):
    formfield_overrides = {models.JSONField: JSON_ADMIN_FIELDS}  # bounded (common/parsing.py)
    list_display = ["name", "namespace", "cluster", "node", "phase", "priority", "gpus", "project"]
    list_filter = ["cluster", "phase"]
    search_fields = ["name", "namespace"]
    list_select_related = ["cluster", "node", "project"]
    raw_id_fields = ["node", "project"]


@admin.register(PodLifetime)
class PodLifetimeAdmin(admin.ModelAdmin):
    """How long each pod held its requests, as the sync recorded it (the GPU-hours ledger's input): looked
    at, never edited."""

    list_display = ["name", "namespace", "cluster", "gpus", "gpu_model", "started", "ended", "end_reason"]
    list_filter = ["cluster", "end_reason"]
    search_fields = ["name", "namespace", "uid"]
    list_select_related = ["cluster"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(DataVersion)
class DataVersionAdmin(ReadOnlyAdmin):
    """How many times each cluster's nodes and pods changed, as the database's triggers count: looked at (is the
    fleet moving?), never edited."""

    list_display = ["cluster_id", "seq"]
