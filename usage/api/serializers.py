from rest_framework import serializers
from common.api import ModelSerializer
from common.fields import StrictDecimalField, StrictFloatField, StrictIntegerField

from usage.models import UsageSnapshot


class UsageSnapshotSerializer(ModelSerializer):
    kind = serializers.CharField(source="get_kind_display", read_only=True, help_text="Pool, Department or Project")

    class Meta:
        model = UsageSnapshot
        fields = ["id", "taken", "kind", "cluster_id", "pool", "department", "project",
                  "gpu_capacity", "gpu_deserved", "gpu_allocated", "gpu_over_quota",
                  "cpu_capacity", "cpu_deserved", "cpu_allocated", "cpu_over_quota",
                  "memory_capacity_mib", "memory_deserved_mib", "memory_allocated_mib", "memory_over_quota_mib",
                  "gpu_utilization", "gpu_idle"]
        read_only_fields = fields


class IdleGpuSerializer(serializers.Serializer):
    cluster = serializers.CharField(source="cluster.name")
    department = serializers.CharField(source="department_name", allow_blank=True)
    project = serializers.CharField(source="project_name", allow_blank=True)
    project_id = StrictIntegerField(source="project.pk", allow_null=True, default=None)
    namespace = serializers.CharField()
    pod = serializers.CharField(source="pod_name")
    node = serializers.CharField()
    pool = serializers.CharField(source="pool.name", allow_null=True, default=None)
    gpu = serializers.CharField(source="gpu_index", help_text="The device index (the exporter's `gpu` label).")
    mig_profile = serializers.CharField(allow_blank=True, help_text="A MIG slice: its profile (the exporter's "
                                        "GPU_I_PROFILE, e.g. 1g.10gb); empty for a whole GPU.")
    gpu_instance = serializers.CharField(allow_blank=True, help_text="A MIG slice: its GPU instance (GPU_I_ID).")
    uuid = serializers.CharField()
    model = serializers.CharField()
    idle_since = serializers.DateTimeField(source="since")
    idle_since_before = serializers.BooleanField(source="since_before",
                                                 help_text="Idle for longer than the lookback: idle_since is its start.")
    idle_hours = StrictFloatField()
    gpu_hours_wasted = StrictDecimalField(max_digits=12, decimal_places=2,
                                          help_text="Idle hours × its share of a GPU (a MIG slice: its profile's).")


class IdleGpusSerializer(serializers.Serializer):
    threshold_percent = StrictFloatField()
    window_minutes = StrictFloatField()
    unavailable = serializers.DictField(child=serializers.CharField(),
                                        help_text="Cluster name -> why its idle GPUs are unknown.")
    results = IdleGpuSerializer(many=True)
