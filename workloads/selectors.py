"""Reads of platforms, pool settings, templates and rule sets, always through `restrict(user, ...)`.

`node_views` turns mirrored nodes into the engine's NodeView (free = allocatable minus the requests
of the pods running there); `platform_config` gathers everything the submission steps need for one
platform (templates in merge order, default variables, rules, node selector, tolerations, nodes).
Below them, the submission's facts (the platform plan, pool targets, the enforcer) and the workloads table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Count, DecimalField, Exists, F, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from enforcers.models import Enforcement
from gpumetrics import NOT_CONFIGURED, Unavailable, pod_gpu_metrics
from kube.taints import common_taints
from nodepools import capacity
from nodepools.models import Cluster, Node, NodePool, Pod
from nodepools.selectors import NO_BUDGET, GpuBudget, cluster_prometheus
from projects import waiting
from projects.models import Project, ProjectNamespace
from provisioning.models import backing_name
from provisioning.pending import pods_explained
from workloads import engine, podsecurity, render
from workloads.models import (
    KueueWorkload,
    Platform,
    PodGroup,
    PodTemplate,
    PoolWorkloadSettings,
    ResourceValidationRuleSet,
    SchedulerEvent,
    Workload,
    WorkloadEvent,
    WorkloadEventKind,
)

Key = tuple[int, str, str]
from workloads.rules import pools_open_q


def platform_list(*, user: Any) -> Any:
    return Platform.objects.restrict(user, "view").select_related("pool__cluster")


def pod_template_list(*, user: Any) -> Any:
    return PodTemplate.objects.restrict(user, "view").select_related("cluster")


def rule_set_list(*, user: Any) -> Any:
    return ResourceValidationRuleSet.objects.restrict(user, "view").select_related("cluster")


def pool_settings(*, pool: NodePool) -> PoolWorkloadSettings:
    """The pool's workload settings (an unsaved empty one when none were saved yet)."""
    return PoolWorkloadSettings.objects.filter(pool=pool).select_related("default_platform").first() or \
        PoolWorkloadSettings(pool=pool)


def _ordered(settings: PoolWorkloadSettings, kind: str) -> list:
    if settings.pk is None:
        return []
    return settings.ordered_templates() if kind == "templates" else settings.ordered_rule_sets()


# ---------------------------------------------------------------------------------------------------
# Nodes as the engine sees them

def node_views(nodes_queryset: Any) -> list[engine.NodeView]:
    """NodeViews of these nodes: free CPU, memory and GPUs = allocatable minus the requests of the active
    pods on the node (never below zero); free ephemeral storage likewise (K8_STORAGE)."""
    gpu = DecimalField(max_digits=14, decimal_places=3)
    pods = Pod.objects.active().filter(node=OuterRef("pk")).order_by().values("node")

    def used(expr: str, output=None):
        kwargs = {"output_field": output} if output is not None else {}
        return Coalesce(Subquery(pods.annotate(v=Sum(expr)).values("v")), Value(0), **kwargs)

    rows = (nodes_queryset.select_related("pool")
            .annotate(cpu_used=used("cpu_millis"), memory_used=used("memory_bytes"), gpu_used=used("gpus", gpu),
                      storage_used=used("storage_bytes"))
            .order_by("name"))
    views = []
    for node in rows:
        gpu_used = Decimal(node.gpu_used or 0)
        views.append(engine.NodeView(
            name=node.name,
            labels=dict(node.labels or {}),
            taints=list(node.taints or []),
            cpu_millis=max(node.cpu_allocatable_millis - int(node.cpu_used or 0), 0),
            memory_bytes=max(node.memory_allocatable_bytes - int(node.memory_used or 0), 0),
            gpus=capacity.node_free(node.status, node.gpu_allocatable, gpu_used),
            storage_bytes=max(node.storage_allocatable_bytes - int(node.storage_used or 0), 0),
            cpu_allocatable_millis=node.cpu_allocatable_millis,
            memory_allocatable_bytes=node.memory_allocatable_bytes,
            gpu_allocatable=node.gpu_allocatable,
            storage_allocatable_bytes=node.storage_allocatable_bytes,
            pool=node.pool.name if node.pool_id else "",
            ready=capacity.is_ready(node.status) and not node.unschedulable,
        ))
    return views


def pool_node_views(*, pool: NodePool) -> list[engine.NodeView]:
    return node_views(Node.objects.filter(pool=pool))


# ---------------------------------------------------------------------------------------------------
# What the pool page and the platforms page show


@dataclass
class PlatformSummary:
    platform: Platform
    is_default: bool
    nodes: list[engine.NodeView]
    templates: list[str] = field(default_factory=list)
    rule_sets: list[str] = field(default_factory=list)

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    @property
    def gpus_total(self) -> Decimal:
        return sum((Decimal(n.gpu_allocatable) for n in self.nodes), Decimal(0))

    @property
    def gpus_free(self) -> Decimal:
        return sum((Decimal(n.gpus) for n in self.nodes if n.ready), Decimal(0))


@dataclass
class ResourceRow:
    """One line of `osmo resource list`: a node, its pool and platforms, used / capacity per resource."""

    node: engine.NodeView
    pool: str
    platforms: list[str]

    @property
    def cpu_used_millis(self) -> int:
        return self.node.cpu_allocatable_millis - self.node.cpu_millis

    @property
    def memory_used_bytes(self) -> int:
        return self.node.memory_allocatable_bytes - self.node.memory_bytes

    @property
    def gpus_used(self) -> Decimal:
        return Decimal(self.node.gpu_allocatable) - Decimal(self.node.gpus)

    @property
    def storage_used_bytes(self) -> int:
        return (self.node.storage_allocatable_bytes or 0) - (self.node.storage_bytes or 0)


