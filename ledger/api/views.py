from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.response import Response

from common.api import RestrictedQuerysetMixin
from ledger import selectors, services
from ledger.api import serializers as s
from ledger.filtersets import LedgerEntryFilterSet, RateFilterSet
from ledger.models import LedgerEntry, Rate
from nodepools.models import Cluster
from projects.models import Department
from ui.tables import csv_filename

MONTH = OpenApiParameter("month", str, description="YYYY-MM (default: the current month, UTC).")


class LedgerEntryViewSet(RestrictedQuerysetMixin, viewsets.ReadOnlyModelViewSet):
    """The GPU-hours ledger: one row per closed hour × cluster × pool × GPU model × project (pods of no
    project: a row without project), and correction rows; readable like the quota of their project."""

    serializer_class = s.LedgerEntrySerializer
    filterset_class = LedgerEntryFilterSet
    ordering_fields = ["hour", "recorded", "gpu_seconds"]
    ordering = ["hour", "pk"]

    def base_queryset(self):
        return LedgerEntry.objects.all()

    @extend_schema(responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="The ledger as CSV.")})
    @action(detail=False, methods=["get"], url_path="export", pagination_class=None)
    def export(self, request):
        """The filtered rows as CSV, oldest first, every figure (e.g. `?date_from=2026-01-01&date_to=2026-12-31`), streamed."""
        rows = self.filter_queryset(self.get_queryset())
        response = StreamingHttpResponse(selectors.ledger_csv_lines(rows), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{csv_filename("gpu-hours-ledger")}"'
        return response


def _month(request) -> selectors.Month:
    try:
        return selectors.Month.parse(request.query_params.get("month"))
    except ValueError as exc:
        raise ApiValidationError({"month": [str(exc).removeprefix("month: ")]}) from None


class DepartmentStatement(generics.GenericAPIView):
    """A department's month: projects × pools × GPU models — GPU-hours, of which over-quota, non-preemptible
    and idle, corrections, utilization, CPU-core-hours, memory-GiB-hours, cost, idle cost — the totals
    (sums of the lines) and the trend per day; the same lines as the page and its CSV."""

    serializer_class = s.StatementSerializer
    pagination_class = None
    queryset = Department.objects.none()
    lookup_value_regex = r"[0-9]{1,18}"

    @extend_schema(parameters=[MONTH])
    def get(self, request, pk: int):
        department = get_object_or_404(Department.objects.restrict(request.user, "view").select_related("cluster"), pk=pk)
        statement = selectors.department_statement(user=request.user, department=department, month=_month(request))
        return Response(s.StatementSerializer(statement).data)


class ClusterStatement(generics.GenericAPIView):
    """A cluster's month, departments ranked by GPU-hours (system administrators)."""

    serializer_class = s.StatementSerializer
    pagination_class = None
    queryset = Cluster.objects.none()

    @extend_schema(parameters=[MONTH])
    def get(self, request, pk: int):
        cluster = get_object_or_404(Cluster.objects.restrict(request.user, "statement"), pk=pk)
        statement = selectors.cluster_statement(user=request.user, cluster=cluster, month=_month(request))
        return Response(s.StatementSerializer(statement).data)


class RateViewSet(RestrictedQuerysetMixin, viewsets.ModelViewSet):
    """Prices per GPU-hour of GPU models (optionally of one pool) from a date on. Reading: anyone with a
    role; writing: system administrators (audited)."""

    serializer_class = s.RateSerializer
    filterset_class = RateFilterSet
    ordering_fields = ["gpu_model", "valid_from", "updated"]
    ordering = ["gpu_model", "pool_id", "valid_from"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def base_queryset(self):
        return Rate.objects.select_related("pool")

    def perform_create(self, serializer):
        serializer.instance = services.rate_create(actor=self.request.user, **serializer.validated_data)

    @extend_schema(request=s.RateUpdateSerializer, responses={200: s.RateSerializer})
    def partial_update(self, request, *args, **kwargs):
        rate = self.get_object()
        form = s.RateUpdateSerializer(data=request.data, context=self.get_serializer_context())
        form.is_valid(raise_exception=True)
        values = dict(form.validated_data)
        saved = services.rate_update(actor=request.user, rate=rate, expected_version=values.pop("version", None),
                                     **values)
        return Response(s.RateSerializer(saved, context=self.get_serializer_context()).data)

    def update(self, request, *args, **kwargs):  # pragma: no cover - PUT is not routed (http_method_names)
        return self.partial_update(request, *args, **kwargs)

    def perform_destroy(self, instance):
        services.rate_delete(actor=self.request.user, rate=instance)

