"""The Kubernetes default scheduler (``schedulerName: default-scheduler`` or none), as a pure function:
pending pods and a :class:`~kubesim.scheduling.fit.Cluster` in, binds and failures out.

Written from the Kubernetes documentation and sources (kubernetes/kubernetes):

- kubernetes.io/docs/concepts/scheduling-eviction/kube-scheduler/ and .../scheduling-framework/: a
  scheduling cycle per pod, filtering then scoring then binding; the active queue is ordered by pod
  priority, then by the time the pod was queued (PrioritySort, pkg/scheduler/framework/plugins/
  queuesort);
- .../scheduler-perf-tuning/ (``percentageOfNodesToScore``) and pkg/scheduler/schedule_one.go
  (``numFeasibleNodesToFind``, ``nextStartNodeIndex``): the filters visit the nodes round-robin from where
  the last cycle stopped and stop once enough feasible nodes are found (all nodes below 100; above, an
  adaptive 50 % − nodes/125, at least 5 % and at least 100 nodes);
- the filters and their reasons: see :mod:`kubesim.scheduling.fit`;
- scores (pkg/scheduler/apis/config/v1/default_plugins.go weights): NodeAffinity × 2 (sum of the
  matching preferred terms' weights, normalised to 0–100 over the feasible nodes), TaintToleration × 3
  (fewer untolerated ``PreferNoSchedule`` taints is better, normalised and reversed),
  NodeResourcesFit × 1 (the ``LeastAllocated`` strategy over cpu and memory, weight 1 each: the share
  left free after placing the pod) and NodeResourcesBalancedAllocation × 1 (1 − the standard deviation
  of the cpu and memory fractions used). The highest total wins; upstream picks at random among equal
  totals, this one takes the first visited;
- an unschedulable pod: the FitError message of pkg/scheduler/framework/types.go (``0/N nodes are
  available: <count> <reason>, ...`` sorted, then the PostFilter's
  ``preemption: 0/N nodes are available: <count> Preemption is not helpful for scheduling, ...``), and
  ``no nodes available to schedule pods`` without nodes (schedule_one.go ``ErrNoNodesAvailable``).

Not emulated, and why: preemption by the default scheduler (the PostFilter only reports; Kueue and KAI,
the schedulers the console drives, decide preemption themselves), inter-pod affinity and topology
spread (the console's pods use neither as a hard constraint), volumes, host ports, the non-zero default
requests used by the scoring of pods that request nothing. A node whose filters reject the pod for a
resource counts as "No preemption victims found for incoming pod" in the PostFilter part: nothing is
ever preempted here.
"""
from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kubesim.scheduling.fit import CPU, MEMORY, Cluster, PodInfo, priority_of, resource_reasons

SCHEDULER_NAME = "default-scheduler"
NO_NODES = "no nodes available to schedule pods"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
MIN_FEASIBLE_NODES = 100
MIN_FEASIBLE_PERCENTAGE = 5
# Plugin weights of the default profile.
WEIGHT_NODE_AFFINITY = 2
WEIGHT_TAINT_TOLERATION = 3
WEIGHT_FIT = 1
WEIGHT_BALANCED = 1


@dataclass(frozen=True)
class Bind:
    namespace: str
    name: str
    node: str


@dataclass(frozen=True)
class Failure:
    namespace: str
    name: str
    message: str


@dataclass
class Result:
    binds: list[Bind] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    next_start: int = 0


def is_default(pod: PodInfo) -> bool:
    return pod.scheduler in ("", SCHEDULER_NAME)


def num_feasible_nodes_to_find(count: int) -> int:
    """How many feasible nodes the filters look for before scoring (``percentageOfNodesToScore`` unset)."""
    if count < MIN_FEASIBLE_NODES:
        return count
    percentage = max(50 - count // 125, MIN_FEASIBLE_PERCENTAGE)
    return max(count * percentage // 100, MIN_FEASIBLE_NODES)


def histogram(reasons: Mapping[str, int]) -> str:
    """``<count> <reason>`` for each reason, sorted as strings and joined with ", " (as upstream)."""
    return ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))


def fit_error(total: int, reasons: Mapping[str, int], not_helpful: int, no_victims: int) -> str:
    message = f"0/{total} nodes are available: {histogram(reasons)}."
    post = {NOT_HELPFUL: not_helpful, NO_VICTIMS: no_victims}
    return message + f" preemption: 0/{total} nodes are available: {histogram({k: v for k, v in post.items() if v})}."


def queue_order(pods: Sequence[PodInfo], classes: Mapping[str, int], default_priority: int = 0) -> list[PodInfo]:
    """PrioritySort: higher priority first, then earlier queued (creation time), then name."""
    return sorted(pods, key=lambda p: (-priority_of(p, classes, default_priority), p.created, p.namespace, p.name))


