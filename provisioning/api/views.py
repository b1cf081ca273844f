"""A pool's provisioning over the API: its Karpenter NodePool (the blueprint) and the NodeClaims launched."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from rest_framework import generics
from rest_framework.response import Response

from nodepools.models import NodePool
from provisioning import selectors
from provisioning.api import serializers as s


class PoolProvisioningView(generics.GenericAPIView):
    """GET: the Karpenter NodePool backing the pool and its NodeClaims, as the user may see them."""

    serializer_class = s.ProvisioningSerializer
    pagination_class = None
    queryset = NodePool.objects.none()

    def get(self, request, pk: int):
        pool = get_object_or_404(NodePool.objects.restrict(request.user, "view"), pk=pk)
        blueprint = selectors.pool_blueprint(user=request.user, pool=pool)
        data = {"pool": pool.pk, "backed_by": blueprint.name if blueprint else "",
                "nodepool": blueprint.nodepool if blueprint else None,
                "nodeclaims": blueprint.nodeclaims if blueprint else []}
        return Response(s.ProvisioningSerializer(data).data)
