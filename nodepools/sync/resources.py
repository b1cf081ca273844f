"""What the sync mirrors: one `Resource` registration per Kubernetes resource.

A registration says where the resource lives (group/version/resource, namespaced or not), how an object
is keyed (`key`), what row values it stores (`values`: raw JSON -> values in `fields` order, plus facts
the derived state needs), how those values are hashed (`hash`: an object whose stored values did not
change is not rewritten) and which model/table they go to. Informers, the mirror and the writer are
generic over registrations: the next resource (Queues, ClusterQueues, Karpenter NodePools, Jobs) is a
`register(Resource(...))`, not a copy of the code.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

import orjson
from django.utils.dateparse import parse_datetime

from common import caches
from kube import gpu as kube_gpu, owners
from nodepools import kube
from nodepools.models import Node, Pod


def name_key(obj: dict[str, Any]) -> str:
    name = obj["metadata"]["name"]
    if not isinstance(name, str) or not name:
        raise TypeError("metadata.name must be a non-empty string")
    return name


def namespaced_key(obj: dict[str, Any]) -> tuple[str, str]:
    metadata = obj["metadata"]
    namespace, name = metadata["namespace"], metadata["name"]
    if not isinstance(namespace, str) or not isinstance(name, str) or not namespace or not name:
        raise TypeError("metadata.namespace and metadata.name must be non-empty strings")
    return namespace, name


def values_hash(values: list) -> int:
    # resourceVersion (last) is left out: an object whose stored fields did not change is not rewritten.
    return hash(orjson.dumps(values[:-1], default=str))


def when(value: str | None) -> datetime | None:
    return parse_datetime(value) if value else None


def json_object(value: Any, what: str) -> dict:
    """A field of a raw object that must be an object (absent: empty); raises naming it otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be an object")
    return value


def json_list(value: Any, what: str) -> list:
    """A field of a raw object that must be a list (absent: empty); raises naming it otherwise."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"{what} must be a list")
    return value


@dataclass(frozen=True)
class Resource:
    """How one Kubernetes resource is listed, watched, keyed, hashed and stored."""

    name: str  # the informer's and the mirror's name for it, e.g. "pods"
    kind: str  # the object kind, for messages ("Pod")
    group: str  # "" for the core API
    version: str
    plural: str  # the resource in the URL
    namespaced: bool
    model: Any  # the Django model its rows go to (a `cluster` FK + key fields + `fields`, with `uid` and `resource_version`)
    fields: tuple[str, ...]  # model fields filled from `values`, in order; resource_version last
    values: Callable[[dict], tuple[list, Any]]  # raw object -> (row values, facts for derived state)
    key: Callable[[dict], Any] = None  # raw object -> key; default: name, or (namespace, name)
    hash: Callable[[list], int] = values_hash
    json_fields: tuple[str, ...] = ()  # stored as JSON
    datetime_fields: tuple[str, ...] = ()  # RFC 3339 strings in `values`
    extra: dict = field(default_factory=dict, compare=False)
    # A resource some clusters do not serve (a CRD, e.g. Karpenter's): a 404 on its list means "none here",
    # not an error; the informer looks for it again every `absent_recheck` seconds (SyncOptions).
    optional: bool = False
    # Only the objects this field selector selects (`?fieldSelector=`), e.g. the Events of one kind of object.
    field_selector: str = ""
    # Rows that outlive their object (a workload's history): `retire(cluster_id, keys, now)` marks the rows of
    # these gone objects instead of deleting them; `live` (a filter) says which stored rows are still in
    # the cluster (the others are not swept again). `written(cluster_id, keys, now)` runs after rows of
    # these keys were written (e.g. to note what changed on a timeline).
    retire: Callable[[int, list, Any], int] | None = None
    live: dict = field(default_factory=dict, compare=False)
    written: Callable[[int, list, Any], None] | None = None
    # `deleted(cluster_id, keys, now)` runs after rows of these keys were deleted (their object left the cluster).
    deleted: Callable[[int, list, Any], None] | None = None

    def __post_init__(self) -> None:
        if self.key is None:
            object.__setattr__(self, "key", namespaced_key if self.namespaced else name_key)

    @property
    def key_fields(self) -> tuple[str, ...]:
        return ("namespace", "name") if self.namespaced else ("name",)

    @property
    def path(self) -> str:
        """The collection's URL across all namespaces."""
        if self.group:
            return f"/apis/{self.group}/{self.version}/{self.plural}"
        return f"/api/{self.version}/{self.plural}"

    def key_of(self, obj: dict[str, Any]) -> Any:
        return self.key(obj)


REGISTRY: dict[str, Resource] = {}


def register(resource: Resource) -> Resource:
    REGISTRY[resource.name] = resource
    return resource


# ---------------------------------------------------------------------------------------------------
# Nodes and Pods

NODES, PODS = "nodes", "pods"

NODE_VALUE_FIELDS = (
    "uid", "labels", "taints", "conditions", "unschedulable", "cpu_capacity_millis", "cpu_allocatable_millis",
    "memory_capacity_bytes", "memory_allocatable_bytes", "gpu_capacity", "gpu_allocatable", "gpu_product",
    "gpu_memory_mib", "gpu_family", "gpu_count_label", "mig_strategy", "is_gpu_node", "zone", "instance_type",
    "capacity_type", "created_in_cluster", "resource_version", "gpu_sharing", "storage_capacity_bytes",
    "storage_allocatable_bytes",
)
POD_VALUE_FIELDS = (
    "uid", "node_name", "phase", "priority", "priority_class", "labels", "node_selector", "ready", "cpu_millis",
    "memory_bytes", "gpus", "created_in_cluster", "started_in_cluster", "finished_in_cluster", "resource_version",
    "storage_bytes", "gpu_request", "scheduling_message", "gpu_unit", "gpu_units", "owner_kind", "owner_name",
    "scheduler_name",
)
# Where a pod's values hold its node's name, its GPU-equivalents and its GPU request (the mirror prices the
# request on the node when it writes the pod: `kube.gpu.demand_on`).
POD_NODE_AT, POD_GPUS_AT, POD_GPU_REQUEST_AT, POD_GPU_UNIT_AT, POD_GPU_UNITS_AT = (
    POD_VALUE_FIELDS.index(f) for f in ("node_name", "gpus", "gpu_request", "gpu_unit", "gpu_units"))


