"""What the scheduler decided about workloads, and the console's reading beside it (reads).

For the workloads of a page (or a CSV batch, or one workload), in a fixed number of queries:

- **the scheduler's reason** a workload waits, from the scheduler's own status first: its Kueue Workload's
  `QuotaReserved=False` reason and message (a suspended Job has no pod yet); its KAI PodGroups' latest
  `UnschedulableOnNodePool` condition (`reasons`: OverLimit, NonPreemptibleOverQuota, PodSchedulingErrors,
  QueueDoesNotExist); else the `PodScheduled=False` message of its pending pod (KAI's or kube-scheduler's
  words). Each reason has a category (`projects.waiting.CATEGORIES`), the same vocabulary as the console's
  own answer;
- **the console's answer** to "Why is it waiting?" for the workload's request (GPUs per pod, priority, its
  first pool; all its pods together when its scheduler takes them so — KAI's one PodGroup per Job, Kueue's
  Workload): `projects.waiting.ClusterFacts.explain`, even when no pod exists yet;
- **who preempted it**: KAI's `Evict` Events on the PodGroups of its pods (the annotations name the evicting
  PodGroup, hence its Job), or its Kueue Workload's `Evicted`/`Preempted` conditions (the message names the
  preemptor's UID and JobUID). The preemptor's workload is named to those who may see it; to others its
  project only;
- **its queue position**: with Kueue, the visibility API's `positionInClusterQueue`/`positionInLocalQueue`
  read from the cluster for the LocalQueues of the page's pending workloads (cached a few seconds, a
  failure said in words); with KAI, computed by the console (KAI publishes no order), the rule KAI's
  documentation gives for jobs of one queue — higher priority first, then older first (`position`) — and
  for the queues of one pool, as KAI's proportion plugin orders them (`queue_turn`): a queue at or below its
  fair share before one over it, then one within its deserved quota with the job before one past it, then
  the higher queue priority (its rank), then the smaller allocation, then the older queue; departments
  first, then the projects inside each (fair share and allocation: `projects.selectors.cluster_fair_shares`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from kube import wellknown
from typing import Any, NamedTuple

import orjson
from django.core.cache import cache
from django.db.models import Q, Subquery
from django.utils import timezone
from django.utils.timesince import timesince

from enforcers.desired import RANK_PRIORITY
from kube.client import api_error_message
from nodepools.models import Cluster, ConnectionState, Pod
from nodepools.sync import api_client_for
from projects import waiting
from projects.models import Project, ProjectNamespace
from projects.selectors import cluster_fair_shares
from workloads.models import KueueWorkload, PodGroup, SchedulerEvent, Workload, WorkloadEvent, WorkloadEventKind
from workloads.selectors import is_waiting, running_pods_count

KAI, KUEUE, DEFAULT = wellknown.KAI_SCHEDULER_NAME, "kueue", wellknown.DEFAULT_SCHEDULER_NAME
SCHEDULER_NAMES = {KAI: "KAI Scheduler", KUEUE: "Kueue", DEFAULT: "kube-scheduler"}
VISIBILITY_GROUP, VISIBILITY_VERSION = "visibility.kueue.x-k8s.io", "v1beta2"
LIVE_CACHE_SECONDS = 5
TIMEOUT = (3, 10)
_KAI_PREFIXES = ("OverLimit", "NonPreemptibleOverQuota", "PodSchedulingErrors", "QueueDoesNotExist",
                 "Unable to schedule podgroup", "Resources were not found", "Resources were found",
                 "no nodes with enough resources")
_KUEUE_PREEMPTOR = re.compile(r"\(UID: ([^,)]*), JobUID: ([^)]*)\)")
_KAI_PREEMPTOR = re.compile(r"was preempted by (?:higher priority )?workload ([^/\s]+)/([^\s.]+)")
KUEUE_PREEMPTION_WORDS = {
    "InClusterQueue": "within its ClusterQueue, by higher priority",
    "InCohortReclamation": "reclaimed by its cohort",
    "InCohortReclaimWhileBorrowing": "reclaimed by its cohort while borrowing",
    "InCohortFairSharing": "by fair sharing within the cohort",
}
KAI_ACTION_WORDS = {"reclaim": "reclaimed by a queue below its fair share", "preempt": "by higher priority in its queue"}

Key = tuple[int, str, str]  # (cluster id, namespace, Job name)


def key_of(workload: Workload) -> Key:
    return workload.cluster_id, workload.namespace, workload.name


@dataclass
class SchedulerReason:
    scheduler: str  # kai-scheduler, kueue, default-scheduler
    reason: str  # the scheduler's reason word (OverLimit, Pending, Unschedulable, ...)
    category: str  # projects.waiting.CATEGORIES
    message: str
    source: str  # where it was read ("PodGroup pg-x: UnschedulableOnNodePool", ...)

    def in_words(self) -> str:
        return f"{SCHEDULER_NAMES.get(self.scheduler, self.scheduler)}: {self.message or self.reason}"

    def as_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler, "reason": self.reason, "category": self.category,
                "message": self.message, "source": self.source}


@dataclass
class Preemption:
    scheduler: str
    action: str  # KAI: reclaim / preempt; Kueue: the Preempted condition's reason
    message: str
    at: Any = None
    by: str = ""  # "namespace/name" of the preempting workload, when the user may see it
    by_project: str = ""
    by_id: int | None = None
    still_waiting: bool = False  # not running again since
    # When it ran again after it: the earliest start of the pods that run now, once they started after it.
    again_at: Any = None

    def in_words(self) -> str:
        """"Preempted by X at T (scheduler: how)", then "; running again since T2" once its pods run again
        (or "; waiting to run again")."""
        who = self.by or (f"a workload of project {self.by_project}" if self.by_project else "another workload")
        how = (KAI_ACTION_WORDS if self.scheduler == KAI else KUEUE_PREEMPTION_WORDS).get(self.action, "")
        when = f" at {moment(self.at)}" if self.at is not None else ""
        since = ""
        if self.again_at is not None:
            since = f"; running again since {moment(self.again_at)}"
        elif self.still_waiting:
            since = "; waiting to run again"
        return f"Preempted by {who}{when} ({SCHEDULER_NAMES.get(self.scheduler, self.scheduler)}" \
               f"{': ' + how if how else ''}){since}"

    def as_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler, "action": self.action, "by": self.by or None,
                "by_project": self.by_project or None, "by_id": self.by_id, "message": self.message,
                "at": self.at.isoformat() if self.at is not None else None, "still_waiting": self.still_waiting,
                "running_again_since": self.again_at.isoformat() if self.again_at is not None else None}


def moment(at: Any) -> str:
    """A moment in the console's time zone: its time of day when today, else its date and time."""
    local = timezone.localtime(at)
    if local.date() == timezone.localtime().date():
        return f"{local:%H:%M:%S}"
    return f"{local:%Y-%m-%d %H:%M:%S}"


