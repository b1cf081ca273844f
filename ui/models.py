"""A user's choice of columns (and their order) for one table of the console."""
from __future__ import annotations

from django.conf import settings
from django.db import models


class TablePreference(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="table_preferences")
    table = models.CharField(max_length=64, help_text="The table's key, e.g. 'nodes'.")
    columns = models.JSONField(default=list, help_text="Column names in the order shown.")
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["user", "table"]
        constraints = [models.UniqueConstraint(fields=["user", "table"], name="tablepreference_unique_user_table")]

    def __str__(self) -> str:
        return f"{self.user} · {self.table}: {', '.join(self.columns)}"
