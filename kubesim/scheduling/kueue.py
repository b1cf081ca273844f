"""Kueue's admission, as a pure function over plain snapshots (the store adapter is ``kueue_adapter``).

Written from Kueue's own published documentation and API, kubernetes-sigs/kueue @ ff69552e79ad:

- site/content/en/docs/concepts/cluster_queue.md — resource groups, flavors tried in the group's order,
  ``nominalQuota``/``borrowingLimit``/``lendingLimit``, the borrowing semantics inside a cohort,
  ``queueingStrategy`` (StrictFIFO, BestEffortFIFO), ``preemption`` and ``flavorFungibility``;
- cohort.md — cohorts (implicit when only named), their own quota, ``parentName`` trees;
- workload.md, workload_priority_class.md — pod sets, ``count``, priority from a WorkloadPriorityClass or
  the pod's PriorityClass;
- preemption.md — classic preemption: candidates, their order, the targets heuristic, the ``Evicted`` and
  ``Preempted`` conditions and the message naming the preemptor;
- fair_sharing.md — Fair Sharing is off unless Kueue's Configuration enables it: classic preemption here;
- local_queue.md, resource_flavor.md — LocalQueue → ClusterQueue, flavor ``nodeLabels`` matched against
  the pods' node selector and required node affinity, ``nodeTaints`` that the pods must tolerate;
- admission.md — quota reservation then admission (no AdmissionChecks here: admitted on reservation);
- apis/kueue/v1beta2/*_types.go — field names, condition types and reasons.

Where the pages leave a detail open, the behaviour follows Kueue's scheduler at the same commit
(pkg/scheduler/scheduler.go, flavorassigner/flavorassigner.go, preemption/preemption.go,
preemption/classical/*.go, pkg/cache/scheduler/resource_node.go), with Kueue's default feature gates
(FlavorFungibility, PrioritySortingWithinCohort, UnadmittedWorkloadsObservability on; Fair Sharing,
TopologyAwareScheduling requests, partial admission and admission checks not modelled).

A scheduling *cycle* takes the head of every active ClusterQueue, computes its flavor assignment (per pod
set, per resource group, flavors in order, with the preemption oracle) and processes the entries
non-borrowing first, then by priority, then FIFO. :func:`schedule` runs cycles until nothing changes
and returns the decisions: admissions, evictions (preemptions) and the ``QuotaReserved=False`` reason and
message of every workload that waits. Two simplifications, both deterministic where Kueue is not: a
flavor search always starts at the group's first flavor (Kueue may resume where the last attempt
stopped), and equal creation timestamps are ordered by name (Kueue: by UID).
"""
from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Decimal
from typing import Any

from kube.labels import label_selector_matches, requirement_matches
from kube.quantity import BINARY_SI, DECIMAL_SI
from kube.quantity import format_quantity as _format
from kube.taints import first_untolerated_taint

FR = tuple[str, str]  # (flavor, resource)
Key = tuple[str, str]  # (namespace, name)

# Condition types and reasons (apis/kueue/v1beta2/workload_types.go).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
FINISHED = "Finished"
NO_MATCHING_FLAVOR = "NoMatchingFlavor"
WAITING_FOR_QUOTA = "WaitingForQuota"
EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
WAITING_FOR_PREEMPTED = "WaitingForPreemptedWorkloads"
MISCONFIGURED = "Misconfigured"
SUSPENDED = "Suspended"
PENDING_EVALUATION = "PendingEvaluation"
NO_RESERVATION = "NoReservation"
IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
HUMAN_REASONS = {  # preemption.go HumanReadablePreemptionReasons
    IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    IN_COHORT_RECLAMATION: "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
}

NEVER, LOWER_PRIORITY, ANY, LOWER_OR_NEWER_EQUAL = "Never", "LowerPriority", "Any", "LowerOrNewerEqualPriority"
STRICT_FIFO, BEST_EFFORT_FIFO = "StrictFIFO", "BestEffortFIFO"
MAY_STOP_SEARCH, TRY_NEXT_FLAVOR = "MayStopSearch", "TryNextFlavor"
PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"
TAINT_EFFECTS = ("NoSchedule", "NoExecute")

# Flavor assignment modes (flavorassigner.go), lowest preference first.
NOFIT, PREEMPT, FIT = 0, 1, 3
# Granular preemption modes inside the assigner.
_G_NOFIT, _G_NO_CANDIDATES, _G_PREEMPT, _G_RECLAIM, _G_FIT = 0, 1, 2, 3, 4
_SEVERITY = {"": 0, WAITING_FOR_QUOTA: 2, EXCEEDS_MAX_QUOTA: 3, NO_MATCHING_FLAVOR: 4}


# ---------------------------------------------------------------------------------------------------
# Snapshot: what the scheduler reads


@dataclass(frozen=True)
class ResourceQuota:
    nominal: Decimal = Decimal(0)
    borrowing_limit: Decimal | None = None
    lending_limit: Decimal | None = None


@dataclass(frozen=True)
class ResourceGroup:
    covered: tuple[str, ...]
    flavors: tuple[str, ...]


@dataclass(frozen=True)
class PreemptionPolicy:
    within_cluster_queue: str = NEVER
    reclaim_within_cohort: str = NEVER
    borrow_within_cohort: str = NEVER
    max_priority_threshold: int | None = None


@dataclass(frozen=True)
class FlavorFungibility:
    when_can_borrow: str = MAY_STOP_SEARCH
    when_can_preempt: str = TRY_NEXT_FLAVOR
    preference: str = ""


@dataclass(frozen=True)
class ClusterQueue:
    name: str
    cohort: str = ""
    resource_groups: tuple[ResourceGroup, ...] = ()
    quotas: Mapping[FR, ResourceQuota] = field(default_factory=dict)
    namespace_selector: Mapping[str, Any] | None = None  # None selects no namespace, {} every one
    queueing_strategy: str = BEST_EFFORT_FIFO
    preemption: PreemptionPolicy = PreemptionPolicy()
    fungibility: FlavorFungibility = FlavorFungibility()
    stop_policy: str = "None"

    def group_of(self, resource: str) -> ResourceGroup | None:
        return next((g for g in self.resource_groups if resource in g.covered), None)

    def flavors(self) -> list[str]:
        return [f for g in self.resource_groups for f in g.flavors]


