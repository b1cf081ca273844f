"""The sync's registrations of Karpenter's NodePools and NodeClaims (raw JSON -> row values).

`nodepools.sync` informs every registered resource the same way (list, watch, mark and sweep); a
registration marked `optional` whose resource the cluster does not serve (Karpenter's CRDs not
installed: 404) lists as nothing and is looked for again later, so the cluster stays connected.
"""
from __future__ import annotations

from kube import wellknown
from kube.gpu import gpu_devices
from typing import Any

from nodepools.sync.resources import Resource
from nodepools.sync.resources import json_list as _list
from nodepools.sync.resources import json_object as _object
from nodepools.sync.resources import register
from provisioning import karpenter
from provisioning.models import KarpenterNodePool, NodeClaim

NODEPOOLS, NODECLAIMS = "karpenter_nodepools", "karpenter_nodeclaims"

NODEPOOL_FIELDS = (
    "uid", "spec", "status", "weight", "limits", "gpu_limit", "resources", "gpus_provisioned", "node_count",
    "conditions", "ready", "consolidation_policy", "node_class", "created_in_cluster", "resource_version",
)
NODECLAIM_FIELDS = (
    "uid", "nodepool", "phase", "node_name", "provider_id", "instance_type", "capacity_type", "zone", "labels",
    "requirements", "taints", "requests", "capacity", "allocatable", "gpus", "conditions", "created_in_cluster",
    "resource_version",
)


def nodepool_values(obj: dict[str, Any]) -> tuple[list, None]:
    """The stored values of a NodePool (NODEPOOL_FIELDS order); raises on a malformed object."""
    metadata = obj["metadata"]
    spec = _object(obj.get("spec"), "spec")
    status = _object(obj.get("status"), "status")
    limits = _object(spec.get("limits"), "spec.limits")
    resources = _object(status.get("resources"), "status.resources")
    conditions = _list(status.get("conditions"), "status.conditions")
    template = _object(_object(spec.get("template"), "spec.template").get("spec"), "spec.template.spec")
    disruption = _object(spec.get("disruption"), "spec.disruption")
    weight = spec.get("weight")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int)):
        raise TypeError("spec.weight must be an integer")
    return [
        metadata.get("uid") or "", spec, status, weight, limits, gpu_devices(limits),
        resources, gpu_devices(resources) or 0, int(status.get("nodes") or 0), conditions,
        karpenter.condition_status(conditions, "Ready"), str(disruption.get("consolidationPolicy") or ""),
        str(_object(template.get("nodeClassRef"), "nodeClassRef").get("name") or ""),
        metadata.get("creationTimestamp"), str(metadata.get("resourceVersion") or ""),
    ], None


def nodeclaim_values(obj: dict[str, Any]) -> tuple[list, None]:
    """The stored values of a NodeClaim (NODECLAIM_FIELDS order); raises on a malformed object."""
    metadata = obj["metadata"]
    labels = _object(metadata.get("labels"), "metadata.labels")
    spec = _object(obj.get("spec"), "spec")
    status = _object(obj.get("status"), "status")
    conditions = _list(status.get("conditions"), "status.conditions")
    requests = _object(_object(spec.get("resources"), "spec.resources").get("requests"), "spec.resources.requests")
    capacity = _object(status.get("capacity"), "status.capacity")
    allocatable = _object(status.get("allocatable"), "status.allocatable")
    requirements = _list(spec.get("requirements"), "spec.requirements")
    gpus = gpu_devices(capacity)
    if gpus is None:
        gpus = gpu_devices(requests)
    return [
        metadata.get("uid") or "", labels.get(karpenter.NODEPOOL_LABEL) or "",
        karpenter.nodeclaim_phase(conditions, deleting=bool(metadata.get("deletionTimestamp"))),
        str(status.get("nodeName") or ""), str(status.get("providerID") or ""),
        labels.get("node.kubernetes.io/instance-type") or karpenter.single_value(requirements, "node.kubernetes.io/instance-type"),
        labels.get(wellknown.KARPENTER_CAPACITY_TYPE_LABEL) or karpenter.single_value(requirements, wellknown.KARPENTER_CAPACITY_TYPE_LABEL),
        labels.get("topology.kubernetes.io/zone") or karpenter.single_value(requirements, "topology.kubernetes.io/zone"),
        labels, requirements, _list(spec.get("taints"), "spec.taints"), requests, capacity, allocatable,
        gpus or 0, conditions, metadata.get("creationTimestamp"), str(metadata.get("resourceVersion") or ""),
    ], None


def register_resources() -> None:
    register(Resource(
        name=NODEPOOLS, kind="NodePool", group=karpenter.GROUP, version=karpenter.VERSION, plural="nodepools",
        namespaced=False, model=KarpenterNodePool, fields=NODEPOOL_FIELDS, values=nodepool_values,
        json_fields=("spec", "status", "limits", "resources", "conditions"), datetime_fields=("created_in_cluster",),
        optional=True,
    ))
    register(Resource(
        name=NODECLAIMS, kind="NodeClaim", group=karpenter.GROUP, version=karpenter.VERSION, plural="nodeclaims",
        namespaced=False, model=NodeClaim, fields=NODECLAIM_FIELDS, values=nodeclaim_values,
        json_fields=("labels", "requirements", "taints", "requests", "capacity", "allocatable", "conditions"),
        datetime_fields=("created_in_cluster",), optional=True,
    ))


__all__ = ["NODECLAIMS", "NODEPOOLS", "nodeclaim_values", "nodepool_values", "register_resources"]
