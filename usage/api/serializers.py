from rest_framework import serializers

from usage.models import UsageSnapshot


class UsageSnapshotSerializer(serializers.ModelSerializer):
    kind = serializers.CharField(source="get_kind_display", read_only=True, help_text="Pool, Department or Project")

    class Meta:
        model = UsageSnapshot
        fields = ["id", "taken", "kind", "cluster_id", "pool", "department", "project",
                  "gpu_capacity", "gpu_deserved", "gpu_allocated", "gpu_over_quota",
                  "cpu_capacity", "cpu_deserved", "cpu_allocated", "cpu_over_quota",
                  "memory_capacity_mib", "memory_deserved_mib", "memory_allocated_mib", "memory_over_quota_mib"]
        read_only_fields = fields