@dataclass
class QueuePosition:
    queue: str
    position: int | None = None  # 1-based, in its queue (Kueue: its ClusterQueue; KAI: its project's queue)
    of: int | None = None
    local_position: int | None = None  # Kueue: in its LocalQueue
    queue_turn: int | None = None  # KAI: its queue's turn among the pool's queues with pending work
    queues: int | None = None
    pool: str = ""
    source: str = ""  # "kueue visibility API" / "console (KAI's order)"
    error: str = ""

    def in_words(self) -> str:
        if self.error:
            return f"unknown ({self.error})"
        if self.position is None:
            return ""
        if self.source == KUEUE:
            local = f"; {self.local_position} in LocalQueue {self.queue}" if self.local_position is not None else ""
            return f"{self.position} in its ClusterQueue{local}"
        of = f" of {self.of}" if self.of else ""
        turn = (f"; its queue's turn: {self.queue_turn} of {self.queues} in pool {self.pool}"
                if self.queue_turn is not None else "")
        return f"{self.position}{of} in queue {self.queue}{turn}"

    def as_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "position": self.position, "of": self.of, "local_position": self.local_position,
                "queue_turn": self.queue_turn, "queues": self.queues, "pool": self.pool or None,
                "source": self.source, "error": self.error or None}


@dataclass
class Decisions:
    reasons: dict[Key, SchedulerReason] = field(default_factory=dict)
    why: dict[Key, waiting.Reason] = field(default_factory=dict)
    preemptions: dict[Key, Preemption] = field(default_factory=dict)
    positions: dict[Key, QueuePosition] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------

