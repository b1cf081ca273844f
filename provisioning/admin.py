from django.contrib import admin

from common.admin import ReadOnlyAdmin
from provisioning.models import KarpenterNodePool, NodeClaim


class MirrorAdmin(ReadOnlyAdmin):
    """Mirrored from the clusters: only the sync writes these rows, so the admin only reads them."""


@admin.register(KarpenterNodePool)
class KarpenterNodePoolAdmin(MirrorAdmin):
    list_display = ["name", "cluster", "weight", "gpu_limit", "gpus_provisioned", "node_count", "ready",
                    "consolidation_policy"]
    list_filter = ["cluster"]
    search_fields = ["name"]


@admin.register(NodeClaim)
class NodeClaimAdmin(MirrorAdmin):
    list_display = ["name", "cluster", "nodepool", "phase", "instance_type", "capacity_type", "zone", "node_name"]
    list_filter = ["cluster", "phase"]
    search_fields = ["name", "nodepool", "node_name"]
