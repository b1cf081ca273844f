"""Reads for enforcement: the organisation snapshot the desired objects are built from."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.db.models import Sum

from enforcers.desired import DepartmentState, OrgState, PoolState, ProjectState, QuotaState
from enforcers.models import Enforcement, Enforcer, RefusedWrite, SchedulerQueue
from common.words import amount, noun
from kube import wellknown
from kube import gpu as kube_gpu
from kube.taints import common_taints
from nodepools.models import Cluster, Node, NodePool
from nodepools.selectors import pod_usage_by_scheduler
from projects.models import Department, PriorityEntry, Project, ProjectNamespace, Quota
from projects.selectors import quotas_attach_allocation


def _quota_state(q: Quota) -> QuotaState:
    return QuotaState(
        gpu_deserved=q.gpu_deserved, cpu_deserved=q.cpu_deserved, memory_deserved_mib=q.memory_deserved_mib,
        gpu_limit=q.gpu_limit, cpu_limit=q.cpu_limit, memory_limit_mib=q.memory_limit_mib,
        over_quota_weight=q.over_quota_weight, rank=q.rank,
    )


def _common_taints(nodes: list[Node]) -> tuple[dict[str, str], ...]:
    """Taints (NoSchedule / NoExecute) that every node of a pool carries: the pool's own taints."""
    return common_taints(node.taints for node in nodes)


def _pool_gpus(nodes: list[Node]) -> kube_gpu.PoolGpus:
    """The pool's GPUs in GPU-equivalents, as KAI counts them and per resource, from what the sync stored."""
    inventories = []
    for node in nodes:
        inv = kube_gpu.node_from_record(node.gpu_sharing, product=node.gpu_product, physical=node.gpu_capacity)
        if not node.gpu_sharing:
            inv = replace(inv, allocatable=Fraction(str(node.gpu_allocatable)))
        inventories.append(inv)
    return kube_gpu.pool_gpus(inventories)


def pools_gpus(*, cluster: Cluster) -> dict[str, kube_gpu.PoolGpus]:
    """Each pool's GPUs (`kube.gpu.PoolGpus`) by pool name: what turns GPU-equivalents into a scheduler's units
    and back. One query."""
    nodes: dict[str, list[Node]] = defaultdict(list)
    for node in Node.objects.filter(cluster=cluster, pool__isnull=False).select_related("pool").only(
            "pool__name", "gpu_sharing", "gpu_product", "gpu_capacity", "gpu_allocatable"):
        nodes[node.pool.name].append(node)
    return {name: _pool_gpus(members) for name, members in nodes.items()}


def org_state(*, cluster: Cluster, pool_label: str | None = None) -> OrgState:
    """The cluster's pools, departments and projects with their quotas, namespaces and pool order.

    Not restricted by a user: this is what the enforcer writes for the whole cluster (its callers are
    the sync's leader and system administrators' dry runs)."""
    pools = list(NodePool.objects.filter(cluster=cluster).order_by("created", "pk"))
    nodes_by_pool: dict[int, list[Node]] = defaultdict(list)
    for node in Node.objects.filter(cluster=cluster, pool__isnull=False).only(
            "pool_id", "taints", "gpu_sharing", "gpu_product", "gpu_capacity", "gpu_allocatable"):
        nodes_by_pool[node.pool_id].append(node)
    totals = {
        row["pool_id"]: row for row in Node.objects.filter(cluster=cluster).order_by().values("pool_id").annotate(
            cpu=Sum("cpu_allocatable_millis"), memory=Sum("memory_allocatable_bytes"),
            storage=Sum("storage_allocatable_bytes"))
    }
    pool_states = tuple(
        PoolState(name=p.name, gpu_placement=p.gpu_placement, cpu_placement=p.cpu_placement,
                  taints=_common_taints(nodes_by_pool.get(p.pk, [])),
                  cpu_total_millis=int((totals.get(p.pk) or {}).get("cpu") or 0),
                  memory_total_bytes=int((totals.get(p.pk) or {}).get("memory") or 0),
                  storage_total_bytes=int((totals.get(p.pk) or {}).get("storage") or 0),
                  gpus=_pool_gpus(nodes_by_pool.get(p.pk, [])))
        for p in pools
    )
    pool_names = {p.pk: p.name for p in pools}
    quotas_d: dict[int, dict[str, QuotaState]] = defaultdict(dict)
    quotas_p: dict[int, dict[str, QuotaState]] = defaultdict(dict)
    for q in Quota.objects.filter(pool__cluster=cluster):
        target = quotas_p[q.project_id] if q.project_id else quotas_d[q.department_id]
        target[pool_names[q.pool_id]] = _quota_state(q)
    namespaces: dict[int, list[str]] = defaultdict(list)
    for project_id, name in ProjectNamespace.objects.filter(cluster=cluster).values_list("project_id", "name"):
        namespaces[project_id].append(name)
    order: dict[int, list[str]] = defaultdict(list)
    for project_id, pool_id in (PriorityEntry.objects.filter(project__cluster=cluster)
                                .order_by("project_id", "position").values_list("project_id", "pool_id")):
        order[project_id].append(pool_names[pool_id])
    departments = list(Department.objects.filter(cluster=cluster).order_by("name"))
    projects = list(Project.objects.filter(cluster=cluster).select_related("department").order_by("name"))
    return OrgState(
        cluster=cluster.name,
        pools=pool_states,
        departments=tuple(DepartmentState(name=d.name, quotas=dict(quotas_d.get(d.pk, {}))) for d in departments),
        projects=tuple(
            ProjectState(name=p.name, department=p.department.name, namespaces=tuple(sorted(namespaces.get(p.pk, []))),
                         allow_over_quota=p.allow_over_quota, pool_order=tuple(order.get(p.pk, [])),
                         quotas=dict(quotas_p.get(p.pk, {})))
            for p in projects
        ),
        **({"pool_label": pool_label} if pool_label else {}),
    )