@dataclass
class PoolPlatforms:
    pool: NodePool
    settings: PoolWorkloadSettings
    platforms: list[PlatformSummary]
    rows: list[ResourceRow]
    common_templates: list[str]
    rule_sets: list[str]


def pool_platforms(*, user: Any, pool: NodePool, with_rows: bool = True) -> PoolPlatforms:
    """The pool's platforms (those the user may see) with their nodes, GPUs total/free, and a per-node
    view: for every node of the pool, the platforms it belongs to and used/capacity of each resource
    (`with_rows=False`: no per-node view, and the nodes are not read at all when there is no platform)."""
    settings = pool_settings(pool=pool)
    platforms = list(platform_list(user=user).filter(pool=pool).prefetch_related(
        "template_links__template", "rule_set_links__rule_set").order_by("name"))
    nodes = pool_node_views(pool=pool) if (platforms or with_rows) else []
    summaries = []
    membership: dict[str, list[str]] = {node.name: [] for node in nodes}
    for platform in platforms:
        members = engine.platform_nodes(node_selector=platform.node_selector, tolerations=platform.tolerations,
                                        nodes=nodes)
        for node in members:
            membership[node.name].append(platform.name)
        summaries.append(PlatformSummary(
            platform=platform, is_default=platform.pk == settings.default_platform_id, nodes=members,
            templates=[link.template.name for link in sorted(platform.template_links.all(), key=lambda l: l.position)],
            rule_sets=[link.rule_set.name for link in sorted(platform.rule_set_links.all(), key=lambda l: l.position)],
        ))
    rows = [ResourceRow(node=node, pool=pool.name, platforms=membership[node.name]) for node in nodes] if with_rows else []
    return PoolPlatforms(
        pool=pool, settings=settings, platforms=summaries, rows=rows,
        common_templates=[t.name for t in _ordered(settings, "templates")],
        rule_sets=[r.name for r in _ordered(settings, "rule_sets")],
    )


@dataclass
class PlatformLeftEmpty:
    """A platform whose pool's nodes a pool change (`nodepools.selectors.capacity_preview`) takes away."""

    platform: Platform
    pool_name: str
    nodes_before: int
    nodes_after: int


def platforms_left_without_nodes(*, user: Any, preview: Any) -> list[PlatformLeftEmpty]:
    """The platforms (those the user may see) of the pools nodes leave in `preview` that have nodes now and
    none after the change: workloads submitted to them would wait. A platform's nodes are its pool's nodes
    matching its selector whose taints it tolerates (`engine.platform_nodes`, as the pool page counts them).
    Two queries, whatever the number of nodes or platforms."""
    sources = {f.source.pk: f.source for f in preview.flows if f.source.pk}
    if not sources:
        return []
    platforms = list(platform_list(user=user).filter(pool_id__in=list(sources)).order_by("pool__name", "name"))
    if not platforms:
        return []
    leaving = {pk for f in preview.flows for pk in f.node_ids}
    arriving = {pk: f.target.pk for f in preview.flows for pk in f.node_ids if f.target.pk in sources}
    rows = Node.objects.filter(Q(pool_id__in=list(sources)) | Q(pk__in=list(arriving))).values_list(
        "pk", "name", "pool_id", "labels", "taints")
    before: dict[int, list[engine.NodeView]] = {}
    after: dict[int, list[engine.NodeView]] = {}
    for pk, name, pool_id, labels, taints in rows:
        if pool_id in sources:
            before.setdefault(pool_id, []).append(engine.NodeView(name=name, labels=labels or {}, taints=taints or []))
        will = arriving.get(pk, None if pk in leaving else pool_id)
        if will in sources:
            labels = preview.labels_after.get(pk, labels)
            after.setdefault(will, []).append(engine.NodeView(name=name, labels=labels or {}, taints=taints or []))
    out = []
    for platform in platforms:
        count = [len(engine.platform_nodes(node_selector=platform.node_selector, tolerations=platform.tolerations,
                                           nodes=nodes.get(platform.pool_id, []))) for nodes in (before, after)]
        if count[0] and not count[1]:
            out.append(PlatformLeftEmpty(platform, sources[platform.pool_id].name, count[0], count[1]))
    return out


# ---------------------------------------------------------------------------------------------------
# Everything the submission steps need for one platform


@dataclass
class PlatformConfig:
    pool: NodePool
    platform: Platform
    pool_defaults: dict
    platform_defaults: dict
    # (name, body) in merge order: the pool's common templates, then the platform's override templates.
    templates: list[tuple[str, dict]]
    # The pool's rule sets then the platform's, as (rule set name, rules).
    rule_sets: list[tuple[str, list[engine.Rule]]]
    nodes: list[engine.NodeView]

    @property
    def rules(self) -> list[engine.Rule]:
        return [rule for _, rules in self.rule_sets for rule in rules]


def platform_config(*, platform: Platform, nodes: list[engine.NodeView] | None = None) -> PlatformConfig:
    """The platform's templates in merge order, its pool's and its own default variables and rule
    sets, and its nodes (ready and schedulable only: where a workload could go)."""
    pool = platform.pool
    settings = pool_settings(pool=pool)
    templates = [(t.name, t.body) for t in _ordered(settings, "templates")]
    templates += [(t.name, t.body) for t in platform.ordered_templates()]
    sets = [(r.name, r.parsed_rules()) for r in _ordered(settings, "rule_sets")]
    sets += [(r.name, r.parsed_rules()) for r in platform.ordered_rule_sets()]
    all_nodes = nodes if nodes is not None else pool_node_views(pool=pool)
    members = engine.platform_nodes(node_selector=platform.node_selector, tolerations=platform.tolerations,
                                    nodes=[n for n in all_nodes if n.ready])
    return PlatformConfig(pool=pool, platform=platform, pool_defaults=dict(settings.default_variables or {}),
                          platform_defaults=dict(platform.default_variables or {}), templates=templates,
                          rule_sets=sets, nodes=members)