@dataclass(frozen=True)
class Cohort:
    name: str
    parent: str = ""
    quotas: Mapping[FR, ResourceQuota] = field(default_factory=dict)


@dataclass(frozen=True)
class Flavor:
    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Mapping[str, Any], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str
    stop_policy: str = "None"


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int
    requests: Mapping[str, Decimal]  # of one pod
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_terms: tuple[Mapping[str, Any], ...] | None = None  # required node affinity nodeSelectorTerms
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class PodSetAssignment:
    name: str
    flavors: Mapping[str, str]  # resource -> flavor
    usage: Mapping[str, Decimal]  # resource -> total of the pod set
    count: int


@dataclass(frozen=True)
class Admission:
    cluster_queue: str
    pod_sets: tuple[PodSetAssignment, ...]

    def usage(self) -> dict[FR, Decimal]:
        out: dict[FR, Decimal] = {}
        for ps in self.pod_sets:
            for res, flavor in ps.flavors.items():
                out[(flavor, res)] = out.get((flavor, res), Decimal(0)) + ps.usage.get(res, Decimal(0))
        return out


@dataclass(frozen=True)
class Workload:
    namespace: str
    name: str
    queue_name: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    created: str = ""  # RFC 3339 creationTimestamp: the queue order timestamp
    uid: str = ""
    job_uid: str = ""
    admission: Admission | None = None  # set while quota is reserved
    reserved_at: str = ""  # lastTransitionTime of QuotaReserved=True
    evicted: bool = False
    finished: bool = False
    active: bool = True
    invalid: str = ""  # why its pod sets' resources cannot be read ('' when they can)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def reserved(self) -> bool:
        return self.admission is not None and not self.finished


@dataclass(frozen=True)
class Snapshot:
    flavors: Mapping[str, Flavor] = field(default_factory=dict)
    cluster_queues: Mapping[str, ClusterQueue] = field(default_factory=dict)
    cohorts: Mapping[str, Cohort] = field(default_factory=dict)
    local_queues: Mapping[Key, LocalQueue] = field(default_factory=dict)
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # name -> labels
    workloads: tuple[Workload, ...] = ()
    now: str = ""  # RFC 3339: the reservation time of what is admitted now


# ---------------------------------------------------------------------------------------------------
# Decisions: what the scheduler writes


@dataclass(frozen=True)
class Eviction:
    workload: Key
    preemptor: Key
    reason: str  # InClusterQueue, InCohortReclamation, InCohortReclaimWhileBorrowing
    message: str


@dataclass
class Decisions:
    admitted: dict[Key, Admission] = field(default_factory=dict)
    evicted: dict[Key, Eviction] = field(default_factory=dict)
    pending: dict[Key, tuple[str, str]] = field(default_factory=dict)  # QuotaReserved=False reason, message


# ---------------------------------------------------------------------------------------------------
# Quantities and messages


def _binary(resource: str) -> bool:
    return resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-")


def amount(resource: str, value: Decimal) -> Decimal:
    """What Kueue counts of a request: CPU in whole millicores, anything else in whole units (rounded up)."""
    if resource == "cpu":
        return (value * 1000).to_integral_value(ROUND_CEILING) / 1000
    return value.to_integral_value(ROUND_CEILING)


def format_quantity(resource: str, value: Decimal) -> str:
    """A quantity as Kueue's ResourceFormatter writes it: CPU from millicores in DecimalSI, memory, ephemeral
    storage and hugepages in BinarySI (a power of 1024 when exact), anything else in DecimalSI."""
    return _format(Decimal(value), BINARY_SI if _binary(resource) else DECIMAL_SI)


def _epoch(timestamp: str) -> float:
    if not timestamp:
        return 0.0
    try:
        return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def preemption_message(preemptor: Workload, reason: str, preemptor_path: str, preemptee_path: str) -> str:
    """preemption.go preemptionMessage."""
    return (f"Preempted to accommodate a workload (UID: {preemptor.uid or 'UNKNOWN'}, JobUID: "
            f"{preemptor.job_uid or 'UNKNOWN'}) due to {HUMAN_REASONS.get(reason, 'UNKNOWN')}; "
            f"preemptor path: {preemptor_path or 'UNKNOWN'}; preemptee path: {preemptee_path or 'UNKNOWN'}")


# ---------------------------------------------------------------------------------------------------
# Label selectors, node affinity, taints (what the flavor check needs)


def _taint_text(taint: Mapping[str, Any]) -> str:
    """A corev1.Taint printed with %s, as Kueue's message shows it: ``{key value NoSchedule <nil>}``."""
    added = taint.get("timeAdded") or "<nil>"
    return f"{{{taint.get('key', '')} {taint.get('value', '')} {taint.get('effect', '')} {added}}}"


def _flavor_mismatch(flavor: Flavor | None, name: str, ps: PodSet) -> str:
    """checkFlavorForPodSets: why a pod set cannot use this flavor ('' when it can)."""
    if flavor is None:
        return f"flavor {name} not found"
    taint = first_untolerated_taint(flavor.node_taints, list(ps.tolerations) + list(flavor.tolerations), TAINT_EFFECTS)
    if taint is not None:
        return f"untolerated taint {_taint_text(taint)} in flavor {name}"
    allowed = set(flavor.node_labels)
    selector = {k: v for k, v in ps.node_selector.items() if k in allowed}
    if any(flavor.node_labels.get(k) != v for k, v in selector.items()):
        return f"flavor {name} doesn't match node affinity"
    # Only the flavor's own label keys count; a term left empty drops the whole affinity (terms are ORed).
    if ps.required_terms:
        terms = []
        for term in ps.required_terms:
            exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") in allowed]
            if not exprs:
                terms = []
                break
            terms.append(exprs)
        if terms and not any(all(requirement_matches(e, flavor.node_labels) for e in exprs) for exprs in terms):
            return f"flavor {name} doesn't match node affinity"
    return ""


