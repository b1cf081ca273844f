from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action

from audit import selectors
from audit.api.serializers import AuditEventSerializer
from audit.filtersets import AuditEventFilterSet
from audit.models import AuditEvent
from common.api import RestrictedQuerysetMixin
from common.csv import csv_response


class AuditEventViewSet(RestrictedQuerysetMixin, viewsets.ReadOnlyModelViewSet):
    """The audit trail (append-only): system administrators read all of it, department administrators
    their departments' events."""

    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilterSet
    ordering_fields = ["when", "actor_name", "action", "object_type"]
    ordering = ["-when", "-pk"]

    def base_queryset(self):
        return AuditEvent.objects.all()

    @extend_schema(responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="The filtered trail as CSV.")})
    @action(detail=False, methods=["get"], url_path="export", pagination_class=None)
    def export(self, request):
        """The filtered trail as a CSV download (streamed; cells escaped against formula injection)."""
        events = self.filter_queryset(self.get_queryset())
        return csv_response("audit-events.csv", selectors.CSV_HEADER, selectors.audit_csv_rows(events))