# ---------------------------------------------------------------------------------------------------
# Submission side (pool access, submitting, the workloads table)
# ---------------------------------------------------------------------------------------------------
# Submission facts

def project_namespace(project: Any) -> str:
    return project.namespaces.order_by("name").values_list("name", flat=True).first() or ""


def gpu_shape_refusal(pools: list[NodePool], *, profile: str = "", fraction: str = "",
                      enforcer: str = "none") -> tuple[str, str] | None:
    """(field, why) when the pools have no GPU of the shape a submission asks: no node publishing slices of
    the MIG profile (nvidia.com/mig-<profile>, or the single strategy's), or, for a KAI GPU fraction, no KAI
    Scheduler or no whole GPU to share. None when they have it (or nothing special is asked). One query."""
    if not profile and not fraction:
        return None
    names = ", ".join(p.name for p in pools)
    rows = list(Node.objects.filter(pool__in=pools).values_list("gpu_sharing", "gpu_capacity"))
    if profile:
        offered = sorted({s.get("profile") for sharing, _ in rows for s in (sharing or {}).get("slices") or ()})
        if profile not in offered:
            there = f"they offer {', '.join(offered)}" if offered else "they have no MIG slices"
            return ("gpu_profile", f"No node of {names} publishes MIG slices of {profile} ({there}).")
    if fraction:
        if enforcer != "kai":
            return ("gpu_fraction", "A GPU fraction is KAI Scheduler's GPU sharing (the gpu-fraction annotation): "
                                    "this cluster's workloads are not scheduled by KAI Scheduler.")
        if not any(physical and (sharing or {}).get("exposure", "whole") == "whole" for sharing, physical in rows):
            return ("gpu_fraction", f"No node of {names} has whole GPUs to share: KAI holds a whole GPU for the "
                                    "fractions on it (MIG slices and time-sliced replicas are not shared again).")
    return None


def enforcer_of(cluster: Any) -> str:
    return Enforcement.objects.filter(cluster_id=cluster.pk).values_list("enforcer", flat=True).first() or "none"


def default_pools(project: Any) -> list[NodePool]:
    """The project's node pool priority list, then `default` (docs/concepts.md#priority-lists)."""
    pools = [e.pool for e in project.priority_entries.select_related("pool").order_by("position")]
    if not any(p.is_default for p in pools):
        default = NodePool.objects.filter(cluster_id=project.cluster_id, is_default=True).first()
        if default is not None:
            pools.append(default)
    return pools


def submittable_pools(*, user: Any, project: Any):
    """The pools `user` may submit `project`'s workloads to (workloads.rules), in creation order."""
    return (NodePool.objects.restrict(user, "view").filter(pools_open_q(user, project)).distinct()
            .order_by("-is_default", "created", "pk"))


def submittable_projects(*, user: Any):
    return Project.objects.restrict(user, "submit").select_related("cluster").order_by("cluster__name", "name")


def pool_taints(pool: NodePool) -> tuple[dict[str, Any], ...]:
    """NoSchedule / NoExecute taints every node of the pool carries: the pool's own taints."""
    return common_taints(Node.objects.filter(pool=pool).values_list("taints", flat=True))


def pool_labels(cluster: Any) -> list[tuple[str, str]]:
    return list(NodePool.objects.filter(cluster_id=cluster.pk, is_default=False).order_by("created", "pk")
                .values_list("label_key", "label_value"))


def pool_targets(pools: list[NodePool], *, platforms: dict[int, Any] | None = None) -> list[render.PoolTarget]:
    """The pools of a submission's list as the renderer needs them; `platforms`: pool id -> the
    platform's node selector there."""
    out = []
    for pool in pools:
        out.append(render.PoolTarget(name=pool.name, label_key=pool.label_key, label_value=pool.label_value,
                                     taints=pool_taints(pool), gpu_placement=pool.gpu_placement,
                                     is_default=pool.is_default, node_selector=(platforms or {}).get(pool.pk, ())))
    return out


