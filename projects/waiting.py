"""Why is it waiting? For each pending GPU request of a project in a pool, the first reason that holds.

The reasons, in the order a scheduler with Run:ai's semantics (KAI) applies them:
1. over its limit: the project (or its department) would use more than its GPU limit in the pool;
   or the project has over-quota off and the request is beyond its deserved quota;
2. non-preemptible work over the deserved quota: a workload of priority ≥ 100 only runs in-quota, and
   the project's (or department's) non-preemptible use plus the request exceeds its deserved GPUs;
3. no node able to fit it: no Ready, schedulable node of the pool has that many GPUs at all;
4. the pool is full: no node has that many GPUs free; named with who borrows over their deserved
   share (departments and projects, how much), which a preemptible-aware scheduler would reclaim;
5. otherwise the request fits now and waits for the scheduler's next round.

`explain()` is pure (numbers in, reasons out); `waiting_requests()` reads them for the pages and API.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from nodepools.kube import CONSOLE_POOL_LABEL, PREEMPTIBLE_BELOW



@dataclass(frozen=True)
class Owner:
    """A department's or project's numbers in one pool (GPUs)."""

    name: str
    deserved: Decimal = Decimal(0)
    allocated: Decimal = Decimal(0)
    non_preemptible: Decimal = Decimal(0)
    limit: Decimal | None = None

    @property
    def over_quota(self) -> Decimal:
        return max(self.allocated - self.deserved, Decimal(0))


@dataclass(frozen=True)
class PoolFacts:
    name: str
    # Per Ready, schedulable node: (allocatable GPUs, free GPUs).
    nodes: tuple[tuple[Decimal, Decimal], ...] = ()
    borrowers: tuple[tuple[str, str, Decimal], ...] = ()  # (kind, name, GPUs over deserved)


@dataclass(frozen=True)
class Reason:
    code: str  # over_limit, over_quota_off, non_preemptible_over_quota, no_node_fits, pool_full, schedulable
    text: str
    borrowers: tuple[tuple[str, str, Decimal], ...] = ()


def _n(value: Decimal | int | float) -> str:
    value = Decimal(value).normalize()
    return f"{value:f}"


def explain(*, gpus: Decimal, priority: int, project: Owner, department: Owner, pool: PoolFacts,
            allow_over_quota: bool = True) -> Reason:
    gpus = Decimal(gpus)
    for kind, owner in (("project", project), ("department", department)):
        if owner.limit is not None and owner.allocated + gpus > owner.limit:
            return Reason("over_limit", f"Over its limit: {kind} {owner.name} uses {_n(owner.allocated)} of its "
                                        f"{_n(owner.limit)} GPU limit in {pool.name}; this asks {_n(gpus)} more.")
    non_preemptible = priority >= PREEMPTIBLE_BELOW
    if not non_preemptible and not allow_over_quota and project.allocated + gpus > project.deserved:
        return Reason("over_quota_off", f"Over-quota is off for project {project.name}: it uses "
                                        f"{_n(project.allocated)} of {_n(project.deserved)} deserved GPUs in "
                                        f"{pool.name}; this asks {_n(gpus)} more.")
    if non_preemptible:
        for kind, owner in (("project", project), ("department", department)):
            if owner.non_preemptible + gpus > owner.deserved:
                return Reason("non_preemptible_over_quota",
                              f"Non-preemptible work runs within deserved quota only: {kind} {owner.name} runs "
                              f"{_n(owner.non_preemptible)} non-preemptible GPUs of {_n(owner.deserved)} deserved in "
                              f"{pool.name}; this asks {_n(gpus)} more.")
    if not any(total >= gpus for total, _ in pool.nodes):
        biggest = max((total for total, _ in pool.nodes), default=Decimal(0))
        return Reason("no_node_fits", f"No node can fit it: the largest Ready node of {pool.name} has "
                                      f"{_n(biggest)} GPUs; this asks {_n(gpus)} on one node.")
    if not any(free >= gpus for _, free in pool.nodes):
        free = sum((f for _, f in pool.nodes), Decimal(0))
        who = tuple(sorted(pool.borrowers, key=lambda b: (-b[2], b[0], b[1])))
        names = ", ".join(f"{kind} {name} (+{_n(over)})" for kind, name, over in who) or "nobody"
        return Reason("pool_full", f"The pool is full: {pool.name} has {_n(free)} GPUs free, none of its nodes "
                                   f"{_n(gpus)}. Borrowing over their deserved quota: {names}.", who)
    return Reason("schedulable", f"It fits in {pool.name} now and waits for the scheduler's next round.")


@dataclass
class WaitingRequest:
    namespace: str
    name: str
    project: str
    department: str
    pool: str
    gpus: Decimal
    priority: int
    reason: Reason
    created: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "project": self.project,
                "department": self.department, "pool": self.pool, "gpus": str(self.gpus),
                "priority": self.priority, "preemptible": self.priority < PREEMPTIBLE_BELOW,
                "reason": self.reason.code, "explanation": self.reason.text,
                "borrowers": [{"kind": k, "name": n, "gpus_over_deserved": str(v)} for k, n, v in self.reason.borrowers]}


@dataclass
class _Facts:
    owners: dict[tuple[str, int, int], Owner] = field(default_factory=dict)
    pools: dict[int, PoolFacts] = field(default_factory=dict)


def _pool_of(pod_selector: dict, pod_labels: dict, by_label: dict, by_name: dict,
             default_id: int | None) -> int | None:
    """The pool a pending pod asks for: the console's pool label, KAI's queue `<project>.<pool>`, a pool's
    own label among its node selector, else the default pool. `by_label`/`by_name`: the pools' ids."""
    selector = pod_selector or {}
    if selector.get(CONSOLE_POOL_LABEL) in by_name:
        return by_name[selector[CONSOLE_POOL_LABEL]]
    queue = (pod_labels or {}).get("kai.scheduler/queue", "")
    if "." in queue and queue.rsplit(".", 1)[1] in by_name:
        return by_name[queue.rsplit(".", 1)[1]]
    return next((by_label[(k, v)] for k, v in selector.items() if (k, v) in by_label), default_id)