def decisions_attach(workloads: list[Workload], *, user: Any, slow: bool = True) -> list[Workload]:
    """Set `decision_reason`, `decision_why`, `decision_preemption`, `decision_position` on these workloads
    (None when there is none). Without `slow`, what reads the whole cluster's fair shares and facts is left
    out (the HTML table fetches it after its page): the console's answer (`decision_why` None) and KAI's
    queue turns (the position in the queue stays); `decisions_complete` says which."""
    found = decisions_for(workloads, user=user, slow=slow)
    for w in workloads:
        key = key_of(w)
        w.decision_reason = found.reasons.get(key)
        w.decision_why = found.why.get(key)
        w.decision_preemption = found.preemptions.get(key)
        w.decision_position = found.positions.get(key)
        w.decisions_complete = slow
    return workloads


def decisions_for(workloads: list[Workload], *, user: Any, slow: bool = True) -> Decisions:
    workloads = [w for w in workloads if isinstance(w, Workload)]
    out = Decisions()
    if not workloads:
        return out
    groups = _pod_groups(workloads)
    kueue = _kueue_workloads(workloads)
    pending = [w for w in workloads if is_waiting(w)]
    for w in pending:
        reason = _reason(w, groups.get(key_of(w), []), kueue.get(key_of(w)))
        if reason is not None:
            out.reasons[key_of(w)] = reason
    if slow:  # the cluster's facts: its nodes, quotas and every running pod's use
        out.why = _console_answers(pending, gangs={key_of(w) for w in pending if is_gang(w, key_of(w) in kueue)})
    out.preemptions = _preemptions(workloads, groups, kueue, user=user)
    out.positions = _positions(pending, kueue, user=user, turns=slow)
    return out


# -- reading the scheduler's objects -------------------------------------------------------------------

def _by_job(model, workloads: list[Workload]) -> dict[Key, list]:
    q = Q()
    for cluster_id in {w.cluster_id for w in workloads}:
        mine = [w for w in workloads if w.cluster_id == cluster_id]
        q |= Q(cluster_id=cluster_id, namespace__in={w.namespace for w in mine}, job_name__in={w.name for w in mine})
    out: dict[Key, list] = {}
    for row in model.objects.filter(q).order_by("created_in_cluster", "name"):
        out.setdefault((row.cluster_id, row.namespace, row.job_name), []).append(row)
    return out


def _pod_groups(workloads: list[Workload]) -> dict[Key, list[PodGroup]]:
    return _by_job(PodGroup, workloads)


def _kueue_workloads(workloads: list[Workload]) -> dict[Key, KueueWorkload]:
    """The Kueue Workload of each Job: the one owned by the Job's uid (the newest when the uid is unknown)."""
    out = {}
    uids = {key_of(w): w.uid for w in workloads}
    for key, rows in _by_job(KueueWorkload, workloads).items():
        mine = [r for r in rows if not uids.get(key) or not r.job_uid or r.job_uid == uids[key]]
        if mine:
            out[key] = mine[-1]
    return out


