from django.apps import AppConfig

from ui import slots


class EnforcersConfig(AppConfig):
    name = "enforcers"
    verbose_name = "Scheduler enforcement"

    def ready(self) -> None:
        # The sync's leader of each cluster brings it in step with the console every few seconds.
        # late: apps' models and services load only once Django's app registry is ready (AppConfig.ready)
        from enforcers.services import enforcement_round
        from nodepools.sync.tasks import register_leader_task

        register_leader_task("enforcement", enforcement_round, every=5.0)
        # What the cluster refused, in the quota grid's cells of projects, which never names this app.
        slots.register("quota-cell.notes", library="enforcement", tag="quota_refusal")
        # Whose pods count against the quotas in "Why is it waiting?": KAI Scheduler's own, where it enforces.
        from enforcers.selectors import counting_scheduler
        from projects import waiting

        if counting_scheduler not in waiting.COUNTING_SCHEDULER:
            waiting.COUNTING_SCHEDULER.append(counting_scheduler)
