"""Reads of the organisation for the pages; each takes the user and returns only what it may see."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_UP, Decimal
from kube import wellknown
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connection, models
from django.db.models import Case, Count, F, OuterRef, Q, Subquery, Sum, Value, When
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Coalesce

from common.parsing import is_digits
from common.words import noun
from access.models import RoleAssignment
from access.rules import Role, ScopeType, user_grants
from nodepools import capacity as node_capacity
from nodepools.kube import CONSOLE_POOL_LABEL, PREEMPTIBLE_BELOW
from nodepools.memo import fleet_memoised, memoised, reads_scope
from nodepools.models import Cluster, Node, NodePool, Pod
from kube import gpu as kube_gpu
from nodepools.selectors import pod_usage, pool_node_gpu_room, pool_node_totals, pools_attach_usage
from projects import fit
from projects.fairshare import Claim, hierarchical_fair_shares
from projects.models import Department, Project, Quota
from projects.waiting import pool_of_pod

GPU = models.DecimalField(max_digits=14, decimal_places=3)


def department_list(*, user: Any):
    """Departments the user may see, with their projects' count. GPUs are per pool, never summed across
    pools (a V100 is not an A100): `owners_attach_pool_gpus` adds them to a page of rows."""
    projects = Project.objects.filter(department=OuterRef("pk")).order_by().values("department")
    return Department.objects.restrict(user, "view").select_related("cluster").annotate(
        project_count=Coalesce(Subquery(projects.annotate(v=Count("pk")).values("v")), Value(0)),
    )


def project_list(*, user: Any):
    """Projects the user may see, with their running workloads; GPUs per pool come from
    `owners_attach_pool_gpus`."""
    active = Pod.objects.active().filter(project=OuterRef("pk")).order_by().values("project")
    return Project.objects.restrict(user, "view").select_related("department", "cluster").annotate(
        workload_count=Coalesce(Subquery(active.annotate(v=Count("pk")).values("v")), Value(0)),
    )


@dataclass
class PoolGpus:
    """One owner's deserved and allocated GPUs in one pool."""

    pool: str
    deserved: Decimal
    allocated: Decimal


def owners_attach_pool_gpus(owners: list[Department | Project]) -> list[Department | Project]:
    """Set `pool_gpus` (a PoolGpus per pool of the owner's cluster, by pool name) on departments or
    projects: two grouped queries for the whole list. A department's allocation is its projects'."""
    if not owners:
        return owners
    kind = "project" if isinstance(owners[0], Project) else "department"
    ids = [o.pk for o in owners]
    rows = (Quota.objects.filter(**{f"{kind}_id__in": ids}).order_by()
            .values_list(f"{kind}_id", "pool_id", "pool__name", "gpu_deserved"))
    path = "project_id" if kind == "project" else "project__department_id"
    allocated = {(owner, pool): gpus or Decimal(0) for owner, pool, gpus in
                 Pod.objects.active().filter(**{f"{path}__in": ids}).order_by().values(path, "node__pool_id")
                 .annotate(v=Sum("gpus")).values_list(path, "node__pool_id", "v")}
    by_owner: dict[int, list[PoolGpus]] = {}
    for owner, pool_id, pool_name, deserved in rows:
        by_owner.setdefault(owner, []).append(PoolGpus(pool_name, deserved, allocated.get((owner, pool_id), Decimal(0))))
    for o in owners:
        o.pool_gpus = sorted(by_owner.get(o.pk, []), key=lambda g: g.pool)
    return owners


def members_list(*, user: Any, department: Department | None = None, project: Project | None = None):
    """Role assignments in exactly this department's or project's scope that the user may see."""
    rows = RoleAssignment.objects.restrict(user, "view").select_related("user", "group")
    if department is not None:
        return rows.filter(scope_type=ScopeType.DEPARTMENT, department=department)
    return rows.filter(scope_type=ScopeType.PROJECT, project=project)


def landing_departments(*, user: Any) -> list[int] | None:
    """For a user whose roles are only department roles (administrator or viewer), the departments
    to land on; None for everyone else (they land on the cluster overview)."""
    grants = user_grants(user)
    if not grants:
        return None
    department_roles = {Role.DEPARTMENT_ADMIN, Role.DEPARTMENT_VIEWER}
    if all(g.role in department_roles and g.scope_type == ScopeType.DEPARTMENT for g in grants):
        return sorted({g.department_id for g in grants})
    return None


def landing_projects(*, user: Any) -> list[int] | None:
    """For a user whose roles are all given in projects (researcher, project administrator, viewer of
    a project), the projects to land on: a cluster overview would show them no department. None for
    everyone else."""
    grants = user_grants(user)
    if grants and all(g.scope_type == ScopeType.PROJECT for g in grants):
        return sorted({g.project_id for g in grants})
    return None


@dataclass
class MyProject:
    project: Project
    lines: list[tuple[NodePool, QuotaLine]]
    priority: list[NodePool]


def my_projects(*, user: Any) -> list[MyProject]:
    """The projects the user holds a role in (directly or through a group), each with its deserved,
    allocated, over-quota and fair-share GPUs per pool and its node pool priority list."""
    ids = {g.project_id for g in user_grants(user) if g.scope_type == ScopeType.PROJECT}
    projects = list(Project.objects.restrict(user, "view").filter(pk__in=ids)
                    .select_related("department", "cluster").order_by("cluster__name", "name")
                    .prefetch_related("priority_entries__pool"))
    by_cluster: dict[int, tuple[list[NodePool], dict]] = {}
    result = []
    for project in projects:
        if project.cluster_id not in by_cluster:
            by_cluster[project.cluster_id] = cluster_fair_shares(cluster=project.cluster)
        pools, lines = by_cluster[project.cluster_id]
        result.append(MyProject(
            project=project,
            lines=[(pool, lines[("project", project.pk, pool.pk)]) for pool in pools
                   if ("project", project.pk, pool.pk) in lines],
            priority=[e.pool for e in project.priority_entries.all()],  # ordered by position
        ))
    return result


# ---------------------------------------------------------------------------------------------------
# Allocation of quota rows, by one grouped query (instead of subqueries per row)

def allocation_by_project_pool(pool_ids, usage: list[dict[str, Any]] | None = None
                                ) -> dict[tuple[int, int], dict[str, Any]]:
    """What running pods use per (project, pool), with the project's department, from `pod_usage`."""
    rows = [r for r in (usage if usage is not None else pod_usage(pool_ids)) if r["project_id"]]
    departments = dict(Project.objects.filter(pk__in={r["project_id"] for r in rows})
                       .values_list("pk", "department_id"))
    return {(r["project_id"], r["pool_id"]): {**r, "project__department_id": departments.get(r["project_id"])}
            for r in rows}