def _reason(workload: Workload, groups: list[PodGroup], kueue: KueueWorkload | None) -> SchedulerReason | None:
    """The scheduler's own reason, its own status first: Kueue's Workload, KAI's PodGroups, the pods."""
    if kueue is not None and not kueue.finished and not kueue.quota_reserved and (kueue.pending_message
                                                                                  or kueue.pending_reason):
        return SchedulerReason(KUEUE, kueue.pending_reason, waiting.kueue_category(kueue.pending_reason,
                                                                                      kueue.pending_message),
                               kueue.pending_message, f"Workload {kueue.name}: QuotaReserved=False")
    told = [g for g in groups if g.waiting and (g.reason or g.message)]
    if told:
        group = max(told, key=lambda g: (g.condition_time or g.created_in_cluster or timezone.now(), g.name))
        return SchedulerReason(KAI, group.reason, waiting.kai_category(group.reason, group.message), group.message,
                               f"PodGroup {group.name}: UnschedulableOnNodePool"
                               f"{' (' + group.node_pool + ')' if group.node_pool else ''}")
    message = getattr(workload, "scheduler_message", None) or ""
    if message:
        if workload.scheduler_name == KAI or message.startswith(_KAI_PREFIXES):
            word = message.split(":", 1)[0] if ":" in message else "Unschedulable"
            return SchedulerReason(KAI, word, waiting.kai_category("", message), message, "Pod: PodScheduled=False")
        return SchedulerReason(DEFAULT, "Unschedulable", waiting.default_scheduler_category(message), message,
                               "Pod: PodScheduled=False")
    return None


# -- the console's own answer --------------------------------------------------------------------------

def request_pool(workload: Workload, facts: waiting.ClusterFacts) -> int | None:
    """The pool a workload's request is explained in: the first pool of its list the cluster has."""
    for name in workload.pools_tried or []:
        if name in facts.by_name:
            return facts.by_name[name]
    return facts.default_id


def per_pod_gpus(workload: Workload) -> Decimal:
    pods = max(int(workload.pods or 1), 1)
    return Decimal(workload.gpus or 0) / pods


def is_gang(workload: Workload, queued_by_kueue: bool) -> bool:
    """Whether its scheduler takes the Job's pods together: KAI makes one PodGroup per Job (the console's Jobs
    of several pods carry the min-member annotation: all of them or none), Kueue admits a Workload whole."""
    return queued_by_kueue or workload.scheduler_name == KAI


def _console_answers(pending: list[Workload], gangs: set[Key] = frozenset()) -> dict[Key, waiting.Reason]:
    gpu_pending = [w for w in pending if getattr(w, "project_id", None) and Decimal(w.gpus or 0) > 0]
    if not gpu_pending:
        return {}
    projects = {p.pk: p for p in Project.objects.filter(pk__in={w.project_id for w in gpu_pending})
                .select_related("department")}
    out = {}
    for cluster_id in sorted({w.cluster_id for w in gpu_pending}):
        facts = waiting.cluster_facts(cluster_id)
        for w in gpu_pending:
            if w.cluster_id != cluster_id or w.project_id not in projects:
                continue
            pool_id = request_pool(w, facts)
            if pool_id is None:
                continue
            out[key_of(w)] = facts.explain(project=projects[w.project_id], pool_id=pool_id, gpus=per_pod_gpus(w),
                                           priority=w.priority if w.priority is not None else 0,
                                           pods=max(int(w.pods or 1), 1) if key_of(w) in gangs else 1)
    return out


# -- who preempted it ----------------------------------------------------------------------------------

def _preemptions(workloads: list[Workload], groups: dict[Key, list[PodGroup]],
                 kueue: dict[Key, KueueWorkload], *, user: Any) -> dict[Key, Preemption]:
    out: dict[Key, Preemption] = {}
    preemptors: dict[Key, Key | None] = {}
    _kai_preemptions(workloads, groups, out, preemptors)
    _kueue_preemptions(kueue, out, preemptors)
    _name_preemptors(out, preemptors, user=user)
    _ran_again(workloads, out)
    return out


