"""Serializers of enforcement over the API."""
from __future__ import annotations

from rest_framework import serializers
from common.api import ModelSerializer
from common.fields import StrictDecimalField, StrictIntegerField

from enforcers.models import Enforcement, Enforcer, SchedulerQueue


class EnforcementSerializer(ModelSerializer):
    cluster = StrictIntegerField(source="cluster_id", read_only=True)
    dry_run = serializers.BooleanField(write_only=True, required=False, default=False,
                                       help_text="Only answer what would change in the cluster; save nothing.")

    class Meta:
        model = Enforcement
        fields = ["cluster", "enforcer", "last_reconciled", "last_error", "dry_run"]
        read_only_fields = ["last_reconciled", "last_error"]
        extra_kwargs = {"enforcer": {"required": True, "help_text": "none, kai (KAI Scheduler) or kueue."}}


class PlanSerializer(serializers.Serializer):
    enforcer = serializers.ChoiceField(choices=Enforcer.choices)
    reachable = serializers.BooleanField(help_text="False: the cluster could not be read; only creations are listed.")
    error = serializers.CharField(allow_blank=True)
    create = serializers.ListField(child=serializers.CharField())
    update = serializers.ListField(child=serializers.CharField())
    delete = serializers.ListField(child=serializers.CharField())
    conflicts = serializers.ListField(child=serializers.CharField())


class BorrowerSerializer(serializers.Serializer):
    kind = serializers.CharField()
    name = serializers.CharField()
    gpus_over_deserved = StrictDecimalField(max_digits=12, decimal_places=3)


class WaitingSerializer(serializers.Serializer):
    namespace = serializers.CharField()
    name = serializers.CharField()
    project = serializers.CharField()
    department = serializers.CharField()
    pool = serializers.CharField()
    gpus = StrictDecimalField(max_digits=12, decimal_places=3)
    priority = StrictIntegerField()
    preemptible = serializers.BooleanField()
    reason = serializers.ChoiceField(choices=["over_limit", "over_quota_off", "non_preemptible_over_quota",
                                              "no_node_fits", "pool_full", "schedulable"])
    explanation = serializers.CharField()
    borrowers = BorrowerSerializer(many=True)


class SchedulerQueueSerializer(ModelSerializer):
    pool = serializers.CharField(source="pool.name", default=None, read_only=True)

    class Meta:
        model = SchedulerQueue
        fields = ["kind", "name", "pool", "owner", "gpu_allocated", "gpu_allocated_non_preemptible", "gpu_requested",
                  "gpu_borrowed", "pending_workloads", "updated"]