# ---------------------------------------------------------------------------------------------------
# The quota tree (pkg/cache/scheduler/resource_node.go): ClusterQueues are leaves, Cohorts inner nodes.


class _Node:
    __slots__ = ("name", "is_cq", "parent", "quotas", "subtree", "usage", "cohorts", "cqs", "cq", "workloads")

    def __init__(self, name: str, is_cq: bool, quotas: Mapping[FR, ResourceQuota]) -> None:
        self.name = name
        self.is_cq = is_cq
        self.parent: _Node | None = None
        self.quotas = quotas
        self.subtree: dict[FR, Decimal] = {}
        self.usage: dict[FR, Decimal] = {}
        self.cohorts: list[_Node] = []
        self.cqs: list[_Node] = []
        self.cq: ClusterQueue | None = None
        self.workloads: dict[Key, Workload] = {}  # ClusterQueues: the workloads reserving quota here

    def quota(self, fr: FR) -> ResourceQuota:
        return self.quotas.get(fr) or _NO_QUOTA

    def local_quota(self, fr: FR) -> Decimal:
        lending = self.quota(fr).lending_limit
        if lending is None:
            return Decimal(0)
        return max(Decimal(0), self.subtree.get(fr, Decimal(0)) - lending)

    def local_available(self, fr: FR) -> Decimal:
        return max(Decimal(0), self.local_quota(fr) - self.usage.get(fr, Decimal(0)))

    def path_to_root(self) -> Iterable[_Node]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> _Node:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def borrowing_with(self, fr: FR, value: Decimal) -> bool:
        limit = self.quota(fr).nominal if self.is_cq else self.subtree.get(fr, Decimal(0))
        return limit < self.usage.get(fr, Decimal(0)) + value

    def within_nominal(self, frs: Iterable[FR]) -> bool:
        return all(self.subtree.get(fr, Decimal(0)) >= self.usage.get(fr, Decimal(0)) for fr in frs)

    def height(self) -> int:
        h = min(len(self.cohorts) + len(self.cqs), 1)
        for child in self.cohorts:
            h = max(h, child.height() + 1)
        return h


_NO_QUOTA = ResourceQuota()


def _available(node: _Node, fr: FR) -> Decimal:
    usage = node.usage.get(fr, Decimal(0))
    if node.parent is None:
        return node.subtree.get(fr, Decimal(0)) - usage
    parent_available = _available(node.parent, fr)
    borrowing = node.quota(fr).borrowing_limit
    if borrowing is not None:
        lq = node.local_quota(fr)
        stored_in_parent = node.subtree.get(fr, Decimal(0)) - lq
        used_in_parent = max(Decimal(0), usage - lq)
        parent_available = min(stored_in_parent - used_in_parent + borrowing, parent_available)
    return node.local_available(fr) + parent_available


def available(node: _Node, fr: FR) -> Decimal:
    """What the ClusterQueue can still take of a flavor-resource, borrowing included (never negative)."""
    return max(Decimal(0), _available(node, fr))


def potential_available(node: _Node, fr: FR) -> Decimal:
    """The most this node could ever take, with no usage anywhere, within its borrowing limits."""
    if node.parent is None:
        return node.subtree.get(fr, Decimal(0))
    avail = node.local_quota(fr) + potential_available(node.parent, fr)
    borrowing = node.quota(fr).borrowing_limit
    if borrowing is not None:
        avail = min(node.subtree.get(fr, Decimal(0)) + borrowing, avail)
    return avail


def _add_usage(node: _Node, fr: FR, value: Decimal) -> None:
    local = node.local_available(fr)
    node.usage[fr] = node.usage.get(fr, Decimal(0)) + value
    if node.parent is not None and value > local:
        _add_usage(node.parent, fr, value - local)


def _remove_usage(node: _Node, fr: FR, value: Decimal) -> None:
    stored = node.usage.get(fr, Decimal(0)) - node.local_quota(fr)
    node.usage[fr] = node.usage.get(fr, Decimal(0)) - value
    if stored <= 0 or node.parent is None:
        return
    _remove_usage(node.parent, fr, min(value, stored))


def _fits_in_quota(node: _Node, requests: Mapping[FR, Decimal]) -> tuple[bool, dict[FR, Decimal]]:
    fits = True
    remaining = {}
    for fr, value in requests.items():
        if node.subtree.get(fr, Decimal(0)) < node.usage.get(fr, Decimal(0)) + value:
            fits = False
        remaining[fr] = max(Decimal(0), value - node.local_available(fr))
    return fits, remaining


def _lowest_subtree_that_fits(cq: _Node, fr: FR, value: Decimal) -> tuple[int, bool]:
    """FindHeightOfLowestSubtreeThatFits: how far up the tree the quota comes from (0 = no borrowing), and
    whether that subtree is smaller than the whole tree (reclaiming in the hierarchy may help)."""
    if not cq.borrowing_with(fr, value) or cq.parent is None:
        return 0, cq.parent is not None
    remaining = value - cq.local_available(fr)
    for node in cq.path_to_root():
        if not node.borrowing_with(fr, remaining):
            return node.height(), node.parent is not None
        remaining -= node.local_available(fr)
    return cq.root().height(), False