# ---------------------------------------------------------------------------------------------------
# What the scheduler reports, beside the console's own figures

def counting_scheduler(cluster_id: int) -> str:
    """The scheduler whose own pods count against the cluster's quotas: KAI Scheduler where it enforces (its
    Queues hold the pods of its PodGroups, the pods it schedules); "" otherwise (every pod counts: the console's
    own record, or Kueue, which admits Jobs and leaves placing their pods to kube-scheduler)."""
    enforcer = Enforcement.objects.filter(cluster_id=cluster_id).values_list("enforcer", flat=True).first()
    return wellknown.KAI_SCHEDULER_NAME if enforcer == Enforcer.KAI else ""


@dataclass
class QueueStatusRow:
    queue: SchedulerQueue
    owner_kind: str
    owner_name: str
    console_allocated: Decimal | None
    # GPUs the owner's pods hold in the pool by the scheduler that placed them ({scheduler name: GPUs}).
    by_scheduler: dict[str, Decimal] = field(default_factory=dict)
    counting: str = ""  # the scheduler whose pods its queues count ("" every pod)

    @property
    def differs(self) -> bool:
        """The scheduler's allocation and the console's differ by more than rounding."""
        reported = self.queue.gpu_allocated
        if reported is None or self.console_allocated is None:
            return False
        return abs(Decimal(reported) - Decimal(self.console_allocated)) >= Decimal("0.01")

    @property
    def empty(self) -> bool:
        """Nothing in it: no GPU allocated (by either count), requested or borrowed, no workload pending."""
        q = self.queue
        figures = (q.gpu_allocated, q.gpu_allocated_non_preemptible, q.gpu_requested, q.gpu_borrowed,
                   q.pending_workloads, self.console_allocated)
        return not any(Decimal(v or 0) for v in figures)

    @property
    def explanation(self) -> str:
        """Why the two counts differ, in words ("" when they agree): the GPUs of pods the enforcing scheduler
        did not place (it counts only its own pods against its queues), then what is left unexplained."""
        if not self.differs:
            return ""
        console, reported = Decimal(self.console_allocated), Decimal(self.queue.gpu_allocated)
        parts, others = [], Decimal(0)
        if self.counting:
            scheduler = SCHEDULER_WORDS.get(self.counting, self.counting)
            for name, gpus in sorted(self.by_scheduler.items(), key=lambda i: (-i[1], i[0])):
                if name in (self.counting, "") or not gpus:
                    continue
                others += gpus
                parts.append(f"{amount(gpus, 'GPU')} held by pods that {scheduler} did not "
                             f"schedule (scheduler: {name}): the console counts them, {scheduler} does not")
        rest = console - others - reported
        if abs(rest) >= Decimal("0.01"):
            if rest > 0:
                parts.append(f"{amount(rest, 'GPU')} more in the console's count: pods placed "
                             f"since the scheduler's last report ({self.queue.updated:%H:%M:%S})")
            else:
                parts.append(f"{amount(-rest, 'GPU')} more in the scheduler's count: pods it "
                             f"has allocated that the console does not see running yet, or that left since its last "
                             f"report ({self.queue.updated:%H:%M:%S})")
        return "; ".join(parts) + "."


