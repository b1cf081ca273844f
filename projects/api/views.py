"""Departments, projects, quotas, priority lists and role assignments over the API.

Reads go through restrict(user, "view") (what a user may not see is a 404); writes go through the
services, which check the permission again (403) and apply the quota rules.
"""
from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from access.models import RoleAssignment
from common.api import PreconditionFailed, RestrictedQuerysetMixin, etag_of, if_match_required
from common.exceptions import ConcurrentUpdate
from common.fields import plain_errors
from nodepools.models import NodePool
from projects import services
from projects.api import serializers as s
from projects.filtersets import DepartmentFilterSet, ProjectFilterSet, QuotaFilterSet, RoleAssignmentFilterSet
from projects.models import Department, PriorityEntry, Project, Quota
from projects.utilization import owner_report

IF_MATCH = OpenApiParameter(
    "If-Match", OpenApiTypes.STR, OpenApiParameter.HEADER, required=True,
    description="The ETag of your last GET of these quotas: a stale one is refused with 412, none with 428.",
)
QUOTA_ERRORS = {
    400: OpenApiResponse(description="Invalid values: `errors.quotas[i].<field>` names the rule broken."),
    403: OpenApiResponse(description="Your role may not change these quotas."),
    404: OpenApiResponse(description="No such owner you may see."),
    412: OpenApiResponse(description="If-Match does not match: someone changed these quotas since you read them."),
    428: OpenApiResponse(description="If-Match is missing."),
}


class OwnerQuotasMixin:
    """GET / PUT of one owner's quota rows, one per pool of its cluster, guarded by ETag / If-Match."""

    owner_field: str = ""

    def _rows(self, owner):
        return (Quota.objects.restrict(self.request.user, "view").filter(**{self.owner_field: owner})
                .with_allocation().select_related("pool", "department", "project").order_by("pool__created", "pool_id"))

    def _quotas_response(self, owner, warnings=(), code=status.HTTP_200_OK):
        rows = list(self._rows(owner))
        data = s.OwnerQuotasSerializer({"quotas": rows, "warnings": list(warnings)}, context=self.get_serializer_context()).data
        return Response(data, status=code, headers={"ETag": etag_of((q.pk, q.version) for q in rows)})

    def _quotas(self, request, pk=None):
        owner = self.get_object()
        if request.method == "GET":
            return self._quotas_response(owner)
        current = {q.pool_id: q for q in Quota.objects.filter(**{self.owner_field: owner}).select_related("pool")}
        changeable = Quota.objects.restrict(request.user, "change").filter(pk__in=[q.pk for q in current.values()])
        if changeable.count() != len(current):
            raise PermissionDenied(f"You may not change the quota of {self.owner_field} '{owner}'.")
        if_match_required(request, etag_of((q.pk, q.version) for q in current.values()))
        form = s.OwnerQuotasUpdateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        entries = form.validated_data["quotas"]
        unknown = [i for i, e in enumerate(entries) if e["pool"] not in current]
        if unknown:
            raise serializers.ValidationError(
                {"quotas": [{"pool": [f"Pool {entries[i]['pool']} is not a node pool of this {self.owner_field}'s cluster."]}
                            if i in unknown else {} for i in range(len(entries))]}
            )
        warnings: list[str] = []
        try:
            with transaction.atomic():
                for index, entry in enumerate(entries):
                    values = dict(entry)
                    quota = current[values.pop("pool")]
                    try:
                        result = services.quota_update(actor=request.user, quota=quota, expected_version=quota.version,
                                                       **values)
                    except DjangoValidationError as exc:
                        # Keyed like the request: errors.quotas[i].<field>; limits in words.
                        exc = plain_errors(exc)
                        errors = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
                        raise serializers.ValidationError(
                            {"quotas": [errors if i == index else {} for i in range(len(entries))]}
                        )
                    warnings.extend(result.warnings)
        except ConcurrentUpdate:
            # Changed between the If-Match check and the write: the same answer as a stale If-Match.
            raise PreconditionFailed()
        return self._quotas_response(owner, warnings)