class _Tree:
    """The ClusterQueues and Cohorts of a snapshot, with the usage of every workload reserving quota."""

    def __init__(self, snap: Snapshot) -> None:
        self.cqs: dict[str, _Node] = {}
        self.cohorts: dict[str, _Node] = {}
        for name, cq in snap.cluster_queues.items():
            node = _Node(name, True, cq.quotas)
            node.cq = cq
            self.cqs[name] = node
            if cq.cohort:
                self._cohort(snap, cq.cohort).cqs.append(node)
                node.parent = self.cohorts[cq.cohort]
        for name in list(snap.cohorts):
            self._cohort(snap, name)
        for root in [c for c in self.cohorts.values() if c.parent is None]:
            self._accumulate(root)
        for cq_node in self.cqs.values():
            if cq_node.parent is None:
                cq_node.subtree = {fr: q.nominal for fr, q in cq_node.quotas.items()}
        self.workloads: dict[Key, Workload] = {}
        for wl in snap.workloads:
            if wl.reserved and wl.admission and wl.admission.cluster_queue in self.cqs:
                self.add(wl)

    def _cohort(self, snap: Snapshot, name: str, seen: frozenset[str] = frozenset()) -> _Node:
        node = self.cohorts.get(name)
        if node is None:
            spec = snap.cohorts.get(name) or Cohort(name)
            node = self.cohorts[name] = _Node(name, False, spec.quotas)
            parent = spec.parent
            if parent and parent not in seen | {name}:  # a cycle is cut where it closes
                parent_node = self._cohort(snap, parent, seen | {name})
                if not any(n is node for n in _ancestors(parent_node)):
                    node.parent = parent_node
                    parent_node.cohorts.append(node)
        return node

    def _accumulate(self, node: _Node) -> None:
        node.subtree = {fr: q.nominal for fr, q in node.quotas.items()}
        for child in node.cohorts:
            self._accumulate(child)
        for child in node.cqs:
            child.subtree = {fr: q.nominal for fr, q in child.quotas.items()}
        for child in node.cohorts + node.cqs:
            for fr, quota in child.subtree.items():
                node.subtree[fr] = node.subtree.get(fr, Decimal(0)) + quota - child.local_quota(fr)

    def add(self, wl: Workload) -> None:
        assert wl.admission is not None
        node = self.cqs[wl.admission.cluster_queue]
        node.workloads[wl.key] = wl
        self.workloads[wl.key] = wl
        for fr, value in wl.admission.usage().items():
            _add_usage(node, fr, value)

    def remove(self, wl: Workload) -> None:
        assert wl.admission is not None
        node = self.cqs[wl.admission.cluster_queue]
        node.workloads.pop(wl.key, None)
        self.workloads.pop(wl.key, None)
        for fr, value in wl.admission.usage().items():
            _remove_usage(node, fr, value)

    def add_usage(self, cq: str, usage: Mapping[FR, Decimal]) -> None:
        for fr, value in usage.items():
            _add_usage(self.cqs[cq], fr, value)

    def remove_usage(self, cq: str, usage: Mapping[FR, Decimal]) -> None:
        for fr, value in usage.items():
            _remove_usage(self.cqs[cq], fr, value)


def _ancestors(node: _Node) -> list[_Node]:
    return [node, *node.path_to_root()]


def cq_path(node: _Node) -> str:
    """buildCQPath: ``/root/.../clusterqueue``."""
    return "/" + "/".join(reversed([node.name] + [n.name for n in node.path_to_root()]))


# ---------------------------------------------------------------------------------------------------
# Flavor assignment (flavorassigner.go)


@dataclass
class _FlavorChoice:
    flavor: str
    mode: int
    borrow: int


@dataclass
class _PodSetAssignment:
    name: str
    count: int
    requests: dict[str, Decimal]
    flavors: dict[str, _FlavorChoice] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    attempts: list[tuple[str, int, str]] = field(default_factory=list)  # flavor, mode, no-fit reason

    def mode(self) -> int:
        if not self.reasons:
            return FIT
        if not self.flavors:
            return NOFIT
        return min(f.mode for f in self.flavors.values())


@dataclass
class _Assignment:
    pod_sets: list[_PodSetAssignment] = field(default_factory=list)
    borrowing: int = 0
    usage: dict[FR, Decimal] = field(default_factory=dict)
    no_fit_reason: str = ""

    def mode(self) -> int:
        if not self.pod_sets:
            return NOFIT
        return min(ps.mode() for ps in self.pod_sets)

    def message(self) -> str:
        parts = []
        for ps in self.pod_sets:
            if ps.reasons:
                parts.append(f"couldn't assign flavors to pod set {ps.name}: {', '.join(sorted(ps.reasons))}")
        return "; ".join(parts)

    def frs_needing_preemption(self) -> set[FR]:
        return {(f.flavor, res) for ps in self.pod_sets for res, f in ps.flavors.items() if f.mode == PREEMPT}

    def admission(self, cq: str) -> Admission:
        return Admission(cq, tuple(PodSetAssignment(ps.name, {r: f.flavor for r, f in ps.flavors.items()},
                                                    {r: ps.requests[r] for r in ps.flavors}, ps.count)
                                   for ps in self.pod_sets))


def _preferred(a: tuple[int, int], b: tuple[int, int], fungibility: FlavorFungibility) -> bool:
    """isPreferred: (preemption mode, borrowing level) a better than b."""
    if a[0] == _G_NOFIT:
        return False
    if b[0] == _G_NOFIT:
        return True
    if (a[0] == _G_NO_CANDIDATES) != (b[0] == _G_NO_CANDIDATES):
        return a[0] != _G_NO_CANDIDATES
    if fungibility.preference == PREEMPTION_OVER_BORROWING:
        if a[1] != b[1]:
            return a[1] < b[1]
        return a[0] > b[0]
    if a[0] != b[0]:
        return a[0] > b[0]
    return a[1] < b[1]


def _try_next_flavor(mode: tuple[int, int], fungibility: FlavorFungibility) -> bool:
    if mode[0] in (_G_NOFIT, _G_NO_CANDIDATES):
        return True
    if mode[0] in (_G_PREEMPT, _G_RECLAIM) and fungibility.when_can_preempt == TRY_NEXT_FLAVOR:
        return True
    return mode[1] > 0 and fungibility.when_can_borrow == TRY_NEXT_FLAVOR


