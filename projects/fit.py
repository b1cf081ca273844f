"""Will it fit, and when? Pure arithmetic over one pool: its nodes' free GPUs, the pods running there, the
quota standing of its departments and projects, and the workloads waiting for it. No Django: the selectors
(`projects.selectors.pool_fit_facts`, `workloads.forecast`) read the facts in a fixed number of queries and
call these functions; tests call them on scripted pools.

- `fragmentation(nodes)`: how many pods of 1, 2, 4 and 8 GPUs fit now, each on one node; the largest gang
  of n pods × k GPUs, in the pool and inside one topology domain (the pool's zone label, or the topology
  label the pool names); free GPUs per node as a histogram (docs/concepts.md#fragmentation: free GPUs scattered so that a pod
  of k GPUs on one node, or a gang of n × k, cannot fit although the free total would cover it).
- Shared GPUs fit in their own units (`in_units`, `by_share`, `mig_fragmentation`): a MIG slice serves only a
  pod asking its profile, on a node publishing it, so each profile is counted in its slices (pods of 1, 2, 4
  slices that fit now, the largest gang); a KAI fraction lands on one GPU with that much share free (a GPU
  fractions share, or a whole free one); a pod of whole GPUs takes neither slices nor shared GPUs. Quota,
  fair share and reclaim count GPU-equivalents whatever the unit.
- `make_room(...)`: the preemptible pods the scheduler's rules would take to make room for n × k GPUs, and
  whose they are: over-quota pods of other queues first (reclaim), then, for a requester, lower-priority
  pods of its own queue (preempt) — docs/concepts.md#schedulers.
- `verdict(...)`: the dry run of a submission against the pool as it is now, the project's quota standing
  and the scheduler's rules: starts now, waits for quota (whose over-quota use holds it, how much), waits
  for capacity (with the fragmentation answer), waits for a node Karpenter can launch, or never fits.
- `estimate(...)`: when a waiting workload may start, as a range with its basis in words, from the queue
  order, the running workloads' expected ends and the quota rules; or no estimate, and why.

The scheduler's rules read here are those of docs/concepts.md#schedulers (KAI Scheduler's, which the console's enforcer
writes): a limit caps a queue and every queue above it; non-preemptible work (priority ≥ 100) runs within
the deserved quota only; a queue may reclaim GPUs of preemptible pods from queues above their fair share
(or above their deserved quota while it stays within its own) only while it stays within its own fair
share with the job, and only if afterwards its saturation (allocated / fair share) stays below theirs;
inside one queue a higher priority preempts a lower one. The scheduler tries victims in its own order and
stops when the job fits, so `verdict` follows that order; `make_room` then keeps only the pods needed.
"""
from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from common.words import noun, verb

ZONE_LABEL = "topology.kubernetes.io/zone"
SHAPES = (1, 2, 4, 8)
PREEMPTIBLE_BELOW = 100
ZERO = Decimal(0)

STARTS_NOW = "starts_now"
WAITS_FOR_QUOTA = "waits_for_quota"
WAITS_FOR_CAPACITY = "waits_for_capacity"
WAITS_FOR_NODE = "waits_for_node"
NEVER_FITS = "never_fits"
VERDICTS = {
    STARTS_NOW: "Starts now",
    WAITS_FOR_QUOTA: "Waits for quota",
    WAITS_FOR_CAPACITY: "Waits for capacity",
    WAITS_FOR_NODE: "Waits for a node Karpenter can launch",
    NEVER_FITS: "Never fits",
}


def n(value: Decimal | int | float) -> str:
    """A number of GPUs as people write it: 2, 1.5 (no trailing zeros)."""
    value = Decimal(value).normalize()
    return f"{value:f}"


def gpus_text(amount: Decimal | int) -> str:
    """"1 GPU", "4 GPUs", "0.5 GPUs"."""
    return f"{n(amount)} {noun(amount, 'GPU')}"


def pods_text(count: int) -> str:
    return f"{count} {noun(count, 'pod')}"


def slices_text(count: int, profile: str = "") -> str:
    """"1 slice", "2 3g.40gb slices"."""
    return f"{count} {profile + ' ' if profile else ''}{noun(count, 'slice')}"


# ---------------------------------------------------------------------------------------------------
# Nodes and fragmentation


@dataclass(frozen=True)
class NodeRoom:
    """One node of a pool: its allocatable GPUs and what the active pods bound there leave free. `ready`:
    Ready and schedulable (not cordoned); only such nodes take new pods. CPU (millicores) and memory (bytes)
    free are None when not known (then only GPUs decide)."""

    name: str
    gpus: int
    free: Decimal
    domain: str = ""
    ready: bool = True
    cpu: int | None = None
    memory: int | None = None
    cpu_free: int | None = None
    memory_free: int | None = None
    # MIG: per profile (profile, allocatable slices, free slices, one slice's share of a GPU); free slices count
    # on a Ready node only. A slice serves only a pod asking that profile: not a whole GPU, not another profile.
    slices: tuple[tuple[str, int, int, Decimal], ...] = ()
    # KAI GPU sharing: the share still free on each GPU that fractional pods share on the node (a fraction
    # lands on one GPU: on one of these with that much free, or on a whole free GPU).
    shared: tuple[Decimal, ...] = ()
    exposure: str = ""  # how the node publishes its GPUs (kube.gpu: whole, mig-mixed, time-slicing, ...)

    def slice_room(self, profile: str) -> tuple[int, int]:
        """(allocatable, free) slices of `profile` on the node."""
        for name, allocatable, free, _ in self.slices:
            if name == profile:
                return allocatable, free
        return 0, 0

    @property
    def whole_gpus(self) -> Decimal:
        """Its allocatable less what MIG slices make of it: the GPUs a pod of whole GPUs may ask (the GPUs of
        a MIG node that are not cut count whole; the slices' shares are rounded, so the rest is too)."""
        if not self.slices:
            return Decimal(self.gpus)
        cut = sum((allocatable * share for _, allocatable, _, share in self.slices), ZERO)
        return max(Decimal(self.gpus) - cut, ZERO).quantize(Decimal(1))

    @property
    def whole_free(self) -> Decimal:
        """Free GPUs that are whole: not MIG slices, not GPUs fractions share."""
        free = self.free - sum(self.shared, ZERO)
        if self.slices:
            free = (free - sum((f * share for _, _, f, share in self.slices), ZERO)).quantize(Decimal(1))
        return max(free, ZERO)


