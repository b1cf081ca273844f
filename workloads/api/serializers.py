"""Platforms, pod templates and rule sets in the API. Input is handed to the services, which validate
it (a bad value: 400 naming the field); `version` on a change is the version read (409 when stale)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.fields import StrictDecimalField, StrictIntegerField
from common.api import ModelSerializer, DocumentField, RestrictedPrimaryKeyRelatedField
from nodepools.models import Cluster, NodePool
from projects import waiting
from projects.api.fit import FragmentationSerializer, RoomSerializer
from projects.models import Project
from workloads import selectors, shell
from workloads.models import Platform, PodSecurityLevel, PodTemplate, ResourceValidationRuleSet, Workload, WorkloadEventKind
from workloads.submission import PRIORITY_CLASSES


def _names():
    return serializers.ListField(child=serializers.CharField(max_length=63), required=False, max_length=100)


class PlatformSerializer(ModelSerializer):
    pool_name = serializers.CharField(source="pool.name", read_only=True)
    cluster = StrictIntegerField(source="pool.cluster_id", read_only=True)
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
    version = StrictIntegerField(required=False, min_value=0, max_value=2**31 - 1,
                                       help_text="The version read; a change made meanwhile is refused (409).")


class PodTemplateSerializer(ModelSerializer):
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
    version = StrictIntegerField(required=False, min_value=0, max_value=2**31 - 1)


class RuleSetSerializer(ModelSerializer):
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
    version = StrictIntegerField(required=False, min_value=0, max_value=2**31 - 1)


# ---------------------------------------------------------------------------------------------------
# Submission side (pool access, submitting, the workloads table)
class SchedulerReasonSerializer(serializers.Serializer):
    scheduler = serializers.CharField(help_text="kai-scheduler, kueue or default-scheduler.")
    reason = serializers.CharField(help_text="The scheduler's reason (OverLimit, NonPreemptibleOverQuota, "
                                             "PodSchedulingErrors, Pending, Unschedulable, ...).")
    category = serializers.CharField(help_text="What it waits for: limit, non_preemptible_quota, capacity, queue, "
                                               "gang, admission or schedulable.")
    message = serializers.CharField()
    source = serializers.CharField(help_text="Where it was read (a PodGroup's condition, the Kueue Workload's "
                                             "QuotaReserved condition, a pod's PodScheduled condition).")


class WhyWaitingSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="The console's reason (projects.waiting): over_limit, over_quota_off, "
                                           "non_preemptible_over_quota, no_node_fits, pool_full, schedulable.")
    category = serializers.CharField(help_text="Its category, in the scheduler's vocabulary.")
    explanation = serializers.CharField()


class PreemptionSerializer(serializers.Serializer):
    scheduler = serializers.CharField()
    action = serializers.CharField(help_text="KAI: reclaim or preempt; Kueue: the Preempted condition's reason "
                                             "(InClusterQueue, InCohortReclamation, ...).")
    by = serializers.CharField(allow_null=True, help_text="namespace/name of the workload that preempted it, when "
                                                          "you may see it.")
    by_project = serializers.CharField(allow_null=True)
    by_id = StrictIntegerField(allow_null=True)
    message = serializers.CharField(help_text="The scheduler's words.")
    at = serializers.DateTimeField(allow_null=True)
    still_waiting = serializers.BooleanField(help_text="It has not run again since.")
    text = serializers.CharField()


class QueuePositionSerializer(serializers.Serializer):
    queue = serializers.CharField()
    position = StrictIntegerField(allow_null=True, help_text="1-based, in its queue (Kueue: its "
                                                                   "ClusterQueue; KAI: its project's queue).")
    of = StrictIntegerField(allow_null=True)
    local_position = StrictIntegerField(allow_null=True, help_text="Kueue: in its LocalQueue.")
    queue_turn = StrictIntegerField(allow_null=True, help_text="KAI: its queue's turn among the pool's "
                                                                     "queues with pending work.")
    queues = StrictIntegerField(allow_null=True)
    pool = serializers.CharField(allow_null=True)
    source = serializers.CharField(help_text="kueue (the visibility API) or console (the console's reading of "
                                             "KAI's order).")
    error = serializers.CharField(allow_null=True)
    text = serializers.CharField()


class EstimateSerializer(serializers.Serializer):
    earliest_seconds = StrictIntegerField(allow_null=True, help_text="Seconds from now; null: no estimate.")
    latest_seconds = StrictIntegerField(allow_null=True)
    ahead_in_queue = StrictIntegerField()
    basis = serializers.CharField(help_text="Its basis in words, or why there is no estimate.")
    text = serializers.CharField(help_text='e.g. "in 40–70 min: 3 workloads ahead in the queue; …".')


class WorkloadSerializer(ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    project = serializers.CharField(source="project_name", read_only=True, allow_null=True)
    placed_pool = serializers.CharField(read_only=True, allow_null=True)
    phase = serializers.SerializerMethodField()
    preemptible = serializers.BooleanField(read_only=True, allow_null=True)
    pending_reason = serializers.SerializerMethodField(
        help_text="Why it waits, in words: the scheduler's own first, then the console's answer to \"Why is it "
                  "waiting?\", then, in a cluster with Karpenter NodePools, what Karpenter can do for its pending pod.")
    scheduler_reason = serializers.SerializerMethodField(
        help_text="The scheduler's own reason, from its status (Kueue Workload, KAI PodGroup, pod conditions); "
                  "null when it says nothing or the workload does not wait.")
    why_waiting = serializers.SerializerMethodField(
        help_text="The console's answer for the workload's request (quotas, limits, nodes); null when it does not "
                  "wait or asks no GPU.")
    waiting_category = serializers.SerializerMethodField(
        help_text="What it waits for: the scheduler's category, else the console's; null when it does not wait.")
    preempted_by = serializers.SerializerMethodField(
        help_text="The last time it was preempted or evicted, and by whom; null when never.")
    queue_position = serializers.SerializerMethodField(
        help_text="Its place in its queue while it waits (Kueue: the visibility API; KAI: the console's reading "
                  "of KAI's order); null when not known.")
    provisioning = serializers.SerializerMethodField(
        help_text="For a pending workload in a cluster with Karpenter NodePools: what Karpenter can do for its "
                  "first pending pod (as /api/v1/clusters/{id}/pods/{namespace}/{name}/provisioning/ gives it: "
                  "each NodePool's first reason, the NodeClaim launched for it), with how many of its pods are "
                  "pending; else null.")
    start_estimate = serializers.SerializerMethodField(
        help_text="For a waiting workload: when it may start (seconds from now, a range) and the basis in words, or "
                  "no estimate and why (earliest_seconds null); null when it does not wait.")
    gpus = StrictDecimalField(max_digits=10, decimal_places=3, read_only=True)
    gpus_held = StrictDecimalField(
        max_digits=14, decimal_places=3, read_only=True,
        help_text="The GPUs its pods hold now (bound, not finished): a project's workloads add up to its allocated GPUs.")
    kind = serializers.CharField(read_only=True, help_text="Job, or for pods no Job owns their controller's kind "
                                                           "(ReplicaSet, StatefulSet, ...) or Pod for a bare pod.")
    owner = serializers.CharField(read_only=True, help_text="Its controller as Kind/name (ownerReferences), or \"\".")
    by_console = serializers.BooleanField(read_only=True, help_text="Submitted through the console.")
    origin = serializers.CharField(read_only=True, help_text="Who made it, in words (kind, owner, scheduler).")
    gpu_utilization = serializers.SerializerMethodField(
        help_text="Average utilization (%) of the GPUs the workload's running pods hold now (the DCGM exporter's "
                  "DCGM_FI_DEV_GPU_UTIL, a MIG instance's DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100, through the cluster's "
                  "Prometheus); null when unavailable.")
    gpu_metrics_unavailable = serializers.SerializerMethodField(
        help_text="Why gpu_utilization is null (e.g. \"Prometheus unreachable: connection refused\", \"no running "
                  "pod: the workload holds no GPU now\"), else null.")

    class Meta:
        model = Workload
        fields = ["id", "cluster", "namespace", "name", "uid", "project", "pools_tried", "placed_pool", "platform",
                  "phase", "pods", "gpus", "gpu_utilization", "gpu_metrics_unavailable", "priority_class", "priority",
                  "preemptible", "queue", "scheduler_name", "submitted_by", "created_in_cluster", "pending_reason",
                  "scheduler_reason", "why_waiting", "waiting_category", "queue_position", "preempted_by",
                  "provisioning", "start_estimate", "gone_at", "kind", "owner", "by_console", "origin", "gpus_held"]
        read_only_fields = fields

    def _enriched(self, obj):
        if not hasattr(obj, "decision_reason"):
            selectors.workloads_enrich([obj], user=self.context["request"].user)
        return obj

    @extend_schema_field(EstimateSerializer(allow_null=True))
    def get_start_estimate(self, obj):
        found = getattr(self._enriched(obj), "start_estimate", None)
        return found.as_dict() if found is not None else None

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
        return selectors.pending_reason(self._enriched(obj))

    @extend_schema_field(SchedulerReasonSerializer(allow_null=True))
    def get_scheduler_reason(self, obj):
        found = self._enriched(obj).decision_reason
        return found.as_dict() if found is not None else None

    @extend_schema_field(WhyWaitingSerializer(allow_null=True))
    def get_why_waiting(self, obj):
        found = self._enriched(obj).decision_why
        if found is None:
            return None
        return {"code": found.code, "category": waiting.console_category(found.code), "explanation": found.text}

    def get_waiting_category(self, obj) -> str | None:
        obj = self._enriched(obj)
        if not selectors.is_waiting(obj):
            return None
        if obj.decision_reason is not None:
            return obj.decision_reason.category
        return waiting.console_category(obj.decision_why.code) if obj.decision_why is not None else None

    @extend_schema_field(PreemptionSerializer(allow_null=True))
    def get_preempted_by(self, obj):
        found = self._enriched(obj).decision_preemption
        return {**found.as_dict(), "text": found.in_words()} if found is not None else None

    @extend_schema_field(QueuePositionSerializer(allow_null=True))
    def get_queue_position(self, obj):
        found = self._enriched(obj).decision_position
        return {**found.as_dict(), "text": found.in_words()} if found is not None else None

    def get_provisioning(self, obj) -> dict | None:
        obj = self._enriched(obj)
        if selectors.display_phase(obj) != "Pending":
            return None
        found = getattr(obj, "karpenter_wait", None)
        return found.as_dict() if found else None


class TimelineEntrySerializer(serializers.Serializer):
    """One event of a workload's timeline: read only (the console and the sync write them)."""

    at = serializers.DateTimeField(read_only=True)
    kind = serializers.ChoiceField(choices=WorkloadEventKind.choices, read_only=True)
    what = serializers.CharField(help_text="In words: \"Submitted by alice\", \"Preempted by rnd-b/serve\", \"Ran "
                                           "again\", \"Stopped by bob\".", read_only=True)
    detail = serializers.CharField(help_text="The cluster's words, when it said some (e.g. the preemption's message).",
                                   read_only=True)
    by_workload = serializers.IntegerField(allow_null=True, read_only=True,
                                           help_text="The preemptor's workload id, if you may see it.")