def pools_projects_gpu_quota(pool_ids: list[int]) -> dict[int, Decimal]:
    """The projects' deserved GPUs per pool (a figure of nodepools' pool table, registered in ProjectsConfig)."""
    return dict(Quota.objects.filter(pool_id__in=pool_ids, project__isnull=False).order_by()
                .values("pool_id").annotate(v=Sum("gpu_deserved")).values_list("pool_id", "v"))


def quotas_attach_allocation(quotas: list[Quota], allocation: dict | None = None,
                             usage: list[dict[str, Any]] | None = None) -> list[Quota]:
    """Set gpu/cpu/memory `_allocated` and `_over_quota` on quota rows (department rows: the sum of their
    projects), as `Quota.objects.with_allocation()` annotates them (the non-preemptible floor is the
    service's business, not the pages')."""
    if allocation is None:
        allocation = allocation_by_project_pool({q.pool_id for q in quotas}, usage)
    by_department: dict[tuple[int, int], dict[str, Any]] = {}
    for (project_id, pool_id), r in allocation.items():
        total = by_department.setdefault((r["project__department_id"], pool_id), {})
        for key in ("gpu", "cpu", "mem"):
            total[key] = (total.get(key) or 0) + (r[key] or 0)
    for q in quotas:
        r = allocation.get((q.project_id, q.pool_id)) if q.project_id else by_department.get((q.department_id, q.pool_id))
        r = r or {}
        q.gpu_allocated = Decimal(r.get("gpu") or 0)
        q.cpu_allocated = (r.get("cpu") or 0) / 1000
        q.memory_allocated_mib = (r.get("mem") or 0) / 1048576
        q.gpu_over_quota = max(q.gpu_allocated - q.gpu_deserved, Decimal(0))
        q.cpu_over_quota = 0.0 if q.cpu_deserved is None else max(q.cpu_allocated - float(q.cpu_deserved), 0.0)
        q.memory_over_quota_mib = (0.0 if q.memory_deserved_mib is None
                                   else max(q.memory_allocated_mib - q.memory_deserved_mib, 0.0))
    return quotas


# ---------------------------------------------------------------------------------------------------
# What a pool change does to the projects' quota (the pool create/edit and node move previews)

@dataclass
class OverQuotaMove:
    """A running workload that a pool change moves into a pool where its project's quota does not cover it:
    `quota` is the project's row there (an unsaved row of 0 deserved GPUs when it has none), with the
    allocation and over-quota the move leaves it (`quotas_attach_allocation`); `has_quota`: it deserves GPUs there."""

    workload: str
    project: Project
    gpus: Decimal
    pool_name: str
    quota: Quota
    has_quota: bool


def preview_over_quota(*, user: Any, preview: Any) -> list[OverQuotaMove]:
    """The workloads (of the projects the user may see) on the nodes `preview` moves
    (`nodepools.selectors.capacity_preview`) whose project is over quota in the pool they land in once the
    nodes have moved: its GPUs running there now (`pod_usage`), minus those leaving on nodes that go, plus
    those arriving, against its deserved GPUs there (no row: 0). A fixed number of queries."""
    moving = {pk: (f.source, f.target) for f in preview.flows for pk in f.node_ids}
    if not moving:
        return []
    pods = list(Pod.objects.active().filter(node_id__in=list(moving), gpus__gt=0,
                                            project__in=Project.objects.restrict(user, "view").values("pk"))
                .order_by().values_list("node_id", "project_id", "job_name", "namespace", "name", "gpus"))
    if not pods:
        return []
    targets = {f.target.pk: f.target for f in preview.flows}  # a pool not saved yet: None
    saved = [pk for pk in targets if pk]
    allocation = {key: dict(r) for key, r in allocation_by_project_pool(saved, pod_usage(saved) if saved else []).items()}
    arriving: dict[tuple[int, int | None, str], Decimal] = {}
    for node_id, project_id, job_name, namespace, name, gpus in pods:
        source, target = moving[node_id]
        for pool_id, sign in ((source.pk, -1), (target.pk, 1)):
            if pool_id in targets:
                row = allocation.setdefault((project_id, pool_id), {"gpu": Decimal(0), "cpu": 0, "mem": 0,
                                                                   "project__department_id": None})
                row["gpu"] = Decimal(row.get("gpu") or 0) + sign * gpus
        key = (project_id, target.pk, job_name or f"{namespace}/{name}")
        arriving[key] = arriving.get(key, Decimal(0)) + gpus
    projects = {p.pk: p for p in Project.objects.filter(pk__in={k[0] for k in arriving})}
    quotas = {(q.project_id, q.pool_id): q for q in Quota.objects.filter(
        project_id__in=list(projects), pool_id__in=saved).select_related("pool")}
    rows = {}
    for project_id, pool_id, _ in arriving:
        if (project_id, pool_id) not in rows:
            rows[(project_id, pool_id)] = quotas.get((project_id, pool_id)) or Quota(
                project=projects[project_id], pool_id=pool_id, gpu_deserved=Decimal(0))
    quotas_attach_allocation(list(rows.values()), allocation=allocation)
    out = []
    for (project_id, pool_id, workload), gpus in sorted(
            arriving.items(), key=lambda i: (targets[i[0][1]].name, projects[i[0][0]].name, i[0][2])):
        quota = rows[(project_id, pool_id)]
        if quota.gpu_over_quota > 0:
            out.append(OverQuotaMove(workload, projects[project_id], gpus, targets[pool_id].name, quota,
                                     has_quota=quota.gpu_deserved > 0))
    return out


# ---------------------------------------------------------------------------------------------------
# Quota, allocation and fair share per pool

@dataclass
class QuotaLine:
    """One owner's numbers in one pool."""

    quota: Quota
    fair_share: Decimal = Decimal(0)
    # A project's GPUs asked in the pool: what it holds plus what it waits for (`project_request`).
    requested: Decimal = Decimal(0)
    # With `cluster_fair_shares(with_demand=...)`: its fair share if it asked for at least its deserved GPUs.
    fair_share_with_demand: Decimal | None = None

    @property
    def deserved(self) -> Decimal:
        return self.quota.gpu_deserved

    @property
    def allocated(self) -> Decimal:
        return self.quota.gpu_allocated

    @property
    def over_quota(self) -> Decimal:
        return self.quota.gpu_over_quota


@dataclass
class PoolSummary:
    pool: NodePool
    department: QuotaLine | None
    projects: list[tuple[Project, QuotaLine]] = field(default_factory=list)


