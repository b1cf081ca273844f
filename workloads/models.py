"""Workloads through pools (OSMO's flow): platforms inside a pool, pod templates, resource validation.

A pool's workload settings hold its default platform, its ordered common pod templates, its default
variables and its resource validation rule sets; each platform selects some of the pool's nodes (node
selector + tolerations), says what it allows (privileged, host network, host mounts) and adds its own
default variables, override templates and rule sets. Templates and rule sets are named per cluster.
The merge, substitution, node matching and validation themselves are pure functions in `engine.py`.
Below them: who may submit to a pool (`PoolAccess`) and the workloads mirrored from the Jobs (`Workload`).
"""
from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Exists, OuterRef
from django.utils import timezone

from access.rules import RestrictedQuerySet, access_q, is_system_admin
from kube import wellknown
from kube.labels import label_key_words, label_value_words
from kube.owners import BARE_POD
from nodepools.kube import is_preemptible
from nodepools.models import validate_dns1123_label
from projects.models import Project, ProjectNamespace
from workloads import engine, podsecurity


class PodSecurityLevel(models.TextChoices):
    """The Kubernetes Pod Security Standards' levels (workloads/podsecurity.py): the most a pod may do."""

    PRIVILEGED = podsecurity.PRIVILEGED, "privileged (no restriction)"
    BASELINE = podsecurity.BASELINE, "baseline (no known privilege escalation)"
    RESTRICTED = podsecurity.RESTRICTED, "restricted (hardened: non-root, no capabilities, seccomp)"


POD_SECURITY_HELP = ("The Pod Security Standards level the pods of its workloads may reach: privileged, baseline or "
                     "restricted (Kubernetes' definitions). Every submission's pod is checked against each control of "
                     "the level.")

# Template and rule-set names follow OSMO's (`default_user`, `l40s`, `default_cpu`): letters, digits,
# '-', '_', '.', starting and ending with a letter or digit, at most 63 characters.
CONFIG_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")


def validate_config_name(value: str) -> None:
    if len(value) > 63:
        raise ValidationError("must be no more than 63 characters", code="invalid")
    if not CONFIG_NAME_RE.match(value):
        raise ValidationError(
            "must consist of letters, digits, '-', '_' or '.', and start and end with a letter or digit "
            "(e.g. 'default_user', 'a100-nvlink')", code="invalid",
        )


def validate_node_selector(value) -> None:
    if not isinstance(value, dict):
        raise ValidationError("A node selector is a mapping of label key to value, e.g. {\"nvidia.com/gpu.product\": \"NVIDIA-A100\"}.")
    errors = []
    for key, label_value in value.items():
        if not isinstance(label_value, str):
            errors.append(f"{key}: a label value must be a string, not {type(label_value).__name__}.")
            continue
        errors += [f"{key}: {message}" for message in label_key_words(str(key))]
        errors += [f"{key}={label_value}: {message}" for message in label_value_words(label_value)]
    if errors:
        raise ValidationError(errors)


def validate_tolerations(value) -> None:
    if not isinstance(value, list):
        raise ValidationError("Tolerations are a list of Kubernetes tolerations {key, operator, value, effect}.")
    errors = []
    for index, toleration in enumerate(value):
        errors += [f"tolerations[{index}].{message}" for message in engine.toleration_errors(toleration)]
    if errors:
        raise ValidationError(errors)


def validate_mounts(value) -> None:
    if not isinstance(value, list) or not all(isinstance(path, str) for path in value):
        raise ValidationError("Allowed mounts are a list of host paths, e.g. [\"/data\"].")
    errors = [f"{path!r}: a host path must be absolute (start with '/')." for path in value if not path.startswith("/")]
    if errors:
        raise ValidationError(errors)


def validate_default_variables(value) -> None:
    errors = engine.default_variables_errors(value)
    if errors:
        raise ValidationError(errors)


def validate_pod_template_body(value) -> None:
    errors = engine.pod_template_errors(value)
    if errors:
        raise ValidationError(errors)


def validate_rules(value) -> None:
    try:
        engine.parse_rules(value)
    except engine.RuleError as exc:
        raise ValidationError(str(exc)) from exc


