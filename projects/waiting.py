"""Why is it waiting? For each pending GPU request of a project in a pool, the first reason that holds.

The reasons, the hardest fact first (what can never change before what may: the one line a person reads):
0. no node able to fit it: no Ready, schedulable node of the pool has that many GPUs at all — it never fits,
   whatever quota or priority it has (a scheduler may name its quota first: both are shown, this leads);
then in the order a scheduler with Run:ai's semantics (KAI) applies them:
1. over its limit: the project (or its department) would use more than its GPU limit in the pool;
   or the project has over-quota off and the request is beyond its deserved quota (any priority: the
   scheduler's limit is then the deserved quota);
2. non-preemptible work over the deserved quota: a workload of priority ≥ 100 only runs in-quota, and
   the project's (or department's) non-preemptible use plus the request exceeds its deserved GPUs;
4. the pool is full: no node has that many GPUs free; named with who borrows over their deserved
   share (departments and projects, how much), which a preemptible-aware scheduler would reclaim;
5. otherwise the request fits now and waits for the scheduler's next round.

The quota figures are the enforcing scheduler's: a scheduler counts against its queues only the pods it
scheduled (KAI Scheduler's queues hold the pods of its PodGroups: a pod of `default-scheduler` uses a node's
GPUs but no queue's quota). `COUNTING_SCHEDULER` (registered by the enforcers app) names that scheduler for a
cluster; the pods of other schedulers are then named apart (`Owner.others`), never added to the quota.

`explain()` is pure (numbers in, reasons out); `waiting_requests()` reads them for the pages and API.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from kube import wellknown
from typing import Any


from nodepools.kube import CONSOLE_POOL_LABEL, PREEMPTIBLE_BELOW
from common.words import noun
from nodepools.memo import fleet_memoised
from nodepools.models import Node, NodePool, NodeStatus, Pod
from nodepools.selectors import pod_usage_by_scheduler
from projects.models import Project, Quota


@dataclass(frozen=True)
class Owner:
    """A department's or project's numbers in one pool (GPUs)."""

    name: str
    deserved: Decimal = Decimal(0)
    allocated: Decimal = Decimal(0)
    non_preemptible: Decimal = Decimal(0)
    limit: Decimal | None = None
    # GPUs its pods hold that the enforcing scheduler does not count against its queue (pods other
    # schedulers placed): (scheduler name, GPUs, of them non-preemptible), most first.
    others: tuple[tuple[str, Decimal, Decimal], ...] = ()

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
            allow_over_quota: bool = True, pods: int = 1) -> Reason:
    """`gpus` per pod; `pods` > 1 for a gang (a Job its scheduler takes whole: KAI's PodGroup with its
    min-member, Kueue's Workload): the quotas are held against all its GPUs, and all its pods must find room."""
    gpus = Decimal(gpus)
    pods = max(int(pods or 1), 1)
    total = gpus * pods
    asks = f"{_n(total)} more" if pods == 1 else f"{_n(total)} more ({pods} pods of {_n(gpus)}, all together)"
    for kind, owner in (("project", project), ("department", department)):
        if owner.limit is not None and owner.allocated + total > owner.limit:
            return Reason("over_limit", f"Over its limit: {kind} {owner.name} uses {_n(owner.allocated)} of its "
                                        f"{_n(owner.limit)} GPU limit in {pool.name}; this asks {asks}.")
    if not any(node_total >= gpus for node_total, _ in pool.nodes):
        biggest = max((node_total for node_total, _ in pool.nodes), default=Decimal(0))
        return Reason("no_node_fits", f"Never fits: no node of {pool.name} has {_n(gpus)} {noun(gpus, 'GPU')} "
                                      f"(the largest Ready node has {_n(biggest)}); this asks {_n(gpus)} on one node.")
    non_preemptible = priority >= PREEMPTIBLE_BELOW
    # Over-quota off caps every workload of the project at its deserved quota (the scheduler's limit is the
    # quota then), whatever its priority: said before the non-preemptible rule, which it implies.
    if not allow_over_quota and project.allocated + total > project.deserved:
        return Reason("over_quota_off", f"Over-quota is off for project {project.name}: it uses "
                                        f"{_n(project.allocated)} of {_n(project.deserved)} deserved GPUs in "
                                        f"{pool.name}; this asks {asks}.")
    if non_preemptible:
        for kind, owner in (("project", project), ("department", department)):
            if owner.non_preemptible + total > owner.deserved:
                return Reason("non_preemptible_over_quota",
                              f"Non-preemptible work runs within deserved quota only: {kind} {owner.name} runs "
                              f"{_n(owner.non_preemptible)} non-preemptible {noun(owner.non_preemptible, 'GPU')} of "
                              f"{_n(owner.deserved)} deserved in "
                              f"{pool.name}; this asks {asks}.{others_text(owner)}")
    room = sum(int(free // gpus) if gpus > 0 else pods for _, free in pool.nodes)
    if room < pods:
        free = sum((f for _, f in pool.nodes), Decimal(0))
        who = tuple(sorted(pool.borrowers, key=lambda b: (-b[2], b[0], b[1])))
        names = ", ".join(f"{kind} {name} (+{_n(over)})" for kind, name, over in who) or "nobody"
        where = (f"none of its nodes {_n(gpus)}" if room == 0 else
                 f"room for {room} of its {pods} pods of {_n(gpus)}")
        return Reason("pool_full", f"The pool is full: {pool.name} has {_n(free)} {noun(free, 'GPU')} free, {where}. Borrowing "
                                   f"over their deserved quota: {names}.", who)
    return Reason("schedulable", f"It fits in {pool.name} now and waits for the scheduler's next round.")


def others_text(owner: Owner) -> str:
    """What of an owner's pods its scheduler does not count, in words (" " first), or ""."""
    if not owner.others:
        return ""
    held = "; ".join(f"{_n(g)} {noun(g, 'GPU')} on pods of {name}" for name, g, _ in owner.others)
    return f" Not counted against its quota by the scheduler (it did not schedule them): {held}."


# The scheduler whose pods count against a cluster's quotas, or "" (every pod counts): cluster id -> name.
# Registered by the app that knows the cluster's enforcer (enforcers' AppConfig.ready()); this floor never names it.
COUNTING_SCHEDULER: list = []


def counting_scheduler(cluster_id: int) -> str:
    return next((name for name in (f(cluster_id) for f in COUNTING_SCHEDULER) if name), "")


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
class ClusterFacts:
    """What `explain()` needs for any request in one cluster, read once: every owner's numbers per pool
    (deserved, allocated, non-preemptible, limit) and every pool's Ready nodes (total and free GPUs) and
    borrowers. A fixed number of queries whatever the number of requests explained with it."""

    owners: dict[tuple[str, int, int], Owner] = field(default_factory=dict)
    pools: dict[int, PoolFacts] = field(default_factory=dict)
    pool_names: dict[int, str] = field(default_factory=dict)
    by_label: dict[tuple[str, str], int] = field(default_factory=dict)
    by_name: dict[str, int] = field(default_factory=dict)
    default_id: int | None = None

    def pool_of(self, pod_selector: dict, pod_labels: dict) -> int | None:
        return pool_of_pod(pod_selector, pod_labels, self.by_label, self.by_name, self.default_id)

    def explain(self, *, project: Any, pool_id: int, gpus: Decimal, priority: int, pods: int = 1) -> Reason:
        """Why a request of `gpus` GPUs (on one node; `pods` of them taken together) at `priority` of
        `project` waits in the pool."""
        return explain(
            gpus=gpus, priority=priority,
            project=self.owners.get(("project", project.pk, pool_id), Owner(project.name)),
            department=self.owners.get(("department", project.department_id, pool_id), Owner(project.department.name)),
            pool=self.pools[pool_id], allow_over_quota=project.allow_over_quota, pods=pods)


def cluster_facts(cluster_id: int) -> ClusterFacts:
    """The facts of one cluster (see ClusterFacts): the running pods summed in SQL through their node (its
    cluster and pool; the pods' covering index): a node's use counts every pod on it, a project's or not (a
    GPU a shared service holds is not free); an owner's counts its own pods per pool, a department's those
    of its projects."""
    # late: projects.selectors imports projects.waiting (pool_of_pod)
    from projects.selectors import project_departments

    pools = list(NodePool.objects.filter(cluster_id=cluster_id))
    department_of = project_departments(cluster_id)
    usage: dict[tuple[str, int, int], dict[str, Any]] = {}
    counting = counting_scheduler(cluster_id)
    # The owners' use per pool: the pods' usage per (pool, project, scheduler) (`pod_usage_by_scheduler`): with
    # a counting scheduler, only its pods count against the quota; the others are named apart.
    for r in pod_usage_by_scheduler([p.pk for p in pools]):
        if not r["project_id"]:
            continue
        project_id, pool_id, gpu, np = r["project_id"], r["pool_id"], r["gpu"] or 0, r["np"] or 0
        for key in (("project", project_id, pool_id), ("department", department_of.get(project_id), pool_id)):
            total = usage.setdefault(key, {"gpu": Decimal(0), "np": Decimal(0), "others": {}})
            if not counting or r["scheduler"] in (counting, ""):
                total["gpu"] += gpu
                total["np"] += np
            else:
                other = total["others"].setdefault(r["scheduler"], [Decimal(0), Decimal(0)])
                other[0] += gpu
                other[1] += np
    owners: dict[tuple[str, int, int], Owner] = {}
    for q in Quota.objects.filter(pool__cluster_id=cluster_id).select_related("project", "department"):
        kind, owner_id = ("project", q.project_id) if q.project_id else ("department", q.department_id)
        name = q.project.name if q.project_id else q.department.name
        u = usage.get((kind, owner_id, q.pool_id), {})
        others = tuple(sorted(((n, g, np) for n, (g, np) in (u.get("others") or {}).items() if g),
                              key=lambda o: (-o[1], o[0])))
        owners[(kind, owner_id, q.pool_id)] = Owner(name, q.gpu_deserved, u.get("gpu", Decimal(0)),
                                                    u.get("np", Decimal(0)), q.gpu_limit, others)
    pool_nodes = _pool_ready_nodes(cluster_id)
    facts = ClusterFacts(
        owners=owners, pool_names={p.pk: p.name for p in pools},
        by_label={(p.label_key, p.label_value): p.pk for p in pools if not p.is_default},
        by_name={p.name: p.pk for p in pools}, default_id=next((p.pk for p in pools if p.is_default), None))
    for pool in pools:
        borrowers = tuple(
            (kind, owner.name, owner.over_quota) for (kind, _, pool_id), owner in owners.items()
            if pool_id == pool.pk and owner.over_quota > 0
        )
        facts.pools[pool.pk] = PoolFacts(pool.name, tuple(pool_nodes.get(pool.pk, [])), borrowers)
    return facts


def _pool_ready_nodes(cluster_id: int) -> dict[int, tuple[tuple[Decimal, Decimal], ...]]:
    """Per pool id, (GPUs, GPUs free) of each node a request could go to: Ready, schedulable, with GPUs, less what
    runs on it (the usage the database keeps on the node, `Node.usage_gpus`). Kept while the fleet holds still."""
    def read() -> dict[int, tuple[tuple[Decimal, Decimal], ...]]:
        ready = Node.objects.filter(cluster_id=cluster_id, status=NodeStatus.READY, unschedulable=False,
                                    gpu_allocatable__gt=0)
        out: dict[int, list[tuple[Decimal, Decimal]]] = {}
        for pool_id, gpus, used in ready.values_list("pool_id", "gpu_allocatable", "usage_gpus"):
            total = Decimal(gpus or 0)
            out.setdefault(pool_id, []).append((total, max(total - (used or Decimal(0)), Decimal(0))))
        return {pool_id: tuple(rows) for pool_id, rows in out.items()}

    return fleet_memoised(("pool_ready_nodes", cluster_id), read)


def pool_of_pod(pod_selector: dict, pod_labels: dict, by_label: dict, by_name: dict,
                default_id: int | None) -> int | None:
    """The pool a pending pod asks for: the console's pool label, KAI's queue `<project>.<pool>`, a pool's
    own label among its node selector, else the default pool. `by_label`/`by_name`: the pools' ids."""
    selector = pod_selector or {}
    if selector.get(CONSOLE_POOL_LABEL) in by_name:
        return by_name[selector[CONSOLE_POOL_LABEL]]
    queue = (pod_labels or {}).get(wellknown.KAI_QUEUE_LABEL, "")
    if "." in queue and queue.rsplit(".", 1)[1] in by_name:
        return by_name[queue.rsplit(".", 1)[1]]
    return next((by_label[(k, v)] for k, v in selector.items() if (k, v) in by_label), default_id)


def waiting_requests(*, user: Any, project=None, department=None) -> list[WaitingRequest]:
    """The pending GPU requests of a project (or of a department's projects) the user may see, each
    with why it waits. A fixed number of queries per call."""
    return waiting_requests_first(user=user, project=project, department=department)[0]


def waiting_requests_first(*, user: Any, project=None, department=None,
                           first: int | None = None) -> tuple[list[WaitingRequest], int]:
    """(the `first` longest waiting of `waiting_requests`, each with why it waits, and how many wait in all):
    only those shown are explained. A fixed number of queries per call."""
    cluster_id = (project or department).cluster_id
    projects = Project.objects.restrict(user, "view").filter(cluster_id=cluster_id).select_related("department")
    projects = projects.filter(pk=project.pk) if project is not None else projects.filter(department=department)
    projects = {p.pk: p for p in projects}
    if not projects:
        return [], 0
    pending = (Pod.objects.filter(cluster_id=cluster_id, project_id__in=list(projects), node__isnull=True,
                                  phase="Pending", gpus__gt=0).order_by("created_in_cluster", "name")
               .values_list("namespace", "name", "project_id", "node_selector", "labels", "gpus", "priority",
                            "created_in_cluster"))
    # The facts are read even when nothing waits: the page makes the same queries whatever the fleet holds.
    facts = cluster_facts(cluster_id)
    out: list[WaitingRequest] = []
    total = 0
    for namespace, name, project_id, selector, labels, gpus, priority, created in pending:
        pool_id = facts.pool_of(selector, labels)
        if pool_id is None:
            continue
        total += 1
        if first is not None and len(out) >= first:
            continue
        p = projects[project_id]
        reason = facts.explain(project=p, pool_id=pool_id, gpus=gpus, priority=priority)
        out.append(WaitingRequest(namespace, name, p.name, p.department.name, facts.pool_names[pool_id],
                                  gpus, priority, reason, created))
    return out, total


# ---------------------------------------------------------------------------------------------------
# The console's answer and the scheduler's, in one vocabulary

# Categories of "why does it wait", shared by the console's reasons and the schedulers' own words, so the
# two can be compared (the workloads table, the agreement test of tests/workloads/test_loop_agreement.py).
LIMIT, NON_PREEMPTIBLE, CAPACITY, QUEUE, GANG, ADMISSION, SCHEDULABLE = (
    "limit", "non_preemptible_quota", "capacity", "queue", "gang", "admission", "schedulable")
CATEGORIES = {
    LIMIT: "over a limit",
    NON_PREEMPTIBLE: "non-preemptible work beyond the deserved quota",
    CAPACITY: "no room on the pool's nodes",
    QUEUE: "its queue is missing or stopped",
    GANG: "its gang is incomplete",
    ADMISSION: "not admitted yet",
    SCHEDULABLE: "fits, waits for the scheduler's next round",
}
CONSOLE_CATEGORY = {
    "over_limit": LIMIT, "over_quota_off": LIMIT, "non_preemptible_over_quota": NON_PREEMPTIBLE,
    "no_node_fits": CAPACITY, "pool_full": CAPACITY, "schedulable": SCHEDULABLE,
}


def console_category(code: str) -> str:
    return CONSOLE_CATEGORY.get(code, SCHEDULABLE)


def kai_category(reason: str, message: str = "") -> str:
    """The category of KAI Scheduler's reason (a PodGroup's `UnschedulableOnNodePool` reasons, or the prefix
    of its pods' PodScheduled message): OverLimit, NonPreemptibleOverQuota, QueueDoesNotExist, NotReady
    (gang), anything about nodes (PodSchedulingErrors, "no nodes with enough resources")."""
    reason = reason or message.split(":", 1)[0]
    if reason == "OverLimit":
        return LIMIT
    if reason == "NonPreemptibleOverQuota":
        return NON_PREEMPTIBLE
    if reason == "QueueDoesNotExist":
        return QUEUE
    if reason == "NotReady" or message.startswith("Job is not ready for scheduling"):
        return GANG
    return CAPACITY


def kueue_category(reason: str, message: str) -> str:
    """The category of Kueue's `QuotaReserved=False` reason and message: beyond the ClusterQueue's maximum
    (nominal + borrowing limit) is a limit; quota in use by others, or no flavor whose nodes fit, is no room;
    a missing or stopped queue; waiting for the preempted workloads to go is about to run."""
    text = message or ""
    if reason in ("Misconfigured", "Suspended", "Stopped", "Inactive", "FlavorNotFound") or "doesn't exist" in text \
            or "is inactive" in text:
        return QUEUE
    if "maximum capacity" in text:
        return LIMIT
    if reason == "WaitingForPreemptedWorkloads" or "Pending the preemption" in text:
        return SCHEDULABLE
    if "insufficient unused quota" in text or "untolerated taint" in text or "node affinity" in text \
            or "couldn't assign flavors" in text:
        return CAPACITY
    return ADMISSION


def default_scheduler_category(message: str) -> str:
    """kube-scheduler's FailedScheduling message ("0/30 nodes are available: …") is about nodes."""
    return CAPACITY if message else SCHEDULABLE
