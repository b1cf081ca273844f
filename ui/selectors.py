"""Reads of table preferences."""
from __future__ import annotations

from typing import Any, Sequence

from ui.models import TablePreference


def table_columns(*, user: Any, table: str, allowed: Sequence[str], default: Sequence[str]) -> list[str]:
    """The columns `user` chose for `table` (in order), or the default; names no longer known are dropped."""
    if user is not None and getattr(user, "is_authenticated", False):
        saved = TablePreference.objects.filter(user=user, table=table).values_list("columns", flat=True).first()
        if saved:
            columns = [name for name in saved if name in allowed]
            if columns:
                return columns
    return list(default)
