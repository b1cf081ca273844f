"""What both schedulers share: plain snapshots of nodes and pods, the node filters with their reasons,
and a node's free resources (pure: plain data in, decisions out; nothing here touches the store).

The filters are the Kubernetes scheduling framework's, in its default profile's order
(kubernetes/kubernetes pkg/scheduler/framework/plugins, the names below are the plugin packages):

- ``nodeunschedulable``: a cordoned node (``spec.unschedulable``) admits only a pod tolerating the taint
  ``node.kubernetes.io/unschedulable:NoSchedule`` — reason ``node(s) were unschedulable``;
- ``tainttoleration``: the first ``NoSchedule``/``NoExecute`` taint no toleration tolerates — reason
  ``node(s) had untolerated taint {key: value}`` (v1.26 to v1.33 wording; v1.34 shortened it to
  ``node(s) had untolerated taint(s)``). A not-ready or unreachable node is kept out by the taints the
  node lifecycle controller puts on it (``node.kubernetes.io/not-ready``, ``.../unreachable``), as upstream;
- ``nodeaffinity``: ``spec.nodeSelector`` and the required node affinity — reason
  ``node(s) didn't match Pod's node affinity/selector``;
- ``noderesources`` (Fit): allocatable minus the requests of the active pods bound to the node, per
  resource the pod requests, and the pod count — reasons ``Too many pods``, ``Insufficient cpu``,
  ``Insufficient memory``, ``Insufficient nvidia.com/gpu`` (one reason per short resource).

KAI Scheduler runs the same Kubernetes predicates (NVIDIA/KAI-Scheduler pkg/scheduler/k8s_internal/
predicates) but words a short resource its own way (pkg/scheduler/api/common_info/pod_errors.go,
``NewFitErrorInsufficientResource``: ``node(s) didn't have enough resources: GPUs`` / ``CPU cores`` /
``memory`` / ``<resource>``; pkg/scheduler/api/unschedule_info.go: ``node(s) pod number exceeded``):
:func:`resource_reasons` gives either wording.

Units inside: cpu in millicores, memory and other byte quantities in bytes, GPUs and pods in units
(floats). Requests come from ``kube.requests.pod_requests`` (init containers, sidecars and overhead as
upstream computes them); a pod whose quantities do not parse is reported, never placed.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from kube import gpu as kgpu
from kube import wellknown
from kube.labels import pod_matches_node, preferred_node_affinity_score
from kube.quantity import QuantityError, parse_quantity
from kube.requests import pod_requests
from kube.taints import first_untolerated_taint, tolerations_tolerate, untolerated_taints

GPU = kgpu.GPU_RESOURCE
GPU_MEMORY_LABEL = kgpu.LABEL_GPU_MEMORY
# KAI's GPU sharing (NVIDIA/KAI-Scheduler docs/gpu-sharing/README.md; pkg/common/constants/constants.go).
GPU_FRACTION_ANNOTATION = kgpu.ANNOTATION_GPU_FRACTION
GPU_MEMORY_ANNOTATION = kgpu.ANNOTATION_GPU_MEMORY
GPU_GROUP_LABEL = kgpu.GPU_GROUP_LABEL
KAI_SCHEDULER = wellknown.KAI_SCHEDULER_NAME
CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}

# The Kubernetes scheduler's words (see the module docstring for where each comes from).
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"
# KAI's words for the same resource shortages.
KAI_POD_NUMBER_EXCEEDED = "node(s) pod number exceeded"
KAI_RESOURCE_NAMES = {GPU: "GPUs", CPU: "CPU cores", MEMORY: "memory"}


def taint_reason(taint: Mapping[str, Any]) -> str:
    return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value') or ''}}}"


def to_units(name: str, value: Any) -> float:
    """A parsed quantity (Decimal) in the units used here: cpu in millicores, everything else as is."""
    amount = float(value)
    return amount * 1000 if name == CPU else amount


UNKNOWN = object()  # a filter answer not evaluated yet

_QUANTITIES: dict[tuple[str, str], float] = {}
_REQUESTS: dict[bytes, tuple[dict[str, float], str]] = {}
_CACHE_LIMIT = 20_000


def _quantity(name: str, text: Any) -> float:
    key = (name, str(text))
    found = _QUANTITIES.get(key)
    if found is None:
        try:
            found = to_units(name, parse_quantity(text))
        except QuantityError:
            found = 0.0
        if len(_QUANTITIES) > _CACHE_LIMIT:
            _QUANTITIES.clear()
        _QUANTITIES[key] = found
    return found


def resource_list(values: Mapping[str, Any] | None) -> dict[str, float]:
    """A node's ``allocatable`` (or any ResourceList) in the units used here; unparsable entries are 0."""
    return {str(name): _quantity(str(name), text) for name, text in (values or {}).items()}


