from django.apps import AppConfig


class EnforcersConfig(AppConfig):
    name = "enforcers"
    verbose_name = "Scheduler enforcement"