SCHEDULER_WORDS = {wellknown.KAI_SCHEDULER_NAME: "KAI"}


@dataclass
class QueueStatus:
    """The queue rows the user may see: those with something in them (`shown`), and the empty ones (`hidden`,
    shown on demand) — all of them with `everything`."""

    rows: list[QueueStatusRow]
    everything: bool = False

    @property
    def hidden(self) -> list[QueueStatusRow]:
        return [] if self.everything else [r for r in self.rows if r.empty]

    @property
    def empty_count(self) -> int:
        return sum(1 for r in self.rows if r.empty)

    @property
    def shown(self) -> list[QueueStatusRow]:
        return self.rows if self.everything else [r for r in self.rows if not r.empty]

    @property
    def differing(self) -> int:
        return sum(1 for r in self.rows if r.differs)

    @property
    def summary(self) -> str:
        """The table's line above it, in words."""
        count = len(self.rows)
        text = f"{count} {noun(count, 'queue')}"
        if self.differing:
            text += (f"; the scheduler's and the console's allocations differ in {self.differing}, each said why "
                     "below")
        return text + "."

    @property
    def toggle(self) -> str:
        """The link that shows (or hides again) the empty queues, with how many ("" when none)."""
        count = self.empty_count
        if not count:
            return ""
        what = f"{count} {noun(count, 'queue')} with nothing in {'it' if count == 1 else 'them'}"
        return f"Hide the {what}" if self.everything else f"Show the {what} (hidden)"


def queue_status(*, user: Any, cluster: Cluster, everything: bool = False) -> QueueStatus:
    return QueueStatus(queue_status_rows(user=user, cluster=cluster), everything)


def queue_status_rows(*, user: Any, cluster: Cluster) -> list[QueueStatusRow]:
    """Mirrored queue status the user may see (the queues of the departments and projects it may see),
    each with the console's own allocation of that owner in that pool and its pods' GPUs by the scheduler
    that placed them (`pod_usage_by_scheduler`, the pods the console's allocation sums)."""
    queues = list(SchedulerQueue.objects.restrict(user, "view").filter(cluster=cluster).select_related("pool"))
    if not queues:
        return []
    visible = list(Quota.objects.restrict(user, "view").filter(pool__cluster=cluster)
                   .select_related("project", "department"))
    quotas_attach_allocation(visible)
    by_owner = {}
    for q in visible:
        key = (f"project.{q.project.name}" if q.project_id else f"department.{q.department.name}", q.pool_id)
        by_owner[key] = q
    projects = dict(Project.objects.filter(cluster=cluster).values_list("pk", "name"))
    departments = dict(Project.objects.filter(cluster=cluster).values_list("pk", "department__name"))
    schedulers: dict[tuple[str, int], dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    pool_ids = {q.pool_id for q in queues if q.pool_id}
    for r in pod_usage_by_scheduler(pool_ids):
        if r["project_id"] not in projects:
            continue
        for owner in (f"project.{projects[r['project_id']]}", f"department.{departments[r['project_id']]}"):
            schedulers[(owner, r["pool_id"])][r["scheduler"]] += Decimal(r["gpu"] or 0)
    counting = counting_scheduler(cluster.pk)
    rows = []
    for queue in queues:
        quota = by_owner.get((queue.owner, queue.pool_id))
        if quota is None:
            continue  # an owner the user may not see (or not the console's)
        kind, _, name = queue.owner.partition(".")
        rows.append(QueueStatusRow(queue, kind, name, quota.gpu_allocated,
                                   dict(schedulers.get((queue.owner, queue.pool_id), {})), counting))
    return rows


def refused_writes(*, user: Any, cluster: Cluster) -> list[RefusedWrite]:
    return list(RefusedWrite.objects.restrict(user, "view").filter(cluster=cluster).select_related("pool"))