class WorkloadDetailSerializer(WorkloadSerializer):
    timeline = serializers.SerializerMethodField(
        help_text="What became of it, oldest first: submitted (by whom), admitted, started, preempted (by whom), ran "
                  "again, finished or failed, stopped (by whom) and when its Job left the cluster.")

    class Meta(WorkloadSerializer.Meta):
        fields = [*WorkloadSerializer.Meta.fields, "timeline"]
        read_only_fields = fields

    @extend_schema_field(TimelineEntrySerializer(many=True))
    def get_timeline(self, obj):
        return [entry.as_dict() for entry in selectors.workload_timeline(obj, user=self.context["request"].user)]


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
    gpus = StrictIntegerField(required=False, default=0, min_value=0, max_value=64,
                                    help_text="Whole GPUs per pod, or MIG slices per pod with gpu_profile.")
    gpu_profile = serializers.CharField(required=False, allow_blank=True, default="", max_length=32,
                                        help_text="A MIG profile (e.g. 1g.10gb): each pod asks `gpus` slices of it "
                                                  "(nvidia.com/mig-<profile>); refused when no node of the pools "
                                                  "publishes it.")
    gpu_fraction = serializers.CharField(required=False, allow_blank=True, default="", max_length=16,
                                         help_text="A share of one GPU per pod (KAI Scheduler's gpu-fraction, e.g. "
                                                   "0.5); refused when the pools have no whole GPU to share.")
    storage = serializers.CharField(required=False, allow_blank=True, default="")
    priority_class = serializers.ChoiceField(choices=PRIORITY_CLASSES, default="train")
    pods = StrictIntegerField(required=False, default=1, min_value=1, max_value=1000)
    name = serializers.CharField(required=False, allow_blank=True, default="", max_length=63)
    active_deadline_seconds = StrictIntegerField(
        required=False, allow_null=True, default=None, min_value=60, max_value=30 * 24 * 3600,
        help_text="The most it may run, in seconds (the Job's activeDeadlineSeconds); omitted: no limit.")
    dry_run = serializers.BooleanField(required=False, default=False,
                                       help_text="Only run the steps and answer the Job it would create, and whether "
                                                 "it would start now, wait (for what) or never fit (`verdict`).")


