from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action

from console.api import RestrictedQuerysetMixin
from console.csv import csv_response
from usage import selectors
from usage.api.serializers import UsageSnapshotSerializer
from usage.filtersets import UsageSnapshotFilterSet
from usage.models import UsageSnapshot


class UsageSnapshotViewSet(RestrictedQuerysetMixin, viewsets.ReadOnlyModelViewSet):
    """Usage history: one row per (time, pool, owner); pool rows for anyone with a role in the cluster,
    department and project rows for whoever may read their quota."""

    serializer_class = UsageSnapshotSerializer
    filterset_class = UsageSnapshotFilterSet
    ordering_fields = ["taken", "gpu_allocated", "gpu_over_quota"]
    ordering = ["taken", "pool_id", "kind", "department_id", "project_id"]

    def base_queryset(self):
        return UsageSnapshot.objects.all()

    @extend_schema(responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="The compliance CSV.")})
    @action(detail=False, methods=["get"], url_path="export", pagination_class=None)
    def export(self, request):
        """The filtered history as CSV (e.g. `?date_from=2025-01-01&date_to=2025-03-31`), streamed."""
        rows = self.filter_queryset(self.get_queryset()).select_related("pool", "department", "project")
        return csv_response("usage-history.csv", selectors.CSV_HEADER, selectors.csv_rows(rows))
