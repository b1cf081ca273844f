from django.apps import AppConfig

from ui import slots


class UsageConfig(AppConfig):
    name = "usage"

    def ready(self) -> None:
        # Its charts on the pages of projects, which never names this app (ui/slots.py).
        slots.register("pool-detail.usage", library="usage_charts", tag="pool_usage_chart")
        slots.register("department-detail.usage", library="usage_charts", tag="department_usage_chart")