def _ran_again(workloads: list[Workload], out: dict[Key, Preemption]) -> None:
    """For the preempted workloads that run now: since when (the earliest start of their running pods, when
    it is after the preemption): one read of their pods."""
    running = [w for w in workloads if key_of(w) in out and not out[key_of(w)].still_waiting]
    if not running:
        return
    starts: dict[Key, Any] = {}
    rows = (Pod.objects.filter(cluster_id__in={w.cluster_id for w in running},
                               namespace__in={w.namespace for w in running}, job_name__in={w.name for w in running},
                               phase="Running", node__isnull=False, started_in_cluster__isnull=False)
            .order_by().values_list("cluster_id", "namespace", "job_name", "started_in_cluster"))
    for cluster_id, namespace, job, started in rows:
        key = (cluster_id, namespace, job)
        if key in out and (key not in starts or started < starts[key]):
            starts[key] = started
    for key, started in starts.items():
        preemption = out[key]
        if preemption.at is None or started >= preemption.at:
            preemption.again_at = started


def _evictor(event: SchedulerEvent) -> tuple[str, str]:
    """(namespace, PodGroup) that evicted, from KAI's annotations (else its message)."""
    name = event.annotations.get("evictor-pod-group-name") or ""
    namespace = event.annotations.get("evictor-pod-group-namespace") or ""
    if not name:
        match = _KAI_PREEMPTOR.search(event.message)
        namespace, name = (match.group(1), match.group(2)) if match else ("", "")
    return namespace or event.namespace, name


def _kai_preemptions(workloads: list[Workload], groups: dict[Key, list[PodGroup]], out: dict[Key, Preemption],
                     preemptors: dict[Key, Key | None]) -> None:
    """KAI: the latest `Evict` event on the PodGroups of each Job; the evicting PodGroup's Job."""
    group_of = {(g.cluster_id, g.namespace, g.name): key for key, rows in groups.items() for g in rows}
    if not group_of:
        return
    q = Q()
    for cluster_id in {k[0] for k in group_of}:
        q |= Q(cluster_id=cluster_id, involved_name__in={k[2] for k in group_of if k[0] == cluster_id})
    events: dict[Key, SchedulerEvent] = {}
    for event in SchedulerEvent.objects.filter(q, involved_kind="PodGroup", reason="Evict").order_by("last_seen", "name"):
        key = group_of.get((event.cluster_id, event.namespace, event.involved_name))
        if key is not None:
            events[key] = event  # the latest wins
    evictors = {key: (key[0], *_evictor(event)) for key, event in events.items()}
    q = Q()
    for cluster_id, namespace, name in {e for e in evictors.values() if e[2]}:
        q |= Q(cluster_id=cluster_id, namespace=namespace, name=name)
    jobs = {(g.cluster_id, g.namespace, g.name): g.job_name or g.name for g in PodGroup.objects.filter(q)} if q else {}
    by_key = {key_of(w): w for w in workloads}
    # An evicting PodGroup gone with its Job (stopped, finished): the Job the timeline noted while it was there.
    noted: dict[Key, str] = {}
    gone = [key for key, e in evictors.items() if e[2] and e not in jobs]
    if gone:
        q = Q()
        for cluster_id, namespace, name in gone:
            q |= Q(cluster_id=cluster_id, namespace=namespace, name=name)
        for row in WorkloadEvent.objects.filter(q, kind=WorkloadEventKind.PREEMPTED).exclude(actor="").order_by("at"):
            noted[(row.cluster_id, row.namespace, row.name)] = row.actor
    for key, event in events.items():
        cluster_id, namespace, name = evictors[key]
        job = jobs.get((cluster_id, namespace, name), name)
        if (cluster_id, namespace, name) not in jobs and "/" in noted.get(key, ""):
            namespace, _, job = noted[key].partition("/")
        preemptors[key] = (cluster_id, namespace, job) if job else None
        out[key] = Preemption(KAI, event.annotations.get("evictor-action-type") or "", event.message,
                              at=event.last_seen, still_waiting=is_waiting(by_key[key]))


