from django.apps import AppConfig

from ui import slots


class ProvisioningConfig(AppConfig):
    name = "provisioning"
    verbose_name = "Provisioning (Karpenter)"

    def ready(self) -> None:
        # The sync mirrors Karpenter NodePools and NodeClaims like Nodes: one registration each. A cluster
        # without Karpenter (no such CRD: 404) lists them as nothing, and its sync stays connected.
        # late: apps' models and services load only once Django's app registry is ready (AppConfig.ready)
        from nodepools.sync.tasks import register_leader_task
        from provisioning import mirror, receivers  # noqa: F401  (receivers: a pool's GPU limit follows)
        from provisioning.services import pool_limits_from_cluster

        mirror.register_resources()
        # Its sections on the pages of nodepools and projects, which never name this app (ui/slots.py).
        slots.register("pool-detail.blueprint", library="provisioning", tag="pool_blueprint")
        slots.register("pool-detail.pending", library="provisioning_pool", tag="pool_pending_pods")
        slots.register("pool-detail.pending", library="provisioning_pool", tag="pool_best_practice")
        slots.register("pool-list.add", library="provisioning", tag="pool_list_add")
        slots.register("pool-form.notice", library="provisioning", tag="pool_form_notice")
        slots.register("pool-delete.notice", library="provisioning", tag="pool_delete_notice")
        # Its columns and rows in the tables of projects (overview, quota grid, "Why is it waiting?").
        slots.register("pool-capacity.head", library="provisioning", tag="capacity_growth_head")
        slots.register("pool-capacity.row", library="provisioning", tag="capacity_growth_cells")
        slots.register("quota-summary.rows", library="provisioning", tag="quota_growth_rows")
        slots.register("waiting.head", library="provisioning_pool", tag="waiting_karpenter_head")
        slots.register("waiting.row", library="provisioning_pool", tag="waiting_karpenter_cell")
        # A NodePool's GPU limit (kube.requests.GPU) changed in the cluster: its pools take the value.
        register_leader_task("karpenter-limits", pool_limits_from_cluster, every=5.0)
