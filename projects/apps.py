from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "projects"

    def ready(self) -> None:
        from projects import receivers  # noqa: F401  (connects the reactions to nodepools' signals)