def _kueue_preemptions(kueue: dict[Key, KueueWorkload], out: dict[Key, Preemption],
                       preemptors: dict[Key, Key | None]) -> None:
    """Kueue: the `Evicted`/`Preempted` conditions of each Job's Workload, naming the preemptor's JobUID (its
    Job) and UID (its Workload)."""
    by_job_uid: dict[tuple[int, str], Key] = {}
    by_workload_uid: dict[tuple[int, str], Key] = {}
    for key, row in kueue.items():
        if not row.evicted_message:
            continue
        out[key] = Preemption(KUEUE, row.evicted_reason, row.evicted_message, at=row.evicted_at,
                              still_waiting=row.evicted_now or not row.quota_reserved)
        preemptors[key] = None
        match = _KUEUE_PREEMPTOR.search(row.evicted_message)
        if match:
            by_workload_uid[(key[0], match.group(1).strip())] = key
            by_job_uid[(key[0], match.group(2).strip())] = key
    if by_job_uid:
        for w in Workload.objects.filter(uid__in={u for _, u in by_job_uid},
                                         cluster_id__in={c for c, _ in by_job_uid}):
            key = by_job_uid.get((w.cluster_id, w.uid))
            if key is not None:
                preemptors[key] = key_of(w)
    if by_workload_uid:
        for row in KueueWorkload.objects.filter(uid__in={u for _, u in by_workload_uid},
                                                cluster_id__in={c for c, _ in by_workload_uid}):
            key = by_workload_uid.get((row.cluster_id, row.uid))
            if key is not None and preemptors.get(key) is None and row.job_name:
                preemptors[key] = (row.cluster_id, row.namespace, row.job_name)


def _name_preemptors(out: dict[Key, Preemption], preemptors: dict[Key, Key | None], *, user: Any) -> None:
    """Name each preemptor's workload to whoever may see it; its project only to the others."""
    found = {k: v for k, v in preemptors.items() if v is not None}
    if not found:
        return
    q = Q()
    for cluster_id, ns, name in set(found.values()):
        q |= Q(cluster_id=cluster_id, namespace=ns, name=name)
    visible = {key_of(w): w.pk for w in Workload.objects.restrict(user, "view").filter(q)}
    projects = {(c, n): p for c, n, p in ProjectNamespace.objects.filter(
        cluster_id__in={k[0] for k in found.values()}, name__in={k[1] for k in found.values()}).values_list(
        "cluster_id", "name", "project__name")}
    for key, who in found.items():
        preemption = out[key]
        preemption.by_project = projects.get((who[0], who[1]), "")
        if who in visible:
            preemption.by, preemption.by_id = f"{who[1]}/{who[2]}", visible[who]


# -- queue positions -----------------------------------------------------------------------------------

def _positions(pending: list[Workload], kueue: dict[Key, KueueWorkload], *, user: Any,
               turns: bool = True) -> dict[Key, QueuePosition]:
    out: dict[Key, QueuePosition] = {}
    queued = [w for w in pending if key_of(w) in kueue and not kueue[key_of(w)].quota_reserved]
    out.update(_kueue_positions(queued, kueue))
    kai = [w for w in pending if w.scheduler_name == KAI and w.queue]
    out.update(_kai_positions(kai, user=user, turns=turns))
    return out