def node_values(obj: dict[str, Any]) -> tuple[list, kube.NodeFacts]:
    """The stored values of a Node object (NODE_VALUE_FIELDS order); raises on a malformed object."""
    facts = kube.node_facts(obj)
    values = [
        facts.uid, facts.labels, facts.taints, facts.conditions, facts.unschedulable,
        facts.capacity.cpu_millis, facts.allocatable.cpu_millis, facts.capacity.memory_bytes,
        facts.allocatable.memory_bytes, int(facts.capacity.gpus), facts.allocatable.gpus, facts.gpu_product,
        facts.gpu_memory_mib, facts.gpu_family, facts.gpu_count_label, facts.mig_strategy, facts.is_gpu_node,
        facts.zone, facts.instance_type, facts.capacity_type, facts.created, facts.resource_version,
        kube.gpu_sharing(facts.gpus), facts.capacity.storage_bytes, facts.allocatable.storage_bytes,
    ]
    return values, facts


_REQUESTS: dict[bytes, tuple[kube.Resources, dict[str, Any]]] = caches.register({})
_GPU_ANNOTATIONS = (kube_gpu.ANNOTATION_GPU_FRACTION, kube_gpu.ANNOTATION_GPU_FRACTION_NUM_DEVICES,
                    kube_gpu.ANNOTATION_GPU_MEMORY)


def pod_requests(spec: dict[str, Any], metadata: dict[str, Any] | None = None) -> tuple[kube.Resources, dict[str, Any]]:
    """kube.pod_resources_and_request, memoised on the resources part of the spec (and what of the metadata
    tells GPU sharing: KAI's annotations, the reservation namespace): pods of one workload share it, and
    parsing quantities (Decimal) is most of a pod's cost on a full list."""
    metadata = metadata if isinstance(metadata, dict) else {}
    annotations = metadata.get("annotations") if isinstance(metadata.get("annotations"), dict) else {}
    sharing = {"namespace": metadata.get("namespace") or "",
               "annotations": {k: annotations[k] for k in _GPU_ANNOTATIONS if k in annotations}}
    pod = {"metadata": sharing, "spec": spec}
    try:
        key = orjson.dumps([
            [(c.get("resources"), c.get("restartPolicy")) for c in spec.get("containers") or ()],
            [(c.get("resources"), c.get("restartPolicy")) for c in spec.get("initContainers") or ()],
            spec.get("overhead"), spec.get("resources"),
            sharing["annotations"] or None, sharing["namespace"] == kube_gpu.RESERVATION_NAMESPACE,
        ])
    except (TypeError, AttributeError, orjson.JSONEncodeError):
        return kube.pod_resources_and_request(pod)  # malformed: let the parser say what is wrong
    found = _REQUESTS.get(key)
    if found is None:
        found = kube.pod_resources_and_request(pod)
        if len(_REQUESTS) > 10_000:
            _REQUESTS.clear()
        _REQUESTS[key] = found
    return found


def pod_values(obj: dict[str, Any]) -> tuple[list, None]:
    """The stored values of a Pod object (POD_VALUE_FIELDS order); raises on a malformed one (`12x`)."""
    metadata = obj["metadata"]
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    requests, gpu_request = pod_requests(spec, metadata)
    labels = metadata.get("labels") or {}
    selector = spec.get("nodeSelector") or {}
    if not isinstance(labels, dict) or not isinstance(selector, dict):
        raise TypeError("labels and nodeSelector must be objects")
    started, finished = kube.pod_times(obj)
    _, unit, units = kube.gpu_priced(gpu_request) if gpu_request else (None, "", requests.gpus)
    return [
        metadata.get("uid") or "", spec.get("nodeName") or "", status.get("phase") or "",
        int(spec.get("priority") or 0), spec.get("priorityClassName") or "", labels, selector,
        kube.pod_is_ready(obj), requests.cpu_millis, requests.memory_bytes, requests.gpus,
        metadata.get("creationTimestamp"), started, finished, str(metadata.get("resourceVersion") or ""),
        requests.storage_bytes, gpu_request, kube.pod_scheduling_message(obj), unit, units,
        *owners.controller_of(metadata), owners.scheduler_of(spec),
    ], None


def _register_core() -> None:
    register(Resource(
        name=NODES, kind="Node", group="", version="v1", plural="nodes", namespaced=False, model=Node,
        fields=NODE_VALUE_FIELDS, values=node_values, json_fields=("labels", "taints", "conditions", "gpu_sharing"),
        datetime_fields=("created_in_cluster",),
    ))
    register(Resource(
        name=PODS, kind="Pod", group="", version="v1", plural="pods", namespaced=True, model=Pod,
        fields=POD_VALUE_FIELDS, values=pod_values, json_fields=("labels", "node_selector", "gpu_request"),
        datetime_fields=("created_in_cluster", "started_in_cluster", "finished_in_cluster"),
    ))


_register_core()
