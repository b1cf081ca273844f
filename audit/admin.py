from django.contrib import admin

from common.admin import ReadOnlyAdmin
from audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):  # append-only, also here
    list_display = ["when", "actor_name", "via", "action", "object_type", "object_repr"]
    list_filter = ["via", "action", "object_type"]
    search_fields = ["object_repr", "actor_name"]
