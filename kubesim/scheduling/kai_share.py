"""KAI Scheduler's queue arithmetic (its ``proportion`` plugin), pure: queues and usage in, fair shares,
capacity verdicts, queue order and reclaim verdicts out.

Written from NVIDIA/KAI-Scheduler's documentation — docs/fairness/README.md (deserved quota first, the
rest by queue priority then in proportion to ``overQuotaWeight``, level by level of the queue tree;
"Queues below fair share are prioritized"; reclaim keeps the relative order of saturation
``Allocated / FairShare``), docs/queues/README.md (``quota``/``limit`` ``-1`` unlimited, units: CPU
millicores, memory megabytes, GPU devices), docs/priority/README.md (a PriorityClass value of 100 or more
is non-preemptible and runs within quota only) — and the plugin those pages describe
(pkg/scheduler/plugins/proportion: ``resource_division/resource_division.go``,
``capacity_policy/{max_allowed_check,quota_check}.go``, ``queue_order/queue_order.go``,
``reclaimable/reclaimable.go``, ``reclaimable/strategies/strategies.go``, ``resource_share/*.go``).

What follows the sources closely:

- per resource, each queue first gets ``min(deserved, requestable)`` (``deserved -1``: the whole amount;
  requestable: its request capped by ``limit``); what remains goes to the priorities in decreasing
  order, within one priority in rounds proportional to ``overQuotaWeight`` (weight 0: no over-quota
  share), whole units per round (``floor``), until every queue is satisfied or nothing is left; the
  fractions left over go one unit at a time to the queues with the largest unmet remainder (then the
  oldest queue, then the name). Children divide their parent's fair share the same way.
  Time-based fairness (``kValue`` with a usage database) is not emulated: with no usage recorded the
  plugin's weights reduce to the plain ``overQuotaWeight`` proportions used here;
- ``limit`` (``MaxAllowed``): a job is refused ``OverLimit`` when it would take a queue or any ancestor
  past it; ``limit: 0`` (or unset) allows nothing, ``-1`` no limit;
- a non-preemptible job is refused ``NonPreemptibleOverQuota`` when the non-preemptible allocation of its
  queue or any ancestor would pass the ``quota``;
- queue order: a queue not over its fair share before one that is; a queue that stays within its
  deserved quota with the job before one that does not; higher queue ``priority`` first; a queue that
  would use what it has no share of last; smaller dominant resource share (allocated / allocatable,
  with the job) first; then the older queue;
- reclaim: a job may reclaim only if its queue stays within its fair share with it (and within quota
  for non-preemptible jobs); a victim's queue must be over its allocatable share (MaintainFairShare) or
  over its deserved quota while the reclaimer stays within its own (GuaranteeDeservedQuota); after
  the move, at every level, the reclaiming queue's saturation must stay below each involved sibling's
  (``reclaimerUtilizationMultiplier`` 1.0).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from kube import gpu as kgpu

CPU = "CPU"
MEMORY = "Memory"
GPU = "GPU"
RESOURCES = (CPU, MEMORY, GPU)  # KAI's AllResources order (the first exceeding one is named)
UNLIMITED = -1.0
MB = 1_000_000  # a queue's memory is in megabytes (10^6 bytes); usage here is in bytes
NO_FAIR_SHARE_DRF_MULTIPLIER = 1000
DEFAULT_QUEUE_PRIORITY = 100
EPSILON = 1e-9


def quantities(cpu: float = 0.0, memory: float = 0.0, gpu: float = 0.0) -> dict[str, float]:
    return {CPU: cpu, MEMORY: memory, GPU: gpu}


def compare(quantity: float, other: float) -> int:
    """Order with ``-1`` meaning unlimited (larger than any amount)."""
    if quantity == UNLIMITED:
        return 0 if other == UNLIMITED else 1
    if other == UNLIMITED:
        return -1
    if quantity > other + EPSILON:
        return 1
    if quantity < other - EPSILON:
        return -1
    return 0


def less_equal(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    return all(compare(a[r], b[r]) <= 0 for r in RESOURCES)


def less(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    """Strictly less in every resource (KAI's ``Less``: raw comparison, no unlimited handling)."""
    return all(a[r] < b[r] for r in RESOURCES)


@dataclass
class Share:
    """One resource of one queue."""

    deserved: float = 0.0
    max_allowed: float = 0.0
    weight: float = 0.0
    fair_share: float = 0.0
    allocated: float = 0.0
    allocated_non_preemptible: float = 0.0
    request: float = 0.0

    def requestable(self) -> float:
        if self.max_allowed == UNLIMITED:
            return self.request
        return min(self.max_allowed, self.request)

    def allocatable(self) -> float:
        if self.deserved == UNLIMITED:
            return self.max_allowed
        allocatable = max(self.deserved, self.fair_share)
        if self.max_allowed != UNLIMITED:
            allocatable = min(self.max_allowed, allocatable)
        return allocatable


@dataclass
class Queue:
    """A queue's attributes for one cycle (``name`` is its object name; ``display`` the name KAI prints:
    ``spec.displayName`` when set)."""

    name: str
    parent: str = ""
    priority: int = DEFAULT_QUEUE_PRIORITY
    created: str = ""
    display: str = ""
    shares: dict[str, Share] = field(default_factory=lambda: {r: Share() for r in RESOURCES})
    children: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.display = self.display or self.name

    def vector(self, attribute: str) -> dict[str, float]:
        return {r: getattr(self.shares[r], attribute) for r in RESOURCES}

    def fair_share(self) -> dict[str, float]:
        return self.vector("fair_share")

    def allocated(self) -> dict[str, float]:
        return self.vector("allocated")

    def deserved(self) -> dict[str, float]:
        return self.vector("deserved")

    def allocatable(self) -> dict[str, float]:
        return {r: self.shares[r].allocatable() for r in RESOURCES}

    def dominant_share(self, total: Mapping[str, float], extra: Mapping[str, float] | None = None) -> float:
        """max over resources of allocated / allocatable (allocated × 1000 where nothing is allocatable)."""
        dominant = 0.0
        for r in RESOURCES:
            share = self.shares[r]
            allocatable = share.allocatable()
            if allocatable == UNLIMITED:
                allocatable = total.get(r, 0.0)
            allocated = share.allocated + (extra or {}).get(r, 0.0)
            value = allocated * NO_FAIR_SHARE_DRF_MULTIPLIER if allocatable == 0 else allocated / allocatable
            dominant = max(dominant, value)
        return dominant


def queue_from_spec(name: str, spec: Mapping, *, created: str = "") -> Queue:
    """A ``scheduling.run.ai/v2`` Queue's spec as KAI reads it (missing numbers are 0, ``priority`` 100;
    memory megabytes → bytes)."""
    resources = spec.get("resources") or {}
    queue = Queue(name=name, parent=spec.get("parentQueue") or "", created=created,
                  priority=int(spec["priority"]) if isinstance(spec.get("priority"), int) else DEFAULT_QUEUE_PRIORITY,
                  display=spec.get("displayName") or name)
    for resource, key, scale in ((CPU, "cpu", 1.0), (MEMORY, "memory", MB), (GPU, "gpu", 1.0)):
        values = resources.get(key) or {}
        quota = float(values.get("quota") or 0)
        limit = float(values.get("limit") or 0)
        if scale != 1.0:
            quota = max(UNLIMITED, quota * scale)
            limit = max(UNLIMITED, limit * scale)
        share = queue.shares[resource]
        share.deserved, share.max_allowed, share.weight = quota, limit, float(values.get("overQuotaWeight") or 0)
    return queue


def link(queues: Mapping[str, Queue]) -> None:
    for queue in queues.values():
        queue.children = []
    for name in sorted(queues):
        parent = queues[name].parent
        if parent in queues:
            queues[parent].children.append(name)


def add_usage(queues: Mapping[str, Queue], queue: str, amounts: Mapping[str, float], *, allocated: bool,
              non_preemptible: bool = False, request: bool = True, sign: float = 1.0) -> None:
    """Count a pod's resources in its queue and every ancestor: requested always, allocated when bound."""
    seen: set[str] = set()
    while queue in queues and queue not in seen:
        seen.add(queue)
        q = queues[queue]
        for r in RESOURCES:
            amount = sign * amounts.get(r, 0.0)
            share = q.shares[r]
            if request:
                share.request += amount
            if allocated:
                share.allocated += amount
                if non_preemptible:
                    share.allocated_non_preemptible += amount
        queue = q.parent


# ---------------------------------------------------------------------------------------------------
# Fair share (resource_division.go)


def _remaining_requested(share: Share) -> float:
    requested = share.requestable()
    return 0.0 if requested < share.fair_share else requested - share.fair_share


def _satisfied(share: Share) -> bool:
    if share.request <= share.fair_share:
        return True
    return share.max_allowed != UNLIMITED and share.max_allowed <= share.fair_share


def _divide_up_to_fair_share(amount: float, queues: list[Queue], resource: str,
                             leftovers: dict[str, tuple[Queue, float]]) -> float:
    while True:
        another_round = False
        in_this_round = amount
        unsatisfied_weights = sum(q.shares[resource].weight for q in queues if _remaining_requested(q.shares[resource]) > 0)
        if unsatisfied_weights == 0:
            break
        weights = {q.name: q.shares[resource].weight / unsatisfied_weights for q in queues
                   if not _satisfied(q.shares[resource])}
        weight_sum = sum(weights.values())
        if weight_sum == 0:
            break
        for q in queues:
            if amount == 0:
                break
            share = q.shares[resource]
            if _satisfied(share) or share.weight == 0:
                continue
            requested = _remaining_requested(share)
            fair = in_this_round * weights[q.name] / weight_sum
            if requested <= fair:
                give = requested
                leftovers.pop(q.name, None)
            else:
                give = float(math.floor(fair))
                if fair - give > 0:
                    leftovers[q.name] = (q, fair - give)
            if give == 0:
                continue
            share.fair_share += give
            amount -= give
            another_round = another_round or requested < fair
        if not another_round or amount == 0:
            break
    return amount


def _divide_remaining(amount: float, leftovers: dict[str, tuple[Queue, float]], resource: str) -> float:
    order = sorted(leftovers.values(), key=lambda item: (-item[1], item[0].created, item[0].name))
    for queue, _ in order:
        if amount <= 0:
            break
        give = min(1.0, amount)
        queue.shares[resource].fair_share += give
        amount -= give
    return amount


def set_resource_share(total: float, queues: Iterable[Queue], resource: str) -> float:
    """Divide ``total`` of one resource among sibling queues (sets their ``fair_share``); returns what is
    left over."""
    queues = list(queues)
    remaining = total
    for q in queues:
        share = q.shares[resource]
        deserved = total if share.deserved == UNLIMITED else share.deserved
        amount = min(deserved, share.requestable())
        share.fair_share += amount
        remaining -= amount
    if remaining <= 0:
        return 0.0
    priorities = sorted({q.priority for q in queues}, reverse=True)
    leftovers_by_priority: dict[int, dict[str, tuple[Queue, float]]] = {}
    for priority in priorities:
        leftovers_by_priority[priority] = {}
        remaining = _divide_up_to_fair_share(remaining, [q for q in queues if q.priority == priority], resource,
                                             leftovers_by_priority[priority])
    for priority in priorities:
        if remaining <= 0:
            break
        if leftovers_by_priority[priority]:
            remaining = _divide_remaining(remaining, leftovers_by_priority[priority], resource)
    return remaining


def set_fair_shares(total: Mapping[str, float], queues: Mapping[str, Queue]) -> None:
    """Fair share of every queue of a tree, level by level: the top queues divide ``total``, each queue's
    children divide its fair share."""
    for q in queues.values():
        for share in q.shares.values():
            share.fair_share = 0.0
    tops = [q for q in queues.values() if not q.parent]
    _set_level(dict(total), tops, queues)


def _set_level(total: Mapping[str, float], level: list[Queue], queues: Mapping[str, Queue]) -> None:
    if not level:
        return
    level = sorted(level, key=lambda q: q.name)
    for r in RESOURCES:
        set_resource_share(total.get(r, 0.0), level, r)
    for q in level:
        _set_level(q.fair_share(), [queues[c] for c in q.children if c in queues], queues)


# ---------------------------------------------------------------------------------------------------
# Capacity (capacity_policy)


def humanize(value: float, unit: float = 1.0) -> str:
    """KAI's HumanizeResource: "Unlimited" for -1, else the value in the unit with up to 3 decimals."""
    if value == UNLIMITED:
        return "Unlimited"
    text = f"{value / unit:.3f}".rstrip("0").rstrip(".")
    return text if text not in ("-0", "") else "0"


def _ancestry(queues: Mapping[str, Queue], name: str) -> list[Queue]:
    out: list[Queue] = []
    seen: set[str] = set()
    while name in queues and name not in seen:
        seen.add(name)
        out.append(queues[name])
        name = queues[name].parent
    return out


@dataclass(frozen=True)
class Verdict:
    """A refused job: KAI's UnschedulableReason, its message and the queue details it reports."""

    reason: str
    message: str
    details: dict


def _details(q: Queue, requested: Mapping[str, float], non_preemptible: bool) -> dict:
    return {"queueDetails": {
        "name": q.name,
        "queueRequestedResources": resource_list(q.vector("request")),
        "queueDeservedResources": resource_list(q.deserved()),
        "queueAllocatedResources": resource_list(q.allocated()),
        "queueAllocatedNonPreemptibleResources": resource_list(q.vector("allocated_non_preemptible")),
        "queueResourceLimits": resource_list(q.vector("max_allowed")),
        "podGroupRequestedResources": resource_list(requested),
        "podGroupRequestedNonPreemptibleResources": resource_list(requested if non_preemptible else {}),
    }}


def resource_list(values: Mapping[str, float]) -> dict[str, str]:
    """KAI's ResourceList view of quantities: GPU devices, CPU as a quantity of cores, memory in bytes."""
    out: dict[str, str] = {}
    for r, key in ((CPU, "cpu"), (MEMORY, "memory"), (GPU, kgpu.GPU_RESOURCE)):
        value = values.get(r, 0.0)
        if value == UNLIMITED:
            out[key] = "-1"
        elif r == CPU:
            out[key] = f"{int(round(value))}m"
        else:
            out[key] = humanize(value)
    return out


def _exceeded(queues: Mapping[str, Queue], queue: str, requested: Mapping[str, float], bound: str,
              used: str) -> tuple[Queue, str] | None:
    """The first (queue or ancestor, resource) whose ``used`` plus the request passes its ``bound``
    (``-1``: no bound), in KAI's order: the queue up, resources CPU, memory, GPU."""
    for q in _ancestry(queues, queue):
        for r in RESOURCES:
            share = q.shares[r]
            want = requested.get(r, 0.0)
            top = getattr(share, bound)
            if top == UNLIMITED or want == 0:
                continue
            if top < getattr(share, used) + want - EPSILON:
                return q, r
    return None


def over_limit(queues: Mapping[str, Queue], queue: str, requested: Mapping[str, float],
               non_preemptible: bool) -> Verdict | None:
    found = _exceeded(queues, queue, requested, "max_allowed", "allocated")
    if found is None:
        return None
    q, r = found
    return Verdict("OverLimit", _over_limit_message(q, r, requested.get(r, 0.0)), _details(q, requested, non_preemptible))


def _over_limit_message(q: Queue, resource: str, requested: float) -> str:
    share = q.shares[resource]
    if resource == GPU:
        name, unit, what = "GPUs", 1.0, "GPUs"
    elif resource == CPU:
        name, unit, what = "CPU cores", 1000.0, "cores"
    else:
        name, unit, what = "memory", 1e9, "GB"
    return (f"{q.display} quota has reached the allowable limit of {name}. Limit is "
            f"{humanize(share.max_allowed, unit)} {what}, currently {humanize(share.allocated, unit)} {what} "
            f"allocated and workload requested {humanize(requested, unit)} {what}")


def non_preemptible_over_quota(queues: Mapping[str, Queue], queue: str, requested: Mapping[str, float],
                               preemptible: bool) -> Verdict | None:
    if preemptible:
        return None
    found = _exceeded(queues, queue, requested, "deserved", "allocated_non_preemptible")
    if found is None:
        return None
    q, r = found
    return Verdict("NonPreemptibleOverQuota", _over_quota_message(q, r, requested), _details(q, requested, True))


def _over_quota_message(q: Queue, resource: str, requested: Mapping[str, float]) -> str:
    share = q.shares[resource]
    if resource == GPU:
        detail = (f"Workload requested {humanize(requested.get(GPU, 0.0))} GPUs, but {q.display} quota is "
                  f"{humanize(share.deserved)} GPUs, while {humanize(share.allocated_non_preemptible)} GPUs are "
                  "already allocated for non-preemptible pods.")
    elif resource == CPU:
        detail = (f"Workload requested {humanize(requested.get(CPU, 0.0), 1000)} CPU cores, but {q.display} quota "
                  f"is {humanize(share.deserved, 1000)} cores, while {humanize(share.allocated_non_preemptible, 1000)} "
                  "cores are already allocated for non-preemptible pods.")
    else:
        detail = (f"Workload requested {humanize(requested.get(MEMORY, 0.0), 1e9)} GB memory, but {q.display} "
                  f"quota is {humanize(share.deserved, 1e9)} GB, while "
                  f"{humanize(share.allocated_non_preemptible, 1e9)} GB are already allocated for non-preemptible pods.")
    return f"Non-preemptible workload is over quota. {detail} Use a preemptible workload to go over quota."


def capacity_verdict(queues: Mapping[str, Queue], queue: str, requested: Mapping[str, float],
                     preemptible: bool) -> Verdict | None:
    """IsJobOverQueueCapacity: the limit first, then the non-preemptible quota."""
    return over_limit(queues, queue, requested, not preemptible) or non_preemptible_over_quota(
        queues, queue, requested, preemptible)


# ---------------------------------------------------------------------------------------------------
# Queue order (queue_order.go)


def queue_order(l: Queue, r: Queue, l_job: Mapping[str, float], r_job: Mapping[str, float],
                total: Mapping[str, float]) -> int:
    """-1: ``l`` is served first; 1: ``r`` is."""
    l_over = less(l.fair_share(), l.allocated())
    r_over = less(r.fair_share(), r.allocated())
    if l_over != r_over:
        return 1 if l_over else -1
    l_with = {k: v + l_job.get(k, 0.0) for k, v in l.allocated().items()}
    r_with = {k: v + r_job.get(k, 0.0) for k, v in r.allocated().items()}
    l_starved = less_equal(l_with, l.deserved())
    r_starved = less_equal(r_with, r.deserved())
    if l_starved != r_starved:
        return -1 if l_starved else 1
    if l.priority != r.priority:
        return -1 if l.priority > r.priority else 1
    l_violates = any(l.shares[k].allocatable() == 0 and l_with[k] > 0 for k in RESOURCES)
    r_violates = any(r.shares[k].allocatable() == 0 and r_with[k] > 0 for k in RESOURCES)
    if l_violates != r_violates:
        return 1 if l_violates else -1
    l_share = l.dominant_share(total, l_job)
    r_share = r.dominant_share(total, r_job)
    if abs(l_share - r_share) > EPSILON:
        return -1 if l_share < r_share else 1
    l_share, r_share = l.dominant_share(total), r.dominant_share(total)
    if abs(l_share - r_share) > EPSILON:
        return -1 if l_share < r_share else 1
    l_alloc, r_alloc = l.allocatable(), r.allocatable()
    if not less_equal(r_alloc, l_alloc) and less_equal(l_alloc, r_alloc):
        return -1
    if not less_equal(l_alloc, r_alloc) and less_equal(r_alloc, l_alloc):
        return 1
    return -1 if (l.created, l.name) <= (r.created, r.name) else 1


# ---------------------------------------------------------------------------------------------------
# Reclaim (reclaimable.go, strategies.go)


def can_reclaim(queues: Mapping[str, Queue], queue: str, requested: Mapping[str, float], preemptible: bool) -> bool:
    """CanReclaimResources: with the job its queue stays within its fair share (and, for a non-preemptible
    job, its non-preemptible allocation within the quota)."""
    q = queues.get(queue)
    if q is None:
        return False
    with_job = {r: q.shares[r].allocated + requested.get(r, 0.0) for r in RESOURCES}
    if not less_equal(with_job, q.fair_share()):
        return False
    if preemptible:
        return True
    non_preemptible = {r: q.shares[r].allocated_non_preemptible + requested.get(r, 0.0) for r in RESOURCES}
    return less_equal(non_preemptible, q.deserved())


def _path(queues: Mapping[str, Queue], name: str) -> list[Queue]:
    return list(reversed(_ancestry(queues, name)))


def leveled(queues: Mapping[str, Queue], reclaimer: str, reclaimee: str) -> tuple[Queue, Queue]:
    """The two queues where the reclaimer's and the reclaimee's paths from the root part."""
    a, b = _path(queues, reclaimer), _path(queues, reclaimee)
    pair = (a[0], b[0]) if a and b else (queues[reclaimer], queues[reclaimee])
    for x, y in zip(a, b):
        pair = (x, y)
        if x.name != y.name:
            break
    return pair


def fits_reclaim_strategy(requested: Mapping[str, float], reclaimer: Queue, reclaimee: Queue,
                          reclaimee_remaining: Mapping[str, float]) -> bool:
    # MaintainFairShare: the reclaimee is over what it may hold (max(deserved, fair share), capped).
    if not less_equal(reclaimee_remaining, reclaimee.allocatable()):
        return True
    # GuaranteeDeservedQuota: the reclaimer stays within its quota, the reclaimee is over its own.
    with_job = {r: reclaimer.shares[r].allocated + requested.get(r, 0.0) for r in RESOURCES}
    if not less_equal(with_job, reclaimer.deserved()):
        return False
    return not less_equal(reclaimee_remaining, reclaimee.deserved())


def _saturation(allocated: float, fair: float) -> float:
    if fair == 0:
        return math.inf if allocated > 0 else 0.0
    if fair == UNLIMITED:
        return 0.0
    return allocated / fair


def _involved(amounts: Iterable[Mapping[str, float]]) -> set[str]:
    return {r for a in amounts for r in RESOURCES if a.get(r, 0.0) > 0}


def reclaimable(queues: Mapping[str, Queue], reclaimer_queue: str, requested: Mapping[str, float],
                preemptible: bool, victims: Mapping[str, list[Mapping[str, float]]]) -> bool:
    """Reclaimable: every victim fits a strategy (given the victims before it), and afterwards the
    reclaiming queue's saturation stays below every involved sibling's, at every level."""
    remaining: dict[str, dict[str, float]] = {}
    involved: dict[str, set[str]] = {}
    for victim_queue, amounts in victims.items():
        reclaimer_level, reclaimee_level = leveled(queues, reclaimer_queue, victim_queue)
        involved[victim_queue] = _involved(amounts)
        remaining.setdefault(reclaimee_level.name, reclaimee_level.allocated())
        for amount in amounts:
            if not fits_reclaim_strategy(requested, reclaimer_level, reclaimee_level, remaining[reclaimee_level.name]):
                return False
            for q in _ancestry(queues, victim_queue):
                left = remaining.setdefault(q.name, q.allocated())
                for r in RESOURCES:
                    left[r] -= amount.get(r, 0.0)
                involved.setdefault(q.name, set()).update(involved[victim_queue])
    reclaimer_involved = _involved([requested])
    for q in _ancestry(queues, reclaimer_queue):
        mine = dict(remaining.get(q.name) or q.allocated())
        for r in RESOURCES:
            mine[r] += requested.get(r, 0.0)
        for sibling_name in remaining:
            sibling = queues[sibling_name]
            if sibling.parent != q.parent or sibling.name == q.name:
                continue
            theirs = remaining[sibling_name]
            for r in involved.get(sibling_name, set()) | reclaimer_involved:
                fair_mine, fair_theirs = q.shares[r].fair_share, sibling.shares[r].fair_share
                if fair_mine == UNLIMITED and fair_theirs == UNLIMITED:
                    continue
                ratio_mine = _saturation(mine[r], fair_mine)
                ratio_theirs = _saturation(theirs[r], fair_theirs)
                if ratio_mine > 1 and fair_theirs > 0 and ratio_mine >= ratio_theirs:
                    return False
        if preemptible:
            continue
        non_preemptible = {r: q.shares[r].allocated_non_preemptible + requested.get(r, 0.0) for r in RESOURCES}
        if not less_equal(non_preemptible, q.deserved()):
            return False
    return True