def requests_of(pod: Mapping[str, Any]) -> tuple[dict[str, float], str]:
    """The pod's requests in the units used here (``kube.requests.pod_requests``) and the error of a bad
    quantity; pods of one template share one answer (remembered by the spec fields it reads)."""
    spec = pod.get("spec") or {}
    if not isinstance(spec, Mapping):
        spec = {}
    key = orjson.dumps([
        [c.get("resources") for c in spec.get("containers") or [] if isinstance(c, Mapping)],
        [(c.get("resources"), c.get("restartPolicy")) for c in spec.get("initContainers") or []
         if isinstance(c, Mapping)],
        spec.get("overhead"), spec.get("resources")], option=orjson.OPT_SORT_KEYS)
    found = _REQUESTS.get(key)
    if found is None:
        try:
            found = ({name: to_units(name, value) for name, value in pod_requests(pod).items() if value}, "")
        except QuantityError as exc:
            found = ({}, str(exc))
        if len(_REQUESTS) > _CACHE_LIMIT:
            _REQUESTS.clear()
        _REQUESTS[key] = found
    return dict(found[0]), found[1]


# ---------------------------------------------------------------------------------------------------
# Snapshots of nodes and pods


@dataclass(slots=True)
class NodeInfo:
    name: str
    labels: dict[str, str]
    taints: list[dict[str, Any]]
    unschedulable: bool
    ready: bool
    allocatable: dict[str, float]
    created: str = ""
    taints_key: tuple = ()  # the taints as a hashable value: nodes with equal ones filter alike
    gpu_memory: float = 0.0  # MiB of one GPU (GPU feature discovery's nvidia.com/gpu.memory), 0: unknown

    @property
    def obj(self) -> dict[str, Any]:
        """The part of the Node the label and affinity helpers read."""
        return {"metadata": {"name": self.name, "labels": self.labels}}


def node_info(node: Mapping[str, Any]) -> NodeInfo:
    md = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
                if isinstance(c, Mapping))
    return NodeInfo(
        name=md.get("name", ""), labels=dict(md.get("labels") or {}),
        taints=[dict(t) for t in spec.get("taints") or [] if isinstance(t, Mapping)],
        unschedulable=bool(spec.get("unschedulable")), ready=ready,
        allocatable=resource_list(status.get("allocatable") or status.get("capacity")),
        created=md.get("creationTimestamp") or "",
        taints_key=tuple((t.get("key"), str(t.get("value") or ""), t.get("effect")) for t in spec.get("taints") or []
                         if isinstance(t, dict)),
        gpu_memory=_gpu_memory_label((md.get("labels") or {}).get(GPU_MEMORY_LABEL)),
    )


def _gpu_memory_label(value: Any) -> float:
    """KAI's reading of ``nvidia.com/gpu.memory`` (pkg/scheduler/api/node_info/node_info.go getNodeGpuMemory):
    MiB, floored to a multiple of 100; 0 when absent or not a number."""
    try:
        mib = int(str(value))
    except (TypeError, ValueError):
        return 0.0
    return float(mib - mib % 100) if mib > 0 else 0.0


def sharing_request(annotations: Mapping[str, str], requests: Mapping[str, float]) -> tuple[float, float, str]:
    """A KAI GPU-sharing request (NVIDIA/KAI-Scheduler docs/gpu-sharing/README.md): (``gpu-fraction``, a
    portion of one GPU in (0, 1]; ``gpu-memory``, MiB; the error of a bad value). (0, 0, "") for a pod that
    asks no shared GPU; a pod that also asks ``nvidia.com/gpu`` is refused, as KAI's admission does."""
    fraction_text = annotations.get(GPU_FRACTION_ANNOTATION)
    memory_text = annotations.get(GPU_MEMORY_ANNOTATION)
    if fraction_text is None and memory_text is None:
        return 0.0, 0.0, ""
    if requests.get(GPU, 0.0) > 0:
        return 0.0, 0.0, (f"pod has both {GPU} in its resources and the {GPU_FRACTION_ANNOTATION if fraction_text is not None else GPU_MEMORY_ANNOTATION} "
                          "annotation: only one of them may ask for GPUs")
    if fraction_text is not None:
        try:
            fraction = float(fraction_text)
        except ValueError:
            fraction = -1.0
        if not 0 < fraction <= 1:
            return 0.0, 0.0, (f"annotation {GPU_FRACTION_ANNOTATION}: {fraction_text!r} must be a number greater than "
                              "0 and at most 1")
        return fraction, 0.0, ""
    try:
        memory = float(int(str(memory_text)))
    except ValueError:
        memory = -1.0
    if memory <= 0:
        return 0.0, 0.0, f"annotation {GPU_MEMORY_ANNOTATION}: {memory_text!r} must be a whole number of MiB above 0"
    return 0.0, memory, ""


