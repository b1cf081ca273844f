from django.apps import AppConfig
from django.conf import settings


class LedgerConfig(AppConfig):
    name = "ledger"
    verbose_name = "GPU-hours ledger"

    def ready(self) -> None:
        # Each cluster's sync leader closes the ledger's hours as they end (and catches up, and corrects).
        # late: apps' models and services load only once Django's app registry is ready (AppConfig.ready)
        from ledger import receivers  # noqa: F401 - a project's deserved quota, as it changes
        from ledger.services import ledger_round
        from nodepools.sync.tasks import register_leader_task

        # The period is read at each run, so that a changed setting holds without a restart.
        register_leader_task("ledger", ledger_round, every=lambda: float(getattr(settings, "LEDGER_EVERY", 60)))