@dataclass
class PlatformPlan:
    """The platform a submission runs on, and the steps that depend on it (workloads.engine)."""

    name: str = ""
    error: str = ""
    platform: Any = None
    settings: Any = None
    pool: Any = None
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    per_pool: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # pool id -> node selector
    pod_metadata: dict[str, Any] = field(default_factory=dict)
    # The Pod Security Standards level the pod must meet: the strictest of the pools' of the list (each
    # its platform's, else the pool's own), and which platform or pool sets it.
    security_level: str = "baseline"
    security_source: str = ""

    def variables(self, user_values: dict[str, str]) -> dict[str, str]:
        return engine.resolve_variables(
            pool_defaults=(self.settings.default_variables if self.settings else {}) or {},
            platform_defaults=(self.platform.default_variables if self.platform else {}) or {},
            user_values=user_values)

    def validate(self, variables: dict[str, str]) -> str:
        """The first rule the request breaks (its message and, per node, why), or ""."""
        rules = []
        for owner in (self.settings, self.platform):
            if owner is not None:
                for rule_set in owner.ordered_rule_sets():
                    rules += rule_set.parsed_rules()
        if not rules:
            return ""
        nodes = pool_node_views(pool=self.pool) if self.pool is not None else []
        if self.platform is not None:
            nodes = engine.platform_nodes(node_selector=self.platform.node_selector or {},
                                          tolerations=self.platform.tolerations or [], nodes=nodes)
        failures = engine.check_rules(rules, values=variables, nodes=nodes)
        if not failures:
            return ""
        others = len(failures) - 1
        more = f" (and {others} more rule{'' if others == 1 else 's'})" if others else ""
        return f"{failures[0]}{more}."

    def pod_spec(self, variables: dict[str, str]) -> tuple[dict[str, Any], str]:
        """The pool's common templates, then the platform's, each substituted, merged in order."""
        templates = []
        for owner in (self.settings, self.platform):
            if owner is not None:
                templates += owner.ordered_templates()
        if not templates:
            return {}, ""
        parts = []
        for template in templates:
            body = template.body
            problems = engine.pod_template_errors(body)
            if problems:
                return {}, f"Pod template {template.name} is malformed: {'; '.join(problems)}"
            try:
                parts.append((template.name, engine.substitute(body, variables, template=template.name)))
            except engine.TemplateError as exc:
                return {}, str(exc)
        merged = engine.merge_templates(parts)
        problems = engine.pod_template_errors(merged)
        if problems:
            names = ", ".join(t.name for t in templates)
            return {}, f"The merged pod templates ({names}) are malformed: {'; '.join(problems)}"
        self.pod_metadata = merged.get("metadata") or {}
        spec = merged.get("spec") or {}
        return spec if isinstance(spec, dict) else {}, ""

    def violations(self, pod_spec: dict[str, Any]) -> list[str]:
        platform = self.platform
        return engine.platform_violations(
            pod_spec, privileged_allowed=bool(platform and platform.privileged_allowed),
            host_network_allowed=bool(platform and platform.host_network_allowed),
            allowed_mounts=list((platform.allowed_mounts if platform else None) or []))


def _security_level(pool: NodePool, platform: Any, settings: Any) -> tuple[str, str]:
    """The level a pool's submissions meet on a platform (the platform's), or without one (the pool's)."""
    if platform is not None:
        return platform.pod_security_level, f"platform {platform.name} of pool {pool.name}"
    return (settings.pod_security_level if settings is not None else podsecurity.BASELINE), f"pool {pool.name}"


def _platform_in(pool: NodePool, name: str):
    settings = PoolWorkloadSettings.objects.filter(pool=pool).select_related("default_platform").first()
    if name:
        return settings, Platform.objects.filter(pool=pool, name=name).first()
    return settings, (settings.default_platform if settings else None)


def platform_plan(*, pool: NodePool, platform: str, pools: list[NodePool]) -> PlatformPlan:
    """The plan for `platform` in the first pool of the list (empty: its default platform). A pool
    without platforms runs on all its nodes. In the other pools of the list, the platform of the same
    name (else their default one) narrows their nodes the same way."""
    settings, chosen = _platform_in(pool, platform)
    if platform and chosen is None:
        names = sorted(Platform.objects.filter(pool=pool).values_list("name", flat=True))
        known = f"its platforms: {', '.join(names)}" if names else "it has none"
        return PlatformPlan(error=f"Pool {pool.name} has no platform named {platform!r} ({known}).")
    if chosen is None and Platform.objects.filter(pool=pool).exists():
        return PlatformPlan(error=f"Pool {pool.name} has platforms but no default one: choose a platform.")
    plan = PlatformPlan(name=chosen.name if chosen else "", platform=chosen, settings=settings, pool=pool,
                        tolerations=list((chosen.tolerations if chosen else None) or []))
    plan.security_level, plan.security_source = _security_level(pool, chosen, settings)
    for other in pools:
        other_settings, found = ((settings, chosen) if other.pk == pool.pk
                                 else _platform_in(other, chosen.name if chosen else ""))
        if found is None and chosen is not None:
            other_settings, found = _platform_in(other, "")
        level, source = _security_level(other, found, other_settings)
        if podsecurity.stricter(level, plan.security_level) == level and level != plan.security_level:
            plan.security_level, plan.security_source = level, source
        if found is not None:
            plan.per_pool[other.pk] = tuple(sorted((str(k), str(v)) for k, v in (found.node_selector or {}).items()))
            for tol in found.tolerations or []:
                if tol not in plan.tolerations:
                    plan.tolerations.append(tol)
    return plan


# ---------------------------------------------------------------------------------------------------
# The workloads table

def _job_pods(cluster_ref: str = "cluster_id"):
    """The pods of the outer query's workload: a Job's (its `batch.kubernetes.io/job-name` label, else the legacy
    `job-name`), a controller's, or the bare pod itself — `Pod.workload_name`, which the database keeps in an
    indexed column, so that each workload's pods are an index lookup."""
    return Pod.objects.filter(cluster_id=OuterRef(cluster_ref), namespace=OuterRef("namespace"),
                              workload_name=OuterRef("name")).annotate(job=F("workload_name"))


def held_gpus():
    """The GPUs the outer query's workload holds now: its pods' that count toward allocation
    (`Pod.objects.active()`, the pods every allocated figure sums), so that a project's workloads add up to
    its allocated GPUs."""
    gpu = DecimalField(max_digits=14, decimal_places=3)
    pods = Pod.objects.active().filter(cluster_id=OuterRef("cluster_id"), namespace=OuterRef("namespace"),
                                       workload_name=OuterRef("name"))
    return Coalesce(Subquery(pods.order_by().values("workload_name").annotate(v=Sum("gpus")).values("v")[:1]),
                    Value(0), output_field=gpu)


def running_pods_count():
    """How many pods of the outer query's workload run (a subquery, as `workload_list` annotates it)."""
    return _job_pods().filter(phase="Running", node__isnull=False).order_by().values("job").annotate(
        n=Count("pk")).values("n")[:1]


