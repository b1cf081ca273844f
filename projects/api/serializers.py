"""Representations of departments, projects, quotas, priority lists and role assignments."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework import serializers

from common.fields import StrictDecimalField, StrictFloatField, StrictIntegerField
from common.api import ModelSerializer, RestrictedPrimaryKeyRelatedField
from nodepools.models import Cluster
from access.rules import Role
from kube.quantity import GIB_PLACES, MIB_PER_GIB, gib_from_mib, mib_from_gib
from projects.models import (GPU_PLACES, QUOTA_MAX_CORES, QUOTA_MAX_GIB, QUOTA_MAX_GPUS, QUOTA_MAX_WEIGHT, Department,
                             Project, Quota, Rank)
from access.models import RoleAssignment


class DepartmentSerializer(ModelSerializer):
    cluster = RestrictedPrimaryKeyRelatedField(model=Cluster)

    class Meta:
        model = Department
        fields = ["id", "cluster", "name", "display_name", "label", "description", "created", "updated"]
        read_only_fields = ["label", "created", "updated"]
        extra_kwargs = {"description": {"max_length": 2000}}

    label = serializers.CharField(read_only=True, help_text="The display name, else the name: what pages show.")


class DepartmentUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=63, required=False)
    display_name = serializers.CharField(max_length=100, required=False, allow_blank=True)
    description = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class NamespacesField(serializers.ListField):
    """Namespace names in, namespace names out (read from the project's namespaces)."""

    def to_representation(self, data):
        return [ns.name for ns in data.all()] if hasattr(data, "all") else list(data)


class ProjectSerializer(ModelSerializer):
    department = RestrictedPrimaryKeyRelatedField(model=Department)
    namespaces = NamespacesField(
        child=serializers.CharField(max_length=63), required=False, min_length=1, max_length=100,
        help_text="Kubernetes namespaces the project owns (default: runai-<name>).",
    )
    priority = serializers.SerializerMethodField(help_text="Ids of the node pools in the project's priority order.")
    label = serializers.CharField(read_only=True, help_text="The display name, else the name: what pages show.")

    class Meta:
        model = Project
        fields = ["id", "cluster", "department", "name", "display_name", "label", "description", "allow_over_quota",
                  "namespaces", "priority", "created", "updated"]
        read_only_fields = ["cluster", "label", "created", "updated"]
        extra_kwargs = {"description": {"max_length": 2000}}

    def get_priority(self, project) -> list[int]:
        return [entry.pool_id for entry in project.priority_entries.all()]


class ProjectUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=63, required=False)
    display_name = serializers.CharField(max_length=100, required=False, allow_blank=True)
    description = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    allow_over_quota = serializers.BooleanField(required=False)
    namespaces = serializers.ListField(child=serializers.CharField(max_length=63), required=False, min_length=1,
                                       max_length=100)


_QUOTA_VALUES = ["gpu_deserved", "cpu_deserved", "memory_deserved_mib", "gpu_limit", "cpu_limit", "memory_limit_mib",
                 "over_quota_weight", "rank"]


class QuotaSerializer(ModelSerializer):
    pool_name = serializers.CharField(source="pool.name", read_only=True)
    owner_kind = serializers.CharField(read_only=True, help_text="department or project")
    rank_label = serializers.CharField(source="get_rank_display", read_only=True)
    gpu_allocated = StrictDecimalField(max_digits=14, decimal_places=3, read_only=True)
    gpu_over_quota = StrictDecimalField(max_digits=14, decimal_places=3, read_only=True)
    cpu_allocated = StrictFloatField(read_only=True, help_text="cores")
    cpu_over_quota = StrictFloatField(read_only=True, help_text="cores")
    memory_allocated_mib = StrictFloatField(read_only=True)
    memory_over_quota_mib = StrictFloatField(read_only=True)
    memory_deserved_gib = serializers.SerializerMethodField(help_text="memory_deserved_mib in GiB, as the pages show it "
                                                            "(null: unlimited).")
    memory_limit_gib = serializers.SerializerMethodField(help_text="memory_limit_mib in GiB (null: unlimited).")

    class Meta:
        model = Quota
        fields = ["id", "pool", "pool_name", "owner_kind", "department", "project", *_QUOTA_VALUES,
                  "memory_deserved_gib", "memory_limit_gib", "rank_label",
                  "version", "gpu_allocated", "gpu_over_quota", "cpu_allocated", "cpu_over_quota",
                  "memory_allocated_mib", "memory_over_quota_mib", "updated"]
        read_only_fields = fields

    def get_memory_deserved_gib(self, quota) -> str | None:
        gib = gib_from_mib(quota.memory_deserved_mib)
        return None if gib is None else f"{gib:f}"

    def get_memory_limit_gib(self, quota) -> str | None:
        gib = gib_from_mib(quota.memory_limit_mib)
        return None if gib is None else f"{gib:f}"


_GIB = dict(max_digits=16, decimal_places=GIB_PLACES, required=False, allow_null=True, min_value=0,
            max_value=QUOTA_MAX_GIB, unit=("GiB", "GiB"))


