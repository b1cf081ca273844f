"""Ready, allocated and free GPUs: the one definition every page, export and API shows.

In GPU-equivalents (kube.gpu: a MIG slice its share of the GPU, a replica 1/replicas, a fraction its value):

- a node's GPUs are **ready** when the console calls the node Ready (`Node.status`, its own status with
  reasons: a cordoned node, or one missing an NVIDIA operand, is not ready); ready = its allocatable;
- **allocated** is what its active pods hold (`Node.usage_gpus`, kept by the database from the pods);
- **free** = ready − allocated on a ready node, never below zero; a node that is not ready has none;
- what pods hold on a node that is not ready is **allocated apart** (`gpu_allocated_not_ready`): it is shown,
  and never subtracted from another node's free GPUs. A node's `gpu_allocated` is all its pods hold; a
  pool's is what they hold on its ready nodes, the rest is the pool's `gpu_allocated_not_ready`.

A pool's figures are the sums over its nodes of the same node figures (`pool_gpu_totals`, one grouped query),
so that a pool's free GPUs are the sum of its nodes' Free column, and "Will it fit?" places pods on exactly
those free GPUs. Physical GPUs (`gpu_capacity`) and their memory count once, however the GPUs are shared.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import models
from django.db.models import Case, F, Q, Sum, Value, When
from django.db.models.functions import Coalesce, Greatest

from nodepools.models import NodeStatus

ZERO = Decimal(0)
GPU_FIELD = models.DecimalField(max_digits=14, decimal_places=3)

# The figures a node or a pool carries (attributes set by `node_attach` / `pool_gpu_totals`).
NODE_FIGURES = ("gpu_ready", "gpu_allocated", "gpu_free", "gpu_allocated_not_ready")
POOL_FIGURES = ("gpu_devices", "gpu_total", "gpu_ready", "gpu_allocated", "gpu_allocated_not_ready", "gpu_free",
                "gpu_memory_total_mib")


def is_ready(status: str) -> bool:
    """The node's GPUs are ready: the console calls the node Ready."""
    return status == NodeStatus.READY


def node_figures(status: str, allocatable: Any, allocated: Any) -> dict[str, Decimal]:
    """(ready, allocated, free, allocated apart) of one node from its status, allocatable GPU-equivalents and
    what its active pods hold."""
    allocatable = Decimal(allocatable or 0)
    allocated = Decimal(allocated or 0)
    if is_ready(status):
        return {"gpu_ready": allocatable, "gpu_allocated": allocated,
                "gpu_free": max(allocatable - allocated, ZERO), "gpu_allocated_not_ready": ZERO}
    return {"gpu_ready": ZERO, "gpu_allocated": allocated, "gpu_free": ZERO, "gpu_allocated_not_ready": allocated}


def node_attach(node: Any, allocated: Any) -> Any:
    """Set `node_figures` on a Node instance (with what its pods hold)."""
    for name, value in node_figures(node.status, node.gpu_allocatable, allocated).items():
        setattr(node, name, value)
    return node


def node_free(status: str, allocatable: Any, allocated: Any) -> Decimal:
    return node_figures(status, allocatable, allocated)["gpu_free"]


# ---------------------------------------------------------------------------------------------------
# The same, as SQL over Node rows (usage_gpus: what the node's active pods hold)

READY_Q = Q(status=NodeStatus.READY)


def ready_expr(prefix: str = "") -> Case:
    return Case(When(Q(**{f"{prefix}status": NodeStatus.READY}), then=F(f"{prefix}gpu_allocatable")),
                default=Value(ZERO), output_field=GPU_FIELD)


def free_expr(prefix: str = "", allocated: Any = None) -> Case:
    used = allocated if allocated is not None else F(f"{prefix}usage_gpus")
    return Case(When(Q(**{f"{prefix}status": NodeStatus.READY}),
                     then=Greatest(F(f"{prefix}gpu_allocatable") - used, Value(ZERO), output_field=GPU_FIELD)),
                default=Value(ZERO), output_field=GPU_FIELD)


def allocated_ready_expr(prefix: str = "") -> Case:
    return Case(When(Q(**{f"{prefix}status": NodeStatus.READY}), then=F(f"{prefix}usage_gpus")),
                default=Value(ZERO), output_field=GPU_FIELD)


def allocated_not_ready_expr(prefix: str = "") -> Case:
    return Case(When(~Q(**{f"{prefix}status": NodeStatus.READY}), then=F(f"{prefix}usage_gpus")),
                default=Value(ZERO), output_field=GPU_FIELD)


