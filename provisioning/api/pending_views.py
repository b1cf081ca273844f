"""What Karpenter can do for pending GPU pods, and a pool's best-practice advice, over the API (reads)."""
from __future__ import annotations

from dataclasses import asdict

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from nodepools.models import Cluster, NodePool
from provisioning.api import pending_serializers as s
from provisioning.karpenter import NODEPOOL_LABEL
from provisioning.pending import pending_gpu_pods, pod_explanation, pool_advice


def _pool(request, pk: int) -> NodePool:
    return get_object_or_404(NodePool.objects.restrict(request.user, "view").select_related("cluster"), pk=pk)


class PoolPendingPodsView(generics.GenericAPIView):
    """The pending GPU pods of the pool's cluster (those the user may see), each with what every Karpenter
    NodePool can do for it (the first reason one cannot) and the NodeClaim launched for it; for a
    Karpenter-backed pool `nodepool` names its NodePool."""

    serializer_class = s.PoolPendingPodsSerializer
    pagination_class = None
    queryset = NodePool.objects.none()

    def get(self, request, pk: int):
        pool = _pool(request, pk)
        backed = pool.label_value if pool.label_key == NODEPOOL_LABEL else ""
        report = pending_gpu_pods(user=request.user, cluster=pool.cluster, nodepool=backed)
        body = {"pool": pool.name, "nodepool": backed, "pending": [p.as_dict() for p in report.pods],
                "error": report.error}
        return Response(s.PoolPendingPodsSerializer(body).data)


class PoolAdviceView(generics.GenericAPIView):
    """The pool's best-practice advice (docs/using/platform-admin.md#node-pools), each with its fix in one sentence."""

    serializer_class = s.PoolAdviceSerializer
    pagination_class = None
    queryset = NodePool.objects.none()

    def get(self, request, pk: int):
        pool = _pool(request, pk)
        advice = pool_advice(user=request.user, pool=pool)
        body = {"pool": pool.name, "advice": [{**asdict(a), "subjects": list(a.subjects)} for a in advice.advice],
                "error": advice.error}
        return Response(s.PoolAdviceSerializer(body).data)


class PodProvisioningView(generics.GenericAPIView):
    """One pod of a cluster: which Karpenter NodePools could provision a node for it, the first reason each
    other one cannot, and the NodeClaim launched for it."""

    serializer_class = s.PodProvisioningSerializer
    pagination_class = None
    queryset = Cluster.objects.none()

    @extend_schema(responses={200: s.PodProvisioningSerializer, 503: None})
    def get(self, request, pk: int, namespace: str, name: str):
        cluster = get_object_or_404(Cluster.objects.restrict(request.user, "view"), pk=pk)
        body, error = pod_explanation(user=request.user, cluster=cluster, namespace=namespace, name=name)
        if error == "not_found":
            raise NotFound(f"No pod {namespace}/{name} you may see in cluster {cluster.name}.")
        if body is None:
            return Response({"detail": error}, status=503)
        return Response(s.PodProvisioningSerializer(body).data)