def workload_list(*, user: Any):
    """Every workload the user may see, with its project, the pool it was placed in (its pods' nodes)
    and how many of its pods run."""
    namespaces = ProjectNamespace.objects.filter(cluster_id=OuterRef("cluster_id"), name=OuterRef("namespace"))
    pods = _job_pods()
    placed = pods.filter(node__pool__isnull=False).order_by("-phase").values("node__pool__name")[:1]
    running = running_pods_count()
    # The scheduler's words for a pod it could not place (PodScheduled=False), first pod by name.
    unscheduled = pods.exclude(scheduling_message="").order_by("name").values("scheduling_message")[:1]
    stop = WorkloadEvent.objects.filter(cluster_id=OuterRef("cluster_id"), namespace=OuterRef("namespace"),
                                        name=OuterRef("name"), job_uid=OuterRef("uid"),
                                        kind=WorkloadEventKind.STOP_REQUESTED)
    return (Workload.objects.restrict(user, "view").select_related("cluster")
            .annotate(stop_requested=Exists(stop),
                      project_name=Subquery(namespaces.values("project__name")[:1]),
                      project_display_name=Subquery(namespaces.values("project__display_name")[:1]),
                      project_id=Subquery(namespaces.values("project_id")[:1]),
                      placed_pool=Subquery(placed), running_pods=Subquery(running),
                      scheduler_message=Subquery(unscheduled), gpus_held=held_gpus()))


# Phases after which a workload does no more (its Job finished, failed, or was stopped / left the cluster).
ENDED = ("Succeeded", "Failed", "Stopped")
# Hidden from the workloads page unless asked for (its "Finished and stopped" filter, or a phase chosen).
HIDDEN_BY_DEFAULT = ("Succeeded", "Stopped")


def display_phase(workload: Workload) -> str:
    running = getattr(workload, "running_pods", None) or 0
    if workload.phase in ("Succeeded", "Failed", "Suspended", "Stopped"):
        return workload.phase
    if running:
        return "Running"
    return workload.phase or "Pending"


def is_waiting(workload: Workload) -> bool:
    """Whether the workload waits to run: Pending (not admitted or not placed) or Suspended."""
    return display_phase(workload) in ("Pending", "Suspended")


def pending_reason(workload: Workload) -> str:
    """Why a workload that is not running waits, in words: the scheduler's own first — the Job's conditions,
    its Kueue Workload's or KAI PodGroups' status, else the scheduler's words on its pods (PodScheduled=False:
    "0/30 nodes are available: …"), or that Kueue has not taken it up yet — then the console's answer to
    "Why is it waiting?" for its request (projects.waiting), then, for a pending workload of a cluster with
    Karpenter NodePools, what Karpenter can do for its pending pod. Reads what `workloads_enrich` attached."""
    return " ".join(text for _, text in pending_reason_story(workload))


# How hard a fact is, hardest first: it never fits (no node of the pool is big enough), then a quota or limit
# refuses it (or its queue is missing), then there is no room now, then anything else.
NEVER, QUOTA, ROOM, OTHER = range(4)
_RANK = {waiting.LIMIT: QUOTA, waiting.NON_PREEMPTIBLE: QUOTA, waiting.QUEUE: QUOTA, waiting.CAPACITY: ROOM}


def _console_rank(workload: Workload) -> int:
    why = getattr(workload, "decision_why", None)
    if why is None:
        return OTHER
    if why.code == "no_node_fits":
        # A pool Karpenter can grow may still get a node that big: then it is no room now, not never.
        return ROOM if getattr(workload, "karpenter_wait", None) else NEVER
    return _RANK.get(waiting.console_category(why.code), OTHER)


def _scheduler_rank(workload: Workload) -> int:
    found = getattr(workload, "decision_reason", None)
    return _RANK.get(found.category, OTHER) if found is not None else OTHER


def pending_reason_story(workload: Workload) -> list[tuple[str, str]]:
    """A waiting workload's reasons as (part, words), the hardest fact first — its one line (the table's
    cell, the first words of the CSV's and the API's reason): the console's answer when it is harder than the
    scheduler's words (it never fits, where the scheduler names a quota; a quota, where it names no room),
    else the scheduler's own words with the console's answer after them; then what Karpenter can do. Parts:
    "scheduler", "why" (the console's answer), "karpenter". Empty when it does not wait."""
    phase = display_phase(workload)
    if phase not in ("Pending", "Suspended"):
        return []
    scheduler, console = pending_reason_parts(workload)
    provisioning = karpenter_text(workload) if phase == "Pending" else ""
    if console and (not scheduler or _console_rank(workload) < _scheduler_rank(workload)):
        found = getattr(workload, "decision_reason", None)
        said = found.in_words() if found is not None and scheduler == (found.message or found.reason) else scheduler
        parts = [("why", console), ("scheduler", said)]
    else:
        parts = [("scheduler", scheduler), ("why", f"Why is it waiting? {console}" if scheduler and console
                                             else console)]
    parts.append(("karpenter", provisioning))
    return [(part, text) for part, text in parts if text]


def reason_line(workload: Workload) -> str:
    """The one line of a waiting workload's reason: its hardest fact (`pending_reason_story`)."""
    story = pending_reason_story(workload)
    return story[0][1] if story else ""


def pending_reason_parts(workload: Workload) -> tuple[str, str]:
    """(the scheduler's words, the console's answer) for a waiting workload."""
    scheduler = workload.status_message
    found = getattr(workload, "decision_reason", None)
    if not scheduler and found is not None:
        scheduler = found.message or found.reason
    if not scheduler and display_phase(workload) == "Suspended" and workload.queue:
        scheduler = f"Waiting for Kueue to admit it (queue {workload.queue})."
    why = getattr(workload, "decision_why", None)
    return scheduler, (why.text if why is not None else "")