def _pending_requests(cluster: Cluster, pools: list[NodePool], quotas: list[Quota],
                      usage: list[dict[str, Any]] | None = None) -> dict[tuple[int, int], Decimal]:
    """GPUs that pending workloads ask for, per (project, pool), which the fair share counts as requested. A
    pending pod's pool is the one "Why is it waiting?" reads (the console's pool label, KAI's queue
    `<project>.<pool>`, a pool's own label, else the default pool). Non-preemptible requests (priority ≥ 100)
    count only up to what is left of the project's (and its department's) deserved quota for non-preemptible
    work: beyond it the scheduler refuses them (they never run), so they claim no share of the pool."""
    by_label = {(p.label_key, p.label_value): p.pk for p in pools if not p.is_default}
    by_name = {p.name: p.pk for p in pools}
    default = next((p.pk for p in pools if p.is_default), None)
    # What is left for non-preemptible work, per (project, pool) and per (department, pool): deserved minus the
    # non-preemptible GPUs running.
    room: dict[tuple[str, int, int], Decimal] = {}
    # The non-preemptible GPUs running, from the pods' usage per (pool, project) (`pod_usage`: read once per
    # request, shared with the allocation), each project's also counted for its department.
    from nodepools.selectors import pod_usage

    usage = usage if usage is not None else pod_usage([p.pk for p in pools])
    departments = project_departments(cluster.pk)
    held: dict[tuple[str, int, int], Decimal] = {}
    department_of: dict[int, int] = {}
    for r in usage:
        if not r["project_id"] or not r["np"]:
            continue
        project, pool = r["project_id"], r["pool_id"]
        for key in (("project", project, pool), ("department", departments.get(project), pool)):
            held[key] = held.get(key, Decimal(0)) + r["np"]
    for q in quotas:
        key = ("project", q.project_id, q.pool_id) if q.project_id else ("department", q.department_id, q.pool_id)
        room[key] = max(Decimal(q.gpu_deserved) - held.get(key, Decimal(0)), Decimal(0))
        if q.project_id:
            department_of[q.project_id] = q.project.department_id
    pending: dict[tuple[int, int], Decimal] = {}
    for project_id, gpus, selector, labels, priority in _pending_pods(cluster.pk):
        pool_id = pool_of_pod(selector or {}, labels or {}, by_label, by_name, default)
        if pool_id is None:
            continue
        key = (project_id, pool_id)
        if priority >= PREEMPTIBLE_BELOW:
            mine = ("project", project_id, pool_id)
            theirs = ("department", department_of.get(project_id), pool_id)
            if gpus > room.get(mine, Decimal(0)) or gpus > room.get(theirs, Decimal(0)):
                continue  # refused by the scheduler: non-preemptible beyond the deserved quota
            room[mine] -= gpus
            room[theirs] -= gpus
        pending[key] = pending.get(key, Decimal(0)) + gpus
    return pending


def _pending_pods(cluster_id: int) -> list[tuple]:
    """The cluster's pods waiting for a node with GPUs asked, oldest first: (project id, GPUs, node selector,
    labels, priority). By the projects of the cluster (few), so that the (node, phase, project, ...) index
    answers it; kept while the fleet holds still (`fleet_memoised`: a pod's project is a link the pods' rows
    keep, so a project made or removed changes them too)."""
    rows = Pod.objects.filter(node__isnull=True, phase="Pending", gpus__gt=0,
                              project__in=Project.objects.filter(cluster_id=cluster_id).values("pk"))
    return fleet_memoised(("pending_pods", cluster_id), lambda: list(
        rows.order_by("created_in_cluster", "name").values_list(
            "project_id", "gpus", "node_selector", "labels", "priority")))


def project_departments(cluster_id: int) -> dict[int, int]:
    """project id -> its department's id, of every project of the cluster (once per request)."""
    return memoised(("project_departments", cluster_id), lambda: dict(
        Project.objects.filter(cluster_id=cluster_id).order_by().values_list("pk", "department_id")))


def cluster_fair_shares(*, cluster: Cluster, overrides: dict[int, dict[str, Any]] | None = None,
                        with_demand: Any = ()) -> tuple[list[NodePool], dict[tuple[str, int, int], QuotaLine]]:
    """Every quota row of the cluster with its allocation and fair share, keyed (kind, owner id, pool id).

    Fair share needs every department's and project's numbers, so this reads the whole cluster; callers
    show only what the user may see. A fixed number of queries, whatever the size of the cluster.
    `overrides` ({quota id: {field: value}}) computes it as if those rows held other values (what-if).
    `with_demand` ((project id, pool id) pairs): those lines' `fair_share_with_demand` too, each as if that
    project alone asked for at least its deserved GPUs there (the same computation again, no query more).
    """
    pools = list(NodePool.objects.filter(cluster=cluster))
    usage = pod_usage([p.pk for p in pools])
    pools_attach_usage(pools, usage)
    rows = quotas_attach_allocation(list(Quota.objects.filter(pool__cluster=cluster)
                                         .select_related("project", "department", "pool")), usage=usage)
    for q in rows:
        for name, value in (overrides or {}).get(q.pk, {}).items():
            setattr(q, name, value)
    pending = _pending_requests(cluster, pools, rows, usage)
    lines: dict[tuple[str, int, int], QuotaLine] = {}
    for q in rows:
        kind, owner = ("project", q.project_id) if q.project_id else ("department", q.department_id)
        lines[(kind, owner, q.pool_id)] = QuotaLine(q)
    with_demand = set(with_demand)
    for pool in pools:
        pool_rows = [q for q in rows if q.pool_id == pool.pk]
        pool_pending = {project: gpus for (project, pool_id), gpus in pending.items() if pool_id == pool.pk}
        shares = pool_fair_shares(pool, pool_rows, pool_pending)
        for (kind, owner), share in shares.items():
            if (kind, owner, pool.pk) in lines:
                lines[(kind, owner, pool.pk)].fair_share = share
        for q in pool_rows:
            if q.project_id:
                line = lines[("project", q.project_id, pool.pk)]
                line.requested = project_request(q, pool_pending)
                if (q.project_id, pool.pk) in with_demand:
                    line.fair_share_with_demand = pool_fair_shares(
                        pool, pool_rows, pool_pending, demand={q.project_id: q.gpu_deserved}
                    ).get(("project", q.project_id), Decimal(0))
    return pools, lines


def project_request(q: Quota, pending: dict[int, Decimal]) -> Decimal:
    """What a project's quota row asks of the fair share in its pool: the GPUs it holds (`gpu_allocated`)
    plus those its pending workloads wait for (`pending`, per project id)."""
    return Decimal(q.gpu_allocated) + pending.get(q.project_id, Decimal(0))