def _score(cluster: Cluster, pod: PodInfo, feasible: list[int]) -> int:
    """The feasible node with the highest weighted score (the first of equals)."""
    if len(feasible) == 1:
        return feasible[0]
    soft = cluster.soft_scores(pod)
    max_affinity = max(soft[i][0] for i in feasible)
    max_taints = max(soft[i][1] for i in feasible)
    want_cpu = pod.requests.get(CPU, 0.0)
    want_memory = pod.requests.get(MEMORY, 0.0)
    nodes, free = cluster.nodes, cluster.free
    best, best_score = feasible[0], -1.0
    plain = not max_affinity and not max_taints  # the usual case: only the resources tell nodes apart
    for i in feasible:
        if plain:
            score = WEIGHT_TAINT_TOLERATION * 100.0
        else:
            affinity, taints = soft[i]
            score = WEIGHT_TAINT_TOLERATION * (100.0 - (taints * 100.0 / max_taints if max_taints else 0.0))
            if max_affinity:
                score += WEIGHT_NODE_AFFINITY * affinity * 100.0 / max_affinity
        allocatable = nodes[i].allocatable
        node_free = free[i]
        # LeastAllocated (cpu, memory; weight 1 each) and BalancedAllocation over the same two.
        capacity = allocatable.get(CPU, 0.0)
        if capacity > 0:
            used = capacity - node_free.get(CPU, 0.0) + want_cpu
            least = max(capacity - used, 0.0) * 100.0 / capacity
            cpu_fraction = min(used / capacity, 1.0)
        else:
            least, cpu_fraction = 0.0, 1.0
        capacity = allocatable.get(MEMORY, 0.0)
        if capacity > 0:
            used = capacity - node_free.get(MEMORY, 0.0) + want_memory
            least += max(capacity - used, 0.0) * 100.0 / capacity
            memory_fraction = min(used / capacity, 1.0)
        else:
            memory_fraction = 1.0
        score += WEIGHT_FIT * least / 2 + WEIGHT_BALANCED * (1.0 - abs(cpu_fraction - memory_fraction) / 2) * 100.0
        if score > best_score + 1e-9:
            best, best_score = i, score
    return best


def schedule(cluster: Cluster, pending: Sequence[PodInfo], *, priority_classes: Mapping[str, int] | None = None,
             default_priority: int = 0, start: int = 0) -> Result:
    """One pass over the pending pods (in queue order): each is bound to its best feasible node, whose
    resources it then holds for the pods after it, or fails with the scheduler's message."""
    classes = priority_classes or {}
    result = Result(next_start=start)
    total = len(cluster)
    wanted = num_feasible_nodes_to_find(total)
    # The nodes the filters admit, per pod shape (the others only count in a failure's message).
    admitted_by_shape: dict[bytes, list[int]] = {}
    # A pod equal in shape and requests to one that failed fails the same way while no pod lands on a node
    # the shape admits (a bind elsewhere changes nothing for it; binds only ever take resources).
    failed: dict[tuple, tuple[str, int]] = {}
    bound_nodes: list[int] = []
    for pod in queue_order(pending, classes, default_priority):
        if pod.error:
            result.failures.append(Failure(pod.namespace, pod.name, pod.error))
            continue
        if total == 0:
            result.failures.append(Failure(pod.namespace, pod.name, NO_NODES))
            continue
        static = cluster.static_reasons(pod)
        admitted = admitted_by_shape.get(pod.filter_key)
        if admitted is None:
            admitted = admitted_by_shape[pod.filter_key] = [
                i for i in range(total) if cluster.static(pod, static, i) is None]
        shape = (pod.filter_key, tuple(sorted(pod.requests.items())))
        known = failed.get(shape)
        if known is not None and not any(static[i] is None for i in bound_nodes[known[1]:]):
            result.failures.append(Failure(pod.namespace, pod.name, known[0]))
            continue
        requests = pod.requests
        items = tuple(requests.items())
        free, free_pods = cluster.free, cluster.free_pods
        feasible: list[int] = []
        short: list[int] = []
        # Round-robin from where the last pod stopped, through the admitted nodes only.
        start_at = result.next_start
        first = bisect.bisect_left(admitted, start_at)
        count = len(admitted)
        last = None
        for k in range(count):
            i = admitted[(first + k) % count] if count else 0
            last = i
            node_free = free[i]
            ok = free_pods[i] >= 1
            if ok:
                for name, want in items:
                    if want > node_free.get(name, 0.0) + 1e-9:
                        ok = False
                        break
            if ok:
                feasible.append(i)
                if len(feasible) >= wanted:
                    break
            else:
                short.append(i)
        if feasible and len(feasible) >= wanted and last is not None:
            processed = (last - start_at) % total + 1
        else:
            processed = total
        result.next_start = (start_at + processed) % total
        if feasible:
            chosen = _score(cluster, pod, feasible)
            cluster.assume(chosen, requests)
            bound_nodes.append(chosen)
            result.binds.append(Bind(pod.namespace, pod.name, cluster.nodes[chosen].name))
            continue
        reasons: dict[str, int] = {}
        for i in range(total):  # every node evaluated: nothing was feasible
            reason = static[i]
            if reason is not None:
                reasons[reason] = reasons.get(reason, 0) + 1
        for i in short:
            for reason in resource_reasons(requests, free[i], free_pods[i]):
                reasons[reason] = reasons.get(reason, 0) + 1
        message = fit_error(total, reasons, total - len(short), len(short))
        failed[shape] = (message, len(bound_nodes))
        result.failures.append(Failure(pod.namespace, pod.name, message))
    return result
