import django_tables2 as tables

from audit.models import AuditEvent


class AuditEventTable(tables.Table):
    when = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="When (UTC)", linkify=("audit-event", {"pk": tables.A("pk")}))
    actor_name = tables.Column(verbose_name="Actor", default="system")
    via = tables.Column(verbose_name="Through")
    action = tables.Column()
    object_type = tables.Column(verbose_name="Object type")
    object_repr = tables.Column(verbose_name="Object")
    changed = tables.Column(verbose_name="Changed fields", empty_values=(), orderable=False)

    class Meta:
        model = AuditEvent
        fields = ["when", "actor_name", "via", "action", "object_type", "object_repr", "changed"]
        attrs = {"class": "data"}
        template_name = "django_tables2/table.html"

    def render_changed(self, record):
        before, after = record.before or {}, record.after or {}
        keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        return ", ".join(keys[:8]) + (" …" if len(keys) > 8 else "") if keys else "—"