def waiting_category_text(workload: Workload) -> str:
    """What a waiting workload waits for, in the categories both answers share (projects.waiting): the
    scheduler's, with the console's beside it when they differ."""
    found, why = getattr(workload, "decision_reason", None), getattr(workload, "decision_why", None)
    if not is_waiting(workload) or (found is None and why is None):
        return ""
    console = waiting.console_category(why.code) if why is not None else ""
    if found is None:
        return waiting.CATEGORIES[console]
    if not console or console == found.category:
        return waiting.CATEGORIES[found.category]
    return f"{waiting.CATEGORIES[found.category]} (the console reads: {waiting.CATEGORIES[console]})"


def workloads_enrich(workloads: list[Workload], *, user: Any, slow: bool = True, gpu: bool = True,
                     estimates: bool = True) -> list[Workload]:
    """What the workloads table, its CSV and the API show beyond the row, for these rows at once: the
    scheduler's decisions (workloads.decisions), what Karpenter can do for the pending ones, and (`gpu`) GPU
    utilization (one Prometheus query per cluster); with `slow`, also what is slow by nature, which the HTML
    table fetches after its page instead (workloads.views.workload_start_estimates): what reads the
    cluster's fair shares and facts (the console's answer to "Why is it waiting?", KAI's queue turns) and,
    with `estimates`, SLOW_ENRICHERS (the start estimates, which simulate the pools' queues)."""
    from workloads.decisions import decisions_attach  # late: workloads.decisions imports workloads.selectors

    workloads = [w for w in workloads if isinstance(w, Workload)]
    decisions_attach(workloads, user=user, slow=slow)
    found = karpenter_explanations(user=user, workloads=workloads)
    for w in workloads:
        w.karpenter_wait = found.get((w.cluster_id, w.namespace, w.name))
    if gpu:
        workloads_attach_gpu_utilization(workloads)
    for enrich in ENRICHERS + (SLOW_ENRICHERS if slow and estimates else []):
        enrich(workloads, user=user)
    return workloads


# More of what `workloads_enrich` attaches, registered by the modules that compute it (they read this one);
# the slow ones (e.g. the start estimates of workloads.forecast, which simulate the pools' queues) are left
# out of the HTML table's page and fetched after it (workloads.views.workload_start_estimates).
ENRICHERS: list = []
SLOW_ENRICHERS: list = []


@dataclass
class KarpenterWait:
    """What Karpenter can do for a pending workload: the explanation of its first pending pod (by name),
    the one its pods get on the pool page and in "Why is it waiting?" (provisioning.pending)."""

    pod: Any  # provisioning.pending.PendingPod
    pending_pods: int = 1
    # The Karpenter NodePools backing the pools the workload asked for: only their verdicts are told.
    nodepools: tuple[str, ...] = ()

    def in_words(self) -> str:
        more = self.pending_pods - 1
        others = f" (and {more} more pending pod{'s' if more != 1 else ''})" if more > 0 else ""
        return f"What Karpenter can do for its pod {self.pod.name}{others}: {self._words()}"

    def _words(self) -> str:
        explanation = self.pod.explanation
        if explanation.problem or explanation.nodeclaim:
            return explanation.summary
        asked = [v for v in explanation.verdicts if v.nodepool in self.nodepools]
        able = [v.nodepool for v in asked if v.can_provision]
        lines = [f"Karpenter can provision a node for it from {', '.join(able)}." if able
                 else "No NodePool can provision a node for it."]
        lines += [f"{v.nodepool}: {v.text}" for v in asked if not v.can_provision]
        return " ".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {**self.pod.as_dict(), "pending_pods": self.pending_pods}


def karpenter_text(workload: Workload) -> str:
    found = getattr(workload, "karpenter_wait", None)
    return found.in_words() if found else ""


def karpenter_explanations(*, user: Any, workloads: list[Workload]) -> dict[tuple[int, str, str], KarpenterWait]:
    """For the pending workloads among these: what Karpenter can do for their pending pods, by (cluster id,
    namespace, job name); nothing for a cluster without Karpenter NodePools (no live read then)."""
    pending = [w for w in workloads if display_phase(w) == "Pending"]
    # Only for the pools it asked for that a Karpenter NodePool backs (their NodePools' verdicts).
    backing: dict[Key, tuple[str, ...]] = {}
    if pending:
        pools = {(p.cluster_id, p.name): backing_name(p) for p in NodePool.objects.filter(
            cluster_id__in={w.cluster_id for w in pending}).only("cluster_id", "name", "label_key", "label_value")}
        for w in pending:
            names = tuple(n for n in (pools.get((w.cluster_id, pool)) for pool in w.pools_tried or []) if n)
            if names:
                backing[(w.cluster_id, w.namespace, w.name)] = names
        pending = [w for w in pending if (w.cluster_id, w.namespace, w.name) in backing]
    if not pending:
        return {}
    rows = (Pod.objects.filter(cluster_id__in={w.cluster_id for w in pending},
                               namespace__in={w.namespace for w in pending}, node__isnull=True, phase="Pending")
            .annotate(job=F("workload_name"))
            .filter(job__in={w.name for w in pending}).order_by("name")
            .values_list("cluster_id", "namespace", "job", "name"))
    wanted = {(w.cluster_id, w.namespace, w.name) for w in pending}
    pods: dict[tuple[int, str, str], list[str]] = {}
    for cluster_id, namespace, job, name in rows:
        if (cluster_id, namespace, job) in wanted:
            pods.setdefault((cluster_id, namespace, job), []).append(name)
    out: dict[tuple[int, str, str], KarpenterWait] = {}
    for cluster in Cluster.objects.filter(pk__in={key[0] for key in pods}).order_by("pk"):
        mine = {key: names for key, names in pods.items() if key[0] == cluster.pk}
        report = pods_explained(user=user, cluster=cluster,
                                pods=[(key[1], name) for key, names in mine.items() for name in names])
        explained = {(p.namespace, p.name): p for p in report.pods}
        for key, names in mine.items():
            found = [explained[(key[1], name)] for name in names if (key[1], name) in explained]
            if found:
                out[key] = KarpenterWait(found[0], len(found), backing[key])
    return out


