from django.apps import AppConfig


class UiConfig(AppConfig):
    """What the console's pages share: table column preferences, table building and CSV streaming."""

    name = "ui"
    verbose_name = "Console pages"
    default_auto_field = "django.db.models.BigAutoField"