class QuotaEntrySerializer(serializers.Serializer):
    """New values for the quota of one pool; fields left out keep their value, null means unlimited. Memory
    in GiB (`memory_deserved_gib`, as the pages say it) or in MiB (`memory_deserved_mib`, as it is stored and
    as earlier clients send it), not both."""

    pool = StrictIntegerField(min_value=1, max_value=2**63 - 1, help_text="Id of the node pool.")
    gpu_deserved = StrictDecimalField(max_digits=10, decimal_places=GPU_PLACES, required=False, min_value=0,
                                      max_value=QUOTA_MAX_GPUS, unit="GPU")
    cpu_deserved = StrictDecimalField(max_digits=10, decimal_places=3, required=False, allow_null=True, min_value=0,
                                      max_value=QUOTA_MAX_CORES, unit="core")
    memory_deserved_gib = StrictDecimalField(**_GIB)
    memory_deserved_mib = StrictIntegerField(required=False, allow_null=True, min_value=0,
                                             max_value=QUOTA_MAX_GIB * MIB_PER_GIB, unit=("MiB", "MiB"))
    gpu_limit = StrictDecimalField(max_digits=10, decimal_places=GPU_PLACES, required=False, allow_null=True, min_value=0,
                                   max_value=QUOTA_MAX_GPUS, unit="GPU")
    cpu_limit = StrictDecimalField(max_digits=10, decimal_places=3, required=False, allow_null=True, min_value=0,
                                   max_value=QUOTA_MAX_CORES, unit="core")
    memory_limit_gib = StrictDecimalField(**_GIB)
    memory_limit_mib = StrictIntegerField(required=False, allow_null=True, min_value=0,
                                          max_value=QUOTA_MAX_GIB * MIB_PER_GIB, unit=("MiB", "MiB"))
    over_quota_weight = StrictIntegerField(required=False, min_value=0, max_value=QUOTA_MAX_WEIGHT)
    rank = serializers.ChoiceField(choices=Rank.choices, required=False)

    def validate(self, attrs):
        for what in ("deserved", "limit"):
            gib, mib = f"memory_{what}_gib", f"memory_{what}_mib"
            if gib in attrs and mib in attrs:
                raise serializers.ValidationError({gib: [f"Send memory in GiB ({gib}) or in MiB ({mib}), not both."]})
            if gib in attrs:
                attrs[mib] = mib_from_gib(attrs.pop(gib))
        return attrs


class OwnerQuotasSerializer(serializers.Serializer):
    quotas = QuotaSerializer(many=True, read_only=True)
    warnings = serializers.ListField(child=serializers.CharField(), read_only=True)


class OwnerQuotasUpdateSerializer(serializers.Serializer):
    quotas = QuotaEntrySerializer(many=True, max_length=1000,
                                  help_text="One entry per pool to change; pools left out are unchanged.")

    def validate_quotas(self, entries):
        pools = [entry["pool"] for entry in entries]
        if len(set(pools)) != len(pools):
            raise serializers.ValidationError("Name each pool at most once.")
        return entries


class PrioritySerializer(serializers.Serializer):
    pools = serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=2**63 - 1), max_length=1000,
        help_text="Node pool ids, first choice first (empty: the cluster's order).",
    )


class RoleAssignmentSerializer(ModelSerializer):
    user = serializers.SlugRelatedField(slug_field="username", queryset=get_user_model().objects.all(), required=False,
                                        allow_null=True)
    group = serializers.SlugRelatedField(slug_field="name", queryset=Group.objects.all(), required=False, allow_null=True)
    role = serializers.ChoiceField(choices=Role.choices)
    cluster = RestrictedPrimaryKeyRelatedField(model=Cluster, required=False, allow_null=True)
    department = RestrictedPrimaryKeyRelatedField(model=Department, required=False, allow_null=True)
    project = RestrictedPrimaryKeyRelatedField(model=Project, required=False, allow_null=True)
    description = serializers.CharField(source="__str__", read_only=True)

    class Meta:
        model = RoleAssignment
        fields = ["id", "user", "group", "role", "scope_type", "cluster", "department", "project", "description",
                  "created"]
        read_only_fields = ["scope_type", "created"]


class UtilizationPointSerializer(serializers.Serializer):
    time = serializers.DateTimeField(help_text="End of the step (UTC).")
    gpu_utilization = StrictFloatField(help_text="Average utilization (%) of the owner's allocated GPUs over "
                                                       "the step.")


class OwnerUtilizationSerializer(serializers.Serializer):
    """GPU utilization of what a project or department holds, from the DCGM exporter through its cluster's
    Prometheus (the figures of its page)."""

    gpu_utilization = StrictFloatField(
        allow_null=True, help_text="Average utilization (%) over the last 5 minutes of the GPUs its pods hold "
                                   "(DCGM_FI_DEV_GPU_UTIL; a MIG instance's DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100); "
                                   "null when unavailable.")
    gpus = StrictIntegerField(help_text="How many of its allocated GPUs report utilization.")
    unavailable = serializers.CharField(
        allow_null=True, help_text="Why `gpu_utilization` is null (e.g. \"Prometheus unreachable: connection "
                                   "refused\", \"no Prometheus configured for this cluster\"), else null.")
    period = serializers.ChoiceField(choices=["24h", "7d"], help_text="The period of `series`.")
    series = UtilizationPointSerializer(
        many=True, help_text="Average utilization of its allocated GPUs over the period, oldest first (at most "
                             "300 points: the step grows with the period).")
    series_unavailable = serializers.CharField(allow_null=True, help_text="Why `series` is empty, else null.")


class UtilizationQuerySerializer(serializers.Serializer):
    period = serializers.ChoiceField(choices=["24h", "7d"], default="24h", required=False)
