"""The audit trail's table: every field of an event is a column; the user chooses and orders them
(saved through the `ui` app) and the page's CSV holds the chosen columns in their order."""
from __future__ import annotations

import json

import django_tables2 as tables

from ui.paths import path_to
from ui.tables import ConsoleTable
from ui.views import register


def _json(value) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True, default=str)


def changed_fields(record) -> list[str]:
    before, after = record.before or {}, record.after or {}
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


@register
class AuditEventTable(ConsoleTable):
    key = "audit"
    default_columns = ("when", "actor_name", "via", "action", "object_type", "object_repr", "changed")

    when = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="When (UTC)",
                                 linkify=lambda record: path_to("audit-event", record.pk))
    actor_name = tables.Column("Actor", default="system")
    via = tables.Column("Through")
    action = tables.Column("Action")
    object_type = tables.Column("Object type")
    object_id = tables.Column("Object id")
    object_repr = tables.Column("Object")
    cluster_id = tables.Column("Cluster id", default="—", attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    department_id = tables.Column("Department id", default="—",
                                  attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    before = tables.Column("Before", orderable=False, default="—", attrs={"td": {"class": "wrap"}})
    after = tables.Column("After", orderable=False, default="—", attrs={"td": {"class": "wrap"}})
    changed = tables.Column("Changed fields", empty_values=(), orderable=False)

    class Meta(ConsoleTable.Meta):
        row_attrs = {"data-event": lambda record: record.pk}

    def render_before(self, value):
        return _json(value)

    def render_after(self, value):
        return _json(value)

    def render_changed(self, record):
        keys = changed_fields(record)
        return ", ".join(keys[:8]) + (" …" if len(keys) > 8 else "") if keys else "—"

    def export_actor_name(self, record):
        return record.actor_name or "system"

    def export_action(self, record):
        return record.get_action_display()

    def export_before(self, record):
        return _json(record.before)

    def export_after(self, record):
        return _json(record.after)

    def export_changed(self, record):
        return ", ".join(changed_fields(record))