class PriorityMixin:
    owner_field: str = ""

    def _priority(self, request, pk=None):
        owner = self.get_object()
        if request.method == "PUT":
            form = s.PrioritySerializer(data=request.data)
            form.is_valid(raise_exception=True)
            ids = form.validated_data["pools"]
            visible = {p.pk: p for p in NodePool.objects.restrict(request.user, "view").filter(pk__in=ids)}
            missing = [pk for pk in ids if pk not in visible]
            if missing:
                raise serializers.ValidationError({"pools": [f"No node pool with id {pk}." for pk in missing]})
            pools = [visible[pk] for pk in ids]
            if self.owner_field == "project":
                services.project_priority_set(actor=request.user, project=owner, pools=pools)
            else:
                services.department_priority_set(actor=request.user, department=owner, pools=pools)
        entries = PriorityEntry.objects.filter(**{self.owner_field: owner}).order_by("position")
        return Response({"pools": [e.pool_id for e in entries]})


PERIOD = OpenApiParameter("period", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=["24h", "7d"],
                          description="The period of the series: the last 24 hours (default) or 7 days.")
UTILIZATION_RESPONSES = {
    200: s.OwnerUtilizationSerializer,
    400: OpenApiResponse(description="`errors.period`: not 24h or 7d."),
    404: OpenApiResponse(description="No such owner you may see."),
}


class UtilizationMixin:
    """GET of one owner's GPU utilization now and over 24 h / 7 d (projects.utilization.owner_report)."""

    owner_field: str = ""

    def _utilization(self, request, pk=None):
        owner = self.get_object()
        form = s.UtilizationQuerySerializer(data=request.query_params)
        form.is_valid(raise_exception=True)
        report = owner_report(cluster=owner.cluster, period=form.validated_data["period"],
                              **{self.owner_field: owner})
        return Response(s.OwnerUtilizationSerializer(report).data)


class WritableViewSet(RestrictedQuerysetMixin, mixins.CreateModelMixin, mixins.ListModelMixin,
                      mixins.RetrieveModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """List, read, create, PATCH (defined by each) and delete; PUT serves only the sub-resources."""

    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]


class DepartmentViewSet(OwnerQuotasMixin, PriorityMixin, UtilizationMixin, WritableViewSet):
    """Departments. Reading: their members and the cluster's; writing: system administrators."""

    owner_field = "department"
    serializer_class = s.DepartmentSerializer
    filterset_class = DepartmentFilterSet
    ordering_fields = ["name", "created"]
    ordering = ["cluster__name", "name"]

    def base_queryset(self):
        return Department.objects.select_related("cluster")

    def perform_create(self, serializer):
        serializer.instance = services.department_create(actor=self.request.user, **serializer.validated_data)

    @extend_schema(request=s.DepartmentUpdateSerializer, responses={200: s.DepartmentSerializer})
    def partial_update(self, request, *args, **kwargs):
        department = self.get_object()
        form = s.DepartmentUpdateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        department = services.department_update(actor=request.user, department=department, **form.validated_data)
        return Response(s.DepartmentSerializer(department, context=self.get_serializer_context()).data)

    def perform_destroy(self, instance):
        services.department_delete(actor=self.request.user, department=instance)

    @extend_schema(methods=["GET"], request=None, responses={200: s.OwnerQuotasSerializer}, operation_id="departments_quotas_retrieve")
    @extend_schema(methods=["PUT"], request=s.OwnerQuotasUpdateSerializer, parameters=[IF_MATCH],
                   responses={200: s.OwnerQuotasSerializer, **QUOTA_ERRORS}, operation_id="departments_quotas_update")
    @action(detail=True, methods=["get", "put"], url_path="quotas")
    def quotas(self, request, pk=None):
        """The department's own quota in every pool of its cluster (`ETag` / `If-Match` guard writes)."""
        return self._quotas(request, pk)

    @extend_schema(methods=["GET"], request=None, responses={200: s.PrioritySerializer}, operation_id="departments_priority_retrieve")
    @extend_schema(methods=["PUT"], request=s.PrioritySerializer, responses={200: s.PrioritySerializer},
                   operation_id="departments_priority_update")
    @action(detail=True, methods=["get", "put"], url_path="priority")
    def priority(self, request, pk=None):
        """The node pool order that seeds the priority list of the department's new projects."""
        return self._priority(request, pk)

    @extend_schema(parameters=[PERIOD], responses=UTILIZATION_RESPONSES)
    @action(detail=True, methods=["get"], url_path="utilization", pagination_class=None, filterset_class=None)
    def utilization(self, request, pk=None):
        """Utilization of the GPUs the department's pods hold: now (last 5 minutes) and over the last 24 h or
        7 d (`?period=`), from the DCGM exporter through the cluster's Prometheus; null with the reason when
        Prometheus does not answer within GPUMETRICS_TIMEOUT."""
        return self._utilization(request, pk)