class OverQuotaOwnerSerializer(serializers.Serializer):
    owner = serializers.CharField()
    gpus_over_deserved = StrictDecimalField(max_digits=14, decimal_places=3)


class KarpenterAnswerSerializer(serializers.Serializer):
    can_launch = serializers.BooleanField()
    nodepool = serializers.CharField(allow_null=True)
    explanation = serializers.CharField()


class OtherPoolSerializer(serializers.Serializer):
    pool = serializers.CharField()
    verdict = serializers.CharField()
    headline = serializers.CharField()


class VerdictSerializer(serializers.Serializer):
    """The dry run: would it start now, wait (for quota, capacity, a node Karpenter launches) or never fit."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

        self.fields["room"] = RoomSerializer(allow_null=True, help_text="What the scheduler would take for it.")
        self.fields["fragmentation"] = FragmentationSerializer(allow_null=True)

    verdict = serializers.ChoiceField(choices=["starts_now", "waits_for_quota", "waits_for_capacity", "waits_for_node",
                                               "never_fits"])
    title = serializers.CharField()
    headline = serializers.CharField()
    reasons = serializers.ListField(child=serializers.CharField())
    cause = serializers.CharField(help_text="fits, reclaim, preempt, limit, over_quota_off, non_preemptible, "
                                            "fair_share, capacity, not_ready, karpenter, too_big")
    pool = serializers.CharField()
    pods = StrictIntegerField()
    pods_that_start_now = StrictIntegerField()
    borrowers = OverQuotaOwnerSerializer(many=True)
    karpenter = KarpenterAnswerSerializer(allow_null=True)
    scheduler = serializers.CharField()
    start_estimate = EstimateSerializer(allow_null=True)
    other_pools = OtherPoolSerializer(many=True)


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
    verdict = VerdictSerializer(required=False, allow_null=True,
                                help_text="With dry_run: whether it would start now against the cluster as it is.")


class UnreachableSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="Which cluster could not be reached, and why.")
