from django.apps import AppConfig
from django.conf import settings


class NodepoolsConfig(AppConfig):
    name = "nodepools"

    def ready(self) -> None:
        # The sync's leader of each cluster reads its pools' GPU figures from Prometheus now and then.
        # late: apps' models and services load only once Django's app registry is ready (AppConfig.ready)
        from nodepools.services import pool_gpu_figures_round
        from nodepools.sync.tasks import register_leader_task

        register_leader_task("pool-gpu-figures", pool_gpu_figures_round,
                             every=float(getattr(settings, "GPUMETRICS_POOLS_EVERY", 30)))