# ---------------------------------------------------------------------------------------------------
# Named per cluster: pod templates and rule sets


class ClusterConfigQuerySet(RestrictedQuerySet):
    access_level = "cluster"
    access_paths = {"cluster": ["cluster_id"]}


class PodTemplate(models.Model):
    """A named fragment of a Pod (`spec`, `metadata`), merged into workloads in the order pools and
    platforms list it; `{{ USER_* }}` and `{{ WF_* }}` variables are substituted."""

    cluster = models.ForeignKey("nodepools.Cluster", on_delete=models.CASCADE, related_name="pod_templates")
    name = models.CharField(max_length=63, validators=[validate_config_name])
    description = models.TextField(blank=True)
    body = models.JSONField(default=dict, blank=True, validators=[validate_pod_template_body])
    version = models.PositiveIntegerField(default=1, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = ClusterConfigQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="podtemplate_unique_name")]

    def __str__(self) -> str:
        return self.name


class ResourceValidationRuleSet(models.Model):
    """Named resource validation rules (OSMO's `resourceValidations`): each compares a user value with a
    number or a node value (`K8_*`) with GT, GE, LT, LE or EQ and says `assert_message` when it fails."""

    cluster = models.ForeignKey("nodepools.Cluster", on_delete=models.CASCADE, related_name="rule_sets")
    name = models.CharField(max_length=63, validators=[validate_config_name])
    description = models.TextField(blank=True)
    rules = models.JSONField(default=list, blank=True, validators=[validate_rules])
    version = models.PositiveIntegerField(default=1, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = ClusterConfigQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="rulesset_unique_name")]

    def __str__(self) -> str:
        return self.name

    def parsed_rules(self) -> list[engine.Rule]:
        return engine.parse_rules(self.rules)


# ---------------------------------------------------------------------------------------------------
# Pools and their platforms


class PoolConfigQuerySet(RestrictedQuerySet):
    access_level = "cluster"
    access_paths = {"cluster": ["pool__cluster_id"]}


