"""Platforms, pod templates and rule sets over the API: reads through restrict(), writes through the
services (403 for those who may not configure the cluster, 400 naming the field, 409 when stale)."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.response import Response

from common.api import RestrictedQuerysetMixin
from kube.client import api_error_message
from nodepools.sync import api_client_for
from workloads import forecast, selectors, services, submission
from workloads.api import serializers as s
from workloads.filtersets import PlatformFilterSet, PodTemplateFilterSet, RuleSetFilterSet, WorkloadFilterSet
from workloads.models import Platform, PodTemplate, ResourceValidationRuleSet

_METHODS = ["get", "post", "patch", "delete", "head", "options"]


class PlatformViewSet(RestrictedQuerysetMixin, viewsets.ModelViewSet):
    """Platforms inside node pools. Reading: anyone with a role in the cluster; writing: system
    administrators."""

    serializer_class = s.PlatformSerializer
    filterset_class = PlatformFilterSet
    ordering_fields = ["name", "created", "updated"]
    ordering = ["pool__cluster__name", "pool__name", "name"]
    http_method_names = _METHODS

    def base_queryset(self):
        return Platform.objects.select_related("pool__cluster", "pool__workload_settings")

    def _read(self, platform):
        return s.PlatformSerializer(self.get_queryset().get(pk=platform.pk), context=self.get_serializer_context()).data

    @extend_schema(request=s.PlatformCreateSerializer, responses={201: s.PlatformSerializer})
    def create(self, request, *args, **kwargs):
        form = s.PlatformCreateSerializer(data=request.data, context=self.get_serializer_context())
        form.is_valid(raise_exception=True)
        platform = services.platform_create(actor=request.user, **form.validated_data)
        return Response(self._read(platform), status=status.HTTP_201_CREATED)

    @extend_schema(request=s.PlatformUpdateSerializer, responses={200: s.PlatformSerializer})
    def partial_update(self, request, *args, **kwargs):
        platform = self.get_object()
        form = s.PlatformUpdateSerializer(data=request.data, context=self.get_serializer_context())
        form.is_valid(raise_exception=True)
        values = dict(form.validated_data)
        services.platform_update(actor=request.user, platform=platform, expected_version=values.pop("version", None),
                                 **values)
        return Response(self._read(platform))

    def update(self, request, *args, **kwargs):  # pragma: no cover - PUT is not routed (http_method_names)
        return self.partial_update(request, *args, **kwargs)

    def perform_destroy(self, instance):
        services.platform_delete(actor=self.request.user, platform=instance)


class PodTemplateViewSet(RestrictedQuerysetMixin, viewsets.ModelViewSet):
    """Pod templates of a cluster. Reading: anyone with a role in the cluster; writing: system administrators."""

    serializer_class = s.PodTemplateSerializer
    filterset_class = PodTemplateFilterSet
    ordering_fields = ["name", "created", "updated"]
    ordering = ["cluster__name", "name"]
    http_method_names = _METHODS

    def base_queryset(self):
        return PodTemplate.objects.select_related("cluster")

    def perform_create(self, serializer):
        serializer.instance = services.pod_template_create(actor=self.request.user, **serializer.validated_data)

    @extend_schema(request=s.PodTemplateUpdateSerializer, responses={200: s.PodTemplateSerializer})
    def partial_update(self, request, *args, **kwargs):
        template = self.get_object()
        form = s.PodTemplateUpdateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        values = dict(form.validated_data)
        saved = services.pod_template_update(actor=request.user, template=template,
                                             expected_version=values.pop("version", None), **values)
        return Response(s.PodTemplateSerializer(saved, context=self.get_serializer_context()).data)

    def perform_destroy(self, instance):
        services.pod_template_delete(actor=self.request.user, template=instance)


class RuleSetViewSet(RestrictedQuerysetMixin, viewsets.ModelViewSet):
    """Resource validation rule sets of a cluster. Reading: anyone with a role in the cluster; writing:
    system administrators."""

    serializer_class = s.RuleSetSerializer
    filterset_class = RuleSetFilterSet
    ordering_fields = ["name", "created", "updated"]
    ordering = ["cluster__name", "name"]
    http_method_names = _METHODS

    def base_queryset(self):
        return ResourceValidationRuleSet.objects.select_related("cluster")

    def perform_create(self, serializer):
        serializer.instance = services.rule_set_create(actor=self.request.user, **serializer.validated_data)

    @extend_schema(request=s.RuleSetUpdateSerializer, responses={200: s.RuleSetSerializer})
    def partial_update(self, request, *args, **kwargs):
        rule_set = self.get_object()
        form = s.RuleSetUpdateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        values = dict(form.validated_data)
        saved = services.rule_set_update(actor=request.user, rule_set=rule_set,
                                         expected_version=values.pop("version", None), **values)
        return Response(s.RuleSetSerializer(saved, context=self.get_serializer_context()).data)

    def perform_destroy(self, instance):
        services.rule_set_delete(actor=self.request.user, rule_set=instance)


# ---------------------------------------------------------------------------------------------------
# Submission side (pool access, submitting, the workloads table)
class ClusterUnreachable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The cluster could not be reached: nothing was created or deleted."
    default_code = "cluster_unreachable"


def _in_cluster(cluster, fn):
    """Run `fn(api_client)` against the cluster; a cluster that cannot be reached is a 503 naming why."""
    try:
        with api_client_for(cluster) as api_client:
            return fn(api_client)
    except (ValidationError, PermissionDenied, exceptions.APIException):
        raise
    except Exception as exc:  # noqa: BLE001 - unreachable, refused connection, bad kubeconfig
        raise ClusterUnreachable(f"The cluster {cluster.name} could not be reached ({api_error_message(exc)}): "
                                 "nothing was created or deleted.") from exc


class WorkloadViewSet(RestrictedQuerysetMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                      mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """Workloads (batch/v1 Jobs) of the projects you may see. POST submits one (researchers, project
    administrators and above, for their projects); DELETE stops one (deletes its Job and pods)."""

    serializer_class = s.WorkloadSerializer
    filterset_class = WorkloadFilterSet
    ordering_fields = ["name", "namespace", "created_in_cluster", "gpus", "priority", "phase"]
    ordering = ["-created_in_cluster", "namespace", "name"]

    def get_queryset(self):
        return selectors.workload_list(user=self.request.user)

    def get_serializer_class(self):
        return s.WorkloadDetailSerializer if self.action == "retrieve" else s.WorkloadSerializer

    # What the page's workloads show beyond their rows (the scheduler's decisions, the console's answers, what
    # Karpenter can do, GPU utilization: one Prometheus query per cluster, in the page's budget), at once.
    def paginate_queryset(self, queryset):
        page = super().paginate_queryset(queryset)
        if page is not None:
            selectors.workloads_enrich(list(page), user=self.request.user)
        return page

    def get_object(self):
        workload = super().get_object()
        if self.action == "retrieve":
            selectors.workloads_enrich([workload], user=self.request.user)
        return workload

    @extend_schema(request=s.SubmitSerializer, responses={
        201: s.SubmittedSerializer, 200: OpenApiResponse(s.SubmittedSerializer, description="dry run: nothing created"),
        503: OpenApiResponse(s.UnreachableSerializer, description="The cluster could not be reached: nothing was created.")})
    def create(self, request, *args, **kwargs):
        if not selectors.submittable_projects(user=request.user).exists():
            raise PermissionDenied("Submitting workloads needs the researcher or project administrator role on a "
                                   "project.")
        form = s.SubmitSerializer(data=request.data, context=self.get_serializer_context())
        form.is_valid(raise_exception=True)
        data = dict(form.validated_data)
        dry_run = data.pop("dry_run")
        project = data.pop("project")
        req = submission.Request(project=project, pools=submission.pools_from_names(
            project=project, names=data.pop("pools", None)), **data)
        try:
            if dry_run:
                preview = submission.workload_preview(actor=request.user, request=req)
            else:
                preview = _in_cluster(project.cluster, lambda api_client: submission.workload_submit(
                    actor=request.user, request=req, api_client=api_client))
        except submission.SubmissionRefused as exc:
            # The first step that failed, in words, with the field it concerns (nothing was created).
            return Response({"detail": f"Refused at the {exc.step} step: {exc.text}", "step": exc.step,
                             "errors": exc.errors}, status=status.HTTP_400_BAD_REQUEST)
        body = {"name": preview.name, "namespace": preview.namespace, "pools": preview.pools,
                "platform": preview.platform, "dry_run": dry_run, "yaml": preview.yaml, "job": preview.job,
                "queued_in": preview.queued_in, "scheduling": preview.scheduling}
        if dry_run:
            body["verdict"] = forecast.submission_verdict(user=request.user, request=req, preview=preview).as_dict()
            body = s.SubmittedSerializer(body).data
        return Response(body, status=status.HTTP_200_OK if dry_run else status.HTTP_201_CREATED)

    @extend_schema(responses={204: None, 503: OpenApiResponse(
        s.UnreachableSerializer, description="The cluster could not be reached: nothing was deleted.")})
    def destroy(self, request, *args, **kwargs):
        return super().destroy(request, *args, **kwargs)

    def perform_destroy(self, instance):
        submission.require_stop(self.request.user, instance)
        try:
            _in_cluster(instance.cluster, lambda api_client: services.workload_stop(
                actor=self.request.user, workload=instance, api_client=api_client))
        except ValidationError as exc:
            raise exceptions.ValidationError({"detail": exc.messages}) from exc