def pool_fair_shares(pool: NodePool, rows: list[Quota], pending: dict[int, Decimal],
                     demand: dict[int, Decimal] | None = None) -> dict[tuple[str, int], Decimal]:
    """Fair shares in one pool, keyed ("department"|"project", id): `rows` are the pool's quota rows with
    their allocation (`quotas_attach_allocation`; `q.project` and `q.department` loaded), `pending` the GPUs
    pending workloads ask per project id. A project's request is what it holds plus what it waits for (its
    deserved quota at most with over-quota off); capacity is the pool's Ready GPUs, at most its limit.
    `demand` (project id -> GPUs): those projects ask for at least that much (what-if: "with demand")."""
    capacity = Decimal(pool.gpu_ready)
    if pool.gpu_limit is not None:
        capacity = min(capacity, Decimal(pool.gpu_limit))
    children: dict[int, list[Claim]] = {}
    for q in rows:
        if q.project_id:
            requested = project_request(q, pending)
            if demand and q.project_id in demand:
                requested = max(requested, Decimal(demand[q.project_id]))
            if not q.project.allow_over_quota:
                requested = min(requested, q.gpu_deserved)
            children.setdefault(q.project.department_id, []).append(
                Claim(("project", q.project_id), q.gpu_deserved, requested, q.gpu_limit, q.over_quota_weight, q.rank))
    departments = [
        Claim(("department", q.department_id), q.gpu_deserved, None, q.gpu_limit, q.over_quota_weight, q.rank,
              tuple(children.get(q.department_id, ())) or (Claim(("none", q.department_id), requested=Decimal(0)),))
        for q in rows if q.department_id
    ]
    return {key: share for key, share in hierarchical_fair_shares(capacity, departments).items()
            if key[0] in ("department", "project")}


def department_summary(*, user: Any, department: Department) -> list[PoolSummary]:
    """Per pool: the department's deserved, allocated, over-quota and fair share, and those of the
    projects under it that the user may see."""
    pools, lines = cluster_fair_shares(cluster=department.cluster)
    projects = list(Project.objects.restrict(user, "view").filter(department=department).order_by("name"))
    summaries = []
    for pool in pools:
        summaries.append(PoolSummary(
            pool=pool,
            department=lines.get(("department", department.pk, pool.pk)),
            projects=[(p, lines[("project", p.pk, pool.pk)]) for p in projects if ("project", p.pk, pool.pk) in lines],
        ))
    return summaries


def project_summary(*, user: Any, project: Project) -> list[tuple[NodePool, QuotaLine]]:
    pools, lines = cluster_fair_shares(cluster=project.cluster)
    return [(pool, lines[("project", project.pk, pool.pk)]) for pool in pools if ("project", project.pk, pool.pk) in lines]


def allocated_in_words(summary: list[tuple[NodePool, QuotaLine]]) -> str:
    """A project's allocated GPUs in all its pools (its summary's lines: the pods every allocated figure sums),
    in words: what its running workloads hold together (the workloads list's "GPUs held")."""
    total = sum((Decimal(line.allocated or 0) for _, line in summary), Decimal(0))
    return f"{total.normalize():f} {noun(total, 'GPU')} allocated, held by its running workloads"


# ---------------------------------------------------------------------------------------------------
# Capacity against quota per pool (the quota grid's summary and the overview)

@dataclass
class PoolCapacity:
    """One pool's GPUs against the quota its departments are given.

    `ratio` is the over-subscription ratio Σ departments' deserved / ready GPUs (None when the pool has
    no ready GPUs); above 1 the pool has promised more than it can run now."""

    pool: NodePool
    gpu_ready: int
    gpu_total: int
    deserved: Decimal

    @property
    def ratio(self) -> Decimal | None:
        if not self.gpu_ready:
            return None
        return (self.deserved / Decimal(self.gpu_ready)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)

    @property
    def oversubscribed(self) -> bool:
        return self.deserved > self.gpu_ready


def pool_capacity(*, user: Any, cluster: Cluster, pools: list[NodePool] | None = None) -> list[PoolCapacity]:
    """Per pool of the cluster the user may see (default first, then by creation): ready and total GPUs
    and the sum of every department's deserved GPUs there. The sum is a fact of the pool, like its
    projects' quota sum on the pools page: it names no department. Two grouped queries; one when `pools`
    (the cluster's pools the user may see, with `pools_attach_usage`'s figures) gives the GPUs already read."""
    if pools is None:
        pools = list(NodePool.objects.restrict(user, "view").filter(cluster=cluster).order_by("-is_default", "created", "pk"))
        ids = [p.pk for p in pools]
        totals = node_capacity.pool_gpu_totals()
        gpus = {r["pool_id"]: r for r in Node.objects.filter(pool_id__in=ids).order_by().values("pool_id").annotate(
            total=totals["gpu_total"], ready=totals["gpu_ready"])}
    else:
        pools = sorted(pools, key=lambda p: (not p.is_default, p.created, p.pk))
        ids = [p.pk for p in pools]
        gpus = {p.pk: {"total": p.gpu_total, "ready": p.gpu_ready} for p in pools}
    deserved = dict(Quota.objects.filter(pool_id__in=ids, project__isnull=True).order_by().values("pool_id")
                    .annotate(v=Sum("gpu_deserved")).values_list("pool_id", "v"))
    return [PoolCapacity(pool=p, gpu_ready=(gpus.get(p.pk) or {}).get("ready") or 0,
                         gpu_total=(gpus.get(p.pk) or {}).get("total") or 0, deserved=deserved.get(p.pk) or Decimal(0))
            for p in pools]


# ---------------------------------------------------------------------------------------------------
# The quota grid and the overview chart

@dataclass
class GridRow:
    owner: Department | Project
    kind: str
    cells: list[Quota | None]
    children: list["GridRow"] = field(default_factory=list)


def quota_summary(*, user: Any, cluster: Cluster) -> dict[str, Any]:
    """The grid's columns (`pools`) and, aligned with them, each pool's capacity against quota."""
    pools = list(NodePool.objects.filter(cluster=cluster).order_by("-is_default", "created", "pk"))
    capacity = {c.pool.pk: c for c in pool_capacity(user=user, cluster=cluster)}
    return {"pools": pools, "capacity": [capacity.get(p.pk) for p in pools]}


def quota_grid(*, user: Any, cluster: Cluster) -> dict[str, Any]:
    """Rows = departments (each with its projects), columns = pools, cells = quota rows the user may see,
    with `editable` the ids of those it may change, and the per-pool summary of `quota_summary`."""
    summary = quota_summary(user=user, cluster=cluster)
    pools = summary["pools"]
    quotas = quotas_attach_allocation(list(Quota.objects.restrict(user, "view").filter(pool__cluster=cluster)
                                           .select_related("department", "project__department", "pool")))
    editable = set(Quota.objects.restrict(user, "change").filter(pool__cluster=cluster).values_list("pk", flat=True))
    cell: dict[tuple[str, int], dict[int, Quota]] = {}
    departments: dict[int, Department] = {}
    projects: dict[int, Project] = {}
    for q in quotas:
        if q.project_id:
            projects[q.project_id] = q.project
            cell.setdefault(("project", q.project_id), {})[q.pool_id] = q
        else:
            departments[q.department_id] = q.department
            cell.setdefault(("department", q.department_id), {})[q.pool_id] = q
    rows: list[GridRow] = []
    for department in sorted(departments.values(), key=lambda d: d.name):
        row = GridRow(department, "department", [cell[("department", department.pk)].get(p.pk) for p in pools])
        for project in sorted((p for p in projects.values() if p.department_id == department.pk), key=lambda p: p.name):
            row.children.append(GridRow(project, "project", [cell[("project", project.pk)].get(p.pk) for p in pools]))
        rows.append(row)
    # Projects visible without their department (a project role): rows of their own.
    for project in sorted((p for p in projects.values() if p.department_id not in departments), key=lambda p: p.name):
        rows.append(GridRow(project, "project", [cell[("project", project.pk)].get(p.pk) for p in pools]))
    return {**summary, "rows": rows, "editable": editable}


