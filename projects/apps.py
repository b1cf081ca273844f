from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "projects"

    def ready(self) -> None:
        # late: apps' models and services load only once Django's app registry is ready (AppConfig.ready)
        from projects import receivers  # noqa: F401  (connects the reactions to nodepools' signals)
