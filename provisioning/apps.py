from django.apps import AppConfig


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
        # A NodePool's limits["nvidia.com/gpu"] changed in the cluster: its pools take the value.
        register_leader_task("karpenter-limits", pool_limits_from_cluster, every=5.0)
