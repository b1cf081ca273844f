from django.contrib import admin

from audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["when", "actor_name", "via", "action", "object_type", "object_repr"]
    list_filter = ["via", "action", "object_type"]
    search_fields = ["object_repr", "actor_name"]

    # Append-only, also here.
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
