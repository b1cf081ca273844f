"""Writes of table preferences (HackSoft style)."""
from __future__ import annotations

from typing import Any, Sequence

from django.core.exceptions import ValidationError
from django.db import transaction

from common.words import noun
from ui.models import TablePreference


@transaction.atomic
def table_preference_set(*, user: Any, table: str, columns: Sequence[str], allowed: Sequence[str]) -> TablePreference:
    """Remember which columns `user` shows in `table`, in this order (duplicates dropped)."""
    chosen = list(dict.fromkeys(columns))
    unknown = [name for name in chosen if name not in allowed]
    if unknown:
        raise ValidationError({"columns": f"Unknown {noun(len(unknown), 'column')}: {', '.join(unknown)}. Known: {', '.join(allowed)}."})
    if not chosen:
        raise ValidationError({"columns": "Choose at least one column."})
    preference, _ = TablePreference.objects.update_or_create(user=user, table=table, defaults={"columns": chosen})
    return preference


@transaction.atomic
def table_preference_reset(*, user: Any, table: str) -> None:
    """Back to the table's default columns."""
    TablePreference.objects.filter(user=user, table=table).delete()
