"""The ledger in the Django admin: looked at, never edited there (the sync's leader writes it; rates are
changed on the console's pages or API, which audit every change)."""
from django.contrib import admin

from common.admin import ReadOnlyAdmin
from ledger.models import ClosedHour, LedgerDay, LedgerEntry, LedgerState, Rate, StatementRevision


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["hour", "kind", "cluster_id", "pool", "gpu_model", "gpu_unit", "project", "gpu_seconds",
                    "unit_seconds", "recorded"]
    list_filter = ["kind", "cluster_id"]
    list_select_related = ["pool", "project"]


@admin.register(LedgerDay)
class LedgerDayAdmin(ReadOnlyAdmin):
    list_display = ["day", "kind", "cluster_id", "pool", "gpu_model", "gpu_unit", "project", "gpu_seconds",
                    "unit_seconds"]
    list_filter = ["kind", "cluster_id"]
    list_select_related = ["pool", "project"]


@admin.register(ClosedHour)
class ClosedHourAdmin(ReadOnlyAdmin):
    list_display = ["hour", "cluster_id", "closed_at", "corrected_at", "pods"]


@admin.register(LedgerState)
class LedgerStateAdmin(ReadOnlyAdmin):
    list_display = ["cluster_id", "started", "closed_until", "scanned_until"]


@admin.register(StatementRevision)
class StatementRevisionAdmin(ReadOnlyAdmin):
    list_display = ["month", "cluster_id", "department_id", "revision", "issued_at"]
    list_filter = ["cluster_id"]


@admin.register(Rate)
class RateAdmin(ReadOnlyAdmin):
    list_display = ["gpu_model", "mig_profile", "pool", "valid_from", "gpu_hour", "currency", "updated"]