class _Scheduler:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.tree = _Tree(snap)
        self.now = snap.now

    # ------------------------------------------------------------------ flavors

    def assign(self, wl: Workload, cq: _Node) -> _Assignment:
        spec = cq.cq
        assert spec is not None
        out = _Assignment()
        covers_pods = spec.group_of("pods") is not None
        for ps in wl.pod_sets:
            requests = {res: amount(res, q) * ps.count for res, q in ps.requests.items()}
            if covers_pods:
                requests["pods"] = Decimal(ps.count)
            psa = _PodSetAssignment(ps.name, ps.count, requests)
            chosen: dict[str, _FlavorChoice] | None = {}
            reasons: list[str] = []
            for res in sorted(requests):
                group = spec.group_of(res)
                if group is None:
                    if requests[res] == 0:
                        continue
                    # No flavor can ever hold it: NoMatchingFlavor (Kueue's reason when it meets this
                    # resource first; its resources come in map order, ours sorted).
                    chosen, reasons = None, [f"resource {res} unavailable in ClusterQueue"]
                    psa.attempts.clear()
                    break
                assert chosen is not None
                if res in chosen:
                    continue  # assigned with its group
                flavors, found_reasons, attempts = self._find_flavor(wl, ps, cq, group, requests, out.usage)
                psa.attempts.extend(attempts)
                if not flavors:
                    chosen, reasons = None, found_reasons
                    break
                chosen.update(flavors)
                reasons.extend(found_reasons)
            psa.flavors = {r: f for r, f in (chosen or {}).items() if r in requests}
            psa.reasons = reasons
            out.pod_sets.append(psa)
            for res, choice in psa.flavors.items():
                out.borrowing = max(out.borrowing, choice.borrow)
                fr = (choice.flavor, res)
                out.usage[fr] = out.usage.get(fr, Decimal(0)) + requests[res]
            if chosen is None:
                break
        if out.mode() == NOFIT:
            out.no_fit_reason = self._no_fit_reason(out, spec)
        return out

    def _find_flavor(self, wl: Workload, ps: PodSet, cq: _Node, group: ResourceGroup,
                     requests: Mapping[str, Decimal], assumed: Mapping[FR, Decimal]
                     ) -> tuple[dict[str, _FlavorChoice], list[str], list[tuple[str, int, str]]]:
        spec = cq.cq
        assert spec is not None
        wanted = {r: q for r, q in requests.items() if r in group.covered}
        reasons: list[str] = []
        attempts: list[tuple[str, int, str]] = []
        best: dict[str, _FlavorChoice] = {}
        best_mode = (_G_NOFIT, 1 << 30)
        for name in group.flavors:
            mismatch = _flavor_mismatch(self.snap.flavors.get(name), name, ps)
            if mismatch:
                reasons.append(mismatch)
                attempts.append((name, NOFIT, NO_MATCHING_FLAVOR))
                continue
            choices: dict[str, _FlavorChoice] = {}
            mode = (_G_FIT, 0)
            no_fit = ""
            for res in sorted(wanted):
                fr = (name, res)
                pmode, borrow, why, why_reason = self._fits_quota(wl, cq, fr, assumed.get(fr, Decimal(0)), wanted[res])
                if why:
                    reasons.append(why)
                    if _SEVERITY.get(why_reason, 0) > _SEVERITY.get(no_fit, 0):
                        no_fit = why_reason
                if _preferred(mode, (pmode, borrow), spec.fungibility):
                    mode = (pmode, borrow)
                if mode[0] == _G_NOFIT:
                    continue  # the flavor does not fit: the other resources are still looked at
                choices[res] = _FlavorChoice(name, FIT if pmode == _G_FIT else PREEMPT, borrow)
            attempts.append((name, NOFIT if mode[0] == _G_NOFIT else FIT if mode[0] == _G_FIT else PREEMPT, no_fit))
            if not _try_next_flavor(mode, spec.fungibility):
                best, best_mode = choices, mode
                break
            if _preferred(mode, best_mode, spec.fungibility):
                best, best_mode = choices, mode
        if best_mode[0] == _G_FIT:
            return best, [], attempts
        return best, reasons, attempts

    def _fits_quota(self, wl: Workload, cq: _Node, fr: FR, assumed: Decimal, request: Decimal
                    ) -> tuple[int, int, str, str]:
        """fitsResourceQuota: (granular mode, borrowing level, reason text, no-fit reason)."""
        flavor, res = fr
        avail = available(cq, fr)
        most = potential_available(cq, fr)
        value = assumed + request
        if value > most:
            return _G_NOFIT, 0, (
                f"insufficient quota for {res} in flavor {flavor}, previously considered podsets requests "
                f"({format_quantity(res, assumed)}) + current podset request ({format_quantity(res, request)}) > "
                f"maximum capacity ({format_quantity(res, most)})"), EXCEEDS_MAX_QUOTA
        borrow, may_reclaim = _lowest_subtree_that_fits(cq, fr, value)
        if value <= avail:
            return _G_FIT, borrow, "", ""
        why = f"insufficient unused quota for {res} in flavor {flavor}, {format_quantity(res, value - avail)} more needed"
        spec = cq.cq
        assert spec is not None
        if cq.quota(fr).nominal >= value or may_reclaim or spec.preemption.borrow_within_cohort != NEVER:
            targets = self.targets(wl, cq, {fr}, {fr: value})
            if not targets:
                return _G_NO_CANDIDATES, _lowest_subtree_that_fits(cq, fr, value)[0], why, ""
            for t in targets:
                self.tree.remove(t[0])
            borrow_after = _lowest_subtree_that_fits(cq, fr, value)[0]
            for t in targets:
                self.tree.add(t[0])
            same = any(t[0].admission and t[0].admission.cluster_queue == cq.name for t in targets)
            return (_G_PREEMPT if same else _G_RECLAIM), borrow_after, why, ""
        return _G_NOFIT, borrow, why, WAITING_FOR_QUOTA

    def _no_fit_reason(self, out: _Assignment, spec: ClusterQueue) -> str:
        overall = ""
        for ps in out.pod_sets:
            if ps.mode() != NOFIT:
                continue
            if not ps.attempts:
                overall = _worse(overall, NO_MATCHING_FLAVOR)
                continue
            per_group: dict[int, str] = {}
            for i, (flavor, mode, reason) in enumerate(ps.attempts):
                if mode != NOFIT:
                    continue
                groups = [n for n, g in enumerate(spec.resource_groups) if flavor in g.flavors] or [-1 - i]
                for g in groups:
                    if g not in per_group or _SEVERITY.get(reason, 0) < _SEVERITY.get(per_group[g], 0):
                        per_group[g] = reason
            reason = ""
            for value in per_group.values():
                reason = _worse(reason, value)
            overall = _worse(overall, reason)
        return overall

    # ------------------------------------------------------------------ preemption (classic)

    def targets(self, wl: Workload, cq: _Node, frs: set[FR], usage: Mapping[FR, Decimal]
                ) -> list[tuple[Workload, str]]:
        """classicalPreemptions: the fewest admitted workloads to evict so that ``usage`` fits."""
        spec = cq.cq
        assert spec is not None
        policy = spec.preemption
        forbidden = policy.borrow_within_cohort == NEVER

        def variant(candidate: Workload, advantage: bool) -> str:
            if not any((f, r) in frs for ps in candidate.admission.pod_sets for r, f in ps.flavors.items()):  # type: ignore[union-attr]
                return ""
            same = candidate.admission.cluster_queue == cq.name  # type: ignore[union-attr]
            rule = policy.within_cluster_queue if same else policy.reclaim_within_cohort
            if not _satisfies(rule, wl, candidate):
                return ""
            if same:
                return "WithinCQ"
            if advantage:
                return "Hierarchical"
            if forbidden:
                return "WithoutBorrowing"
            if candidate.priority >= wl.priority or (
                    policy.max_priority_threshold is not None and candidate.priority > policy.max_priority_threshold):
                return "WithoutBorrowing"
            return "WhileBorrowing"

        same_queue: list[tuple[Workload, _Node | None, str]] = []
        if policy.within_cluster_queue != NEVER:
            for candidate in cq.workloads.values():
                v = variant(candidate, False)
                if v:
                    same_queue.append((candidate, None, v))
        hierarchy: list[tuple[Workload, _Node | None, str]] = []
        priority: list[tuple[Workload, _Node | None, str]] = []
        if cq.parent is not None and policy.reclaim_within_cohort != NEVER:
            advantage, remaining = _fits_in_quota(cq, usage)
            previous: _Node | None = None
            for root in cq.path_to_root():
                bucket = hierarchy if advantage else priority
                self._collect(root, root, previous, cq, frs, advantage, variant, bucket)
                fits, remaining = _fits_in_quota(root, remaining)
                advantage = advantage or fits
                previous = root
        now = _epoch(self.now)

        def order(item: tuple[Workload, _Node | None, str]) -> tuple:
            c = item[0]
            same = c.admission is not None and c.admission.cluster_queue == cq.name
            reserved = _epoch(c.reserved_at) if c.reserved_at else now
            return (0 if c.evicted else 1, 1 if same else 0, c.priority, -reserved, c.uid, c.name)

        for bucket in (same_queue, hierarchy, priority):
            bucket.sort(key=order)
        everything = ([c for c in hierarchy if c[0].evicted] + [c for c in priority if c[0].evicted]
                      + [c for c in same_queue if c[0].evicted] + [c for c in hierarchy if not c[0].evicted]
                      + [c for c in priority if not c[0].evicted] + [c for c in same_queue if not c[0].evicted])
        if not hierarchy and not priority:
            attempts = [True]
        elif forbidden and not all(cq.quota(fr).nominal > cq.usage.get(fr, Decimal(0)) for fr in frs):
            attempts = [True]
        elif forbidden and not hierarchy:
            attempts = [False, True]
        else:
            attempts = [True, False]

        def valid(item: tuple[Workload, _Node | None, str], borrow: bool) -> bool:
            candidate, lca, kind = item
            if kind == "WithinCQ":
                return True
            if borrow and kind == "WithoutBorrowing":
                return False
            node = self.tree.cqs[candidate.admission.cluster_queue]  # type: ignore[union-attr]
            if node.within_nominal(frs):
                return False
            for ancestor in node.path_to_root():
                if ancestor is lca:
                    break
                if ancestor.within_nominal(frs):
                    return False
            return True

        def fits(borrow: bool) -> bool:
            for fr, value in usage.items():
                if not borrow and cq.borrowing_with(fr, value):
                    return False
                if value > available(cq, fr):
                    return False
            return True

        reason_of = {"WithinCQ": IN_CLUSTER_QUEUE, "Hierarchical": IN_COHORT_RECLAMATION,
                     "WithoutBorrowing": IN_COHORT_RECLAMATION, "WhileBorrowing": IN_COHORT_RECLAIM_WHILE_BORROWING}
        for borrow in attempts:
            chosen: list[tuple[Workload, str]] = []
            for item in everything:
                if not valid(item, borrow):
                    continue
                self.tree.remove(item[0])
                chosen.append((item[0], reason_of[item[2]]))
                if fits(borrow):
                    # Put back, last to first, every target the preemptor does not need after all.
                    i = len(chosen) - 2
                    while i >= 0:
                        self.tree.add(chosen[i][0])
                        if fits(borrow):
                            chosen[i] = chosen[-1]
                            chosen.pop()
                        else:
                            self.tree.remove(chosen[i][0])
                        i -= 1
                    for target, _ in chosen:
                        self.tree.add(target)
                    return chosen
            for target, _ in chosen:
                self.tree.add(target)
        return []

    def _collect(self, current: _Node, subtree_root: _Node, skip: _Node | None, cq: _Node, frs: set[FR],
                 advantage: bool, variant: Any, out: list[tuple[Workload, _Node | None, str]]) -> None:
        for child in current.cohorts:
            if child is skip or child.within_nominal(frs):
                continue
            self._collect(child, subtree_root, skip, cq, frs, advantage, variant, out)
        for child in current.cqs:
            if child is cq or child.within_nominal(frs):
                continue
            for candidate in child.workloads.values():
                v = variant(candidate, advantage)
                if v:
                    out.append((candidate, subtree_root, v))