@dataclass(slots=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
    scheduler: str
    node: str  # spec.nodeName ("" while pending)
    phase: str
    requests: dict[str, float]
    priority: int | None  # spec.priority when the API server set it
    priority_class: str
    created: str
    owner: tuple[str, str, str, str] | None  # (apiVersion, kind, name, uid) of the controller owner
    constraints: dict[str, Any]  # the spec fields the filters read: nodeSelector, affinity, tolerations
    # Keys of the filter and score caches: pods with equal constraints get equal answers.
    filter_key: bytes = b""
    score_key: bytes = b""
    error: str = ""  # why the pod cannot be considered (a bad quantity), in the API server's words
    terminating: bool = False  # being deleted (``deletionTimestamp``): holds its node, is never placed
    # KAI GPU sharing: the annotations' ``gpu-fraction`` / ``gpu-memory`` (MiB), the shared GPU it is on
    # (``runai-gpu-group`` label) and its share of that GPU in GPU devices (the fraction; a memory request's
    # share of its node's GPU memory, set by the scheduler).
    gpu_fraction: float = 0.0
    gpu_memory: float = 0.0
    gpu_group: str = ""
    gpu_share: float = 0.0

    @property
    def shares_gpu(self) -> bool:
        return self.gpu_fraction > 0 or self.gpu_memory > 0

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def active(self) -> bool:
        return self.phase not in ("Succeeded", "Failed")

    @property
    def tolerations(self) -> list[dict[str, Any]]:
        return self.constraints.get("tolerations") or []

    @property
    def obj(self) -> dict[str, Any]:
        """The part of the Pod the label and affinity helpers read."""
        return {"spec": self.constraints}


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """The scheduling-relevant part of a Pod (the dicts it holds are the pod's own: read, never changed)."""
    md = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    node = spec.get("nodeName") or ""
    requests, error = requests_of(pod)
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    constraints: dict[str, Any] = {}
    if spec.get("nodeSelector"):
        constraints["nodeSelector"] = spec["nodeSelector"]
    if affinity:
        constraints["affinity"] = {"nodeAffinity": affinity}
    if spec.get("tolerations"):
        constraints["tolerations"] = spec["tolerations"]
    filter_key = score_key = b""
    if not node:  # only a pod waiting for a node is filtered and scored
        required = {k: v for k, v in constraints.items() if k != "affinity"}
        if affinity.get("requiredDuringSchedulingIgnoredDuringExecution"):
            required["required"] = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        filter_key = orjson.dumps(required, option=orjson.OPT_SORT_KEYS)
        score_key = orjson.dumps({"p": affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or [],
                                  "t": constraints.get("tolerations") or []}, option=orjson.OPT_SORT_KEYS)
    owner = None
    for ref in md.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            owner = (ref.get("apiVersion", ""), ref.get("kind", ""), ref.get("name", ""), ref.get("uid", ""))
            break
    priority = spec.get("priority")
    annotations = md.get("annotations") or {}
    # Only KAI reads the sharing annotations (another scheduler's pod asks what its resources say).
    fraction, memory, sharing_error = sharing_request(annotations, requests) \
        if spec.get("schedulerName") == KAI_SCHEDULER else (0.0, 0.0, "")
    return PodInfo(
        namespace=md.get("namespace") or "default", name=md.get("name", ""), uid=md.get("uid", ""),
        labels=md.get("labels") or {}, annotations=annotations,
        scheduler=spec.get("schedulerName") or "default-scheduler", node=node,
        phase=(pod.get("status") or {}).get("phase") or "Pending", requests=requests,
        priority=priority if type(priority) is int else None,
        priority_class=spec.get("priorityClassName") or "", created=md.get("creationTimestamp") or "",
        owner=owner, constraints=constraints, filter_key=filter_key, score_key=score_key, error=error or sharing_error,
        terminating=bool(md.get("deletionTimestamp")), gpu_fraction=fraction, gpu_memory=memory,
        gpu_group=(md.get("labels") or {}).get(GPU_GROUP_LABEL, ""), gpu_share=fraction,
    )


def priority_of(pod: PodInfo, classes: Mapping[str, int], default: int = 0) -> int:
    """The pod's priority: ``spec.priority`` (the API server's Priority admission sets it from the class),
    else the value of its PriorityClass, else ``default`` (the globalDefault class, or 0)."""
    if pod.priority is not None:
        return pod.priority
    return classes.get(pod.priority_class, default)


# ---------------------------------------------------------------------------------------------------
# Filters


def static_reason(pod: PodInfo, node: NodeInfo) -> str | None:
    """The first of NodeUnschedulable, TaintToleration and NodeAffinity that keeps the pod off the node
    (its reason), or None when all three admit it."""
    tolerations = pod.tolerations
    if node.unschedulable and not tolerations_tolerate(tolerations, UNSCHEDULABLE_TAINT):
        return REASON_UNSCHEDULABLE
    if node.taints:
        taint = first_untolerated_taint(node.taints, tolerations)
        if taint is not None:
            return taint_reason(taint)
    if pod.constraints.get("nodeSelector") or pod.constraints.get("affinity"):
        if not pod_matches_node(pod.obj, node.obj):
            return REASON_AFFINITY
    return None


def referenced(pod: PodInfo) -> tuple[tuple[str, ...], bool]:
    """The node label keys the pod's node selector and node affinity read, and whether they read the
    node's name (``matchFields``)."""
    keys = set((pod.constraints.get("nodeSelector") or {}).keys())
    by_name = False
    affinity = (pod.constraints.get("affinity") or {}).get("nodeAffinity") or {}
    terms = list(((affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms"))
                 or [])
    terms += [p.get("preference") for p in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
              if isinstance(p, dict)]
    for term in terms:
        if not isinstance(term, dict):
            continue
        for requirement in term.get("matchExpressions") or []:
            if isinstance(requirement, dict):
                keys.add(str(requirement.get("key")))
        if term.get("matchFields"):
            by_name = True
    return tuple(sorted(keys)), by_name


def prefer_no_schedule_count(pod: PodInfo, node: NodeInfo) -> int:
    """Taints with effect PreferNoSchedule the pod does not tolerate (the TaintToleration score)."""
    if not node.taints:
        return 0
    return len(untolerated_taints(node.taints, pod.tolerations, effects=("PreferNoSchedule",)))


def preferred_affinity(pod: PodInfo, node: NodeInfo) -> int:
    if not pod.constraints.get("affinity"):
        return 0
    return preferred_node_affinity_score(pod.obj, node.obj)


def resource_reasons(requests: Mapping[str, float], free: Mapping[str, float], free_pods: float,
                     *, kai: bool = False) -> list[str]:
    """Why the node's free resources do not fit the requests (empty: they fit), in the Kubernetes
    scheduler's words or, with ``kai``, in KAI's."""
    reasons: list[str] = []
    if free_pods < 1:
        reasons.append(KAI_POD_NUMBER_EXCEEDED if kai else REASON_TOO_MANY_PODS)
    order = (GPU, CPU, MEMORY) if kai else (CPU, MEMORY)
    for name in order:
        want = requests.get(name, 0.0)
        if want > 0 and want > free.get(name, 0.0) + 1e-9:
            reasons.append(kai_resource_reason(name) if kai else f"Insufficient {name}")
    for name in sorted(requests):
        if name in order or name == PODS:
            continue
        want = requests[name]
        if want > 0 and want > free.get(name, 0.0) + 1e-9:
            reasons.append(kai_resource_reason(name) if kai else f"Insufficient {name}")
    return reasons


def kai_resource_reason(name: str) -> str:
    return f"node(s) didn't have enough resources: {KAI_RESOURCE_NAMES.get(name, name)}"


def fits(requests: Mapping[str, float], free: Mapping[str, float], free_pods: float) -> bool:
    if free_pods < 1:
        return False
    for name, want in requests.items():
        if want > 0 and want > free.get(name, 0.0) + 1e-9:
            return False
    return True


# ---------------------------------------------------------------------------------------------------
# The cluster as the schedulers see it


class Cluster:
    """Nodes (in name order) with their free resources, and caches of the filters' answers per pod shape.

    ``used`` is what the active pods bound to each node request (any scheduler's pods); a scheduler
    :meth:`assume` s its own decisions as it goes, as the real schedulers' caches do.
    """

    def __init__(self, nodes: Sequence[NodeInfo], used: Mapping[str, Mapping[str, float]] | None = None,
                 pod_counts: Mapping[str, int] | None = None, *, caches: tuple[dict, dict] | None = None) -> None:
        """``caches``: the filter and score caches of an earlier Cluster over the same nodes (reused while
        no node changed)."""
        self.nodes = list(nodes)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.free: list[dict[str, float]] = []
        self.free_pods: list[float] = []
        used = used or {}
        pod_counts = pod_counts or {}
        for node in self.nodes:
            taken = used.get(node.name) or {}
            free = {name: value - taken.get(name, 0.0) for name, value in node.allocatable.items()}
            for name, value in taken.items():
                if name not in free:
                    free[name] = -value
            self.free.append(free)
            self.free_pods.append(node.allocatable.get(PODS, 110.0) - pod_counts.get(node.name, 0))
        self._static, self._scores = caches if caches is not None else ({}, {})

    @classmethod
    def from_free(cls, nodes: Sequence[NodeInfo], free: Mapping[str, Mapping[str, float]],
                  free_pods: Mapping[str, float], *, caches: tuple[dict, dict] | None = None) -> Cluster:
        """A Cluster from what is free on each node already (copied: the cluster's own to change)."""
        cluster = cls.__new__(cls)
        cluster.nodes = list(nodes)
        cluster.index = {n.name: i for i, n in enumerate(cluster.nodes)}
        cluster.free = [dict(free.get(n.name) or n.allocatable) for n in cluster.nodes]
        cluster.free_pods = [free_pods.get(n.name, n.allocatable.get(PODS, 110.0)) for n in cluster.nodes]
        cluster._static, cluster._scores = caches if caches is not None else ({}, {})
        return cluster

    @property
    def caches(self) -> tuple[dict, dict]:
        return self._static, self._scores

    def __len__(self) -> int:
        return len(self.nodes)

    def static_reasons(self, pod: PodInfo) -> list[str | None]:
        """Per node, the reason the filters keep the pod off it (None: admitted), once per pod shape. The
        answer depends on a node only through the labels the pod's selector and affinity name, its taints,
        its cordon (and its name, for ``matchFields``): nodes alike in those are evaluated once."""
        found = self._static.get(pod.filter_key)
        if found is None:
            keys, by_name = referenced(pod)
            memo: dict[tuple, str | None] = {}
            found = []
            for node in self.nodes:
                labels = node.labels
                signature = (tuple(labels.get(k) for k in keys), node.taints_key, node.unschedulable,
                             node.name if by_name else "")
                reason = memo.get(signature, UNKNOWN)
                if reason is UNKNOWN:
                    reason = memo[signature] = static_reason(pod, node)
                found.append(reason)
            self._static[pod.filter_key] = found
        return found

    def static(self, pod: PodInfo, reasons: list, index: int) -> str | None:
        """``reasons[index]`` (from :meth:`static_reasons`), evaluating it when still unknown."""
        reason = reasons[index]
        if reason is UNKNOWN:
            reason = reasons[index] = static_reason(pod, self.nodes[index])
        return reason

    def soft_scores(self, pod: PodInfo) -> list[tuple[int, int]]:
        """Per node, (preferred node affinity weight, untolerated PreferNoSchedule taints); nodes alike in
        what the pod reads are evaluated once."""
        found = self._scores.get(pod.score_key)
        if found is None:
            keys, by_name = referenced(pod)
            memo: dict[tuple, tuple[int, int]] = {}
            found = []
            for node in self.nodes:
                labels = node.labels
                signature = (tuple(labels.get(k) for k in keys), node.taints_key, node.name if by_name else "")
                score = memo.get(signature)
                if score is None:
                    score = memo[signature] = (preferred_affinity(pod, node), prefer_no_schedule_count(pod, node))
                found.append(score)
            self._scores[pod.score_key] = found
        return found

    def assume(self, index: int, requests: Mapping[str, float], sign: int = 1) -> None:
        """Take (``sign=1``) or give back (``-1``) a pod's requests on node ``index``."""
        free = self.free[index]
        for name, value in requests.items():
            free[name] = free.get(name, 0.0) - sign * value
        self.free_pods[index] -= sign

    def fits(self, index: int, requests: Mapping[str, float]) -> bool:
        return fits(requests, self.free[index], self.free_pods[index])


def usage(pods: Iterable[PodInfo]) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """What the active pods bound to each node request, and how many they are."""
    used: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for pod in pods:
        if not pod.node or not pod.active:
            continue
        into = used.setdefault(pod.node, {})
        for name, value in pod.requests.items():
            into[name] = into.get(name, 0.0) + value
        counts[pod.node] = counts.get(pod.node, 0) + 1
    return used, counts