def waiting_requests(*, user: Any, project=None, department=None) -> list[WaitingRequest]:
    """The pending GPU requests of a project (or of a department's projects) the user may see, each
    with why it waits. A fixed number of queries per call."""
    from django.db.models import Q, Sum

    from nodepools.models import Node, NodePool, NodeStatus, Pod
    from projects.models import Project, Quota

    cluster_id = (project or department).cluster_id
    projects = Project.objects.restrict(user, "view").filter(cluster_id=cluster_id).select_related("department")
    projects = projects.filter(pk=project.pk) if project is not None else projects.filter(department=department)
    projects = {p.pk: p for p in projects}
    if not projects:
        return []
    pools = list(NodePool.objects.filter(cluster_id=cluster_id))
    default_id = next((p.pk for p in pools if p.is_default), None)
    pending = list(Pod.objects.filter(cluster_id=cluster_id, project_id__in=list(projects), node__isnull=True,
                                      phase="Pending", gpus__gt=0).order_by("created_in_cluster", "name"))
    if not pending:
        return []
    # The running pods, summed in SQL through their node (its cluster and pool; the pods' covering index):
    # a node's use counts every pod on it, a project's or not (a GPU a shared service holds is not free);
    # an owner's counts its own pods per pool, a department's those of its projects.
    nodes = list(Node.objects.filter(cluster_id=cluster_id).values_list("pk", "pool_id", "status", "unschedulable",
                                                                      "gpu_allocatable"))
    department_of = dict(Project.objects.filter(cluster_id=cluster_id).values_list("pk", "department_id"))
    running = Pod.objects.active().filter(node__cluster_id=cluster_id).order_by()
    used_by_node: dict[int, Decimal] = dict(
        running.values("node_id").annotate(v=Sum("gpus")).values_list("node_id", "v"))
    usage: dict[tuple[str, int, int], dict[str, Decimal]] = {}
    for project_id, pool_id, gpu, np in (
            running.filter(project__isnull=False).values("project_id", "node__pool_id")
            .annotate(gpu=Sum("gpus"), np=Sum("gpus", filter=Q(priority__gte=PREEMPTIBLE_BELOW)))
            .values_list("project_id", "node__pool_id", "gpu", "np")):
        for key in (("project", project_id, pool_id), ("department", department_of.get(project_id), pool_id)):
            total = usage.setdefault(key, {"gpu": Decimal(0), "np": Decimal(0)})
            total["gpu"] += gpu or 0
            total["np"] += np or 0
    owners: dict[tuple[str, int, int], Owner] = {}
    names = {}
    for q in Quota.objects.filter(pool__cluster_id=cluster_id).select_related("project", "department"):
        kind, owner_id = ("project", q.project_id) if q.project_id else ("department", q.department_id)
        name = q.project.name if q.project_id else q.department.name
        names[(kind, owner_id)] = name
        u = usage.get((kind, owner_id, q.pool_id), {})
        owners[(kind, owner_id, q.pool_id)] = Owner(name, q.gpu_deserved, u.get("gpu", Decimal(0)),
                                                    u.get("np", Decimal(0)), q.gpu_limit)
    pool_nodes: dict[int, list[tuple[Decimal, Decimal]]] = {}
    for node_id, pool_id, status, unschedulable, gpus in nodes:
        if status != NodeStatus.READY or unschedulable:
            continue
        total = Decimal(gpus or 0)
        used = used_by_node.get(node_id) or Decimal(0)
        pool_nodes.setdefault(pool_id, []).append((total, max(total - used, Decimal(0))))
    facts: dict[int, PoolFacts] = {}
    for pool in pools:
        borrowers = tuple(
            (kind, owner.name, owner.over_quota) for (kind, _, pool_id), owner in owners.items()
            if pool_id == pool.pk and owner.over_quota > 0
        )
        facts[pool.pk] = PoolFacts(pool.name, tuple(pool_nodes.get(pool.pk, [])), borrowers)
    pool_names = {p.pk: p.name for p in pools}
    by_label = {(p.label_key, p.label_value): p.pk for p in pools if not p.is_default}
    by_name = {p.name: p.pk for p in pools}
    out: list[WaitingRequest] = []
    for pod in pending:
        p = projects[pod.project_id]
        pool_id = _pool_of(pod.node_selector, pod.labels, by_label, by_name, default_id)
        if pool_id is None:
            continue
        reason = explain(
            gpus=pod.gpus, priority=pod.priority,
            project=owners.get(("project", p.pk, pool_id), Owner(p.name)),
            department=owners.get(("department", p.department_id, pool_id), Owner(p.department.name)),
            pool=facts[pool_id], allow_over_quota=p.allow_over_quota)
        out.append(WaitingRequest(pod.namespace, pod.name, p.name, p.department.name, pool_names[pool_id], pod.gpus,
                                  pod.priority, reason, pod.created_in_cluster))
    return out
