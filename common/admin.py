"""What the apps' admin pages share."""
from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the admin shows and never writes: what the sync mirrors or derives, what is append-only (the audit
    log, the ledger), what the database's own triggers count."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