def _worse(a: str, b: str) -> str:
    return a if _SEVERITY.get(a, 0) >= _SEVERITY.get(b, 0) else b


def _satisfies(policy: str, preemptor: Workload, candidate: Workload) -> bool:
    """SatisfiesPreemptionPolicy."""
    if policy == LOWER_PRIORITY:
        return preemptor.priority > candidate.priority
    if policy == LOWER_OR_NEWER_EQUAL:
        newer = preemptor.priority == candidate.priority and _queue_key(preemptor) < _queue_key(candidate)
        return preemptor.priority > candidate.priority or newer
    return policy == ANY


# ---------------------------------------------------------------------------------------------------
# Queues


def _queue_key(wl: Workload) -> tuple:
    """The order inside a ClusterQueue: higher priority first, then older (creationTimestamp)."""
    return (-wl.priority, _epoch(wl.created), wl.name, wl.namespace, wl.uid)


def cluster_queue_inactive(snap: Snapshot, cq: ClusterQueue) -> tuple[str, str]:
    """(reason, message) of a ClusterQueue that cannot admit (clusterqueue.go inactiveReason), ('', '') else."""
    reasons, messages = [], []
    if cq.stop_policy not in ("", "None"):
        reasons.append("Stopped")
        messages.append("is stopped")
    missing = sorted({f for f in cq.flavors() if f not in snap.flavors})
    if missing:
        reasons.append("FlavorNotFound")
        messages.append(f"references missing ResourceFlavor(s): {','.join(missing)}")
    if not reasons:
        return "", ""
    return reasons[0], f"Can't admit new workloads: {', '.join(messages)}."