class Platform(models.Model):
    """A kind of node inside a pool (OSMO): the pool's nodes matching its node selector whose taints its
    tolerations tolerate, with what workloads on it may do."""

    pool = models.ForeignKey("nodepools.NodePool", on_delete=models.CASCADE, related_name="platforms")
    name = models.CharField(max_length=63, validators=[validate_dns1123_label])
    description = models.TextField(blank=True)
    node_selector = models.JSONField(
        default=dict, blank=True, validators=[validate_node_selector],
        help_text="Label key → value every node of the platform carries, e.g. nvidia.com/gpu.product: NVIDIA-A100.",
    )
    tolerations = models.JSONField(
        default=list, blank=True, validators=[validate_tolerations],
        help_text="Kubernetes tolerations of the platform's workloads (for its nodes' NoSchedule/NoExecute taints).",
    )
    pod_security_level = models.CharField(max_length=16, choices=PodSecurityLevel, default=PodSecurityLevel.BASELINE,
                                          help_text=POD_SECURITY_HELP)
    # Finer allowances inside the `privileged` level (the only level that lets a pod have them at all).
    privileged_allowed = models.BooleanField(default=False)
    host_network_allowed = models.BooleanField(default=False)
    allowed_mounts = models.JSONField(default=list, blank=True, validators=[validate_mounts],
                                      help_text="Host paths workloads may mount.")
    default_variables = models.JSONField(default=dict, blank=True, validators=[validate_default_variables])
    override_templates = models.ManyToManyField(PodTemplate, through="PlatformTemplate", related_name="+", blank=True)
    rule_sets = models.ManyToManyField(ResourceValidationRuleSet, through="PlatformRuleSet", related_name="+", blank=True)
    version = models.PositiveIntegerField(default=1, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = PoolConfigQuerySet.as_manager()

    class Meta:
        ordering = ["pool__cluster__name", "pool__name", "name"]
        constraints = [models.UniqueConstraint(fields=["pool", "name"], name="platform_unique_name")]

    def __str__(self) -> str:
        return self.name

    def audit_scope(self, pk: int) -> tuple[int | None, int | None]:
        return self.pool.cluster_id, None

    def clean(self) -> None:
        """Privileged containers, host networking and host paths exist only at the level `privileged`: a
        platform of another level that allowed them would allow what its level forbids."""
        if self.pod_security_level == PodSecurityLevel.PRIVILEGED:
            return
        errors = {}
        level = self.pod_security_level
        if self.privileged_allowed:
            errors["privileged_allowed"] = (f"Privileged containers are allowed only at the pod security level "
                                            f"privileged; this platform's level is {level}.")
        if self.host_network_allowed:
            errors["host_network_allowed"] = (f"Host networking is allowed only at the pod security level privileged; "
                                              f"this platform's level is {level}.")
        if self.allowed_mounts:
            errors["allowed_mounts"] = (f"Host paths may be mounted only at the pod security level privileged; this "
                                        f"platform's level is {level}.")
        if errors:
            raise ValidationError(errors)

    def ordered_templates(self) -> list[PodTemplate]:
        return [link.template for link in self.template_links.select_related("template").order_by("position")]

    def ordered_rule_sets(self) -> list[ResourceValidationRuleSet]:
        return [link.rule_set for link in self.rule_set_links.select_related("rule_set").order_by("position")]


class PoolWorkloadSettings(models.Model):
    """What a pool adds to every workload: its default platform, common pod templates (in order),
    default variables and resource validation rule sets (OSMO's `common_*` fields)."""

    pool = models.OneToOneField("nodepools.NodePool", on_delete=models.CASCADE, related_name="workload_settings")
    default_platform = models.ForeignKey(Platform, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The level of submissions to the pool without a platform, and the level a new platform starts at.
    pod_security_level = models.CharField(max_length=16, choices=PodSecurityLevel, default=PodSecurityLevel.BASELINE,
                                          help_text=POD_SECURITY_HELP)
    default_variables = models.JSONField(default=dict, blank=True, validators=[validate_default_variables])
    common_templates = models.ManyToManyField(PodTemplate, through="PoolTemplate", related_name="+", blank=True)
    rule_sets = models.ManyToManyField(ResourceValidationRuleSet, through="PoolRuleSet", related_name="+", blank=True)
    version = models.PositiveIntegerField(default=1, editable=False)
    updated = models.DateTimeField(auto_now=True)

    objects = PoolConfigQuerySet.as_manager()

    class Meta:
        verbose_name = "pool workload settings"
        verbose_name_plural = "pool workload settings"

    def __str__(self) -> str:
        return f"workload settings of {self.pool}"

    def audit_scope(self, pk: int) -> tuple[int | None, int | None]:
        return self.pool.cluster_id, None

    def clean(self) -> None:
        if self.default_platform_id and self.default_platform.pool_id != self.pool_id:
            raise ValidationError({"default_platform": "The default platform must be one of this pool's platforms."})

    def ordered_templates(self) -> list[PodTemplate]:
        return [link.template for link in self.template_links.select_related("template").order_by("position")]

    def ordered_rule_sets(self) -> list[ResourceValidationRuleSet]:
        return [link.rule_set for link in self.rule_set_links.select_related("rule_set").order_by("position")]


# Ordered lists: one row per place (position 0 first). The services refuse to delete a template or
# rule set in use (naming the pools and platforms using it).

class PoolTemplate(models.Model):
    settings = models.ForeignKey(PoolWorkloadSettings, on_delete=models.CASCADE, related_name="template_links")
    template = models.ForeignKey(PodTemplate, on_delete=models.CASCADE, related_name="pool_links")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["settings", "template"], name="pooltemplate_once")]


class PlatformTemplate(models.Model):
    platform = models.ForeignKey(Platform, on_delete=models.CASCADE, related_name="template_links")
    template = models.ForeignKey(PodTemplate, on_delete=models.CASCADE, related_name="platform_links")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["platform", "template"], name="platformtemplate_once")]


