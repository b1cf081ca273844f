"""Karpenter's `karpenter.sh/v1` NodePool and NodeClaim objects read and explained (no Django).

Field names, enums and formats follow Karpenter's published CRDs (kube/crds/karpenter.sh_*.yaml,
from kubernetes-sigs/karpenter) and its documentation (concepts/nodepools, concepts/nodeclaims,
concepts/disruption).
"""
from __future__ import annotations

from decimal import Decimal
from kube import gpu as kube_gpu
from kube import wellknown
from typing import Any, Iterable, Mapping

from kube.quantity import QuantityError, parse_quantity
from kube.requests import GPU as GPU_RESOURCE

GROUP, VERSION = wellknown.KARPENTER_GROUP, wellknown.KARPENTER_VERSION
API_VERSION = f"{GROUP}/{VERSION}"
# Set by Karpenter on every node (and NodeClaim) it launches for a NodePool: a console pool whose label is
# `karpenter.sh/nodepool=<name>` is backed by that NodePool.
NODEPOOL_LABEL = wellknown.KARPENTER_NODEPOOL_LABEL
GPU = GPU_RESOURCE

# NodePool status conditions (status.conditions[].type) the console shows, in this order.
NODEPOOL_CONDITIONS = ("Ready", "ValidationSucceeded", "NodeClassReady", "NodeRegistrationHealthy")


def quantity(value: Any) -> Decimal | None:
    """A quantity of a NodePool or NodeClaim read for display: None when it is none (the API server refuses
    such objects, so only a hand-made one shows it)."""
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def condition(conditions: Iterable[Mapping[str, Any]] | None, kind: str) -> Mapping[str, Any] | None:
    for item in conditions or ():
        if isinstance(item, Mapping) and item.get("type") == kind:
            return item
    return None


def condition_status(conditions: Iterable[Mapping[str, Any]] | None, kind: str) -> str:
    found = condition(conditions, kind)
    return str(found.get("status") or "") if found else ""


def nodeclaim_phase(conditions: Iterable[Mapping[str, Any]] | None, deleting: bool = False) -> str:
    """Where a NodeClaim is in its life, from the conditions Karpenter sets: Launched (the cloud
    provider created the instance), Registered (its Node joined), Initialized (the Node is ready with
    its resources), then Drifted / Consolidatable (Empty in older releases) when Karpenter may disrupt it;
    Terminating once it is being deleted."""
    def true(kind: str) -> bool:
        return condition_status(conditions, kind) == "True"

    if deleting or true("InstanceTerminating"):
        return "Terminating"
    if true("Drifted"):
        return "Drifted"
    if true("Empty"):
        return "Empty"
    if true("Consolidatable"):
        return "Consolidatable"
    if true("Initialized"):
        return "Initialized"
    if true("Registered"):
        return "Registered"
    if true("Launched"):
        return "Launched"
    if condition_status(conditions, "Launched") == "False":
        return "LaunchFailed"
    return "Launching"


def single_value(requirements: Iterable[Mapping[str, Any]] | None, key: str) -> str:
    """The value of an `In` requirement on `key` with exactly one value ('' otherwise)."""
    for item in requirements or ():
        if isinstance(item, Mapping) and item.get("key") == key and item.get("operator") == "In":
            values = item.get("values") or []
            if len(values) == 1:
                return str(values[0])
    return ""


# ---------------------------------------------------------------------------------------------------
# The blueprint in words

WELL_KNOWN_KEYS = {
    "node.kubernetes.io/instance-type": "Instance type",
    "karpenter.k8s.aws/instance-family": "Instance family",
    "karpenter.k8s.aws/instance-category": "Instance category",
    "karpenter.k8s.aws/instance-generation": "Instance generation",
    "karpenter.k8s.aws/instance-gpu-name": "GPU name",
    "karpenter.k8s.aws/instance-gpu-count": "GPU count",
    "karpenter.k8s.aws/instance-gpu-manufacturer": "GPU manufacturer",
    "karpenter.k8s.aws/instance-gpu-memory": "GPU memory (MiB)",
    "karpenter.k8s.aws/instance-cpu": "vCPUs",
    "karpenter.k8s.aws/instance-memory": "Memory (MiB)",
    kube_gpu.LABEL_GPU_PRODUCT: "GPU type",
    kube_gpu.LABEL_GPU_COUNT: "GPU count",
    wellknown.KARPENTER_CAPACITY_TYPE_LABEL: "Capacity type",
    "topology.kubernetes.io/zone": "Zone",
    "topology.kubernetes.io/region": "Region",
    "kubernetes.io/arch": "Architecture",
    "kubernetes.io/os": "Operating system",
}

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")


def requirement_words(requirement: Mapping[str, Any]) -> str:
    """One requirement as a sentence: `karpenter.sh/capacity-type In [spot]` -> "Capacity type is spot"."""
    key = str(requirement.get("key") or "")
    name = WELL_KNOWN_KEYS.get(key, key)
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    listed = ", ".join(values)
    if operator == "In":
        text = f"{name} is {listed}" if len(values) == 1 else f"{name} is one of {listed}"
    elif operator == "NotIn":
        text = f"{name} is not {listed}" if len(values) == 1 else f"{name} is none of {listed}"
    elif operator == "Exists":
        text = f"{name} is set (any value)"
    elif operator == "DoesNotExist":
        text = f"{name} is not set"
    elif operator == "Gt":
        text = f"{name} is greater than {listed}"
    elif operator == "Lt":
        text = f"{name} is less than {listed}"
    elif operator == "Gte":
        text = f"{name} is at least {listed}"
    elif operator == "Lte":
        text = f"{name} is at most {listed}"
    else:
        text = f"{name} {operator} {listed}".strip()
    min_values = requirement.get("minValues")
    if min_values:
        text += f" (at least {min_values} different values)"
    return text

BUDGET_REASONS = ("Underutilized", "Empty", "Drifted")