@dataclass
class QueueState:
    """Where a workload that waits stands: its ClusterQueue ('' when none takes it) and what blocks it."""

    cluster_queue: str = ""
    blocker: tuple[str, str] | None = None  # QuotaReserved=False (reason, message) that no cycle changes
    queued: bool = False  # in the ClusterQueue's queue (counted pending, shown by the visibility API)


def queue_state(snap: Snapshot, wl: Workload) -> QueueState:
    """The workload controller's queue checks (getQueueBlocker, ValidateAdmissibility)."""
    lq = snap.local_queues.get((wl.namespace, wl.queue_name))
    if lq is None:
        return QueueState(blocker=(MISCONFIGURED, f"LocalQueue {wl.queue_name} doesn't exist"))
    if lq.stop_policy not in ("", "None"):
        return QueueState(lq.cluster_queue, (SUSPENDED, f"LocalQueue {wl.queue_name} is inactive"))
    cq = snap.cluster_queues.get(lq.cluster_queue)
    if cq is None:
        return QueueState(lq.cluster_queue, (MISCONFIGURED, f"ClusterQueue {lq.cluster_queue} doesn't exist"))
    if cluster_queue_inactive(snap, cq)[0]:
        return QueueState(cq.name, (SUSPENDED, f"ClusterQueue {cq.name} is inactive"), queued=True)
    if wl.namespace not in snap.namespaces:
        return QueueState(cq.name, (MISCONFIGURED, f'workload namespace "{wl.namespace}" does not exist'), True)
    if not label_selector_matches(cq.namespace_selector, snap.namespaces.get(wl.namespace) or {}):
        return QueueState(cq.name, (MISCONFIGURED, "workload namespace doesn't match ClusterQueue selector"), True)
    if wl.invalid:
        return QueueState(cq.name, (MISCONFIGURED, f"resources validation failed: {wl.invalid}"), True)
    return QueueState(cq.name, queued=True)


def _waiting(wl: Workload) -> bool:
    return wl.admission is None and not wl.finished and wl.active


def pending_workloads(snap: Snapshot) -> dict[str, list[Workload]]:
    """Every ClusterQueue's pending workloads in queue order (what the visibility API lists)."""
    out: dict[str, list[Workload]] = {name: [] for name in snap.cluster_queues}
    for wl in snap.workloads:
        if _waiting(wl):
            state = queue_state(snap, wl)
            if state.queued:
                out[state.cluster_queue].append(wl)
    for items in out.values():
        items.sort(key=_queue_key)
    return out


# ---------------------------------------------------------------------------------------------------
# Scheduling


