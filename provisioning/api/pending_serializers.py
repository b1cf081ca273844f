"""The shapes of "what Karpenter can do for a pending pod" and of a pool's advice, over the API."""
from __future__ import annotations

from rest_framework import serializers

from common.fields import StrictIntegerField

class LimitSerializer(serializers.Serializer):
    resource = serializers.CharField()
    provisioned = serializers.CharField()
    limit = serializers.CharField()


class NodePoolVerdictSerializer(serializers.Serializer):
    name = serializers.CharField()
    weight = StrictIntegerField()
    can_provision = serializers.BooleanField()
    reason = serializers.ChoiceField(choices=["requirements", "taint", "limit", "budget"], allow_null=True,
                                     help_text="The first reason the NodePool cannot provision a node for the pod.")
    explanation = serializers.CharField()
    limit = LimitSerializer(required=False, help_text="For reasons limit and budget: provisioned of limit.")


class LaunchingSerializer(serializers.Serializer):
    name = serializers.CharField()
    phase = serializers.CharField()
    nodepool = serializers.CharField()


class PodProvisioningSerializer(serializers.Serializer):
    namespace = serializers.CharField()
    name = serializers.CharField()
    project = serializers.CharField(required=False)
    gpus = serializers.CharField()
    summary = serializers.CharField()
    can_provision = serializers.ListField(child=serializers.CharField(), help_text="NodePools that can provision for it.")
    nodeclaim = LaunchingSerializer(allow_null=True, help_text="The NodeClaim being launched for it, if any.")
    nodepools = NodePoolVerdictSerializer(many=True)
    pending = serializers.BooleanField(required=False)


class AdviceSerializer(serializers.Serializer):
    code = serializers.ChoiceField(choices=["untainted_gpu_nodes", "mixed_gpu_types", "missing_feature_labels",
                                            "spot_non_preemptible", "no_priority_classes"])
    problem = serializers.CharField()
    fix = serializers.CharField()
    subjects = serializers.ListField(child=serializers.CharField())


class PoolPendingPodsSerializer(serializers.Serializer):
    pool = serializers.CharField()
    nodepool = serializers.CharField(allow_blank=True, help_text="The Karpenter NodePool backing the pool ('' if none).")
    pending = PodProvisioningSerializer(many=True)
    error = serializers.CharField(allow_blank=True, help_text="A live read that failed, in words ('' if none).")


class PoolAdviceSerializer(serializers.Serializer):
    pool = serializers.CharField()
    advice = AdviceSerializer(many=True)
    error = serializers.CharField(allow_blank=True, help_text="A live read that failed, in words ('' if none).")