def _slots(free: Decimal, gpus: int, cpu_free: int | None = None, memory_free: int | None = None,
           cpu: int = 0, memory: int = 0) -> int:
    """How many pods of `gpus` GPUs (and `cpu` millicores, `memory` bytes) fit in this much room."""
    if gpus > 0 and not cpu and not memory:  # GPUs only (the estimates' shapes): called per node, per pod
        return int(free // gpus) if free > 0 else 0
    counts = []
    if gpus > 0:
        counts.append(math.floor(max(free, ZERO) / gpus))
    if cpu > 0 and cpu_free is not None:
        counts.append(max(cpu_free, 0) // cpu)
    if memory > 0 and memory_free is not None:
        counts.append(max(memory_free, 0) // memory)
    return int(min(counts)) if counts else 1_000_000


def slots_on(node: NodeRoom, gpus: int, cpu: int = 0, memory: int = 0) -> int:
    return _slots(node.free, gpus, node.cpu_free, node.memory_free, cpu, memory) if node.ready else 0


def holds(node: NodeRoom, gpus: int, cpu: int = 0, memory: int = 0) -> bool:
    """Whether the node, empty, could hold one such pod (its allocatable, whatever runs there now)."""
    return _slots(Decimal(node.gpus), gpus, node.cpu, node.memory, cpu, memory) >= 1


@dataclass(frozen=True)
class DomainRoom:
    """One topology domain of a pool (a zone, or the value of the pool's topology label)."""

    name: str
    nodes: int
    free: Decimal
    slots: Mapping[int, int]


@dataclass(frozen=True)
class Fragmentation:
    """A pool's free GPUs and what they can hold now (Ready, schedulable GPU nodes only)."""

    nodes: int = 0
    gpus: int = 0
    free: Decimal = ZERO
    slots: Mapping[int, int] = field(default_factory=dict)
    histogram: tuple[tuple[int, int], ...] = ()  # (free GPUs on a node, how many nodes), ascending
    largest_free: Decimal = ZERO
    domain_key: str = ZONE_LABEL
    domains: tuple[DomainRoom, ...] = ()
    unlabelled: int = 0  # nodes without the topology label
    mig: tuple["MigRoom", ...] = ()  # per MIG profile the pool's nodes publish: its slices, counted apart

    def mig_room(self, profile: str) -> "MigRoom | None":
        return next((m for m in self.mig if m.profile == profile), None)

    def stranded(self, k: int) -> Decimal:
        """Free GPUs that no pod of k GPUs can use (each on nodes with fewer than k free)."""
        return max(self.free - k * self.slots.get(k, 0), ZERO)

    def best_domain(self, k: int) -> DomainRoom | None:
        """The domain holding the largest gang of k-GPU pods (ties: the first by name)."""
        best = None
        for domain in self.domains:
            if domain.slots.get(k, 0) and (best is None or domain.slots[k] > best.slots[k]):
                best = domain
        return best

    def largest_gang(self, k: int) -> tuple[int, int, str]:
        """(pods of k GPUs in the pool, pods of k GPUs inside one domain, that domain's name)."""
        best = self.best_domain(k)
        return self.slots.get(k, 0), (best.slots[k] if best else 0), (best.name if best else "")

    def rows(self) -> list[dict[str, Any]]:
        """Per pod size (ascending): pods that fit now, GPUs left over, the largest gang inside one domain."""
        out = []
        for k in sorted(self.slots):
            _, in_domain, domain = self.largest_gang(k)
            out.append({"gpus": k, "pods": self.slots[k], "stranded": self.stranded(k), "in_domain": in_domain,
                        "domain": domain})
        return out

    def histogram_bars(self) -> list[tuple[int, int, int]]:
        """(free GPUs, nodes, percent of the most common) for a bar chart of the histogram."""
        most = max((count for _, count in self.histogram), default=0)
        return [(free, count, round(100 * count / most) if most else 0) for free, count in self.histogram]

    def line(self) -> str:
        """The compact line of the overview: "22 GPUs free: 1×8 · 3×4 · 7×2 · 22×1"."""
        if not self.nodes:
            return "no Ready GPU node"
        parts = " · ".join(f"{self.slots.get(k, 0)}×{k}" for k in sorted(self.slots, reverse=True))
        return f"{n(self.free)} {noun(self.free, 'GPU')} free: {parts}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes, "gpus": self.gpus, "gpus_free": self.free, "largest_free_on_a_node": self.largest_free,
            "pods_that_fit": [{"gpus_per_pod": k, "pods": self.slots.get(k, 0), "gpus_stranded": self.stranded(k)}
                              for k in sorted(self.slots)],
            "largest_gang": [{"gpus_per_pod": k, "pods": self.largest_gang(k)[0], "pods_in_one_domain": self.largest_gang(k)[1],
                              "domain": self.largest_gang(k)[2] or None} for k in sorted(self.slots)],
            "free_gpus_histogram": [{"free_gpus": free, "nodes": count} for free, count in self.histogram],
            "topology_key": self.domain_key,
            "domains": [{"name": d.name, "nodes": d.nodes, "gpus_free": d.free,
                         "pods_that_fit": [{"gpus_per_pod": k, "pods": v} for k, v in sorted(d.slots.items())]} for d in self.domains],
            "nodes_without_topology_label": self.unlabelled,
            "summary": self.line(),
            "mig_slices": [m.as_dict() for m in self.mig],
        }


def fragmentation(nodes: Iterable[NodeRoom], *, sizes: Sequence[int] = SHAPES,
                  domain_key: str = ZONE_LABEL) -> Fragmentation:
    """One pass over the pool's nodes: the pods of each size that fit now, the histogram of free GPUs per
    node, and the same per topology domain. Only Ready, schedulable nodes with GPUs count. The pass only
    counts nodes by (domain, whole free GPUs); the figures come from those counts."""
    nodes = list(nodes)
    frag = fragmentation_of(((node.domain, node.free, 1, node.gpus) for node in nodes if node.ready and node.gpus > 0),
                            sizes=sizes, domain_key=domain_key)
    return by_share(frag, nodes, sizes=sizes, domain_key=domain_key)


def by_share(frag: Fragmentation, nodes: Sequence[NodeRoom], *, sizes: Sequence[int] = SHAPES,
             domain_key: str = ZONE_LABEL) -> Fragmentation:
    """`frag` (the pool's free GPU-equivalents, as every page counts them) where some nodes publish MIG
    slices or share GPUs between KAI fractions: the pods of 1, 2, 4, 8 GPUs, the histogram, the largest free
    and the domains count whole GPUs only (a slice or a shared GPU takes no pod of whole GPUs: what is left is
    stranded for them), and each MIG profile its slices (`mig`). Unchanged when no node does."""
    if not any(node.slices or node.shared for node in nodes):
        return frag
    whole = fragmentation_of(((node.domain, node.whole_free, 1, int(node.whole_gpus)) for node in nodes
                              if node.ready and node.whole_gpus > 0), sizes=sizes, domain_key=domain_key)
    return replace(whole, nodes=frag.nodes, gpus=frag.gpus, free=frag.free,
                   mig=mig_fragmentation(nodes, domain_key=domain_key) if any(x.slices for x in nodes) else ())


SLICE_SIZES = (1, 2, 4)


@dataclass(frozen=True)
class MigRoom:
    """One MIG profile of a pool, in slices: `frag` is its `Fragmentation` counted in slices of that profile on
    the Ready, schedulable nodes that publish it (a slice serves only a pod asking that profile, on its
    node: never a whole GPU, never a slice of another profile)."""

    profile: str
    share: Decimal  # one slice in GPU-equivalents
    frag: Fragmentation
    published: int = 0  # nodes publishing it, Ready or not

    @property
    def free(self) -> int:
        return int(self.frag.free)

    @property
    def largest_free(self) -> int:
        return int(self.frag.largest_free)

    def pods(self, k: int) -> int:
        """Pods of k slices that fit now, each on one node (for a gang: all at once)."""
        return sum(int(free) // k * count for free, count in self.frag.histogram) if k > 0 else 0

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for k in sorted(self.frag.slots):
            _, in_domain, domain = self.frag.largest_gang(k)
            out.append({"slices": k, "pods": self.pods(k), "stranded": self.free - k * self.pods(k),
                        "in_domain": in_domain, "domain": domain})
        return out

    def words(self, pods: int | None = None, k: int = 1) -> str:
        """Its fragmentation in slices: "12 3g.40gb slices are free on 3 Ready nodes that publish them; the
        most free on one node is 4, so 3 pods of 4 slices fit now — enough slices in total (8 asked), but
        scattered over nodes (fragmentation)."."""
        if not self.frag.nodes:
            return f"No Ready, schedulable node of the pool publishes {self.profile} slices."
        fit = self.pods(k)
        text = (f"{slices_text(self.free, self.profile)} {verb(self.free, 'is', 'are')} free on {self.frag.nodes} "
                f"Ready {noun(self.frag.nodes, 'node')} that {verb(self.frag.nodes, 'publishes', 'publish')} them; the "
                f"most free on one node is {self.largest_free}, so {pods_text(fit)} of {slices_text(k)} "
                f"{verb(fit, 'fits', 'fit')} now")
        if pods is not None and self.free >= pods * k and fit < pods:
            text += f" — enough slices in total ({pods * k} asked), but scattered over nodes (fragmentation)"
        return text + "."

    def as_dict(self) -> dict[str, Any]:
        rows = self.rows()
        return {
            "profile": self.profile, "share": self.share, "nodes": self.frag.nodes, "nodes_publishing": self.published,
            "slices": int(self.frag.gpus), "slices_free": self.free, "most_free_on_a_node": self.largest_free,
            "pods_that_fit": [{"slices_per_pod": r["slices"], "pods": r["pods"], "slices_stranded": r["stranded"]}
                              for r in rows],
            "largest_gang": [{"slices_per_pod": r["slices"], "pods": r["pods"], "pods_in_one_domain": r["in_domain"],
                              "domain": r["domain"] or None} for r in rows],
            "free_slices_histogram": [{"free_slices": int(free), "nodes": count} for free, count in self.frag.histogram],
            "summary": self.words(),
        }


def mig_fragmentation(nodes: Iterable[NodeRoom], *, sizes: Sequence[int] = SLICE_SIZES,
                      domain_key: str = ZONE_LABEL) -> tuple[MigRoom, ...]:
    """Per MIG profile the nodes publish (by share, then name), its slices free on Ready, schedulable nodes
    and what they hold now: pods of 1, 2 and 4 slices, the largest gang in the pool and in one domain."""
    groups: dict[str, list[tuple[str, Decimal, int, int]]] = {}
    shares: dict[str, Decimal] = {}
    published: dict[str, int] = {}
    for node in nodes:
        for profile, allocatable, free, share in node.slices:
            shares.setdefault(profile, share)
            published[profile] = published.get(profile, 0) + 1
            rows = groups.setdefault(profile, [])
            if node.ready and allocatable > 0:
                rows.append((node.domain, Decimal(max(free, 0)), 1, allocatable))
    return tuple(MigRoom(profile, shares[profile], fragmentation_of(groups[profile], sizes=sizes, domain_key=domain_key),
                         published[profile])
                 for profile in sorted(groups, key=lambda p: (shares[p], p)))


def fragmentation_of(groups: Iterable[tuple[str, Decimal, int, int]], *, sizes: Sequence[int] = SHAPES,
                     domain_key: str = ZONE_LABEL) -> Fragmentation:
    """`fragmentation` of Ready, schedulable GPU nodes given in groups (domain, free GPUs on each node, how many
    such nodes, their allocatable GPUs together) — what a selector has the database count, without a row
    (let alone a NodeRoom) per node."""
    counts: dict[tuple[str, int], int] = {}
    room_of: dict[str, Decimal] = {}
    count = gpus = 0
    free = largest = ZERO
    for domain, room, many, allocatable in groups:
        count += many
        gpus += allocatable
        room = room if room > 0 else ZERO
        free += room * many
        if room > largest:
            largest = room
        key = (domain, int(room))
        counts[key] = counts.get(key, 0) + many
        if domain:
            room_of[domain] = room_of.get(domain, ZERO) + room * many
    slots = {k: 0 for k in sizes}
    histogram: dict[int, int] = {}
    domains: dict[str, dict[str, Any]] = {}
    unlabelled = 0
    for (domain, whole), many in counts.items():
        histogram[whole] = histogram.get(whole, 0) + many
        if domain:
            entry = domains.setdefault(domain, {"nodes": 0, "slots": {k: 0 for k in sizes}})
            entry["nodes"] += many
        else:
            unlabelled += many
        for k in sizes:
            fits = whole // k * many
            slots[k] += fits
            if domain:
                domains[domain]["slots"][k] += fits
    return Fragmentation(
        nodes=count, gpus=gpus, free=free, slots=slots, histogram=tuple(sorted(histogram.items())),
        largest_free=largest, domain_key=domain_key, unlabelled=unlabelled,
        domains=tuple(DomainRoom(name, d["nodes"], room_of[name], d["slots"]) for name, d in sorted(domains.items())))


def fits_now(nodes: Iterable[NodeRoom], pods: int, gpus: int, cpu: int = 0, memory: int = 0) -> int:
    """How many of `pods` pods of this shape the pool's free room takes now (each pod on one node)."""
    total = 0
    for node in nodes:
        total += slots_on(node, gpus, cpu, memory)
        if total >= pods:
            return pods
    return total


def capacity_words(frag: Fragmentation, pods: int, gpus: int) -> str:
    """The fragmentation answer for a shape, in words."""
    if not frag.nodes:
        return "The pool has no Ready, schedulable GPU node."
    k_slots = sum(free // gpus * count for free, count in frag.histogram) if gpus else 0
    text = (f"{gpus_text(frag.free)} {verb(frag.free, 'is', 'are')} free on {frag.nodes} Ready "
            f"{noun(frag.nodes, 'node')}; the most free on one node is {n(frag.largest_free)}, so "
            f"{pods_text(k_slots)} of {gpus_text(gpus)} {verb(k_slots, 'fits', 'fit')} now")
    if frag.free >= pods * gpus and k_slots < pods:
        text += f" — enough GPUs in total ({n(pods * gpus)} asked), but scattered over nodes (fragmentation)"
    return text + "."


# ---------------------------------------------------------------------------------------------------
# Quota standing, running pods, victims


@dataclass(frozen=True)
class Standing:
    """A department's or project's numbers in one pool (GPUs). `fair_share` None: not known."""

    kind: str  # "project" / "department"
    name: str
    deserved: Decimal = ZERO
    allocated: Decimal = ZERO
    non_preemptible: Decimal = ZERO
    limit: Decimal | None = None
    fair_share: Decimal | None = None
    allow_over_quota: bool = True

    @property
    def over_quota(self) -> Decimal:
        return max(self.allocated - self.deserved, ZERO)

    @property
    def cap(self) -> Decimal | None:
        """The most it may hold: its limit, or its deserved quota when over-quota is off."""
        if not self.allow_over_quota:
            return self.deserved if self.limit is None else min(self.limit, self.deserved)
        return self.limit

    def allocatable(self) -> Decimal:
        """What it may hold without being reclaimed: the larger of deserved and fair share, capped."""
        top = max(self.deserved, self.fair_share if self.fair_share is not None else self.deserved)
        return top if self.cap is None else min(top, self.cap)

    def label(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Running:
    """A pod holding GPUs on a node of the pool (or, for estimates, a whole workload's pods)."""

    namespace: str
    name: str
    node: str
    gpus: Decimal
    priority: int
    project: str
    department: str
    workload: str = ""
    created: str = ""  # sortable (ISO 8601)
    visible: bool = True  # may the reader see its name (else only its project)
    cpu: int = 0
    memory: int = 0
    pk: Any = None  # the mirror's row, when read from it
    mig: tuple[tuple[str, int], ...] = ()  # MIG slices it holds: (profile, slices)
    fraction: bool = False  # a KAI fraction (or GPU memory) of a shared GPU
    # What leaving frees on its node in the units of the shape being judged (`in_units`); None: its GPUs.
    units: Decimal | None = None

    @property
    def preemptible(self) -> bool:
        return self.priority < PREEMPTIBLE_BELOW

    @property
    def room(self) -> Decimal:
        return self.gpus if self.units is None else self.units

    def who(self) -> str:
        return f"{self.namespace}/{self.workload or self.name}" if self.visible else f"a workload of project {self.project}"


@dataclass(frozen=True)
class Victim:
    pod: Running
    action: str  # "reclaim" (over-quota use of another queue) / "preempt" (lower priority in the same queue)

    def as_dict(self) -> dict[str, Any]:
        pod = self.pod
        return {"action": self.action, "namespace": pod.namespace if pod.visible else None,
                "pod": pod.name if pod.visible else None, "workload": (pod.workload or None) if pod.visible else None,
                "node": pod.node if pod.visible else None, "gpus": pod.gpus, "priority": pod.priority,
                "project": pod.project, "department": pod.department}


@dataclass(frozen=True)
class Room:
    """What making room for n × k GPUs takes: nothing (it fits), these victims, or it cannot."""

    pods: int
    gpus: int
    fits: bool
    victims: tuple[Victim, ...] = ()
    reason: str = ""
    domain: str = ""
    unit: str = ""  # what one pod asks, in words ("2 GPUs", "1 3g.40gb slice"); empty: `gpus` GPUs
    profile: str = ""
    slices: int = 0
    # Nothing can make room: no Ready node of the pool could hold one pod of the shape even empty (`largest`:
    # the most one node holds, in the shape's units). Said first, with no victim.
    never: bool = False
    largest: Decimal = ZERO
    pool: str = ""

    @property
    def gpus_taken(self) -> Decimal:
        return sum((v.pod.gpus for v in self.victims), ZERO)

    def by_owner(self) -> list[tuple[str, str, Decimal, int]]:
        """(project, department, GPUs, pods) taken per owner, most first."""
        totals: dict[tuple[str, str], list] = {}
        for v in self.victims:
            entry = totals.setdefault((v.pod.project, v.pod.department), [ZERO, 0])
            entry[0] += v.pod.gpus
            entry[1] += 1
        return sorted(((p, d, g, c) for (p, d), (g, c) in totals.items()), key=lambda t: (-t[2], t[0]))

    def words(self) -> str:
        shape = f"{pods_text(self.pods)} of {self.unit or gpus_text(self.gpus)}"
        where = f" in {self.domain}" if self.domain else ""
        if self.never:
            place = f"{self.domain} of {self.pool}" if self.domain and self.pool else (
                self.domain or self.pool or "the pool")
            largest = n(self.largest) if not self.profile else slices_text(int(self.largest))
            return (f"Nothing can make room: no node of {place} has {self.unit or gpus_text(self.gpus)} "
                    f"(the largest has {largest}).")
        if not self.fits:
            return f"Nothing the scheduler may take makes room for {shape}{where}: {self.reason}"
        if not self.victims:
            return f"{shape}{where} fit now, nothing needs to move."
        owners = ", ".join(f"{p} ({d}): {gpus_text(g)} in {pods_text(c)}" for p, d, g, c in self.by_owner())
        actions = sorted({v.action for v in self.victims})
        how = " and ".join({"reclaim": "reclaiming over-quota use", "preempt": "preempting lower priority"}[a]
                           for a in actions)
        return f"Room for {shape}{where} by {how}: {owners}."

    def as_dict(self) -> dict[str, Any]:
        return {"pods": self.pods, "gpus_per_pod": None if self.profile else self.gpus,
                "gpu_equivalents_per_pod": Decimal(self.gpus), "mig_profile": self.profile or None,
                "slices_per_pod": self.slices if self.profile else None, "fits": self.fits, "domain": self.domain or None,
                "never": self.never, "gpus_taken": self.gpus_taken, "victims": [v.as_dict() for v in self.victims],
                "by_owner": [{"project": p, "department": d, "gpus": g, "pods": c} for p, d, g, c in self.by_owner()],
                "explanation": self.words()}


class _Free:
    """Free room per node and the pods of one shape it takes, kept up to date as pods leave or land."""

    def __init__(self, nodes: Iterable[NodeRoom], gpus: int, cpu: int = 0, memory: int = 0) -> None:
        self.gpus, self.cpu, self.memory = gpus, cpu, memory
        self.nodes = {node.name: node for node in nodes if node.ready}
        self.free = {name: [node.free, node.cpu_free, node.memory_free] for name, node in self.nodes.items()}
        self.slots = {name: self._count(name) for name in self.nodes}
        self.total = sum(self.slots.values())

    def _count(self, name: str) -> int:
        free, cpu_free, memory_free = self.free[name]
        return _slots(free, self.gpus, cpu_free, memory_free, self.cpu, self.memory)

    def release(self, pod: Running, sign: int = 1) -> None:
        if pod.node not in self.free:
            return
        room = self.free[pod.node]
        room[0] += sign * pod.room
        if room[1] is not None:
            room[1] += sign * pod.cpu
        if room[2] is not None:
            room[2] += sign * pod.memory
        before = self.slots[pod.node]
        self.slots[pod.node] = self._count(pod.node)
        self.total += self.slots[pod.node] - before


def _victim_order(pod: Running) -> tuple:
    return (pod.priority, _desc(pod.created), pod.namespace, pod.name)


def _desc(text: str) -> tuple:
    """Newest first, for a sortable text."""
    return tuple(-ord(c) for c in text)


def reclaim_candidates(running: Iterable[Running], owners: Mapping[tuple[str, str], Standing], *,
                       requester: Standing | None = None, requester_department: Standing | None = None,
                       job_gpus: Decimal = ZERO) -> list[Running]:
    """Preemptible pods of other queues, in the order the scheduler takes them: the most saturated queue
    first (allocated / fair share), then lowest priority, then newest. A pod is a candidate while its
    owner — the project when the requester is of the same department, else the department — holds more
    than it may keep (above its fair share, or above its deserved quota while the requester stays within
    its own)."""
    within_deserved = False
    if requester is not None:
        within_deserved = requester.allocated + job_gpus <= requester.deserved
    out = []
    for pod in running:
        if not pod.preemptible or (requester is not None and pod.project == requester.name):
            continue
        owner = _level_owner(pod, owners, requester_department)
        if owner is None:
            continue
        if owner.allocated > owner.allocatable() or (within_deserved and owner.allocated > owner.deserved) \
                or (requester is None and owner.allocated > owner.deserved):
            out.append(pod)

    def saturation(pod: Running) -> Decimal:
        owner = _level_owner(pod, owners, requester_department)
        fair = owner.fair_share if owner is not None and owner.fair_share is not None else owner.deserved
        return owner.allocated / fair if fair else Decimal(10**9) * (owner.allocated or 1)

    out.sort(key=lambda p: (-saturation(p), _victim_order(p)))
    return out


def _level_owner(pod: Running, owners: Mapping[tuple[str, str], Standing],
                 requester_department: Standing | None) -> Standing | None:
    """Where the requester's and the victim's queues part: the victim's project inside the requester's own
    department, else the victim's department (KAI reclaims between siblings)."""
    if requester_department is not None and pod.department != requester_department.name:
        return owners.get(("department", pod.department))
    return owners.get(("project", pod.project))


def make_room(nodes: Sequence[NodeRoom], running: Iterable[Running], owners: Mapping[tuple[str, str], Standing], *,
              pods: int, gpus: int | Decimal, cpu: int = 0, memory: int = 0, domain: str = "", profile: str = "",
              slices: int = 0, pool: str = "") -> Room:
    """The preemptible pods whose GPUs the scheduler's rules would take to fit `pods` × `gpus` (inside
    `domain` when given) for a queue entitled to them: the over-quota use of the queues holding more than
    their deserved quota, most saturated first, lowest priority and newest first. Only what is needed is
    kept: victims are taken in that order until the shape fits, then those it can do without are given
    back. (For one requester's own rules — fair share, preemption inside its queue — see `verdict`.) With
    `profile`, each pod asks `slices` MIG slices of it (`gpus` their GPU-equivalents): only pods holding
    slices of that profile make room."""
    nodes = [node for node in nodes if not domain or node.domain == domain]
    names = {node.name for node in nodes}
    running = [p for p in running if p.node in names]
    shape = Shape(pods, gpus, cpu, memory, profile=profile, slices=slices)
    nodes, running = in_units(shape, nodes, running)
    ready = [node for node in nodes if node.ready]
    if not any(Decimal(node.gpus) >= Decimal(shape.room) for node in ready):
        # No node could hold one pod even empty: taking pods would not help; said so, with no victim.
        largest = max((Decimal(node.gpus) for node in ready), default=ZERO)
        return Room(shape.pods, shape.gpus, False, (), domain=domain, unit=shape.unit, profile=shape.profile,
                    slices=shape.slices, never=True, largest=largest, pool=pool)
    candidates = [Victim(p, "reclaim") for p in reclaim_candidates(running, owners)]
    return replace(_take_victims(shape, nodes, candidates, owners), domain=domain, pool=pool)


def _take_victims(shape: Shape, nodes: Sequence[NodeRoom], candidates: Sequence[Victim],
                  owners: Mapping[tuple[str, str], Standing], *, project: Standing | None = None,
                  department: Standing | None = None) -> Room:
    """Victims in the scheduler's order until the shape's pods fit: a reclaim victim only while its owner
    (at the level where the queues part) still holds more than it may keep — its deserved quota without a
    requester; with one, its fair share (its deserved quota while the requester stays within its own) —
    and while the requester's saturation stays below the owners' (`_may_reclaim`). Then those not needed
    are given back, the last taken first."""
    room = _Free(nodes, shape.room, shape.cpu, shape.memory)
    done = dict(unit=shape.unit, profile=shape.profile, slices=shape.slices)
    if room.total >= shape.pods:
        return Room(shape.pods, shape.gpus, True, **done)
    budget = {key: owner.allocated for key, owner in owners.items()}
    within = project is not None and project.allocated + shape.total_gpus <= project.deserved
    chosen: list[Victim] = []
    for victim in candidates:
        if victim.action == "reclaim":
            owner = _level_owner(victim.pod, owners, department)
            if owner is None:
                continue
            key = (owner.kind, owner.name)
            if project is None:
                keep = owner.deserved
            else:
                keep = min(owner.allocatable(), owner.deserved) if within else owner.allocatable()
            if budget[key] <= keep:
                continue
            if project is not None and not _may_reclaim(shape, project, department, owners, chosen + [victim]):
                continue
            budget[key] -= victim.pod.gpus
        chosen.append(victim)
        room.release(victim.pod)
        if room.total >= shape.pods:
            break
    if room.total < shape.pods:
        free = sum((node.free for node in nodes if node.ready), ZERO)
        taken = sum((v.pod.room for v in chosen), ZERO)
        if shape.profile:
            had = (f"{slices_text(int(free), shape.profile)} {verb(free, 'is', 'are')} free, and with the "
                   f"{slices_text(int(taken))} of the preemptible pods the scheduler may take")
        elif shape.fraction is not None:
            had = (f"the free GPUs take {pods_text(int(free))} of {gpus_text(shape.fraction)} (each on one GPU), and "
                   f"with the {gpus_text(room_gpus(chosen))} of the preemptible pods the scheduler may take")
        else:
            had = (f"{gpus_text(free)} {verb(free, 'is', 'are')} free, and with the {gpus_text(room_gpus(chosen))} "
                   "of the preemptible pods the scheduler may take")
        reason = f"{had} there is room for {pods_text(room.total)} of {shape.unit}, {shape.pods} asked."
        return Room(shape.pods, shape.gpus, False, tuple(chosen), reason, **done)
    for victim in list(reversed(chosen)):
        room.release(victim.pod, -1)
        if room.total >= shape.pods:
            chosen.remove(victim)
        else:
            room.release(victim.pod)
    return Room(shape.pods, shape.gpus, True, tuple(chosen), **done)


def room_gpus(victims: Iterable[Victim]) -> Decimal:
    return sum((v.pod.gpus for v in victims), ZERO)


# ---------------------------------------------------------------------------------------------------
# The dry run


@dataclass(frozen=True)
class Shape:
    """What a workload asks for: `pods` pods of `gpus` GPUs, `cpu` millicores and `memory` bytes each, at
    `priority`. `gang`: all pods at once or none (a PodGroup with minMember = pods)."""

    pods: int
    gpus: int | Decimal  # GPU-equivalents per pod (kube.gpu): a MIG slice or a KAI fraction is a share
    cpu: int = 0
    memory: int = 0
    priority: int = 50
    gang: bool = False
    # A MIG profile: each pod asks `slices` slices of it (judged by the nodes' free slices of that profile).
    profile: str = ""
    slices: int = 0
    # A KAI GPU fraction: each pod asks this share of one GPU (judged GPU by GPU).
    fraction: Decimal | None = None

    @property
    def total_gpus(self) -> Decimal:
        return Decimal(self.pods * self.gpus)

    @property
    def preemptible(self) -> bool:
        return self.priority < PREEMPTIBLE_BELOW

    @property
    def room(self) -> int | Decimal:
        """What one pod takes of a node in the units the nodes are judged in (`in_units`): slices of its
        profile, one fractional pod, or GPUs."""
        if self.profile:
            return self.slices
        if self.fraction is not None:
            return 1
        return self.gpus

    def room_in(self, target: Shape) -> int | Decimal:
        """What one pod of this shape takes in the units `target` is judged in: slices of another profile or
        whole GPUs take none of a profile's slices; a whole GPU takes ⌊1/f⌋ pods of a fraction f; a fraction
        takes a whole GPU (it may land on one), a MIG slice none."""
        if target.profile:
            return self.slices if self.profile == target.profile else 0
        if target.fraction is not None:
            if self.fraction is not None:
                return max(1, math.ceil(self.fraction / target.fraction))
            return 0 if self.profile else int(self.gpus) * _fraction_slots(Decimal(1), target.fraction)
        if self.profile:
            return 0
        return 1 if self.fraction is not None else self.gpus

    @property
    def unit(self) -> str:
        """Words for what one pod asks: "2 GPUs", "1 3g.40gb slice", "0.5 of one GPU"."""
        if self.profile:
            return slices_text(self.slices, self.profile)
        if self.fraction is not None:
            return f"{gpus_text(self.fraction)} (a share of one GPU)"
        return gpus_text(self.gpus) if self.gpus else "no GPU"

    def words(self) -> str:
        each = self.unit
        if self.profile:
            each += f" ({gpus_text(Decimal(self.gpus))} each)" if self.gpus else ""
        return f"{pods_text(self.pods)} of {each}" + (" (all at once)" if self.gang and self.pods > 1 else "")


def _fraction_slots(share: Decimal, fraction: Decimal) -> int:
    return int(share // fraction) if fraction > 0 else 0


def in_units(shape: Shape, nodes: Sequence[NodeRoom], running: Iterable[Running] = ()
             ) -> tuple[list[NodeRoom], list[Running]]:
    """The nodes and pods as the scheduler sees them for this shape, in the units of `Shape.room`: for a MIG
    profile, each node's allocatable and free slices of that profile (a node that does not publish it holds
    none) and the slices of it each pod holds; for a KAI fraction f, how many pods of f each node takes (on
    each whole free GPU ⌊1/f⌋, on each GPU fractions share ⌊free share/f⌋) — MIG and time-sliced GPUs are
    not shared again; for whole GPUs, the node's GPUs less its MIG slices and the GPUs fractions share, a MIG
    or fractional pod freeing no whole GPU. Nodes without slices or fractions are as they are."""
    nodes, running = list(nodes), list(running)
    if shape.profile:
        projected = []
        for node in nodes:
            allocatable, free = node.slice_room(shape.profile)
            projected.append(replace(node, gpus=allocatable, free=Decimal(free), slices=(), shared=()))
        pods = [replace(p, units=Decimal(dict(p.mig).get(shape.profile, 0))) for p in running]
        return projected, pods
    if shape.fraction is not None:
        f = shape.fraction
        per_gpu = _fraction_slots(Decimal(1), f)
        projected = []
        for node in nodes:
            if node.exposure not in ("", "whole") or node.slices:
                projected.append(replace(node, gpus=0, free=ZERO, slices=(), shared=()))
                continue
            whole = int(node.whole_free)
            free = whole * per_gpu + sum(_fraction_slots(share, f) for share in node.shared)
            projected.append(replace(node, gpus=int(node.gpus) * per_gpu, free=Decimal(free), shared=()))
        pods = [replace(p, units=Decimal(_fraction_slots(p.gpus, f) if p.fraction else
                                         (0 if p.mig else int(p.gpus) * per_gpu))) for p in running]
        return projected, pods
    if not any(node.slices or node.shared for node in nodes):
        return nodes, running
    projected = [replace(node, gpus=node.whole_gpus, free=node.whole_free, slices=(), shared=())
                 if node.slices or node.shared else node for node in nodes]
    shared_nodes = {node.name for node in nodes if node.slices or node.shared}
    pods = [replace(p, units=ZERO) if p.node in shared_nodes and (p.mig or p.fraction) else p for p in running]
    return projected, pods


@dataclass(frozen=True)
class Karpenter:
    """What Karpenter can do for the workload's pod in this pool: a NodePool can launch a node for it
    (`can_launch`, naming it), or why none can (`words`). None of them: the pool is not Karpenter-backed."""

    can_launch: bool
    words: str
    nodepool: str = ""


@dataclass
class Verdict:
    code: str
    headline: str
    reasons: list[str] = field(default_factory=list)
    cause: str = ""  # limit, over_quota_off, non_preemptible, fair_share, capacity, not_ready, karpenter, too_big, fits, reclaim, preempt
    pods_now: int = 0
    pods: int = 1
    room: Room | None = None
    borrowers: list[tuple[str, Decimal]] = field(default_factory=list)
    fragmentation: Fragmentation | None = None
    karpenter: Karpenter | None = None
    pool: str = ""
    # The quota rule that refuses it too (limit, over_quota_off, non_preemptible), when the verdict is about
    # nodes (never fits, a node to launch): the scheduler checks quota first and names that rule.
    quota_cause: str = ""

    @property
    def title(self) -> str:
        return VERDICTS[self.code]

    def scheduler_outcome(self) -> str:
        """What the scheduler is then expected to show: "running" (every pod bound), "limit" (refused by a
        limit), "non_preemptible_quota" (refused beyond the deserved quota) or "capacity" (no room)."""
        if self.code == STARTS_NOW:
            return "running"
        cause = self.quota_cause or self.cause
        if cause in ("limit", "over_quota_off"):
            return "limit"
        if cause == "non_preemptible":
            return "non_preemptible_quota"
        return "capacity"

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.code, "title": self.title, "headline": self.headline, "reasons": self.reasons,
            "cause": self.cause, "pool": self.pool, "pods": self.pods, "pods_that_start_now": self.pods_now,
            "room": self.room.as_dict() if self.room is not None else None,
            "borrowers": [{"owner": who, "gpus_over_deserved": g} for who, g in self.borrowers],
            "fragmentation": self.fragmentation.as_dict() if self.fragmentation is not None else None,
            "karpenter": ({"can_launch": self.karpenter.can_launch, "nodepool": self.karpenter.nodepool or None,
                           "explanation": self.karpenter.words} if self.karpenter is not None else None),
        }


def quota_refusal(shape: Shape, project: Standing, department: Standing | None, *, enforced: bool = True,
                  gpus: Decimal | None = None, non_preemptible_rule: bool = True) -> tuple[str, str] | None:
    """(cause, words) when the scheduler's quota rules refuse `gpus` more GPUs (default: the whole shape)
    for the project now, else None: a limit of the project or its department (over-quota off: the
    deserved quota is the limit), then non-preemptible work beyond a deserved quota (KAI's rule; Kueue has
    none: `non_preemptible_rule` False)."""
    if not enforced:
        return None
    asked = shape.total_gpus if gpus is None else gpus
    for owner in (project, department):
        if owner is None:
            continue
        cap = owner.cap
        if cap is not None and owner.allocated + asked > cap:
            if not owner.allow_over_quota and (owner.limit is None or owner.deserved <= owner.limit):
                return "over_quota_off", (
                    f"Over-quota is off for {owner.label()}: it uses {n(owner.allocated)} of its {n(owner.deserved)} "
                    f"deserved GPUs in this pool, and this asks {n(asked)} more.")
            return "limit", (f"Over its limit: {owner.label()} uses {n(owner.allocated)} of its {n(cap)}-GPU limit in "
                             f"this pool, and this asks {n(asked)} more.")
    if not shape.preemptible and non_preemptible_rule:
        for owner in (project, department):
            if owner is not None and owner.non_preemptible + asked > owner.deserved:
                return "non_preemptible", (
                    f"Non-preemptible work (priority {shape.priority}) runs within the deserved quota only: "
                    f"{owner.label()} runs {n(owner.non_preemptible)} non-preemptible GPUs of {n(owner.deserved)} "
                    f"deserved, and this asks {n(asked)} more.")
    return None


def _may_reclaim(shape: Shape, project: Standing, department: Standing | None, owners, victims) -> bool:
    """The requester's queue stays within its fair share with the job; and, where the departments part,
    its department's saturation after the move stays below that of each department it takes from."""
    asked = shape.total_gpus
    if project.fair_share is None or project.allocated + asked > project.fair_share:
        return False
    if department is None or department.fair_share is None:
        return True
    mine = department.allocated + asked
    if mine <= department.fair_share:
        return True
    ratio = mine / department.fair_share if department.fair_share else Decimal(10**9)
    taken: dict[str, Decimal] = {}
    for victim in victims:
        if victim.pod.department != department.name:
            taken[victim.pod.department] = taken.get(victim.pod.department, ZERO) + victim.pod.gpus
    for name, gpus in taken.items():
        other = owners.get(("department", name))
        if other is None or not other.fair_share:
            continue
        if ratio >= (other.allocated - gpus) / other.fair_share:
            return False
    return True


def verdict(*, shape: Shape, pool: str, nodes: Sequence[NodeRoom], running: Sequence[Running],
            owners: Mapping[tuple[str, str], Standing], project: Standing, department: Standing | None,
            enforced: bool = True, karpenter: Karpenter | None = None, domain_key: str = ZONE_LABEL,
            non_preemptible_rule: bool = True, memo: dict | None = None) -> Verdict:
    """The dry run: what the scheduler would do with this workload in this pool now (see the module's
    docstring for the rules). `owners` holds every project's and department's standing in the pool,
    `project`/`department` the submitter's, their fair share computed with this workload's request added.
    `enforced` False (no scheduler enforcing quota): only nodes decide, nothing is reclaimed. A workload
    that is not a gang is placed pod by pod, as the scheduler places a batch Job's pods: the quota rules
    are checked for each pod as it comes (what the scheduler says of the first waiting pod is its reason).
    Nodes are judged in the shape's units (`in_units`): a MIG profile's free slices, a KAI fraction GPU by
    GPU; quota in GPU-equivalents. `memo`: a dict the caller keeps for the verdicts of one pool (the same
    `nodes`, `running` and `domain_key`, unchanged): what depends on them alone — the fragmentation, the pool in
    each shape's units, its node sizes — is worked out once, not once per verdict."""
    memo = {} if memo is None else memo
    whole_shape = not shape.profile and shape.fraction is None
    sizes = sorted({*SHAPES, int(shape.gpus)} - {0}) if whole_shape and shape.gpus == int(shape.gpus) else SHAPES
    key = ("fragmentation", tuple(sizes), domain_key)
    if key not in memo:
        memo[key] = fragmentation(nodes, sizes=sizes, domain_key=domain_key)
    frag = memo[key]
    base = dict(pods=shape.pods, pool=pool, fragmentation=frag, karpenter=karpenter)
    unit = shape if shape.gang else replace(shape, pods=1)
    first = quota_refusal(unit, project, department, enforced=enforced, non_preemptible_rule=non_preemptible_rule)
    if "sliced" not in memo:
        memo["sliced"] = any(node.slices or node.shared for node in nodes)
    sliced = memo["sliced"]
    units = units_key(shape)
    if ("units", units) not in memo:
        nodes, running = in_units(shape, nodes, running)
        memo[("units", units)] = (nodes, running, _node_sizes(nodes), _node_sizes([n for n in nodes if n.ready]))
    nodes, running, node_sizes, ready_sizes = memo[("units", units)]
    room_words = _room_words(shape, frag, nodes, domain_key, sliced)
    # 1. No node shape of the pool can hold one pod (or, for a gang, all of them), and Karpenter launches none.
    launch = karpenter is not None and karpenter.can_launch
    never = ""
    if not any(_slots(Decimal(gpus), shape.room, cpu, memory, shape.cpu, shape.memory) >= 1  # `holds`, per size
               for gpus, cpu, memory in node_sizes):
        biggest = max((node.gpus for node in nodes), default=0)
        if launch:
            return Verdict(WAITS_FOR_NODE, f"Waits for a node Karpenter can launch: no node of {pool} holds "
                           f"{shape.unit} now, and Karpenter NodePool {karpenter.nodepool} can launch one.",
                           [karpenter.words], "karpenter", quota_cause=first[0] if first else "", **base)
        if not nodes:
            never = f"{pool} has no node"
        elif shape.room > biggest:
            never = _too_big(shape, pool, biggest, sliced)
        else:
            never = (f"no node of {pool} has the CPU and memory one pod asks ({n(Decimal(shape.cpu) / 1000)} "
                     f"{noun(Decimal(shape.cpu) / 1000, 'core')}, "
                     f"{n(Decimal(shape.memory) / 2**30)} GiB)")
    else:
        whole = _empty_slots(node_sizes, shape)
        if shape.gang and whole < shape.pods and not launch:
            never = (f"even empty, the nodes of {pool} hold {pods_text(whole)} of {shape.unit}, and its "
                     f"gang needs {shape.pods} at once")
        cap = None if first is None else (project.deserved if first[0] == "non_preemptible" else project.cap)
        if not never and first is not None and shape.gang and cap is not None and shape.total_gpus > cap:
            never = (f"{project.label()} may hold {gpus_text(cap)} in {pool} and its gang asks "
                     f"{gpus_text(shape.total_gpus)} at once")
    if never:
        reasons = [f"No node shape can hold it: {never}."] if not never.startswith("project") else []
        reasons += [first[1]] if first else []
        reasons += [karpenter.words] if karpenter is not None else []
        return Verdict(NEVER_FITS, f"Never fits: {never}.", reasons, "too_big", quota_cause=first[0] if first else "",
                       **base)
    # 2. Pods as the scheduler takes them: quota rules, then free room, then room it makes (reclaim, preempt).
    placed = _place(shape, nodes, running, owners, project, department, enforced, non_preemptible_rule)
    started, room = placed.started, placed.room
    if started >= shape.pods:
        if room is None or not room.victims:
            where = (f"on a GPU of {pool} with that much share free" if shape.fraction is not None else
                     f"on the free {_free_what(shape)} of {pool}")
            return Verdict(STARTS_NOW, f"Starts now: {shape.words()} {verb(shape.pods, 'fits', 'fit')} {where}.",
                           [room_words], "fits", pods_now=shape.pods, **base)
        actions = {v.action for v in room.victims}
        how = "reclaiming over-quota GPUs" if actions == {"reclaim"} else \
            "preempting lower-priority work of its own project" if actions == {"preempt"} else \
            "reclaiming over-quota GPUs and preempting lower-priority work"
        return Verdict(STARTS_NOW, f"Starts now by {how}. {room.words()}", [room.words()],
                       "reclaim" if "reclaim" in actions else "preempt", pods_now=shape.pods, room=room, **base)
    partly = "" if started == 0 else f" {pods_text(started)} of {shape.pods} can start now; the others wait."
    if placed.refusal is not None:  # the next pod is refused by the quota rules
        cause, words = placed.refusal
        return Verdict(WAITS_FOR_QUOTA, f"Waits for quota.{partly} {words}", [words], cause, pods_now=started,
                       room=room, quota_cause=cause, **base)
    # 3. It waits for room on the nodes: what for.
    borrowers = sorted(((o.label(), o.over_quota) for key, o in owners.items()
                        if o.kind == "project" and o.over_quota > 0 and o.name != project.name),
                       key=lambda b: (-b[1], b[0]))
    reasons = [room_words]
    later = quota_refusal(shape, project, department, enforced=enforced, non_preemptible_rule=non_preemptible_rule)
    if later is not None:
        reasons.append(f"Beyond the pods that fit its quota: {later[1]}")
    if karpenter is not None:
        reasons.append(karpenter.words)
        if karpenter.can_launch:
            return Verdict(WAITS_FOR_NODE, f"Waits for a node Karpenter can launch (NodePool {karpenter.nodepool}).{partly}",
                           reasons, "karpenter", pods_now=started, borrowers=borrowers, room=room, **base)
    ready_whole = _empty_slots(ready_sizes, shape)
    if ready_whole == 0 or (shape.gang and ready_whole < shape.pods):
        return Verdict(WAITS_FOR_CAPACITY, f"Waits for capacity: only nodes of {pool} that are not Ready (or are "
                       f"cordoned) can hold it.{partly}", reasons, "not_ready", pods_now=started, **base)
    asked = unit.total_gpus
    over_share = enforced and placed.project.fair_share is not None and \
        placed.project.allocated + asked > placed.project.fair_share
    if over_share and borrowers:
        held = sum((g for _, g in borrowers), ZERO)
        who = ", ".join(f"{who} (+{n(g)})" for who, g in borrowers)
        words = (f"With it, {project.label()} would hold {gpus_text(placed.project.allocated + asked)}, above its "
                 f"fair share of {n(project.fair_share)}, so the scheduler reclaims nothing for it; {gpus_text(held)} "
                 f"of {pool} {verb(held, 'is', 'are')} over-quota use of others: {who}. It starts when they end, or "
                 "when its share grows.")
        return Verdict(WAITS_FOR_QUOTA, f"Waits for quota: over-quota use of others holds {gpus_text(held)} of {pool}."
                       f"{partly}", [words] + reasons, "fair_share", pods_now=started, borrowers=borrowers, room=room,
                       **base)
    return Verdict(WAITS_FOR_CAPACITY, f"Waits for capacity. {reasons[0]}{partly}", reasons, "capacity",
                   pods_now=started, borrowers=borrowers, room=room, **base)


def _node_sizes(nodes: Sequence[NodeRoom]) -> Counter:
    """How many nodes of each size (allocatable GPUs, CPU, memory): a pool has thousands of nodes of a few."""
    return Counter((node.gpus, node.cpu, node.memory) for node in nodes)


def _empty_slots(sizes: Counter, shape: Shape) -> int:
    """How many pods of the shape nodes of these sizes (`_node_sizes`) hold empty (their allocatable), all
    together: the nodes of one size are counted at once."""
    return sum(count * _slots(Decimal(gpus), shape.room, cpu, memory, shape.cpu, shape.memory)
               for (gpus, cpu, memory), count in sizes.items())


def _free_what(shape: Shape) -> str:
    return f"{shape.profile} slices" if shape.profile else "GPUs"


def _too_big(shape: Shape, pool: str, biggest: Decimal | int, sliced: bool) -> str:
    """Why no node of the pool holds one pod, in the shape's units (`biggest`: the most one node holds)."""
    if shape.profile:
        if not biggest:
            return f"no node of {pool} publishes {shape.profile} slices"
        return (f"the largest node of {pool} has {slices_text(int(biggest), shape.profile)}; this asks "
                f"{shape.slices} on one node")
    if shape.fraction is not None:
        return (f"no node of {pool} has a whole GPU to share (KAI shares whole GPUs: MIG slices and time-sliced "
                "replicas are not shared again)")
    whole = " not cut into MIG slices" if sliced else ""
    return f"the largest node of {pool} has {gpus_text(biggest)}{whole}; this asks {n(shape.gpus)} on one node"


def _room_words(shape: Shape, frag: Fragmentation, nodes: Sequence[NodeRoom], domain_key: str, sliced: bool) -> str:
    """The fragmentation answer for the shape, in its units (`nodes` already `in_units`)."""
    if shape.profile:
        mig = frag.mig_room(shape.profile)
        if mig is None:
            return f"No node of the pool publishes {shape.profile} slices."
        return mig.words(shape.pods, shape.slices)
    if shape.fraction is not None:
        ready = [node for node in nodes if node.ready and node.gpus > 0]
        fit = sum(int(node.free) for node in ready)
        return (f"A fraction of {gpus_text(shape.fraction)} runs on one GPU with that much share free (KAI Scheduler "
                f"shares a GPU between fractions; a whole free GPU takes {_fraction_slots(Decimal(1), shape.fraction)}): "
                f"the {len(ready)} Ready {noun(len(ready), 'node')} with whole GPUs take {pods_text(fit)} of it now.")
    if sliced:  # whole GPUs only: a MIG slice or a GPU fractions share is no whole GPU
        return capacity_words(fragmentation(nodes, domain_key=domain_key), shape.pods, shape.gpus)
    return capacity_words(frag, shape.pods, shape.gpus)


def _scheduler_room(shape: Shape, nodes, running, owners, project: Standing, department: Standing | None) -> Room | None:
    """Reclaim (while the project stays within its fair share with the job), then preempt lower priority
    inside its own project; victims in the scheduler's order until it fits."""
    candidates: list[Victim] = []
    if project.fair_share is not None and project.allocated + shape.total_gpus <= project.fair_share:
        candidates += [Victim(p, "reclaim") for p in reclaim_candidates(
            running, owners, requester=project, requester_department=department, job_gpus=shape.total_gpus)]
    candidates += [Victim(p, "preempt") for p in _own_lower(shape, running, project)]
    if not candidates:
        return None
    return _take_victims(shape, nodes, candidates, owners, project=project, department=department)


def _own_lower(shape: Shape, running: Iterable[Running], project: Standing) -> list[Running]:
    """Preemptible pods of the project itself at a lower priority, in the order the scheduler takes them."""
    return sorted((p for p in running if p.project == project.name and p.preemptible and p.priority < shape.priority),
                  key=_victim_order)


def _preempt_within_quota(shape: Shape, nodes: Sequence[NodeRoom], running: Sequence[Running], project: Standing,
                          department: Standing | None, non_preemptible_rule: bool) -> Room | None:
    """A job refused by a limit (its project's or department's, over-quota off included) may still start by
    preempting lower-priority pods of its own project: the scheduler takes them in its order until the job is
    within the limit and fits (non-preemptible use is not lowered so: that refusal stays)."""
    room = _Free(nodes, shape.room, shape.cpu, shape.memory)
    chosen: list[Victim] = []
    for pod in _own_lower(shape, running, project):
        chosen.append(Victim(pod, "preempt"))
        room.release(pod)
        project = _use(project, pod.gpus, True, -1)
        department = _use(department, pod.gpus, True, -1) if department is not None else None
        if quota_refusal(shape, project, department, non_preemptible_rule=non_preemptible_rule) is None \
                and room.total >= shape.pods:
            return Room(shape.pods, shape.gpus, True, tuple(chosen), unit=shape.unit, profile=shape.profile,
                        slices=shape.slices)
    return None


@dataclass
class _Placed:
    started: int
    room: Room | None
    refusal: tuple[str, str] | None  # why the next pod was refused by the quota rules, if it was
    project: Standing


def _place(shape: Shape, nodes: Sequence[NodeRoom], running: Sequence[Running], owners, project: Standing,
           department: Standing | None, enforced: bool, non_preemptible_rule: bool = True) -> _Placed:
    """How many of the shape's pods start now, the victims taken for them, and why the next one does not. A
    gang: all or none; else one pod at a time, with the project's use growing. Each unit: the quota rules
    (a limit may be met by preempting the project's own lower-priority pods), then free room, then room the
    scheduler makes (reclaim, preempt)."""
    unit = shape if shape.gang or shape.pods == 1 else replace(shape, pods=1)
    nodes, running, owners = list(nodes), list(running), dict(owners)
    taken: list[Victim] = []
    started = 0
    refusal = None
    while started < shape.pods:
        room = None
        refusal = quota_refusal(unit, project, department, enforced=enforced,
                                non_preemptible_rule=non_preemptible_rule) if enforced else None
        if refusal is not None:
            if refusal[0] == "non_preemptible":
                break
            room = _preempt_within_quota(unit, nodes, running, project, department, non_preemptible_rule)
            if room is None:
                break
            refusal = None
        elif fits_now(nodes, unit.pods, unit.room, unit.cpu, unit.memory) < unit.pods:
            room = _scheduler_room(unit, nodes, running, owners, project, department) if enforced else None
            if room is None or not room.fits:
                break
        if room is not None:
            gone = {(v.pod.namespace, v.pod.name) for v in room.victims}
            running = [p for p in running if (p.namespace, p.name) not in gone]
            for victim in room.victims:
                taken.append(victim)
                nodes = _with_pod(nodes, victim.pod, -1)
                for key in (("project", victim.pod.project), ("department", victim.pod.department)):
                    if key in owners:
                        owners[key] = _use(owners[key], victim.pod.gpus, victim.pod.preemptible, -1)
                if victim.pod.project == project.name:
                    project = _use(project, victim.pod.gpus, victim.pod.preemptible, -1)
                    if department is not None:
                        department = _use(department, victim.pod.gpus, victim.pod.preemptible, -1)
        for _ in range(unit.pods):
            one = replace(unit, pods=1)
            node = _binpack(nodes, one)
            pod = Running("", f"pod-{started}", node, Decimal(shape.gpus), shape.priority, project.name,
                          department.name if department else "", cpu=shape.cpu, memory=shape.memory,
                          units=Decimal(shape.room))
            nodes = _with_pod(nodes, pod, 1)
            project = _use(project, pod.gpus, shape.preemptible)
            owners[("project", project.name)] = project
            if department is not None:
                department = _use(department, pod.gpus, shape.preemptible)
                owners[("department", department.name)] = department
            started += 1
    room = Room(shape.pods, shape.gpus, started == shape.pods, tuple(taken), unit=shape.unit, profile=shape.profile,
                slices=shape.slices) if taken else None
    return _Placed(started, room, refusal, project)


def _use(owner: Standing, gpus: Decimal, preemptible: bool, sign: int = 1) -> Standing:
    return replace(owner, allocated=owner.allocated + sign * gpus,
                   non_preemptible=owner.non_preemptible + (0 if preemptible else sign * gpus))


def _binpack(nodes: Sequence[NodeRoom], shape: Shape) -> str:
    fitting = [node for node in nodes if slots_on(node, shape.room, shape.cpu, shape.memory) >= 1]
    return min(fitting, key=lambda node: (node.free, node.name)).name


def _with_pod(nodes: Sequence[NodeRoom], pod: Running, sign: int) -> list[NodeRoom]:
    """The nodes with `pod` bound (sign 1) or gone (-1)."""
    out = []
    for node in nodes:
        if node.name == pod.node:
            node = replace(node, free=node.free - sign * pod.room,
                           cpu_free=None if node.cpu_free is None else node.cpu_free - sign * pod.cpu,
                           memory_free=None if node.memory_free is None else node.memory_free - sign * pod.memory)
        out.append(node)
    return out


# ---------------------------------------------------------------------------------------------------
# Start estimates


@dataclass(frozen=True)
class Ending:
    """A running workload's pods and when they are expected to end, in seconds from now: `soon`/`late`
    (None: not known). `basis`: "deadline" (activeDeadlineSeconds), "usual" (the median and 90th
    percentile run time of finished workloads of its project and priority class), "overdue" (running past
    its usual length)."""

    name: str
    project: str
    department: str
    klass: str
    pods: tuple[Running, ...]
    soon: float | None
    late: float | None
    basis: str = ""

    @property
    def gpus(self) -> Decimal:
        return sum((p.gpus for p in self.pods), ZERO)


@dataclass(frozen=True)
class Waiting:
    """A pending workload of the pool, in the queue's order, with how long it runs once started (`soon`/
    `late` seconds; None: not known) and who it belongs to."""

    name: str
    project: str
    department: str
    shape: Shape
    soon: float | None = None
    late: float | None = None
    klass: str = ""


@dataclass(frozen=True)
class Estimate:
    """When a waiting workload may start: between `earliest` and `latest` seconds from now, with the basis in
    words; or no estimate (`earliest` None) and why (`basis`)."""

    earliest: float | None
    latest: float | None
    basis: str
    ahead: int = 0

    @property
    def known(self) -> bool:
        return self.earliest is not None and self.latest is not None

    def text(self) -> str:
        if not self.known:
            return f"no estimate: {self.basis}"
        return f"{span(self.earliest, self.latest)}: {self.basis}"

    def short(self) -> str:
        return span(self.earliest, self.latest) if self.known else "no estimate"

    def as_dict(self) -> dict[str, Any]:
        return {"earliest_seconds": None if self.earliest is None else round(self.earliest),
                "latest_seconds": None if self.latest is None else round(self.latest),
                "ahead_in_queue": self.ahead, "basis": self.basis, "text": self.text()}


def minutes(seconds: float) -> int:
    return max(0, int(math.ceil(seconds / 60 - 1e-9)))


def span(earliest: float, latest: float) -> str:
    """"in 40–70 min", "within a minute", "in about 5 min", "in 2–3 h"."""
    lo, hi = minutes(earliest), minutes(latest)
    if hi <= 1:
        return "within a minute"
    if hi >= 180:
        return f"in {lo // 60}–{math.ceil(hi / 60)} h" if lo // 60 != math.ceil(hi / 60) else f"in about {hi // 60} h"
    if lo == hi:
        return f"in about {hi} min"
    return f"in {lo}–{hi} min"


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of a sample (fraction 0.5: the median)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def usual_length(run_seconds: Sequence[float]) -> tuple[float, float] | None:
    """(median, 90th percentile) of finished workloads' run times, or None without any."""
    if not run_seconds:
        return None
    return percentile(run_seconds, 0.5), percentile(run_seconds, 0.9)


def expected_end(*, running_for: float, deadline: float | None, usual: tuple[float, float] | None,
                 cycle: float = 60.0) -> tuple[float | None, float | None, str]:
    """(soon, late, basis) of a running workload, in seconds from now. With `activeDeadlineSeconds`
    (`deadline`, counted from its start) it ends at the latest then; with a usual length it ends between
    the median and the 90th percentile (capped by the deadline); past its usual length it is overdue and
    expected within (p90 − median) more; with neither, not known."""
    limit = None if deadline is None else max(deadline - running_for, 0.0)
    if usual is not None:
        median, p90 = usual
        soon, late = median - running_for, p90 - running_for
        basis = "usual"
        if late <= 0:
            soon, late, basis = 0.0, max(p90 - median, cycle), "overdue"
        soon, late = max(soon, 0.0), max(late, 0.0)
        if limit is not None:
            soon, late = min(soon, limit), min(late, limit)
            if limit <= late:
                basis = "deadline"
        return soon, late, basis
    if limit is not None:
        return 0.0, limit, "deadline"
    return None, None, ""


class _World:
    """The pool in one scenario of the estimate: free room per node, each owner's use, events."""

    def __init__(self, nodes: Sequence[NodeRoom], owners: Mapping[tuple[str, str], Standing],
                 start: "_World | None" = None) -> None:
        self.use = {key: [o.allocated, o.non_preemptible] for key, o in owners.items()}
        self.owners = owners
        if start is not None:  # the same nodes as `start`, as it was built (a copy: scenarios change theirs)
            self.free = {name: room[:] for name, room in start.free.items()}
            self.order, self.index, self.by_free = start.order, start.index, start.by_free[:]
            return
        self.free = {node.name: [node.free, node.cpu_free, node.memory_free] for node in nodes if node.ready}
        self.order = [node.name for node in nodes if node.ready]
        # The Ready nodes by (free GPUs, their order): binpack's choice is the first of them, from the first
        # with enough free GPUs, whose CPU and memory also fit (a bisection, not a pass over every node).
        self.index = {name: i for i, name in enumerate(self.order)}
        self.by_free = sorted((room[0], self.index[name], name) for name, room in self.free.items())

    def place(self, shape: Shape, room: int | Decimal | None = None) -> list[tuple[str, Running]] | None:
        """Bind the shape's pods (binpack: the fullest node that fits first, the first in order among
        equals), each taking `room` (default `shape.room`) of the nodes' units; None when not all fit."""
        placed: list[tuple[str, Running]] = []
        gpus, cpu, memory = (shape.room if room is None else room), shape.cpu, shape.memory
        rooms, by_free = self.free, self.by_free
        for _ in range(shape.pods):
            best = None
            for k in range(bisect_left(by_free, (gpus,)) if gpus > 0 else 0, len(by_free)):
                name = by_free[k][2]
                room = rooms[name]
                if cpu > 0 and room[1] is not None and room[1] < cpu:
                    continue
                if memory > 0 and room[2] is not None and room[2] < memory:
                    continue
                best = name
                break
            if best is None:
                for name, pod in placed:
                    self.release(pod)
                return None
            pod = Running("", "", best, Decimal(shape.gpus), shape.priority, "", "", cpu=shape.cpu, memory=shape.memory,
                          units=Decimal(gpus))
            self.take(pod)
            placed.append((best, pod))
        return placed

    def take(self, pod: Running, sign: int = 1) -> None:
        room = self.free.get(pod.node)
        if room is None:
            return
        index = self.index[pod.node]
        del self.by_free[bisect_left(self.by_free, (room[0], index, pod.node))]
        room[0] -= sign * pod.room
        if room[1] is not None:
            room[1] -= sign * pod.cpu
        if room[2] is not None:
            room[2] -= sign * pod.memory
        insort(self.by_free, (room[0], index, pod.node))

    def release(self, pod: Running) -> None:
        self.take(pod, -1)

    def account(self, project: str, department: str, shape_or_gpus, preemptible: bool, sign: int = 1) -> None:
        gpus = shape_or_gpus if isinstance(shape_or_gpus, Decimal) else shape_or_gpus.total_gpus
        for key in (("project", project), ("department", department)):
            if key in self.use:
                self.use[key][0] += sign * gpus
                if not preemptible:
                    self.use[key][1] += sign * gpus

    def quota_ok(self, waiting: Waiting, enforced: bool, non_preemptible_rule: bool = True) -> bool:
        if not enforced:
            return True
        standings = []
        for key in (("project", waiting.project), ("department", waiting.department)):
            owner = self.owners.get(key)
            if owner is not None:
                standings.append(replace(owner, allocated=self.use[key][0], non_preemptible=self.use[key][1]))
        project = standings[0] if standings and standings[0].kind == "project" else None
        department = next((s for s in standings if s.kind == "department"), None)
        if project is None:
            return True
        return quota_refusal(waiting.shape, project, department, non_preemptible_rule=non_preemptible_rule) is None


def _events(endings: Sequence[Ending], scenario: str) -> list[tuple[float, int, Ending]]:
    """The endings known in the scenario as a heap of (when, their order, ending)."""
    events: list[tuple[float, int, Ending]] = []
    for index, ending in enumerate(endings):
        at = getattr(ending, scenario)
        if at is not None:
            events.append((at, index, ending))
    heapq.heapify(events)
    return events


def _simulate(target: Waiting, *, nodes, endings: Sequence[Ending], ahead: Sequence[Waiting], owners,
              scenario: str, enforced: bool, non_preemptible_rule: bool = True, memo: dict | None = None
              ) -> tuple[float | None, list[Ending], list[Waiting]]:
    """When the target starts if every running workload ends at its `scenario` ("soon"/"late") time and the
    workloads ahead start as soon as they fit (and then run their usual length): (time, the endings it waited
    for, the workloads ahead that started first). None: not within what is known. `memo`: one for these
    nodes and endings (`estimate`'s, per unit): the nodes' starting room and the endings' heap, built once."""
    if memo is None:
        world = _World(nodes, owners)
        events = _events(endings, scenario)
    else:
        if "world" not in memo:
            memo["world"] = _World(nodes, {})
        if scenario not in memo:
            memo[scenario] = _events(endings, scenario)
        world = _World(nodes, owners, start=memo["world"])
        events = memo[scenario][:]  # a copy of the heap: the same heap, changed by this scenario alone
    serial = len(endings)
    queue = list(ahead)
    waited: list[Ending] = []
    started: list[Waiting] = []
    now = 0.0
    while True:
        for job in list(queue):
            if not world.quota_ok(job, enforced, non_preemptible_rule):
                continue
            placed = world.place(job.shape, job.shape.room_in(target.shape))
            if placed is None:
                continue
            queue.remove(job)
            started.append(job)
            world.account(job.project, job.department, job.shape, job.shape.preemptible)
            length = getattr(job, scenario)
            if length is not None:
                pods = tuple(replace(pod, project=job.project, department=job.department) for _, pod in placed)
                serial += 1
                heapq.heappush(events, (now + length, serial, Ending(job.name, job.project, job.department, job.klass,
                                                                    pods, None, None, "ahead")))
        if world.quota_ok(target, enforced, non_preemptible_rule) and world.place(target.shape) is not None:
            return now, waited, started
        if not events:
            return None, waited, started
        now = events[0][0]
        while events and events[0][0] <= now:  # every workload ending at this moment
            _, _, ending = heapq.heappop(events)
            for pod in ending.pods:
                world.release(pod)
            world.account(ending.project, ending.department, ending.gpus, all(p.preemptible for p in ending.pods), -1)
            if ending.basis != "ahead":
                waited.append(ending)


def estimate(target: Waiting, *, nodes: Sequence[NodeRoom], endings: Sequence[Ending], ahead: Sequence[Waiting],
             owners: Mapping[tuple[str, str], Standing], verdict_now: Verdict | None = None, enforced: bool = True,
             unknown: Sequence[Ending] = (), non_preemptible_rule: bool = True,
             reclaim_delay: float = 0.0, memo: dict | None = None) -> Estimate:
    """When `target` may start: the range between the scenario where every running workload ends soon (its
    usual median, or now for a deadline) and the one where each ends late (its 90th percentile, or its
    deadline), the workloads `ahead` in the queue starting first as they fit. `verdict_now` (the dry run
    for it now) settles the cases with no waiting: it never fits, or the scheduler makes room at once.
    The reclaim rules: a workload that would run over its project's deserved quota borrows, so in-quota work
    of the pool's other owners may take the GPUs first, or back (docs/concepts.md#schedulers): the latest bound then grows by
    `reclaim_delay`, how long such work usually runs (the 90th percentile of the owners' finished workloads).
    `memo`: a dict the caller keeps for the estimates of one pool (the same `nodes`, `endings` and `unknown`,
    unchanged): what depends on them alone — the pool in each target's units, who holds GPUs of no known end —
    is then worked out once per unit, not once per waiting workload."""
    if verdict_now is not None:
        if verdict_now.code == NEVER_FITS:
            return Estimate(None, None, verdict_now.headline.removeprefix("Never fits: ").rstrip(".") + ": it never fits")
        if verdict_now.code == STARTS_NOW:
            how = verdict_now.room.words() if verdict_now.room is not None and verdict_now.room.victims else \
                "it fits now; the scheduler binds it at its next round"
            return Estimate(0.0, 60.0, how)
        if verdict_now.code == WAITS_FOR_NODE:
            return Estimate(60.0, 300.0, f"a node Karpenter launches (NodePool {verdict_now.karpenter.nodepool}) is "
                            "usually ready within 1–5 minutes", len(ahead))
    key = ("units", units_key(target.shape))
    if memo is None or key not in memo:
        world = _in_units_all(target.shape, nodes, endings, unknown)
        if memo is None:
            nodes, endings, unknown = world
        else:
            memo[key] = (*world, {})
    unit_memo = None
    if memo is not None:
        nodes, endings, unknown, unit_memo = memo[key]
    soon, waited_soon, _ = _simulate(target, nodes=nodes, endings=endings, ahead=ahead, owners=owners,
                                     scenario="soon", enforced=enforced, non_preemptible_rule=non_preemptible_rule,
                                     memo=unit_memo)
    late, waited_late, started = _simulate(target, nodes=nodes, endings=endings, ahead=ahead, owners=owners,
                                           scenario="late", enforced=enforced, non_preemptible_rule=non_preemptible_rule,
                                           memo=unit_memo)
    if soon is None or late is None:
        if memo is None or "blockers" not in memo:
            blockers = [e for e in list(endings) + list(unknown) if getattr(e, "late") is None]
            names = _owners_words(blockers) if blockers else ""
            if memo is not None:
                memo["blockers"] = names
        else:
            names = memo["blockers"]
        if names:
            return Estimate(None, None, f"it needs GPUs that {names} hold, and they have neither "
                            "activeDeadlineSeconds nor finished workloads of their project and priority class to "
                            "measure their usual length", len(ahead))
        return Estimate(None, None, "even when every running workload ends, the pool's Ready nodes and the quota "
                        "rules leave it no room", len(ahead))
    earliest, latest = min(soon, late), max(soon, late)
    parts = []
    first = len(started)  # those ahead that start before it (a workload ahead that never fits holds nothing)
    if first:
        parts.append(f"{first} {noun(first, 'workload')} ahead in the queue")
    mine = owners.get(("project", target.project))
    borrows = mine is not None and enforced and mine.allocated + target.shape.total_gpus > mine.deserved
    if borrows and reclaim_delay > 0:
        latest += reclaim_delay
    waited = waited_late or waited_soon
    if waited:
        freed = sum((e.gpus for e in waited), ZERO)
        bases = {e.basis for e in waited}
        how = "at their usual length" if bases <= {"usual", "overdue"} else "by their deadline" if bases == {"deadline"} \
            else "at their usual length or deadline"
        ends = verb(len(waited), "ends", "end")
        if target.shape.profile:  # in its units: slices of its profile
            slices = int(sum((p.room for e in waited for p in e.pods), ZERO))
            freed_text = slices_text(slices, target.shape.profile)
        else:
            freed_text = gpus_text(freed)
        parts.append(f"{freed_text} free when {_owners_words(waited)} {ends} {how}")
    elif not parts:
        parts.append("the scheduler's next round")
    if borrows and reclaim_delay > 0:
        parts.append(f"over its project's deserved quota, so in-quota work of the pool's owners may come first "
                     f"(up to {minutes(reclaim_delay)} min more)")
    return Estimate(earliest, latest, "; ".join(parts), first)


def units_key(shape: Shape) -> tuple:
    """What `in_units` reads of a shape: two shapes with the same key see the pool in the same units."""
    if shape.profile:
        return ("profile", shape.profile)
    if shape.fraction is not None:
        return ("fraction", shape.fraction)
    return ("whole",)


def _in_units_all(shape: Shape, nodes: Sequence[NodeRoom], endings: Sequence[Ending], unknown: Sequence[Ending]):
    """`in_units` of the nodes and of every ending's pods (the estimate's world in the target's units)."""
    groups = [list(endings), list(unknown)]
    before = [p for group in groups for e in group for p in e.pods]
    nodes, pods = in_units(shape, nodes, before)
    if all(a is b for a, b in zip(pods, before)):  # whole GPUs on whole-GPU nodes: the pods as they are
        return nodes, groups[0], groups[1]
    out, at = [], 0
    for group in groups:
        done = []
        for e in group:
            done.append(replace(e, pods=tuple(pods[at:at + len(e.pods)])))
            at += len(e.pods)
        out.append(done)
    return nodes, out[0], out[1]


def _owners_words(endings: Sequence[Ending]) -> str:
    """"team-nlp's two train jobs and rnd-a's build job"."""
    groups: dict[tuple[str, str], int] = {}
    for e in endings:
        groups[(e.project, e.klass)] = groups.get((e.project, e.klass), 0) + 1
    words = {1: "", 2: "two ", 3: "three ", 4: "four "}
    parts = [f"{project}'s {words.get(count, f'{count} ')}{klass + ' ' if klass else ''}job{'s' if count > 1 else ''}"
             for (project, klass), count in sorted(groups.items(), key=lambda item: (-item[1], item[0]))]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