def schedule(snap: Snapshot, max_cycles: int = 10_000) -> Decisions:
    """Run scheduling cycles until nothing changes: what to admit, whom to evict, why the others wait."""
    decisions = Decisions()
    sched = _Scheduler(snap)
    tree = sched.tree
    queues: dict[str, list[Workload]] = {}
    for wl in snap.workloads:
        if not _waiting(wl):
            continue
        state = queue_state(snap, wl)
        if state.blocker is not None:
            decisions.pending[wl.key] = state.blocker
            continue
        queues.setdefault(state.cluster_queue, []).append(wl)
    for items in queues.values():
        items.sort(key=_queue_key)
    inadmissible: set[Key] = set()
    blocked: set[str] = set()  # StrictFIFO queues whose head cannot be admitted
    evicted: dict[Key, Workload] = {k: w for k, w in tree.workloads.items() if w.evicted}
    for _ in range(max_cycles):
        heads: list[Workload] = []
        for name in sorted(queues):
            if name in blocked:
                continue
            head = next((w for w in queues[name] if w.key not in decisions.admitted and w.key not in inadmissible),
                        None)
            if head is not None:
                heads.append(head)
        if not heads:
            break
        entries = []
        for wl in heads:
            cq = tree.cqs[_queue_of(snap, wl)]
            assignment = sched.assign(wl, cq)
            targets: list[tuple[Workload, str]] = []
            if assignment.mode() == PREEMPT:
                targets = sched.targets(wl, cq, assignment.frs_needing_preemption(), assignment.usage)
            entries.append((wl, cq, assignment, targets))
        entries.sort(key=lambda e: (e[2].borrowing, -e[0].priority, _epoch(e[0].created), e[0].name))
        progress = False
        cycle_preempted: dict[Key, Workload] = {}
        cycle_usage: list[tuple[str, dict[FR, Decimal]]] = []

        def give_up(wl: Workload, cq: _Node, reason: str, message: str) -> None:
            nonlocal progress
            decisions.pending[wl.key] = (reason or "Pending", message)
            if cq.cq is not None and cq.cq.queueing_strategy == STRICT_FIFO:
                blocked.add(cq.name)
            elif wl.key not in inadmissible:
                inadmissible.add(wl.key)
                progress = True

        for wl, cq, assignment, targets in entries:
            mode = assignment.mode()
            message = assignment.message()
            if mode == NOFIT:
                give_up(wl, cq, assignment.no_fit_reason, message)
                continue
            if mode == PREEMPT and not targets:
                give_up(wl, cq, WAITING_FOR_QUOTA, message)
                continue
            if any(t.key in cycle_preempted for t, _ in targets):
                decisions.pending[wl.key] = (WAITING_FOR_QUOTA,
                                             "Workload has overlapping preemption targets with another workload")
                continue
            removed = {**cycle_preempted, **{t.key: t for t, _ in targets}}
            for t in removed.values():
                tree.remove(t)
            fits = all(value <= available(cq, fr) for fr, value in assignment.usage.items())
            for t in removed.values():
                tree.add(t)
            if not fits:
                decisions.pending[wl.key] = (WAITING_FOR_QUOTA, "Workload no longer fits after processing another workload")
                continue
            cycle_preempted.update({t.key: t for t, _ in targets})
            if mode == PREEMPT:
                tree.add_usage(cq.name, assignment.usage)
                cycle_usage.append((cq.name, assignment.usage))
                for target, reason in targets:
                    if target.evicted or target.key in evicted:
                        continue
                    target_cq = tree.cqs[target.admission.cluster_queue]  # type: ignore[union-attr]
                    decisions.evicted[target.key] = Eviction(
                        target.key, wl.key, reason, preemption_message(wl, reason, cq_path(cq), cq_path(target_cq)))
                    marked = replace(target, evicted=True)
                    tree.remove(target)
                    tree.add(marked)
                    evicted[target.key] = marked
                    progress = True
                decisions.pending[wl.key] = (WAITING_FOR_PREEMPTED,
                                             f"{message}. Pending the preemption of {len(targets)} workload(s)")
                continue
            admission = assignment.admission(cq.name)
            decisions.admitted[wl.key] = admission
            decisions.pending.pop(wl.key, None)
            tree.add(replace(wl, admission=admission, reserved_at=snap.now))
            progress = True
        for name, usage in cycle_usage:
            tree.remove_usage(name, usage)
        if not progress:
            break
    return decisions


def _queue_of(snap: Snapshot, wl: Workload) -> str:
    return snap.local_queues[(wl.namespace, wl.queue_name)].cluster_queue


# ---------------------------------------------------------------------------------------------------
# Status


@dataclass(frozen=True)
class ResourceUsage:
    name: str
    total: Decimal
    borrowed: Decimal


@dataclass
class QueueStatus:
    """A ClusterQueue's or LocalQueue's status: workload counts, usage per flavor, the Active condition."""

    active: tuple[str, str, str]  # status, reason, message
    pending: int = 0
    reserving: int = 0
    admitted: int = 0
    flavors: list[tuple[str, list[ResourceUsage]]] = field(default_factory=list)


def statuses(snap: Snapshot) -> tuple[dict[str, QueueStatus], dict[Key, QueueStatus]]:
    """What Kueue reports in ClusterQueue and LocalQueue status, from the workloads' reservations."""
    tree = _Tree(snap)
    pending = pending_workloads(snap)
    cq_status: dict[str, QueueStatus] = {}
    for name, cq in snap.cluster_queues.items():
        node = tree.cqs[name]
        st = QueueStatus(("True", "Ready", "Can admit new workloads"), pending=len(pending.get(name, [])),
                         reserving=len(node.workloads), admitted=len(node.workloads))
        reason, message = cluster_queue_inactive(snap, cq)
        if reason:
            st.active = ("False", reason, message)
        for group in cq.resource_groups:
            for flavor in group.flavors:
                rows = []
                for res in sorted(group.covered):
                    used = node.usage.get((flavor, res), Decimal(0))
                    borrowed = max(Decimal(0), used - node.quota((flavor, res)).nominal) if node.parent else Decimal(0)
                    rows.append(ResourceUsage(res, used, borrowed))
                st.flavors.append((flavor, rows))
        cq_status[name] = st
    lq_status: dict[Key, QueueStatus] = {}
    lq_usage: dict[Key, dict[FR, Decimal]] = {}
    for key, lq in snap.local_queues.items():
        st = QueueStatus(("True", "Ready", "Can submit new workloads to localQueue"))
        if lq.stop_policy not in ("", "None"):
            st.active = ("False", "Stopped", "LocalQueue is stopped")
        elif lq.cluster_queue not in snap.cluster_queues:
            st.active = ("False", "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue")
        elif cq_status[lq.cluster_queue].active[0] != "True":
            st.active = ("False", "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue")
        lq_status[key] = st
        lq_usage[key] = {}
    for wl in snap.workloads:
        key = (wl.namespace, wl.queue_name)
        st = lq_status.get(key)
        if st is None or wl.finished:
            continue
        if wl.admission is not None:
            st.reserving += 1
            st.admitted += 1
            for fr, value in wl.admission.usage().items():
                lq_usage[key][fr] = lq_usage[key].get(fr, Decimal(0)) + value
    for name, items in pending.items():
        for wl in items:
            lq_status[(wl.namespace, wl.queue_name)].pending += 1
    for key, st in lq_status.items():
        cq = snap.cluster_queues.get(snap.local_queues[key].cluster_queue)
        for group in cq.resource_groups if cq else ():
            for flavor in group.flavors:
                st.flavors.append((flavor, [ResourceUsage(res, lq_usage[key].get((flavor, res), Decimal(0)), Decimal(0))
                                            for res in sorted(group.covered)]))
    return cq_status, lq_status
