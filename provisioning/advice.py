"""Best-practice advice for a node pool (docs/using/platform-admin.md#node-pools), each with its fix in one
sentence. Pure functions over plain facts (no Django): the pool's nodes (labels, taints, GPU facts), the
pods on them, the Karpenter NodePool backing the pool (raw JSON, if any) and the cluster's PriorityClasses.

- ``untainted_gpu_nodes``: GPU nodes without a ``NoSchedule`` taint of key ``nvidia.com/gpu`` (for a
  Karpenter-backed pool also its NodePool's template, which every node it launches gets);
- ``mixed_gpu_types``: the pool's GPU nodes are of more than one GPU type (``nvidia.com/gpu.product``);
- ``missing_feature_labels``: GPU nodes missing NVIDIA GPU feature discovery labels;
- ``spot_non_preemptible``: a spot pool (capacity type ``spot``) running non-preemptible work (priority ≥ 100);
- ``no_priority_classes``: the cluster has no PriorityClass of its own (the built-in ``system-*`` ones aside).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from kube import gpu as kube_gpu
from kube import wellknown
from typing import Any, Iterable, Mapping, Sequence

GPU_TAINT_KEY = kube_gpu.GPU_RESOURCE
CAPACITY_TYPE_LABEL = wellknown.KARPENTER_CAPACITY_TYPE_LABEL
NON_PREEMPTIBLE_FROM = 100
# The labels NVIDIA GPU feature discovery puts on every GPU node, which the console reads (docs/concepts.md#not-ready).
FEATURE_LABELS = (kube_gpu.LABEL_GPU_PRESENT, kube_gpu.LABEL_GPU_PRODUCT, kube_gpu.LABEL_GPU_COUNT,
                  kube_gpu.LABEL_GPU_MEMORY, kube_gpu.LABEL_GPU_FAMILY)
SYSTEM_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")
SHOWN = 5  # names listed in a piece of advice


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, Any]] = ()
    is_gpu_node: bool = False
    gpu_product: str = ""

    @property
    def capacity_type(self) -> str:
        return str(self.labels.get(CAPACITY_TYPE_LABEL) or "")


@dataclass(frozen=True)
class PodInfo:
    namespace: str
    name: str
    priority: int
    node: str = ""
    priority_class: str = ""


@dataclass(frozen=True)
class Advice:
    code: str
    problem: str
    fix: str
    subjects: tuple[str, ...] = ()


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def has_gpu_taint(taints: Iterable[Mapping[str, Any]]) -> bool:
    return any(isinstance(t, Mapping) and t.get("key") == GPU_TAINT_KEY and t.get("effect") == "NoSchedule"
               for t in taints or [])


def _template_spec(nodepool: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (((nodepool or {}).get("spec") or {}).get("template") or {}).get("spec") or {}


def _allows_gpus(nodepool: Mapping[str, Any] | None) -> bool:
    """A NodePool launches GPU nodes when its requirements or limits name GPUs."""
    if not nodepool:
        return False
    limits = ((nodepool.get("spec") or {}).get("limits") or {})
    if str(limits.get(GPU_TAINT_KEY, "")) not in ("", "0"):
        return True
    keys = {r.get("key") for r in _template_spec(nodepool).get("requirements") or [] if isinstance(r, Mapping)}
    return bool(keys & {"karpenter.k8s.aws/instance-gpu-name", "karpenter.k8s.aws/instance-gpu-count",
                        "karpenter.k8s.aws/instance-gpu-manufacturer"})


def capacity_types(nodepool: Mapping[str, Any] | None) -> set[str] | None:
    """The capacity types a NodePool may launch (None: not constrained)."""
    for req in _template_spec(nodepool).get("requirements") or []:
        if isinstance(req, Mapping) and req.get("key") == CAPACITY_TYPE_LABEL and req.get("operator") == "In":
            return {str(v) for v in req.get("values") or []}
    labels = ((((nodepool or {}).get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
    if CAPACITY_TYPE_LABEL in labels:
        return {str(labels[CAPACITY_TYPE_LABEL])}
    return None


def untainted_gpu_nodes(nodes: Sequence[NodeInfo], nodepool: Mapping[str, Any] | None = None) -> Advice | None:
    bare = [n.name for n in nodes if n.is_gpu_node and not has_gpu_taint(n.taints)]
    template_bare = nodepool is not None and _allows_gpus(nodepool) and not has_gpu_taint(
        _template_spec(nodepool).get("taints") or [])
    if not bare and not template_bare:
        return None
    where = []
    if bare:
        where.append(f"{len(bare)} GPU node{'s' if len(bare) != 1 else ''} ({_names(bare)})")
    if template_bare:
        where.append(f"the nodes NodePool {nodepool['metadata']['name']} launches")
    return Advice(
        "untainted_gpu_nodes", f"No NoSchedule GPU taint on {' and '.join(where)}: any pod may land there and "
                               "waste the GPUs.",
        "Taint the pool's GPU nodes nvidia.com/gpu=true:NoSchedule (for Karpenter in the NodePool's "
        "spec.template.spec.taints) so that only pods tolerating it are scheduled there.", tuple(bare))


def mixed_gpu_types(nodes: Sequence[NodeInfo]) -> Advice | None:
    types: dict[str, list[str]] = {}
    for n in nodes:
        if n.is_gpu_node and n.gpu_product:
            types.setdefault(n.gpu_product, []).append(n.name)
    if len(types) < 2:
        return None
    shown = ", ".join(f"{t} ({len(v)} node{'s' if len(v) != 1 else ''})" for t, v in sorted(types.items()))
    return Advice(
        "mixed_gpu_types", f"The pool's nodes mix GPU types: {shown}; a workload may get a GPU it was not sized for.",
        "Split the pool so that each pool holds one GPU type (select it by nvidia.com/gpu.product or, for "
        "Karpenter, a karpenter.k8s.aws/instance-gpu-name requirement).", tuple(sorted(types)))


def missing_feature_labels(nodes: Sequence[NodeInfo]) -> Advice | None:
    missing = {n.name: [k for k in FEATURE_LABELS if k not in n.labels] for n in nodes if n.is_gpu_node}
    missing = {k: v for k, v in missing.items() if v}
    if not missing:
        return None
    labels = sorted({label for v in missing.values() for label in v})
    names = sorted(missing)
    return Advice(
        "missing_feature_labels", f"GPU nodes labelled inconsistently: {len(names)} GPU node"
                                  f"{'s' if len(names) != 1 else ''} ({_names(names)}) lack GPU feature "
                                  f"discovery labels ({', '.join(labels)}).",
        "Run NVIDIA GPU feature discovery (the GPU Operator's gpu-feature-discovery) on every GPU node so that "
        "each carries nvidia.com/gpu.product, .count, .memory and .family.", tuple(names))


def is_spot_pool(nodes: Sequence[NodeInfo], nodepool: Mapping[str, Any] | None = None) -> bool:
    allowed = capacity_types(nodepool) if nodepool is not None else None
    if allowed is not None and "spot" in allowed:
        return True
    return any(n.capacity_type == "spot" for n in nodes)


def spot_non_preemptible(nodes: Sequence[NodeInfo], pods: Sequence[PodInfo],
                         nodepool: Mapping[str, Any] | None = None) -> Advice | None:
    if not is_spot_pool(nodes, nodepool):
        return None
    allowed = capacity_types(nodepool) if nodepool is not None else None
    spot_nodes = {n.name for n in nodes if n.capacity_type == "spot"}
    every_node = allowed is not None and "spot" in allowed  # the NodePool may replace any node by spot
    critical = sorted(f"{p.namespace}/{p.name}" for p in pods
                      if p.priority >= NON_PREEMPTIBLE_FROM and (every_node or p.node in spot_nodes))
    if not critical:
        return None
    return Advice(
        "spot_non_preemptible", f"A spot pool serves {len(critical)} non-preemptible workload"
                                f"{'s' if len(critical) != 1 else ''} (priority ≥ {NON_PREEMPTIBLE_FROM}: "
                                f"{_names(critical)}); a spot interruption takes them down.",
        "Move non-preemptible workloads to an on-demand or reserved pool (or limit this pool's "
        "karpenter.sh/capacity-type to on-demand) and keep spot for preemptible work.", tuple(critical))


def no_priority_classes(priority_classes: Iterable[Mapping[str, Any]] | None) -> Advice | None:
    """None also when the PriorityClasses could not be read (`priority_classes` None)."""
    if priority_classes is None:
        return None
    own = [pc for pc in priority_classes
           if (pc.get("metadata") or {}).get("name") not in SYSTEM_PRIORITY_CLASSES]
    if own:
        return None
    return Advice(
        "no_priority_classes", "The cluster has no PriorityClasses (besides the system ones): critical inference "
                               "waits behind batch jobs and nothing tells preemptible work from the rest.",
        "Create PriorityClasses (e.g. train 50, build-preemptible 75, build 100, inference 125) and set "
        "priorityClassName on every workload.")


def pool_advice(*, nodes: Sequence[NodeInfo], pods: Sequence[PodInfo], nodepool: Mapping[str, Any] | None = None,
                priority_classes: Iterable[Mapping[str, Any]] | None = None) -> list[Advice]:
    """Every piece of advice that holds for the pool, in the seed's order."""
    found = [
        untainted_gpu_nodes(nodes, nodepool),
        mixed_gpu_types(nodes),
        missing_feature_labels(nodes),
        spot_non_preemptible(nodes, pods, nodepool),
        no_priority_classes(priority_classes),
    ]
    return [a for a in found if a is not None]