def _kueue_positions(queued: list[Workload], kueue: dict[Key, KueueWorkload]) -> dict[Key, QueuePosition]:
    out: dict[Key, QueuePosition] = {}
    local_queues: dict[int, set[tuple[str, str]]] = {}
    for w in queued:
        row = kueue[key_of(w)]
        if row.queue_name:
            local_queues.setdefault(w.cluster_id, set()).add((w.namespace, row.queue_name))
    for cluster in Cluster.objects.filter(pk__in=list(local_queues)):
        for namespace, lq in sorted(local_queues[cluster.pk]):
            items, error = pending_workloads(cluster, namespace, lq)
            by_name = {(i.get("metadata") or {}).get("name"): i for i in items}
            for w in queued:
                row = kueue[key_of(w)]
                if w.cluster_id != cluster.pk or w.namespace != namespace or row.queue_name != lq:
                    continue
                item = by_name.get(row.name)
                if error:
                    out[key_of(w)] = QueuePosition(queue=lq, source=KUEUE, error=error)
                elif item is not None:
                    position, local = item.get("positionInClusterQueue"), item.get("positionInLocalQueue")
                    out[key_of(w)] = QueuePosition(
                        queue=lq, source=KUEUE,
                        position=position + 1 if isinstance(position, int) else None,
                        local_position=local + 1 if isinstance(local, int) else None)
    return out


def pending_workloads(cluster, namespace: str, local_queue: str) -> tuple[list[dict], str]:
    """Kueue's visibility API: the pending workloads of a LocalQueue, in queue order (each with
    `positionInClusterQueue` and `positionInLocalQueue`); cached a few seconds; (items, error in words)."""
    key = f"kueue-pending:{cluster.pk}:{cluster.kubeconfig_path}:{cluster.kube_context}:{namespace}:{local_queue}"
    cached = cache.get(key)
    if cached is not None:
        found = orjson.loads(cached)
        return found.get("items") or [], found.get("error") or ""

    if cluster.connection_state == ConnectionState.UNREACHABLE:
        return [], f"the cluster is unreachable ({cluster.last_error or 'no answer'})"
    path = (f"/apis/{VISIBILITY_GROUP}/{VISIBILITY_VERSION}/namespaces/{namespace}/localqueues/{local_queue}"
            "/pendingworkloads")
    try:
        with api_client_for(cluster) as api_client:
            response = api_client.call_api(path, "GET", {}, [("limit", 1000)], {"Accept": "application/json"},
                                           auth_settings=["BearerToken"], _return_http_data_only=True,
                                           _preload_content=False, _request_timeout=TIMEOUT)
            found = {"items": orjson.loads(response.data).get("items") or []}
    except Exception as exc:  # noqa: BLE001 - a failed live read is shown in words, never raised
        found = {"error": f"Kueue's visibility API: {api_error_message(exc)}"}
    cache.set(key, orjson.dumps(found), LIVE_CACHE_SECONDS)
    return found.get("items") or [], found.get("error") or ""


def _kai_positions(kai: list[Workload], *, user: Any, turns: bool = True) -> dict[Key, QueuePosition]:
    """The console's reading of KAI's order (see the module docstring): in the project's queue, higher
    priority first, then older; with `turns`, the queue's turn among the pool's project queues with pending
    work (it reads the cluster's fair shares). A project's queue holds only that project's workloads:
    whoever sees one sees its peers."""
    if not kai:
        return {}
    out: dict[Key, QueuePosition] = {}
    # One condition per cluster (its queues together), not one per workload: the database tests each of its
    # workloads against these.
    queues: dict[int, set[str]] = {}
    for w in kai:
        queues.setdefault(w.cluster_id, set()).add(w.queue)
    q = Q()
    for cluster_id, names in sorted(queues.items()):
        q |= Q(cluster_id=cluster_id, queue__in=sorted(names))
    # The peers' fields the order reads, as plain rows (no model object, nor the table's other columns).
    peers = [Peer(*row) for row in Workload.objects.restrict(user, "view").filter(q, scheduler_name=KAI)
             .annotate(running_pods=Subquery(running_pods_count()))
             .filter(Q(phase="Pending") & (Q(running_pods__isnull=True) | Q(running_pods=0)))
             .order_by().values_list(*Peer._fields)]
    by_queue: dict[tuple[int, str], list[Workload]] = {}
    for w in peers:
        by_queue.setdefault((w.cluster_id, w.queue), []).append(w)
    for rows in by_queue.values():
        rows.sort(key=kai_job_order)
    turns = _kai_queue_turns(by_queue) if turns else {}
    places: dict[tuple, int] = {}  # each peer's place in its queue (the first, should a key come twice)
    for rows in by_queue.values():
        for i, r in enumerate(rows):
            places.setdefault((r.cluster_id, r.queue, r.namespace, r.name), i)
    for w in kai:
        rows = by_queue.get((w.cluster_id, w.queue), [])
        index = places.get((w.cluster_id, w.queue, w.namespace, w.name))
        if index is None:
            continue
        turn, count, pool = turns.get((w.cluster_id, w.queue), (None, None, ""))
        out[key_of(w)] = QueuePosition(queue=w.queue, position=index + 1, of=len(rows), queue_turn=turn,
                                       queues=count, pool=pool, source="console")
    return out