def gpus_text(value: Decimal | None) -> str:
    if value is None:
        return ""
    value = Decimal(value).normalize()
    return f"{value:f}"


def pools_of_list(pools: list[str] | None) -> str:
    return " → ".join(pools or [])





# ---------------------------------------------------------------------------------------------------
# GPU utilization per workload (the DCGM exporter, through the cluster's Prometheus)

NO_RUNNING_POD = "no running pod: the workload holds no GPU now"
NO_GPU_SERIES = "no GPU of its pods reports utilization (none held, or the exporter lacks the namespace/pod labels)"


def workload_pods(workloads: list[Workload]) -> dict[tuple[int, str, str], list[str]]:
    """(cluster id, namespace, job name) -> names of its running pods (the mirrored Pods whose labels
    carry the job name, `Pod.job_name`): one lookup of the `pod_job` index whatever the number of workloads."""
    names = {w.name for w in workloads}
    if not names:
        return {}
    # The phase is checked here, not in SQL: with it, the planner may prefer the (project, phase) index and
    # read every running pod of the fleet (its statistics count the pods without a Job as one large Job).
    rows = (Pod.objects.filter(cluster_id__in={w.cluster_id for w in workloads},
                               namespace__in={w.namespace for w in workloads}, workload_name__in=names)
            .order_by().values_list("cluster_id", "namespace", "workload_name", "name", "phase"))
    out: dict[tuple[int, str, str], list[str]] = {}
    for cluster_id, namespace, job, name, phase in rows:
        if phase == "Running":
            out.setdefault((cluster_id, namespace, job), []).append(name)
    return out


def workloads_attach_gpu_utilization(workloads: list[Workload], *, budget: Any = None) -> list[Workload]:
    """Set `gpu_utilization` (%, averaged over every GPU its running pods hold, or None) and
    `gpu_metrics_reason` (why None) on workloads: ONE Prometheus query per cluster whatever the number
    of rows (gpumetrics.pod_gpu_metrics), within the page's budget (nodepools.selectors.GpuBudget)."""
    workloads = list(workloads)
    pods = workload_pods(workloads)
    wanted: dict[int, set[tuple[str, str]]] = {}
    for (cluster_id, namespace, _), names in pods.items():
        wanted.setdefault(cluster_id, set()).update((namespace, name) for name in names)
    budget = budget or GpuBudget()
    configs = cluster_prometheus(wanted) if wanted else {}
    results: dict[int, Any] = {}
    for cluster_id, cluster_pods in wanted.items():
        config = configs.get(cluster_id)
        if config is None:
            results[cluster_id] = NOT_CONFIGURED
        elif budget.left() < 0.02:
            results[cluster_id] = Unavailable(NO_BUDGET)
        else:
            results[cluster_id] = pod_gpu_metrics(config, sorted(cluster_pods), timeout=budget.left())
    for workload in workloads:
        names = pods.get((workload.cluster_id, workload.namespace, workload.name))
        workload.gpu_utilization, workload.gpu_metrics_reason = None, ""
        if not names:
            workload.gpu_metrics_reason = NO_RUNNING_POD
            continue
        result = results.get(workload.cluster_id)
        if isinstance(result, Unavailable):
            workload.gpu_metrics_reason = result.reason
            continue
        figures = [f for f in (result.get((workload.namespace, n)) for n in names)
                   if f is not None and f.utilization is not None and f.gpus]
        gpus = sum(f.gpus for f in figures)
        if not gpus:
            workload.gpu_metrics_reason = NO_GPU_SERIES
            continue
        workload.gpu_utilization = sum(f.utilization * f.gpus for f in figures) / gpus
    return workloads


# ---------------------------------------------------------------------------------------------------
# The submission form's choices

def submit_pool_choices(*, user: Any, project: Any) -> list[NodePool]:
    """The pools `user` may submit `project`'s workloads to (workloads.rules), its priority list first
    (in its order, then `default`: `default_pools`), then the other open pools in creation order."""
    open_pools = list(submittable_pools(user=user, project=project))
    open_ids = {p.pk for p in open_pools}
    first = [p for p in default_pools(project) if p.pk in open_ids]
    return first + [p for p in open_pools if p.pk not in {f.pk for f in first}]


def submit_platform_choices(pools: list[NodePool]) -> tuple[list[str], str, dict[str, list[str]]]:
    """For a submission's ordered pools: the platforms a workload may name (those of the first pool:
    `platform_plan` looks the name up there), the first pool's default platform ('' when it has none),
    and {platform name: the pools of the list that have a platform of that name}."""
    if not pools:
        return [], "", {}
    first = pools[0]
    by_name: dict[str, list[str]] = {}
    order = {p.pk: i for i, p in enumerate(pools)}
    rows = Platform.objects.filter(pool__in=pools).values_list("name", "pool_id")
    for name, pool_id in sorted(rows, key=lambda r: (order[r[1]], r[0])):
        by_name.setdefault(name, []).append(pools[order[pool_id]].name)
    names = sorted(n for n, owners in by_name.items() if first.name in owners)
    default = _platform_in(first, "")[1]
    return names, default.name if default is not None else "", by_name


