"""Enforcement over the API: a cluster's enforcer (with a dry run), the scheduler's queue status, and
why a project's or department's GPU requests wait."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.response import Response

from access.rules import require_system_admin
from enforcers import services
from enforcers.api import serializers as s
from enforcers.models import SchedulerQueue
from kube.client import api_error_message
from nodepools.models import Cluster
from nodepools.sync import api_client_for
from projects.models import Department, Project
from projects.waiting import waiting_requests


def _labels(objects) -> list[str]:
    return [f"{o['kind']} {(o['metadata'].get('namespace') + '/') if o['metadata'].get('namespace') else ''}"
            f"{o['metadata']['name']}" for o in objects]


class EnforcementView(generics.GenericAPIView):
    """GET: the cluster's enforcer. PUT `{"enforcer": ..., "dry_run": true}`: what would be created,
    changed and deleted; without `dry_run` the setting is saved (system administrators)."""

    serializer_class = s.EnforcementSerializer
    queryset = Cluster.objects.none()

    def _cluster(self, pk: int) -> Cluster:
        return get_object_or_404(Cluster.objects.restrict(self.request.user, "view"), pk=pk)

    def get(self, request, pk: int):
        return Response(s.EnforcementSerializer(services.enforcement_get(cluster=self._cluster(pk))).data)

    @extend_schema(responses={200: s.EnforcementSerializer, 202: s.PlanSerializer})
    def put(self, request, pk: int):
        cluster = self._cluster(pk)
        require_system_admin(request.user, "choose a cluster's enforcer")
        serializer = s.EnforcementSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        enforcer = serializer.validated_data["enforcer"]
        if serializer.validated_data.get("dry_run"):
            try:
                with api_client_for(cluster) as api_client:
                    plan = services.enforcement_preview(cluster=cluster, enforcer=enforcer, api_client=api_client)
                reachable, error = True, ""
            except Exception as exc:  # noqa: BLE001 - reported in the answer
                plan = services.plan(services.desired_for(cluster, enforcer), [])
                reachable, error = False, api_error_message(exc)
            return Response({"enforcer": enforcer, "reachable": reachable, "error": error,
                             "create": _labels(plan.create), "update": _labels(o for o, _, _ in plan.update),
                             "delete": _labels(plan.delete), "conflicts": _labels(plan.conflicts)}, status=202)
        row = services.enforcement_set(actor=request.user, cluster=cluster, enforcer=enforcer)
        return Response(s.EnforcementSerializer(row).data)


class SchedulerQueueList(generics.ListAPIView):
    """The scheduler's queues of a cluster as it reports them (KAI Queue / Kueue ClusterQueue status)."""

    serializer_class = s.SchedulerQueueSerializer
    pagination_class = None
    queryset = SchedulerQueue.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # drawing the schema
            return SchedulerQueue.objects.none()
        cluster = get_object_or_404(Cluster.objects.restrict(self.request.user, "view"), pk=self.kwargs["pk"])
        return SchedulerQueue.objects.restrict(self.request.user, "view").filter(cluster=cluster).select_related("pool")


class _WaitingView(generics.GenericAPIView):
    serializer_class = s.WaitingSerializer
    pagination_class = None
    model = Project

    def get(self, request, pk: int):
        owner = get_object_or_404(self.model.objects.restrict(request.user, "view"), pk=pk)
        kwargs = {"project": owner} if self.model is Project else {"department": owner}
        rows = [r.as_dict() for r in waiting_requests(user=request.user, **kwargs)]
        return Response(s.WaitingSerializer(rows, many=True).data)


class ProjectWaitingView(_WaitingView):
    """The project's pending GPU requests, each with why it waits."""

    model = Project
    queryset = Project.objects.none()

    @extend_schema(responses=s.WaitingSerializer(many=True))
    def get(self, request, pk: int):
        return super().get(request, pk)


class DepartmentWaitingView(_WaitingView):
    """The department's projects' pending GPU requests (those the user may see), each with why it waits."""

    model = Department
    queryset = Department.objects.none()

    @extend_schema(responses=s.WaitingSerializer(many=True))
    def get(self, request, pk: int):
        return super().get(request, pk)