class Peer(NamedTuple):
    """A waiting workload of a KAI queue, as the queue order reads it (`kai_job_order`, `per_pod_gpus`)."""

    cluster_id: int
    queue: str
    namespace: str
    name: str
    priority: int | None
    created_in_cluster: Any
    gpus: Any
    pods: int | None


def kai_job_order(w: Workload) -> tuple:
    """KAI's order of the jobs of one queue: higher priority first, then older, then by name."""
    created = w.created_in_cluster.timestamp() if w.created_in_cluster else 0.0
    return (-(w.priority or 0), created, w.namespace, w.name)


def _kai_queue_turns(by_queue: dict[tuple[int, str], list[Workload]]) -> dict[tuple[int, str], tuple[int, int, str]]:
    """Per (cluster, queue `<project>.<pool>`): its turn among the pool's queues with pending work."""
    out: dict[tuple[int, str], tuple[int, int, str]] = {}
    # Only a queue named `<project>.<pool>` has a turn among its pool's queues: a cluster with none of them
    # among these has no turn to tell, and its fair shares (the whole cluster's) are not read for nothing.
    clusters = {c for c, queue in by_queue if "." in queue}
    for cluster in Cluster.objects.filter(pk__in=clusters):
        pools, lines = cluster_fair_shares(cluster=cluster)
        pool_ids = {p.name: p.pk for p in pools}
        projects = {p.name: p for p in Project.objects.filter(cluster=cluster).select_related("department")}
        per_pool: dict[str, list[tuple[tuple, str]]] = {}
        for (cluster_id, queue), rows in by_queue.items():
            if cluster_id != cluster.pk or "." not in queue:
                continue
            project_name, pool_name = queue.rsplit(".", 1)
            project, pool_id = projects.get(project_name), pool_ids.get(pool_name)
            if project is None or pool_id is None:
                continue
            head = rows[0]
            job = per_pod_gpus(head)
            project_line = lines.get(("project", project.pk, pool_id))
            department_line = lines.get(("department", project.department_id, pool_id))
            order = (*_queue_key(department_line, job, project.department.created),
                     *_queue_key(project_line, job, project.created))
            per_pool.setdefault(pool_name, []).append((order, queue))
        for pool_name, queues in per_pool.items():
            queues.sort()
            for index, (_, queue) in enumerate(queues):
                out[(cluster.pk, queue)] = (index + 1, len(queues), pool_name)
    return out


def _queue_key(line, job: Decimal, created) -> tuple:
    """A queue's place in KAI's queue order (kai_share.queue_order, GPU only), smaller first."""
    if line is None:
        return (1, 1, 0, Decimal(0), 0.0)
    allocated, fair, deserved = Decimal(line.allocated), Decimal(line.fair_share), Decimal(line.deserved)
    over = allocated > fair
    starved = allocated + job <= deserved
    priority = _rank_priority(line.quota.rank)
    return (1 if over else 0, 0 if starved else 1, -priority, allocated, created.timestamp() if created else 0.0)


def _rank_priority(rank: int) -> int:
    return RANK_PRIORITY.get(rank, 100)
