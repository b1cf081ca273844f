from django.contrib import admin

from accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created", "last_used", "revoked"]
    readonly_fields = ["user", "name", "prefix", "digest", "created", "last_used"]
    search_fields = ["name", "user__username", "prefix"]

    def has_add_permission(self, request):
        return False