class PoolRuleSet(models.Model):
    settings = models.ForeignKey(PoolWorkloadSettings, on_delete=models.CASCADE, related_name="rule_set_links")
    rule_set = models.ForeignKey(ResourceValidationRuleSet, on_delete=models.CASCADE, related_name="pool_links")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["settings", "rule_set"], name="poolruleset_once")]


class PlatformRuleSet(models.Model):
    platform = models.ForeignKey(Platform, on_delete=models.CASCADE, related_name="rule_set_links")
    rule_set = models.ForeignKey(ResourceValidationRuleSet, on_delete=models.CASCADE, related_name="platform_links")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["platform", "rule_set"], name="platformruleset_once")]


# ---------------------------------------------------------------------------------------------------
# Pool access (who may submit to a pool) and the workloads mirrored from the clusters' Jobs


class PoolAccessQuerySet(RestrictedQuerySet):
    """Read with the pool (anyone with a role in its cluster); changed by system administrators and
    department administrators of the whole cluster ("cluster administrators")."""

    access_level = "cluster"
    access_paths = {"cluster": ["pool__cluster_id"]}

    def restrict(self, user: Any, action: str = "view") -> "PoolAccessQuerySet":
        permission = "nodepool.view" if action == "view" else f"poolaccess.{action}"
        return self.filter(access_q(user, type(self), permission))


class PoolAccess(models.Model):
    """Who may submit workloads to one pool (OSMO's pool roles, docs/concepts.md#roles). No row: open to every
    project of the pool's cluster, not in maintenance."""

    pool = models.OneToOneField("nodepools.NodePool", on_delete=models.CASCADE, related_name="access")
    open_to_cluster = models.BooleanField(
        "open to all projects of the cluster", default=True,
        help_text="Off: only the departments, projects and groups listed below may submit.")
    departments = models.ManyToManyField("projects.Department", blank=True, related_name="+")
    projects = models.ManyToManyField("projects.Project", blank=True, related_name="+")
    groups = models.ManyToManyField("auth.Group", blank=True, related_name="+")
    maintenance = models.BooleanField(
        default=False, help_text="Refuse new workloads, except from system administrators.")
    maintenance_note = models.CharField(max_length=255, blank=True)
    version = models.PositiveIntegerField(default=1, editable=False)
    updated = models.DateTimeField(auto_now=True)

    objects = PoolAccessQuerySet.as_manager()

    def __str__(self) -> str:
        return f"access to {self.pool}"

    def audit_scope(self, pk: int) -> tuple[int | None, int | None]:
        return self.pool.cluster_id, None


JOB_KIND = "Job"


class WorkloadQuerySet(RestrictedQuerySet):
    """A workload belongs to the project owning its namespace. Seeing one is `project.view` on that
    project; stopping one is `project.submit` (researchers, project administrators and above)."""

    access_level = "project"
    access_paths = {}

    def restrict(self, user: Any, action: str = "view") -> "WorkloadQuerySet":
        if is_system_admin(user):
            return self.all()

        projects = Project.objects.restrict(user, "view" if action == "view" else "submit")
        owned = ProjectNamespace.objects.filter(cluster_id=OuterRef("cluster_id"), name=OuterRef("namespace"),
                                                project__in=projects.values("pk"))
        return self.filter(Exists(owned))


