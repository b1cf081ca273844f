from django.apps import AppConfig

from ui import slots


class ProjectsConfig(AppConfig):
    name = "projects"

    def ready(self) -> None:
        # late: apps' models and services load only once Django's app registry is ready (AppConfig.ready)
        from projects import receivers  # noqa: F401  (connects the reactions to nodepools' signals)

        # Its part of the pages of nodepools, which never names this app (ui/slots.py).
        slots.register("pool-delete.consequences", library="projects_pool", tag="pool_delete_consequences")
