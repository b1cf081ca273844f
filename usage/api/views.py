from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from common.api import RestrictedQuerysetMixin
from common.csv import csv_response
from nodepools.models import Pod
from projects.utilization import idle_threshold, idle_window
from usage import selectors
from usage.api.serializers import IdleGpusSerializer, UsageSnapshotSerializer
from usage.filtersets import IdleGpuFilterSet, UsageSnapshotFilterSet
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


class IdleGpuList(generics.GenericAPIView):
    """Idle allocated GPUs (utilization under the threshold for the window) of the pods the user may see,
    by project, with since-when and GPU-hours wasted; filters as on the Idle GPUs page."""

    serializer_class = IdleGpusSerializer
    filterset_class = IdleGpuFilterSet
    pagination_class = None
    queryset = Pod.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # drawing the schema
            return Pod.objects.none()
        return selectors.idle_gpu_pods(user=self.request.user)

    def get(self, request):
        rows, reasons = selectors.idle_gpu_rows(self.filter_queryset(self.get_queryset()))
        return Response(IdleGpusSerializer({
            "threshold_percent": idle_threshold(), "window_minutes": idle_window().total_seconds() / 60,
            "unavailable": reasons, "results": rows}).data)
