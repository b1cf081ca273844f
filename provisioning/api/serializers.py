from __future__ import annotations

from rest_framework import serializers
from common.api import ModelSerializer
from common.fields import StrictIntegerField

from provisioning.models import KarpenterNodePool, NodeClaim


class KarpenterNodePoolSerializer(ModelSerializer):
    class Meta:
        model = KarpenterNodePool
        fields = ["name", "uid", "weight", "limits", "gpu_limit", "resources", "gpus_provisioned", "node_count",
                  "conditions", "ready", "consolidation_policy", "node_class", "spec", "created_in_cluster",
                  "resource_version", "updated"]


class NodeClaimSerializer(ModelSerializer):
    class Meta:
        model = NodeClaim
        fields = ["name", "uid", "nodepool", "phase", "node_name", "provider_id", "instance_type", "capacity_type",
                  "zone", "gpus", "requests", "capacity", "allocatable", "conditions", "created_in_cluster",
                  "resource_version"]


class ProvisioningSerializer(serializers.Serializer):
    """A pool's Karpenter NodePool (null when the pool is not backed, or the cluster has none) and its NodeClaims."""

    pool = StrictIntegerField()
    backed_by = serializers.CharField(allow_blank=True, help_text="The Karpenter NodePool's name ('' when not backed)")
    nodepool = KarpenterNodePoolSerializer(allow_null=True)
    nodeclaims = NodeClaimSerializer(many=True)