def pool_gpu_totals(prefix: str = "") -> dict[str, Any]:
    """Aggregates over Node rows (grouped by pool, or a pool's nodes): physical GPUs (`gpu_devices`),
    allocatable (`gpu_total`), ready, allocated on ready nodes, allocated apart on nodes not ready, free, and
    physical GPU memory (each physical GPU's memory once)."""
    p = prefix
    return {
        "gpu_devices": Sum(f"{p}gpu_capacity"),
        "gpu_total": Sum(f"{p}gpu_allocatable"),
        "gpu_ready": Sum(ready_expr(p)),
        "gpu_allocated": Sum(allocated_ready_expr(p)),
        "gpu_allocated_not_ready": Sum(allocated_not_ready_expr(p)),
        "gpu_free": Sum(free_expr(p)),
        "gpu_memory_total_mib": Sum(F(f"{p}gpu_capacity") * Coalesce(f"{p}gpu_memory_mib", 0)),
    }


def pool_defaults() -> dict[str, Any]:
    """The figures of a pool without nodes."""
    return {"gpu_devices": 0, "gpu_total": ZERO, "gpu_ready": ZERO, "gpu_allocated": ZERO,
            "gpu_allocated_not_ready": ZERO, "gpu_free": ZERO, "gpu_memory_total_mib": 0}


def pool_figures(nodes: list[tuple[str, Any, Any, int, int | None]]) -> dict[str, Any]:
    """`pool_gpu_totals` in Python over (status, allocatable, allocated, physical, memory MiB) of each node:
    what a test or a page holding the nodes already computes, the same way."""
    out = pool_defaults()
    for status, allocatable, allocated, physical, memory in nodes:
        figures = node_figures(status, allocatable, allocated)
        out["gpu_devices"] += int(physical or 0)
        out["gpu_total"] += Decimal(allocatable or 0)
        for name in ("gpu_ready", "gpu_free", "gpu_allocated_not_ready"):
            out[name] += figures[name]
        # A node not ready: its pods' GPUs are apart, not in the pool's allocated (of ready nodes).
        out["gpu_allocated"] += figures["gpu_allocated"] - figures["gpu_allocated_not_ready"]
        out["gpu_memory_total_mib"] += int(physical or 0) * int(memory or 0)
    return out


# ---------------------------------------------------------------------------------------------------
# How a node shares its GPUs, and what of each share its pods use

def node_sharing(sharing: dict[str, Any] | None, requests: list[dict[str, Any]], *, physical: int = 0) -> dict[str, Any]:
    """A node's sharing (`Node.gpu_sharing`) with what its active pods use (their `Pod.gpu_request`): the
    exposure, replicas, MIG slices by profile (count, allocatable, allocated, memory per slice, share of a
    GPU), the replicas in use, and KAI fractions in use (pods, GPU-equivalents). Pure: the caller reads the
    pods (`nodepools.selectors.nodes_attach_sharing`, one query for a page of nodes)."""
    from kube import gpu as kube_gpu  # (Django-free arithmetic)

    sharing = sharing or {}
    exposure = sharing.get("exposure") or (kube_gpu.WHOLE if physical else kube_gpu.NONE)
    used: dict[str, int] = {}
    fraction_pods, fraction_gpus = 0, Decimal(0)
    for record in requests:
        demand = kube_gpu.request_from_record(record)
        for name, count in demand.resources.items():
            used[name] = used.get(name, 0) + count
        if demand.kind in ("fraction", "memory"):
            fraction_pods += 1
            fraction_gpus += demand.gpus
    slices = [{"profile": s.get("profile"), "resource": s.get("resource"), "count": s.get("capacity", 0),
               "allocatable": s.get("allocatable", 0), "allocated": used.get(s.get("resource"), 0),
               "memory_mib": s.get("memory_mib"),
               "share": kube_gpu.to_decimal(kube_gpu.fraction_of(s.get("share", "0")))}
              for s in sharing.get("slices") or ()]
    replicas = int(sharing.get("replicas") or 1)
    shared = exposure in (kube_gpu.TIME_SLICING, kube_gpu.MPS)
    return {
        "exposure": exposure,
        "replicas": replicas,
        "sharing_strategy": sharing.get("sharing_strategy", ""),
        "mig_strategy": sharing.get("mig_strategy", ""),
        "mig_config": sharing.get("mig_config", ""),
        "mig_config_state": sharing.get("mig_config_state", ""),
        "slices": slices,
        "replicas_total": (physical * replicas) if shared else None,
        "replicas_in_use": (used.get(kube_gpu.GPU_RESOURCE, 0) + used.get(kube_gpu.GPU_SHARED_RESOURCE, 0))
        if shared else None,
        "fractions_in_use": fraction_pods,
        "fraction_gpus": fraction_gpus,
    }
