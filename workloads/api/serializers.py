"""Platforms, pod templates and rule sets in the API. Input is handed to the services, which validate
it (a bad value: 400 naming the field); `version` on a change is the version read (409 when stale)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from console.api import DocumentField, RestrictedPrimaryKeyRelatedField
from nodepools.models import Cluster, NodePool
from workloads import selectors, shell
from workloads.models import Platform, PodSecurityLevel, PodTemplate, ResourceValidationRuleSet
from workloads.models import Workload
from workloads.submission import PRIORITY_CLASSES


def _names():
    return serializers.ListField(child=serializers.CharField(max_length=63), required=False, max_length=100)


class PlatformSerializer(serializers.ModelSerializer):
    pool_name = serializers.CharField(source="pool.name", read_only=True)
    cluster = serializers.IntegerField(source="pool.cluster_id", read_only=True)
    override_templates = serializers.SerializerMethodField(help_text="Pod template names, in merge order.")
    rule_sets = serializers.SerializerMethodField(help_text="Resource validation rule set names.")
    is_default = serializers.SerializerMethodField(help_text="Whether it is its pool's default platform.")

    class Meta:
        model = Platform
        fields = ["id", "pool", "pool_name", "cluster", "name", "description", "node_selector", "tolerations",
                  "pod_security_level", "privileged_allowed", "host_network_allowed", "allowed_mounts", "default_variables",
                  "override_templates", "rule_sets", "is_default", "version", "created", "updated"]
        read_only_fields = fields

    def get_override_templates(self, obj) -> list[str]:
        return [t.name for t in obj.ordered_templates()]

    def get_rule_sets(self, obj) -> list[str]:
        return [r.name for r in obj.ordered_rule_sets()]

    def get_is_default(self, obj) -> bool:
        settings = getattr(obj.pool, "workload_settings", None)  # None when the pool has none saved yet
        return bool(settings is not None and settings.default_platform_id == obj.pk)


class _PlatformInput(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    node_selector = DocumentField(required=False, help_text="Label key -> value.")
    tolerations = DocumentField(required=False, help_text="Kubernetes tolerations.")
    pod_security_level = serializers.ChoiceField(
        choices=PodSecurityLevel.choices, required=False,
        help_text="The Pod Security Standards level its pods may reach (default on create: the pool's level); the "
                  "allowances below exist only at privileged.")
    privileged_allowed = serializers.BooleanField(required=False)
    host_network_allowed = serializers.BooleanField(required=False)
    allowed_mounts = DocumentField(required=False, help_text="Host paths.")
    default_variables = DocumentField(required=False, help_text="USER_* / WF_* -> value.")
    override_templates = _names()
    rule_sets = _names()


class PlatformCreateSerializer(_PlatformInput):
    pool = RestrictedPrimaryKeyRelatedField(model=NodePool)
    make_default = serializers.BooleanField(required=False, default=False)


class PlatformUpdateSerializer(_PlatformInput):
    name = serializers.CharField(max_length=100, required=False)
    version = serializers.IntegerField(required=False, min_value=0, max_value=2**31 - 1,
                                       help_text="The version read; a change made meanwhile is refused (409).")


class PodTemplateSerializer(serializers.ModelSerializer):
    cluster = RestrictedPrimaryKeyRelatedField(model=Cluster)
    body = DocumentField(help_text="A fragment of a Pod (spec and/or metadata); YAML text is accepted too (no anchors "
                                   "or aliases, at most 64 levels and 65536 characters).")

    class Meta:
        model = PodTemplate
        fields = ["id", "cluster", "name", "description", "body", "version", "created", "updated"]
        read_only_fields = ["version", "created", "updated"]
        extra_kwargs = {"name": {"validators": [], "max_length": 100}, "description": {"max_length": 2000}}


class PodTemplateUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, required=False)
    description = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    body = DocumentField(required=False)
    version = serializers.IntegerField(required=False, min_value=0, max_value=2**31 - 1)


class RuleSetSerializer(serializers.ModelSerializer):
    cluster = RestrictedPrimaryKeyRelatedField(model=Cluster)
    rules = DocumentField(help_text="[{operator: GT|GE|LT|LE|EQ, left_operand, right_operand, assert_message}]")

    class Meta:
        model = ResourceValidationRuleSet
        fields = ["id", "cluster", "name", "description", "rules", "version", "created", "updated"]
        read_only_fields = ["version", "created", "updated"]
        extra_kwargs = {"name": {"validators": [], "max_length": 100}, "description": {"max_length": 2000}}


class RuleSetUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, required=False)
    description = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    rules = DocumentField(required=False)
    version = serializers.IntegerField(required=False, min_value=0, max_value=2**31 - 1)


# ---------------------------------------------------------------------------------------------------
# Submission side (pool access, submitting, the workloads table)
class WorkloadSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    project = serializers.CharField(source="project_name", read_only=True, allow_null=True)
    placed_pool = serializers.CharField(read_only=True, allow_null=True)
    phase = serializers.SerializerMethodField()
    preemptible = serializers.BooleanField(read_only=True, allow_null=True)
    pending_reason = serializers.SerializerMethodField(
        help_text="Why it waits, in words; for a pending workload in a cluster with Karpenter NodePools followed by "
                  "what Karpenter can do for its pending pod.")
    provisioning = serializers.SerializerMethodField(
        help_text="For a pending workload in a cluster with Karpenter NodePools: what Karpenter can do for its "
                  "first pending pod (as /api/v1/clusters/{id}/pods/{namespace}/{name}/provisioning/ gives it: "
                  "each NodePool's first reason, the NodeClaim launched for it), with how many of its pods are "
                  "pending; else null.")
    gpus = serializers.DecimalField(max_digits=10, decimal_places=3, read_only=True)
    gpu_utilization = serializers.SerializerMethodField(
        help_text="Average utilization (%) of the GPUs the workload's running pods hold now (the DCGM exporter's "
                  "DCGM_FI_DEV_GPU_UTIL through the cluster's Prometheus); null when unavailable.")
    gpu_metrics_unavailable = serializers.SerializerMethodField(
        help_text="Why gpu_utilization is null (e.g. \"Prometheus unreachable: connection refused\", \"no running "
                  "pod: the workload holds no GPU now\"), else null.")

    class Meta:
        model = Workload
        fields = ["id", "cluster", "namespace", "name", "uid", "project", "pools_tried", "placed_pool", "platform",
                  "phase", "pods", "gpus", "gpu_utilization", "gpu_metrics_unavailable", "priority_class", "priority",
                  "preemptible", "queue", "submitted_by", "created_in_cluster", "pending_reason", "provisioning"]
        read_only_fields = fields

    def get_gpu_utilization(self, obj) -> float | None:
        value = getattr(obj, "gpu_utilization", None)
        return None if value is None else round(value, 1)

    def get_gpu_metrics_unavailable(self, obj) -> str | None:
        if getattr(obj, "gpu_utilization", None) is not None:
            return None
        return getattr(obj, "gpu_metrics_reason", "") or "not loaded"

    def get_phase(self, obj) -> str:
        return selectors.display_phase(obj)

    def get_pending_reason(self, obj) -> str:
        return selectors.pending_reason(obj, self.context.get("waiting"), self.context.get("karpenter"))

    def get_provisioning(self, obj) -> dict | None:
        if selectors.display_phase(obj) != "Pending":
            return None
        found = (self.context.get("karpenter") or {}).get((obj.cluster_id, obj.namespace, obj.name))
        return found.as_dict() if found else None


@extend_schema_field({"oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}],
                      "description": "The command as a list of strings, or one line split as a shell would; at most "
                                     "65536 characters and 4096 words."})
class CommandField(serializers.Field):
    """A list of strings, or one shell-like line split as a shell would."""

    def to_internal_value(self, data):
        try:  # bounded (at most shell.MAX_COMMAND_CHARS), split in linear time
            return shell.command_from(data)
        except shell.CommandError as exc:
            raise serializers.ValidationError(str(exc)) from exc

    def to_representation(self, value):
        return value


class SubmitSerializer(serializers.Serializer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from projects.models import Project

        self.fields["project"] = RestrictedPrimaryKeyRelatedField(
            model=Project, help_text="The project's id (you need the researcher or project administrator role).")

    pools = serializers.ListField(child=serializers.CharField(max_length=63), required=False, max_length=100,
                                  help_text="Pool names in the order to try them; omitted: the project's priority "
                                            "list, then default.")
    platform = serializers.CharField(required=False, allow_blank=True, default="")
    image = serializers.CharField(max_length=512)
    command = CommandField(required=False, default=list)
    cpu = serializers.CharField(required=False, allow_blank=True, default="")
    memory = serializers.CharField(required=False, allow_blank=True, default="")
    gpus = serializers.IntegerField(required=False, default=0, min_value=0, max_value=64)
    storage = serializers.CharField(required=False, allow_blank=True, default="")
    priority_class = serializers.ChoiceField(choices=PRIORITY_CLASSES, default="train")
    pods = serializers.IntegerField(required=False, default=1, min_value=1, max_value=1000)
    name = serializers.CharField(required=False, allow_blank=True, default="", max_length=63)
    dry_run = serializers.BooleanField(required=False, default=False,
                                       help_text="Only run the steps and answer the Job it would create.")


class SubmittedSerializer(serializers.Serializer):
    name = serializers.CharField()
    namespace = serializers.CharField()
    pools = serializers.ListField(child=serializers.CharField())
    platform = serializers.CharField()
    dry_run = serializers.BooleanField()
    yaml = serializers.CharField()
    job = serializers.DictField()
    queued_in = serializers.CharField(help_text="The pool the scheduler queues it in (KAI Scheduler: the first "
                                                "pool of the list; empty otherwise).")
    scheduling = serializers.ListField(child=serializers.CharField(),
                                       help_text="How the cluster's scheduler will take the Job, in words.")


class UnreachableSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="Which cluster could not be reached, and why.")
