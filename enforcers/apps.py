from django.apps import AppConfig


class EnforcersConfig(AppConfig):
    name = "enforcers"
    verbose_name = "Scheduler enforcement"

    def ready(self) -> None:
        # The sync's leader of each cluster brings it in step with the console every few seconds.
        # late: apps' models and services load only once Django's app registry is ready (AppConfig.ready)
        from enforcers.services import enforcement_round
        from nodepools.sync.tasks import register_leader_task

        register_leader_task("enforcement", enforcement_round, every=5.0)