def overview_chart(*, user: Any, cluster: Cluster, usage: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Deserved, allocated and over-quota GPUs per department (that the user may see) and pool."""
    rows = quotas_attach_allocation(list(
        Quota.objects.restrict(user, "view").filter(pool__cluster=cluster, project__isnull=True)
        .select_related("department", "pool").order_by("pool__created", "pool_id", "department__name")), usage=usage)
    return [
        {"department": q.department.name, "pool": q.pool.name, "deserved": q.gpu_deserved,
         "allocated": q.gpu_allocated, "over_quota": q.gpu_over_quota}
        for q in rows
    ]


@dataclass
class WhatIf:
    kind: str  # "department" / "project"
    name: str
    before: Decimal
    after: Decimal
    edited: bool = False
    # A project's change held back by its demand: the GPUs it asks for in the pool now, and the fair share
    # it would have after the change if it asked for its deserved GPUs (None: not limited by demand).
    requested: Decimal = Decimal(0)
    with_demand: Decimal | None = None

    @property
    def change(self) -> Decimal:
        return self.after - self.before

    @property
    def change_size(self) -> Decimal:
        return abs(self.change)

    @property
    def limited_by_demand(self) -> bool:
        return self.with_demand is not None


WHAT_IF_FIELDS = ("gpu_deserved", "gpu_limit", "over_quota_weight", "rank")


def quota_what_if(*, user: Any, quota: Quota, values: dict[str, Any]) -> list[WhatIf]:
    """Each sibling's GPU fair share in the quota's pool before and after a change of the row (before
    saving): the departments of the pool for a department row, the department's projects for a project
    row. Only siblings the user may see are listed."""
    changes = {k: v for k, v in values.items() if k in WHAT_IF_FIELDS}
    cluster = quota.pool.cluster
    visible = Quota.objects.restrict(user, "view").filter(pool_id=quota.pool_id)
    if quota.project_id:
        visible = visible.filter(project__department_id=quota.project.department_id)
    else:
        visible = visible.filter(department__isnull=False)
    visible = list(visible.select_related("project", "department").order_by("department__name", "project__name"))
    projects = [(q.project_id, q.pool_id) for q in visible if q.project_id]
    _, before = cluster_fair_shares(cluster=cluster, with_demand=projects)
    _, after = cluster_fair_shares(cluster=cluster, overrides={quota.pk: changes}, with_demand=projects)
    out = []
    for q in visible:
        kind, owner = ("project", q.project_id) if q.project_id else ("department", q.department_id)
        key = (kind, owner, q.pool_id)
        if key in before and key in after:
            row = WhatIf(kind, (q.project or q.department).name, before[key].fair_share, after[key].fair_share,
                         q.pk == quota.pk, requested=after[key].requested)
            if q.project_id:
                # Held back by its demand: with demand it would have more after the change, and the change
                # with demand differs from the change without (or it is the row edited).
                now, then = before[key].fair_share_with_demand, after[key].fair_share_with_demand
                if then > row.after and (row.edited or then - now != row.change):
                    row.with_demand = then
            out.append(row)
    return out


# ---------------------------------------------------------------------------------------------------
# Will it fit? The facts of `projects.fit` for one pool (or every pool of a cluster), in a fixed number of
# queries: the nodes with what their active pods leave free (one grouped query over the pods' covering
# index), the preemptible GPU pods running there, and each owner's standing (deserved, allocated,
# non-preemptible, limit, fair share).

def pool_pending_requests(pool: NodePool, *, cluster_pools: list[NodePool] | None = None) -> dict[int, Decimal]:
    """GPUs the cluster's pending pods ask in `pool`, per project id. A pod's pool is the console's pool label
    among its labels or node selector (the KAI Jobs' pods carry it), else the pool of its KAI queue
    (`<project>.<pool>`), else a pool's own label in its node selector, else the default pool."""
    pools = cluster_pools if cluster_pools is not None else list(NodePool.objects.filter(cluster_id=pool.cluster_id))
    by_name = {p.name: p.pk for p in pools}
    by_label = {(p.label_key, p.label_value): p.pk for p in pools if not p.is_default}
    default = next((p.pk for p in pools if p.is_default), None)
    out: dict[int, Decimal] = {}
    rows = Pod.objects.filter(node__isnull=True, phase="Pending", gpus__gt=0,
                              project__in=Project.objects.filter(cluster_id=pool.cluster_id).values("pk"))
    for project_id, gpus, selector, labels in rows.values_list("project_id", "gpus", "node_selector", "labels"):
        selector, labels = selector or {}, labels or {}
        named = labels.get(CONSOLE_POOL_LABEL) or selector.get(CONSOLE_POOL_LABEL)
        queue = labels.get(wellknown.KAI_QUEUE_LABEL, "")
        if named in by_name:
            pool_id = by_name[named]
        elif "." in queue and queue.rsplit(".", 1)[1] in by_name:
            pool_id = by_name[queue.rsplit(".", 1)[1]]
        else:
            pool_id = next((by_label[(k, v)] for k, v in selector.items() if (k, v) in by_label), default)
        if pool_id == pool.pk:
            out[project_id] = out.get(project_id, Decimal(0)) + gpus
    return out


def _rows(queryset) -> list[tuple]:
    """The rows of a values_list queryset straight from the database cursor, without Django's per-row
    converters (the 5,000 rows of a large pool convert in more time than the query takes): numbers come as
    the driver gives them (int, float or Decimal), datetimes as the driver gives them, JSON as text."""
    try:
        sql, params = queryset.query.sql_with_params()
    except EmptyResultSet:  # e.g. `__in` an empty list: no row, no query
        return []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _decimal(value: Any) -> Decimal:
    if value is None:
        return Decimal(0)
    return value if isinstance(value, Decimal) else Decimal(str(value))


# Not-ready reasons no scheduler reads (an NVIDIA operand missing, an undrained move). A node not ready for
# one of them is still not ready: its GPUs are neither ready nor free anywhere (nodepools.capacity), so that
# "Will it fit?" counts the same free GPUs as the pools table, the nodes' Free column and the API.
SCHEDULER_BLIND_REASONS = ("Undrained migrated node", "Missing NVIDIA container toolkit", "Missing NVIDIA DCGM exporter")


def takes_pods_q():
    """Nodes whose GPUs take new pods: the nodes the console calls Ready (nodepools.capacity), as a filter."""
    return node_capacity.READY_Q & Q(unschedulable=False)


def _pool_node_rows(pools: list[NodePool]) -> dict[int, list[tuple]]:
    """Per pool id, each node's row with what its active pods use (the usage the database keeps on the node,
    `Node.usage_*`, recounted by triggers on the pods table: no pod is read), in one query per topology label:
    (name, takes pods (1/0), GPUs, CPU, memory, domain, GPUs used, CPU used, memory used, GPU exposure). Kept
    while the fleet holds still (`fleet_memoised`)."""
    shape = tuple(sorted((pool.pk, pool.topology_label) for pool in pools))
    return fleet_memoised(("pool_node_rows", shape), lambda: _read_pool_node_rows(pools))


def _read_pool_node_rows(pools: list[NodePool]) -> dict[int, list[tuple]]:
    keys: dict[str, list[int]] = {}
    for pool in pools:
        keys.setdefault(pool.topology_label, []).append(pool.pk)
    out: dict[int, list[tuple]] = {pool.pk: [] for pool in pools}
    for key, pool_ids in keys.items():
        nodes = Node.objects.filter(pool_id__in=pool_ids).order_by()  # no join for the default ordering
        nodes = nodes.annotate(domain=F("zone") if key == NodePool.ZONE_LABEL else KeyTextTransform(key, "labels"),
                               takes=Case(When(takes_pods_q(), then=Value(1)), default=Value(0)))
        rows = nodes.values_list(
            "pool_id", "name", "takes", "gpu_allocatable", "cpu_allocatable_millis",
            "memory_allocatable_bytes", "domain", "usage_gpus", "usage_cpu_millis", "usage_memory_bytes",
            "gpu_exposure")
        for row in _rows(rows):
            out[row[0]].append(row[1:])
    return out


def pools_node_room(pools: list[NodePool]) -> dict[int, tuple[Any, ...]]:
    """Per pool id, every node of the pool as a `fit.NodeRoom` (Ready and schedulable or not), with the GPUs,
    CPU and memory its active pods leave free and its topology domain (the value of the pool's topology
    label): one query per pool, rows read straight from the cursor. The nodes whose GPUs are not all whole, or
    that fractions share, carry their MIG slices free per profile and the share free on each shared GPU
    (`nodes_attach_gpu_room`: two queries per pool). Each pool's nodes a tuple, kept while the fleet holds still
    (`fleet_memoised`): shared, never to be changed."""
    return {pool.pk: fleet_memoised(("pool_node_room", pool.pk, pool.topology_label),
                                    lambda pool=pool: _read_pool_node_room(pool))
            for pool in pools}


def _read_pool_node_room(pool: NodePool) -> tuple[Any, ...]:
    rows = _pool_node_rows([pool])[pool.pk]
    return tuple(nodes_attach_gpu_room(pool, [
        fit.NodeRoom(name, _decimal(gpus), kube_gpu.to_decimal(max(_decimal(gpus) - _decimal(g), Decimal(0))),
                     domain or "",
                     bool(takes), cpu, memory, (cpu or 0) - int(c or 0), (memory or 0) - int(m or 0),
                     exposure="" if exposure in (None, kube_gpu.WHOLE) else exposure)
        for name, takes, gpus, cpu, memory, domain, g, c, m, exposure in rows]))


def nodes_attach_gpu_room(pool: NodePool, rooms: list[Any]) -> list[Any]:
    """The pool's `fit.NodeRoom`s with their GPUs by share (`nodepools.selectors.pool_node_gpu_room`, the
    reading the pool page's MIG slices come from): per MIG profile the allocatable and free slices and one
    slice's share, the share free on each GPU KAI fractions share, the exposure."""
    gpu = pool_node_gpu_room(pool)
    if not gpu:
        return rooms
    out = []
    shares: dict[str, Decimal] = {}  # a slice's share (text) as a Decimal, converted once per request
    for room in rooms:
        found = gpu.get(room.name)
        if found is None:
            out.append(room)
            continue
        slices = []
        for profile, (allocatable, _, share) in sorted(found.slices.items()):
            if share not in shares:
                shares[share] = kube_gpu.to_decimal(kube_gpu.fraction_of(share))
            slices.append((profile, allocatable, found.slices_free(profile), shares[share]))
        slices = tuple(slices)
        shared = tuple(max(Decimal(1) - used, Decimal(0)) for used in found.shared)
        out.append(replace(room, slices=slices, shared=shared, exposure=found.exposure))
    return out


def pools_node_figures(pools: list[NodePool]) -> tuple[dict[int, dict[str, Any]], dict[int, Any]]:
    """(per pool id its nodes' `pool_node_totals`, per pool id its `fit.Fragmentation`), from one pass over the
    pools' nodes per distinct topology label: the database groups the nodes by (pool, takes GPU pods, domain,
    free GPUs) — a few dozen rows whatever the size of the pool; the groups of nodes that take GPU pods make
    the fragmentation. A Ready, schedulable GPU node's free GPUs are
    its allocatable less the usage the database keeps on it (`Node.usage_gpus`: its active pods' GPUs, kept by
    triggers), so that no pod is read. Kept while the fleet holds still (`fleet_memoised`)."""
    shape = tuple(sorted((pool.pk, pool.topology_label) for pool in pools))
    return fleet_memoised(("pools_node_figures", shape), lambda: _read_pools_node_figures(pools))


def _read_pools_node_figures(pools: list[NodePool]) -> tuple[dict[int, dict[str, Any]], dict[int, Any]]:
    totals = tuple(pool_node_totals())
    keys: dict[str, list[int]] = {}
    for pool in pools:
        keys.setdefault(pool.topology_label, []).append(pool.pk)
    nodes: dict[int, dict[str, Any]] = {}
    groups: dict[int, list[tuple]] = {pool.pk: [] for pool in pools}
    for key, pool_ids in keys.items():
        domain = F("zone") if key == NodePool.ZONE_LABEL else KeyTextTransform(key, "labels")
        rows = (Node.objects.filter(pool_id__in=pool_ids).order_by()
                .annotate(fits=Case(When(takes_pods_q() & Q(gpu_allocatable__gt=0), then=Value(1)), default=Value(0)),
                          domain=domain, room=node_capacity.free_expr())
                .values("pool_id", "fits", "domain", "room").annotate(**pool_node_totals())
                .values_list("pool_id", "fits", "domain", "room", *totals))
        for pool_id, fits, domain, room, *figures in _rows(rows):
            group = dict(zip(totals, figures))
            pool = nodes.setdefault(pool_id, dict.fromkeys(totals))
            for name, value in group.items():
                if value is not None:
                    pool[name] = (pool[name] or 0) + (_decimal(value) if name.startswith("gpu_") and name not in (
                        "gpu_devices", "gpu_memory_total_mib") else int(value))
            if fits:
                groups[pool_id].append((domain or "", kube_gpu.to_decimal(_decimal(room)), group["node_count"],
                                        _decimal(group["gpu_total"])))
    labels = {pool.pk: pool.topology_label for pool in pools}
    return nodes, {pool_id: fit.fragmentation_of(rows, domain_key=labels[pool_id]) for pool_id, rows in groups.items()}


def pools_fragmentation(pools: list[NodePool]) -> dict[int, Any]:
    """Per pool id, its `fit.Fragmentation` (`pools_node_figures`)."""
    return pools_node_figures(pools)[1]


def pools_attach_fit(pools: list[NodePool], fragmentation: dict[int, Any] | None = None) -> list[NodePool]:
    """Set `pool.fit` (a `fit.Fragmentation`: pods of 1, 2, 4 and 8 GPUs that fit now, per topology domain too)
    on each pool: the overview's compact line."""
    figures = pools_fragmentation(pools) if fragmentation is None else fragmentation
    shared = pools_sharing_gpus(pools)
    for pool in pools:
        pool.fit = figures.get(pool.pk) or fit.Fragmentation(domain_key=pool.topology_label)
        if pool.pk in shared:  # whole GPUs counted apart from MIG slices and shared GPUs (`fit.by_share`)
            pool.fit = fleet_memoised(
                ("fit_by_share", pool.pk, pool.topology_label),
                lambda pool=pool, frag=pool.fit: fit.by_share(frag, pools_node_room([pool])[pool.pk],
                                                              domain_key=pool.topology_label))
    return pools


def pools_sharing_gpus(pools: list[NodePool]) -> set[int]:
    """The ids of those pools with nodes publishing MIG slices or active pods holding KAI fractions (two
    queries): their "Will it fit?" counts whole GPUs apart (`fit.by_share`)."""
    ids = tuple(sorted(pool.pk for pool in pools))
    if not ids:
        return set()
    return fleet_memoised(("pools_sharing_gpus", ids), lambda: _read_pools_sharing_gpus(list(ids)))


def _read_pools_sharing_gpus(ids: list[int]) -> set[int]:
    found = set(Node.objects.filter(pool_id__in=ids, gpu_exposure__in=(kube_gpu.MIG_MIXED, kube_gpu.MIG_SINGLE),
                                    gpu_sharing__has_key="slices").order_by()
                .values_list("pool_id", flat=True).distinct())
    found |= set(Pod.objects.active().filter(gpu_kind__in=kube_gpu.FRACTIONAL_KINDS, node__pool_id__in=ids)
                 .order_by().values_list("node__pool_id", flat=True).distinct())
    return found


def pools_attach_usage_and_fit(pools: list[NodePool], usage: list[dict[str, Any]] | None = None) -> list[NodePool]:
    """`pools_attach_usage` and `pools_attach_fit` (the overview's pools), reading the pools' nodes once."""
    nodes, fragmentation = pools_node_figures(pools)
    pools_attach_usage(pools, usage, nodes=nodes)
    return pools_attach_fit(pools, fragmentation)


def pool_standings(pool: NodePool, *, extra: tuple[Project, Decimal] | None = None) -> dict[tuple[str, str], Any]:
    """Every department's and project's `fit.Standing` in the pool, keyed (kind, name): deserved, allocated and
    non-preemptible GPUs of their running pods there, limit, over-quota switch, and fair share — computed with
    `extra` (a project, GPUs) added to what that project asks, as if its workload were submitted."""
    rows = list(Quota.objects.filter(pool=pool).select_related("project__department", "department"))
    usage = dict(((r["project_id"]), r) for r in Pod.objects.active().filter(node__pool=pool, project__isnull=False)
                 .order_by().values("project_id").annotate(
                     gpu=Sum("gpus"), np=Sum("gpus", filter=models.Q(priority__gte=fit.PREEMPTIBLE_BELOW))))
    if getattr(pool, "gpu_ready", None) is None:
        pool.gpu_ready = Node.objects.filter(pool=pool).aggregate(
            v=node_capacity.pool_gpu_totals()["gpu_ready"])["v"] or 0
    by_department: dict[int, dict[str, Decimal]] = {}
    for q in rows:
        u = usage.get(q.project_id) if q.project_id else None
        q.gpu_allocated = Decimal((u or {}).get("gpu") or 0)
        q.gpu_non_preemptible = Decimal((u or {}).get("np") or 0)
        if q.project_id:
            total = by_department.setdefault(q.project.department_id, {"gpu": Decimal(0), "np": Decimal(0)})
            total["gpu"] += q.gpu_allocated
            total["np"] += q.gpu_non_preemptible
    for q in rows:
        if q.department_id:
            total = by_department.get(q.department_id) or {}
            q.gpu_allocated, q.gpu_non_preemptible = total.get("gpu", Decimal(0)), total.get("np", Decimal(0))
    pending = pool_pending_requests(pool)
    if extra is not None:
        pending[extra[0].pk] = pending.get(extra[0].pk, Decimal(0)) + Decimal(extra[1])
    shares = pool_fair_shares(pool, rows, pending)
    out: dict[tuple[str, str], Any] = {}
    for q in rows:
        kind, owner = ("project", q.project) if q.project_id else ("department", q.department)
        out[(kind, owner.name)] = fit.Standing(
            kind, owner.name, deserved=q.gpu_deserved, allocated=q.gpu_allocated,
            non_preemptible=q.gpu_non_preemptible, limit=q.gpu_limit, fair_share=shares.get((kind, owner.pk)),
            allow_over_quota=owner.allow_over_quota if kind == "project" else True)
    return out


def pool_running(pool: NodePool, *, user: Any, preemptible_only: bool = True, projects: set[int] | None = None,
                 names: bool = True) -> list[Any]:
    """The GPU pods running in the pool as `fit.Running` (by default only the preemptible ones: what the
    scheduler may take; `projects`: only those of these project ids), with their project and department; the
    pod is named only to those who may see its project, others read its project alone. `names` False leaves
    the workload (the Job) out: `running_name_workloads` fills it for the few that are shown."""
    visible = set(Project.objects.restrict(user, "view").filter(cluster_id=pool.cluster_id).values_list("pk", flat=True))
    owners = {pk: (name, department) for pk, name, department in
              Project.objects.filter(cluster_id=pool.cluster_id).values_list("pk", "name", "department__name")}
    pods = Pod.objects.active().filter(node__pool=pool, project__isnull=False, gpus__gt=0).order_by()
    if preemptible_only:
        pods = pods.filter(priority__lt=fit.PREEMPTIBLE_BELOW)
    if projects is not None:
        pods = pods.filter(project_id__in=list(projects))
    columns = ["pk", "namespace", "name", "node__name", "gpus", "priority", "project_id", "created_in_cluster",
               "cpu_millis", "memory_bytes", "gpu_request"]
    if names:
        pods = pods.annotate(job=F("job_name"))
        columns.append("job")
    out = []
    decimals: dict[tuple, Decimal] = {}  # a pool's pods ask a few GPU counts: each converted once
    shares: dict[str, tuple[tuple, bool]] = {}  # a pool's pods ask a few GPU shapes: each read once
    for row in _rows(pods.values_list(*columns)):
        pk, namespace, name, node, gpus, priority, project_id, created, cpu, memory, request = row[:11]
        project, department = owners.get(project_id, ("", ""))
        key = (gpus.__class__, gpus)  # 1 and 1.0 apart: Decimal("1") and Decimal("1.0") read differently
        if key not in decimals:
            decimals[key] = _decimal(gpus)
        out.append(fit.Running(namespace, name, node, decimals[key], priority, project, department,
                               workload=(row[11] or "") if names else "", created=str(created or ""),
                               visible=project_id in visible, cpu=cpu or 0, memory=memory or 0, pk=pk,
                               **_held_share(request, shares)))
    return out


def _held_share(request: Any, seen: dict) -> dict[str, Any]:
    """A pod's GPU request record (JSON text from the cursor, or a dict) as `fit.Running`'s `mig` (the MIG
    slices it holds, by profile) and `fraction` (a KAI fraction of a shared GPU); {} for whole GPUs."""
    text = request if isinstance(request, str) else json.dumps(request or {}, sort_keys=True)
    if "mig-" not in text and "fraction" not in text and "memory" not in text:
        return {}
    if text not in seen:
        demand = kube_gpu.request_from_record(json.loads(text) if text else {})
        seen[text] = (tuple(sorted(demand.mig.items())), demand.kind in ("fraction", "memory"))
    mig, fraction = seen[text]
    return {"mig": mig, "fraction": fraction}


def running_name_workloads(pods: list[Any]) -> list[Any]:
    """The same pods with their workload (the Job named by their job-name label): one query for these few."""
    if not pods:
        return pods
    labels = dict(Pod.objects.filter(pk__in=[p.pk for p in pods]).values_list("pk", "labels"))
    return [replace(p, workload=(labels.get(p.pk) or {}).get("batch.kubernetes.io/job-name")
                    or (labels.get(p.pk) or {}).get("job-name") or "") for p in pods]


@dataclass
class PoolFit:
    pool: NodePool
    fragmentation: Any
    room: Any = None
    shape_error: str = ""


FIT_SHAPE_LIMITS = {"pods": (1, 1000), "gpus": (1, 64)}


@dataclass(frozen=True)
class FitShape:
    """What "what would make room?" asks: `pods` pods of `gpus` GPUs each, or with `profile` of `gpus` MIG
    slices of that profile each."""

    pods: int
    gpus: int
    profile: str = ""


def fit_shape(values: Any) -> tuple[FitShape | None, dict[str, str]]:
    """The shape of "what would make room for n × k GPUs" from a query (`pods`, `gpus`, optional `profile`: a
    MIG profile, `gpus` then slices of it per pod): None when not asked, with an error per bad field."""
    if not values.get("pods") and not values.get("gpus"):
        return None, {}
    errors, shape = {}, []
    for name, (low, high) in FIT_SHAPE_LIMITS.items():
        text = str(values.get(name) or "").strip()
        if not is_digits(text) or not low <= int(text) <= high:
            errors[name] = f"{name} is a whole number from {low} to {high}."
        else:
            shape.append(int(text))
    profile = str(values.get("profile") or "").strip()[:40]
    if profile:
        parsed = kube_gpu.parse_mig_profile(profile)
        if parsed is None:
            errors["profile"] = f"profile {profile!r} is not a MIG profile: <slices>g.<memory>gb, e.g. 1g.10gb."
        else:
            profile = parsed.name
    return (None if errors else FitShape(shape[0], shape[1], profile)), errors


def pool_fit(*, user: Any, pool: NodePool, shape: tuple[int, int] | FitShape | None = None,
             domain: str = "") -> PoolFit:
    """A pool's fragmentation — in whole GPUs, and per MIG profile in slices of it (`fit.mig_fragmentation`
    over the nodes' free slices, the reading the pool page's MIG slices come from) — and for a shape (pods,
    GPUs per pod, or MIG slices of a profile per pod) what would make room: the preemptible pods the
    scheduler's rules would take (over-quota use of the owners above their deserved quota) and whose they
    are. The pool must be one the user may see (the caller restricts)."""
    with reads_scope():  # the nodes' GPUs by share are read once, whoever asks them
        return _pool_fit(user=user, pool=pool, shape=shape, domain=domain)


def _pool_fit(*, user: Any, pool: NodePool, shape: tuple[int, int] | FitShape | None, domain: str) -> PoolFit:
    frag = pools_fragmentation([pool])[pool.pk]
    rooms = None
    if any(room.slices or room.shared for room in pool_node_gpu_room(pool).values()):
        rooms = pools_node_room([pool])[pool.pk]
        frag = fit.by_share(frag, rooms, domain_key=pool.topology_label)
    result = PoolFit(pool, frag)
    if shape is not None:
        pods, gpus, profile = (shape.pods, shape.gpus, shape.profile) if isinstance(shape, FitShape) else (*shape, "")
        rooms = rooms if rooms is not None else pools_node_room([pool])[pool.pk]
        owners = pool_standings(pool)
        # Only owners above their deserved quota give: their preemptible pods, named once chosen.
        over = {name for (kind, name), owner in owners.items() if kind == "project" and owner.over_quota > 0}
        ids = set(Project.objects.filter(cluster_id=pool.cluster_id, name__in=over).values_list("pk", flat=True))
        running = pool_running(pool, user=user, projects=ids, names=False)
        if profile:
            mig = frag.mig_room(profile)
            share = mig.share if mig is not None else kube_gpu.to_decimal(kube_gpu.mig_profile_share(profile))
            room = fit.make_room(rooms, running, owners, pods=pods, gpus=share * gpus, domain=domain,
                                 profile=profile, slices=gpus, pool=pool.name)
        else:
            room = fit.make_room(rooms, running, owners, pods=pods, gpus=gpus, domain=domain, pool=pool.name)
        victims = running_name_workloads([v.pod for v in room.victims])
        result.room = replace(room, victims=tuple(replace(v, pod=pod) for v, pod in zip(room.victims, victims)))
    return result