class ProjectViewSet(OwnerQuotasMixin, PriorityMixin, UtilizationMixin, WritableViewSet):
    """Projects. Reading: their members, their department's and the cluster's; adding: department
    administrators; changing: project and department administrators."""

    owner_field = "project"
    serializer_class = s.ProjectSerializer
    filterset_class = ProjectFilterSet
    ordering_fields = ["name", "created", "department__name"]
    ordering = ["cluster__name", "name"]

    def base_queryset(self):
        return Project.objects.select_related("department", "cluster").prefetch_related("namespaces", "priority_entries")

    def perform_create(self, serializer):
        serializer.instance = services.project_create(actor=self.request.user, **serializer.validated_data)

    @extend_schema(request=s.ProjectUpdateSerializer, responses={200: s.ProjectSerializer})
    def partial_update(self, request, *args, **kwargs):
        project = self.get_object()
        form = s.ProjectUpdateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        values = dict(form.validated_data)
        namespaces = values.pop("namespaces", None)
        with transaction.atomic():
            if values:
                services.project_update(actor=request.user, project=project, **values)
            if namespaces is not None:
                services.project_namespaces_set(actor=request.user, project=project, namespaces=namespaces)
        return Response(s.ProjectSerializer(self.get_queryset().get(pk=project.pk), context=self.get_serializer_context()).data)

    def perform_destroy(self, instance):
        services.project_delete(actor=self.request.user, project=instance)

    @extend_schema(methods=["GET"], request=None, responses={200: s.OwnerQuotasSerializer}, operation_id="projects_quotas_retrieve")
    @extend_schema(methods=["PUT"], request=s.OwnerQuotasUpdateSerializer, parameters=[IF_MATCH],
                   responses={200: s.OwnerQuotasSerializer, **QUOTA_ERRORS}, operation_id="projects_quotas_update")
    @action(detail=True, methods=["get", "put"], url_path="quotas")
    def quotas(self, request, pk=None):
        """The project's quota in every pool of its cluster (`ETag` / `If-Match` guard writes)."""
        return self._quotas(request, pk)

    @extend_schema(methods=["GET"], request=None, responses={200: s.PrioritySerializer}, operation_id="projects_priority_retrieve")
    @extend_schema(methods=["PUT"], request=s.PrioritySerializer, responses={200: s.PrioritySerializer},
                   operation_id="projects_priority_update")
    @action(detail=True, methods=["get", "put"], url_path="priority")
    def priority(self, request, pk=None):
        """The project's node pool priority list (ids, first choice first)."""
        return self._priority(request, pk)

    @extend_schema(parameters=[PERIOD], responses=UTILIZATION_RESPONSES)
    @action(detail=True, methods=["get"], url_path="utilization", pagination_class=None, filterset_class=None)
    def utilization(self, request, pk=None):
        """Utilization of the GPUs the project's pods hold: now (last 5 minutes) and over the last 24 h or 7 d
        (`?period=`), from the DCGM exporter through the cluster's Prometheus; null with the reason when
        Prometheus does not answer within GPUMETRICS_TIMEOUT."""
        return self._utilization(request, pk)


class QuotaViewSet(RestrictedQuerysetMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Every quota row you may see, with what its owner uses (change them through the owner's /quotas)."""

    serializer_class = s.QuotaSerializer
    filterset_class = QuotaFilterSet
    ordering_fields = ["gpu_deserved", "gpu_allocated", "gpu_over_quota", "rank", "updated"]
    ordering = ["pool__cluster__name", "pool__created", "department__name", "project__name"]

    def base_queryset(self):
        return Quota.objects.select_related("pool", "department", "project").with_allocation()


class RoleAssignmentViewSet(RestrictedQuerysetMixin, mixins.CreateModelMixin, mixins.ListModelMixin,
                            mixins.RetrieveModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """Who has which role where. Managing members: department and project administrators in their
    scope, system administrators everywhere."""

    serializer_class = s.RoleAssignmentSerializer
    filterset_class = RoleAssignmentFilterSet
    ordering_fields = ["role", "scope_type", "created"]
    ordering = ["scope_type", "role", "pk"]

    def base_queryset(self):
        return RoleAssignment.objects.select_related("user", "group", "cluster", "department", "project")

    def perform_create(self, serializer):
        serializer.instance = services.role_assign(actor=self.request.user, **serializer.validated_data)

    def perform_destroy(self, instance):
        services.role_unassign(actor=self.request.user, assignment=instance)
