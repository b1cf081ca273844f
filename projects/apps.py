from decimal import Decimal

from django.apps import AppConfig

from ui import slots


class ProjectsConfig(AppConfig):
    name = "projects"

    def ready(self) -> None:
        # late: apps' models and services load only once Django's app registry is ready (AppConfig.ready)
        from nodepools.selectors import register_pool_figure
        from nodepools.tables import NodePoolTable, NumberColumn
        from projects import receivers  # noqa: F401  (connects the reactions to nodepools' signals)
        from projects.selectors import pools_projects_gpu_quota

        # Its column of nodepools' pool table (the pools page, its CSV), which never names this app.
        NodePoolTable.add_column("projects_gpu_quota", NumberColumn("Projects' GPU quota (sum)"),
                                 after="memory_allocated", default_after="idle_gpus")
        register_pool_figure("projects_gpu_quota", pools_projects_gpu_quota, default=Decimal(0))

        # Its part of the pages of nodepools, which never names this app (ui/slots.py).
        slots.register("pool-delete.consequences", library="projects_pool", tag="pool_delete_consequences")
        slots.register("capacity-preview.consequences", library="projects_pool", tag="preview_over_quota")