class Workload(models.Model):
    """A `batch/v1` Job mirrored by the sync (the cluster is its source of truth): what was asked
    (pools tried, platform, GPUs, priority class — from the console's annotations and the pod
    template) and what became of it (phase from the Job's status and conditions)."""

    cluster = models.ForeignKey("nodepools.Cluster", on_delete=models.CASCADE, related_name="workloads")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    pools_tried = models.JSONField(default=list, blank=True)
    platform = models.CharField(max_length=63, blank=True)
    priority_class = models.CharField(max_length=253, blank=True)
    priority = models.IntegerField(null=True, blank=True)
    pods = models.PositiveIntegerField(default=1)
    gpus = models.DecimalField(max_digits=10, decimal_places=3, default=0)  # all pods together
    # What one pod asks of GPUs, node-independent (kube.gpu.request_record of the pod template): whole GPUs, a
    # MIG profile's slices, a KAI fraction — what its start estimate judges the nodes by.
    gpu_request = models.JSONField(default=dict, blank=True)
    phase = models.CharField(max_length=16, blank=True)
    # Why the Job waits or failed, in the cluster's words (a condition's message), when it says.
    status_message = models.TextField(blank=True)
    queue = models.CharField(max_length=253, blank=True)
    submitted_by = models.CharField(max_length=150, blank=True)
    created_in_cluster = models.DateTimeField(null=True, blank=True)
    resource_version = models.CharField(max_length=32, blank=True)
    # When it ran (the start estimates read run times from finished workloads): the Job's status.startTime
    # (when the Job controller started it; for a Kueue Job, when it was admitted), the time it finished
    # (status.completionTime, else the Complete/Failed condition's time), and spec.activeDeadlineSeconds.
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    active_deadline_seconds = models.PositiveIntegerField(null=True, blank=True)
    # The pod template's schedulerName ("" for the default scheduler; "kai-scheduler").
    scheduler_name = models.CharField(max_length=253, blank=True)
    # When the sync saw its Job leave the cluster (stopped, deleted, or removed after it finished): the row
    # stays, with its page and its timeline; its phase becomes Stopped unless it had finished.
    gone_at = models.DateTimeField(null=True, blank=True)
    # What it is and who made it: "Job" for a Job (the console's or another's); for pods no Job owns, the kind
    # of their controller ("ReplicaSet", "StatefulSet", ...) or "Pod" for a bare pod, its pods together in one
    # row named after that controller (or the pod). `owner`: its own controller as "Kind/name" ("" none).
    # `by_console`: submitted through the console (its annotations on the Job).
    kind = models.CharField(max_length=63, default="Job")
    owner = models.CharField(max_length=320, blank=True)
    by_console = models.BooleanField(default=False)
    updated = models.DateTimeField(auto_now=True)

    objects = WorkloadQuerySet.as_manager()

    class Meta:
        ordering = ["-created_in_cluster", "namespace", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="workload_unique_name")]
        indexes = [
            # The workloads list's default order (newest first): its first page read in that order, up to its
            # rows, not every workload read and sorted.
            models.Index(fields=["created_in_cluster"], name="workload_created"),
            # The waiting workloads of a scheduler's queues (KAI's queue order: a row's place among its peers).
            models.Index(fields=["cluster", "phase", "queue"], name="workload_phase_queue"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def audit_scope(self, pk: Any) -> tuple[int | None, int | None]:
        department = (ProjectNamespace.objects.filter(cluster_id=self.cluster_id, name=self.namespace)
                      .values_list("project__department_id", flat=True).first())
        return self.cluster_id, department

    @property
    def preemptible(self) -> bool | None:
        return None if self.priority is None else is_preemptible(self.priority)

    @property
    def is_job(self) -> bool:
        return self.kind == JOB_KIND

    @property
    def origin_mark(self) -> str:
        """The short mark of a workload the console did not submit, beside its name in the list: the pods no Job
        owns ("bare pod", "ReplicaSet") and a Job of another controller ("Job of CronJob/nightly"), each "· not
        submitted by the console"; "" for the console's and for a plain Job (its origin says the rest)."""
        if self.by_console or (self.kind == JOB_KIND and not self.owner):
            return ""
        what = "bare pod" if self.kind == BARE_POD else (f"Job of {self.owner}" if self.kind == JOB_KIND else self.kind)
        return f"{what} · not submitted by the console"

    @property
    def origin(self) -> str:
        """Who made it, in words: the console, or what else (its kind, its owner, its scheduler)."""
        if self.by_console:
            return "submitted by the console"
        scheduler = self.scheduler_name or wellknown.DEFAULT_SCHEDULER_NAME
        if self.kind == BARE_POD:
            what = "a bare pod (no owner)"
        elif self.kind == JOB_KIND:
            what = f"a Job ({'owner ' + self.owner if self.owner else 'no owner'})"
        else:
            what = f"pods of {self.kind} {self.name}"
        return f"not submitted by the console: {what}, scheduler {scheduler}"


# ---------------------------------------------------------------------------------------------------
# What the scheduler decided: KAI PodGroups, Kueue Workloads and KAI's eviction events, mirrored by the
# sync (workloads/sync.py; optional registrations: a cluster without the CRD stays connected). Rows are
# read with the Workload (Job) they belong to, so seeing one is seeing that Job.


class _ScheduledQuerySet(RestrictedQuerySet):
    """Like WorkloadQuerySet: a row belongs to the project owning its namespace."""

    access_level = "project"
    access_paths = {}

    def restrict(self, user: Any, action: str = "view") -> "_ScheduledQuerySet":
        if is_system_admin(user):
            return self.all()

        projects = Project.objects.restrict(user, "view")
        owned = ProjectNamespace.objects.filter(cluster_id=OuterRef("cluster_id"), name=OuterRef("namespace"),
                                                project__in=projects.values("pk"))
        return self.filter(Exists(owned))


class _Mirrored(models.Model):
    """A namespaced object of a cluster the sync mirrors for the workloads (key: cluster, namespace, name)."""

    cluster = models.ForeignKey("nodepools.Cluster", on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    resource_version = models.CharField(max_length=32, blank=True)
    updated = models.DateTimeField(auto_now=True)

    objects = _ScheduledQuerySet.as_manager()

    class Meta:
        abstract = True
        ordering = ["cluster", "namespace", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="%(class)s_unique_name")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class PodGroup(_Mirrored):
    """A KAI Scheduler PodGroup (`scheduling.run.ai/v2alpha2`): KAI's pod grouper makes one per batch Job
    (`pg-<job>-<uid>`, its pods together: `minMember`; older KAI one per pod), owned by the Job. Its `status.schedulingConditions` say why KAI
    could not place it (`UnschedulableOnNodePool`, with `reasons` such as OverLimit,
    NonPreemptibleOverQuota, PodSchedulingErrors, QueueDoesNotExist); `status.resourcesStatus` what it
    asks and holds."""

    job_name = models.CharField(max_length=253, blank=True)  # its owner, when a batch/v1 Job
    job_uid = models.CharField(max_length=64, blank=True)
    queue = models.CharField(max_length=253, blank=True)
    priority_class = models.CharField(max_length=253, blank=True)
    min_member = models.PositiveIntegerField(default=1)
    node_pool = models.CharField(max_length=63, blank=True)  # the console's pool label it carries
    gpus_requested = models.DecimalField(max_digits=10, decimal_places=3, default=0)
    gpus_allocated = models.DecimalField(max_digits=10, decimal_places=3, default=0)
    # Asks for more than it holds (resourcesStatus.requested above allocated): a pod of it waits.
    waiting = models.BooleanField(default=False)
    # The latest scheduling condition (UnschedulableOnNodePool): its first reason and its message.
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    condition_time = models.DateTimeField(null=True, blank=True)
    conditions = models.JSONField(default=list, blank=True)
    created_in_cluster = models.DateTimeField(null=True, blank=True)

    class Meta(_Mirrored.Meta):
        indexes = [models.Index(fields=["cluster", "namespace", "job_name"])]

    @property
    def condition_in_words(self) -> str:
        """Its latest scheduling condition as a person reads it: the reason once (KAI's message often starts
        with it); while the group runs (it waits for nothing), said as what it was, not what is."""
        said = self.message or ""
        if self.reason and not said.startswith(self.reason):
            said = f"{self.reason}: {said}" if said else self.reason
        if not said:
            return "—"
        if self.waiting:
            return said
        when = f" at {timezone.localtime(self.condition_time):%Y-%m-%d %H:%M:%S}" if self.condition_time else ""
        return f"Not current — it was placed since. Before{when}: {said}"


class KueueWorkload(_Mirrored):
    """A Kueue Workload (`kueue.x-k8s.io/v1beta2`), one per queued Job: whether its quota is reserved and it
    is admitted (and in which ClusterQueue), why not (`QuotaReserved=False`: its reason and message), and
    whether it was evicted or preempted (the `Evicted` / `Preempted` conditions: by whom, in the message)."""

    job_name = models.CharField(max_length=253, blank=True)
    job_uid = models.CharField(max_length=64, blank=True)
    queue_name = models.CharField(max_length=253, blank=True)  # the LocalQueue
    cluster_queue = models.CharField(max_length=253, blank=True)  # of its admission
    priority = models.IntegerField(null=True, blank=True)
    priority_class = models.CharField(max_length=253, blank=True)
    quota_reserved = models.BooleanField(default=False)
    admitted = models.BooleanField(default=False)
    finished = models.BooleanField(default=False)
    pending_reason = models.CharField(max_length=64, blank=True)
    pending_message = models.TextField(blank=True)
    evicted_reason = models.CharField(max_length=64, blank=True)
    evicted_message = models.TextField(blank=True)
    evicted_now = models.BooleanField(default=False)
    evicted_at = models.DateTimeField(null=True, blank=True)
    conditions = models.JSONField(default=list, blank=True)
    created_in_cluster = models.DateTimeField(null=True, blank=True)

    class Meta(_Mirrored.Meta):
        indexes = [models.Index(fields=["cluster", "namespace", "job_name"])]


class SchedulerEvent(_Mirrored):
    """An Event a scheduler wrote about one of its objects and the console reads back: KAI's `Evict` event
    on a PodGroup, naming the PodGroup that preempted or reclaimed it (annotations
    `evictor-pod-group-name`/`-namespace`, `evictor-action-type`)."""

    involved_kind = models.CharField(max_length=63, blank=True)
    involved_name = models.CharField(max_length=253, blank=True)
    reason = models.CharField(max_length=128, blank=True)
    message = models.TextField(blank=True)
    type = models.CharField(max_length=16, blank=True)
    component = models.CharField(max_length=128, blank=True)
    count = models.PositiveIntegerField(default=1)
    annotations = models.JSONField(default=dict, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)

    class Meta(_Mirrored.Meta):
        indexes = [models.Index(fields=["cluster", "namespace", "involved_name"])]

    def __str__(self) -> str:
        return f"{self.reason} {self.involved_kind} {self.namespace}/{self.involved_name}"

    @property
    def evictor(self) -> str:
        """The evicting PodGroup ("namespace/name") KAI's evictor names, or ""."""
        name = (self.annotations or {}).get("evictor-pod-group-name") or ""
        namespace = (self.annotations or {}).get("evictor-pod-group-namespace") or self.namespace
        return f"{namespace}/{name}" if name else ""

    @property
    def evictor_action(self) -> str:
        return (self.annotations or {}).get("evictor-action-type") or ""


# ---------------------------------------------------------------------------------------------------
# A workload's timeline: what the console did to it (stopping, with who) and what the sync saw become of
# it (submitted, admitted, started, preempted by whom, ran again, finished, gone from the cluster). Keyed by
# the Job's cluster, namespace and name, so that it outlives the Job.


class WorkloadEventKind(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    ADMITTED = "admitted", "Admitted"
    STARTED = "started", "Started"
    PREEMPTED = "preempted", "Preempted"
    STOP_REQUESTED = "stop_requested", "Stopped"
    SUCCEEDED = "succeeded", "Finished"
    FAILED = "failed", "Failed"
    GONE = "gone", "Left the cluster"


class WorkloadEvent(models.Model):
    """One moment of a workload's life. `stop_requested` is written by the console (its actor is the
    person); the others by the sync, from what the cluster says (their actor is whom the cluster names:
    the submitter's annotation, the preemptor)."""

    cluster = models.ForeignKey("nodepools.Cluster", on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    job_uid = models.CharField(max_length=64, blank=True)
    kind = models.CharField(max_length=16, choices=WorkloadEventKind)
    at = models.DateTimeField()
    actor = models.CharField(max_length=253, blank=True)
    detail = models.TextField(blank=True)

    objects = _ScheduledQuerySet.as_manager()

    class Meta:
        ordering = ["at", "pk"]
        indexes = [models.Index(fields=["cluster", "namespace", "name"])]
        constraints = [models.UniqueConstraint(fields=["cluster", "namespace", "name", "job_uid", "kind", "at"],
                                               name="workloadevent_once")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} {self.kind} {self.at:%Y-%m-%d %H:%M:%S}"