# ---------------------------------------------------------------------------------------------------
# One workload's page

@dataclass
class WorkloadDetail:
    pods: list[Any]
    pod_groups: list[Any]
    kueue_workload: Any
    evictions: list[Any]


def workload_detail(workload: Workload) -> WorkloadDetail:
    """Its pods (mirrored), KAI's PodGroups of them, its Kueue Workload and KAI's eviction events."""
    pods = list(Pod.objects.filter(cluster_id=workload.cluster_id, namespace=workload.namespace,
                                   workload_name=workload.name)
                .select_related("node__pool").order_by("created_in_cluster", "name"))
    groups = list(PodGroup.objects.filter(cluster_id=workload.cluster_id, namespace=workload.namespace,
                                          job_name=workload.name).order_by("created_in_cluster", "name"))
    kueue = (KueueWorkload.objects.filter(cluster_id=workload.cluster_id, namespace=workload.namespace,
                                          job_name=workload.name).order_by("-created_in_cluster").first())
    evictions = list(SchedulerEvent.objects.filter(
        cluster_id=workload.cluster_id, namespace=workload.namespace, involved_kind="PodGroup",
        involved_name__in=[g.name for g in groups]).order_by("-last_seen", "name")) if groups else []
    return WorkloadDetail(pods, groups, kueue, evictions)


# ---------------------------------------------------------------------------------------------------
# One workload's timeline

@dataclass
class TimelineEntry:
    at: Any
    kind: str
    what: str  # in words: "Submitted by alice", "Preempted by rnd-b/serve", "Ran again", "Stopped by bob"
    detail: str = ""
    by_id: int | None = None  # the preemptor's workload page, when the user may see it

    def as_dict(self) -> dict[str, Any]:
        return {"at": self.at.isoformat() if self.at else None, "kind": self.kind, "what": self.what,
                "detail": self.detail, "by_workload": self.by_id}


def workload_timeline(workload: Workload, *, user: Any) -> list[TimelineEntry]:
    """What became of the workload, oldest first: submitted (by whom), admitted, started, preempted (by
    whom: its workload if the user may see it, else its project), ran again, finished or failed, stopped
    (by whom, through the console) and when its Job left the cluster. Its Job's events only (a Job of the
    same name submitted again has its own)."""
    events = list(WorkloadEvent.objects.filter(cluster_id=workload.cluster_id, namespace=workload.namespace,
                                               name=workload.name, job_uid__in={workload.uid, ""})
                  .order_by("at", "pk"))
    preemptors: dict[str, int] = {}
    wanted = {e.actor for e in events if e.kind == WorkloadEventKind.PREEMPTED and "/" in e.actor}
    if wanted:
        q = Q(pk__in=[])
        for who in wanted:
            namespace, _, name = who.partition("/")
            q |= Q(namespace=namespace, name=name)
        for w in Workload.objects.restrict(user, "view").filter(q, cluster_id=workload.cluster_id):
            preemptors[f"{w.namespace}/{w.name}"] = w.pk
        projects = dict(ProjectNamespace.objects.filter(
            cluster_id=workload.cluster_id, name__in={who.partition("/")[0] for who in wanted}).values_list(
            "name", "project__name"))
    out = []
    preempted = False
    for e in events:
        kind, by_id = e.kind, None
        if kind == WorkloadEventKind.SUBMITTED:
            what = f"Submitted by {e.actor}" if e.actor else "Submitted (created in the cluster)"
        elif kind == WorkloadEventKind.ADMITTED:
            what = "Admitted" + (f" to {e.detail}" if e.detail else "")
        elif kind == WorkloadEventKind.STARTED:
            what = "Ran again" if preempted else "Started"
        elif kind == WorkloadEventKind.PREEMPTED:
            preempted = True
            if e.actor in preemptors:
                what, by_id = f"Preempted by {e.actor}", preemptors[e.actor]
            elif e.actor and "/" in e.actor:
                project = projects.get(e.actor.partition("/")[0])
                what = f"Preempted by a workload of project {project}" if project else "Preempted by another workload"
            else:
                what = f"Preempted by {e.actor}" if e.actor else "Preempted"
        elif kind == WorkloadEventKind.STOP_REQUESTED:
            what = f"Stopped by {e.actor}" if e.actor else "Stopped"
        elif kind == WorkloadEventKind.SUCCEEDED:
            what = "Finished"
        elif kind == WorkloadEventKind.FAILED:
            what = "Failed"
        else:
            what = "Its Job left the cluster" + (" (deleted before it finished: Stopped)" if e.detail else "")
        out.append(TimelineEntry(e.at, kind, what, e.detail if kind != WorkloadEventKind.GONE else "", by_id))
    # KAI evicts a Job's pods and places new ones (the Job itself never restarts): it ran again when the pods
    # running now started, after its last preemption.
    preemptions = [e.at for e in events if e.kind == WorkloadEventKind.PREEMPTED]
    if preemptions:
        last = max(preemptions)
        if not any(e.kind == WorkloadEventKind.STARTED and e.at > last for e in events):
            started = (Pod.objects.filter(cluster_id=workload.cluster_id, namespace=workload.namespace,
                                          job_name=workload.name, phase="Running", node__isnull=False,
                                          started_in_cluster__gt=last)
                       .order_by("started_in_cluster").values_list("started_in_cluster", flat=True).first())
            if started is not None:
                out.append(TimelineEntry(started, WorkloadEventKind.STARTED, "Ran again",
                                         "its pods placed again after the preemption"))
                out.sort(key=lambda entry: entry.at)
    return out
