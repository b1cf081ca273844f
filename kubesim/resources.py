"""The registry of resources the emulator serves: built-in kinds and custom resources (from CRD manifests).

Register another one with :func:`register_resource` (or :func:`register_crd` for a CustomResourceDefinition
manifest file; every manifest of ``kube/crds/`` is registered at import) before the emulator serves it;
every registered resource gets list/watch/get/create/update/patch/delete, discovery and OpenAPI entries.
Objects are pruned, defaulted and validated by their schema as the API server does (:mod:`kube.validation`:
OpenAPI through ``jsonschema``, the CRDs' CEL rules through ``cel``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kube import crd as crds
from kube.validation import SchemaValidator
from kubesim.util import Obj

NODES = "nodes"
PODS = "pods"
NAMESPACES = "namespaces"

Schema = dict[str, Any]
# Printer column: (header, dotted path, a CRD's JSONPath starting with "." or "@computed", type[, priority]);
# served in Table responses (kubectl get; priority 1 only with -o wide).  Type "date" shows an age ("5m").
Column = tuple
AGE: Column = ("Age", "metadata.creationTimestamp", "date")


@dataclass(eq=False)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    # Field-selector fields besides metadata.name and metadata.namespace (dotted paths into the object).
    fields: tuple[str, ...] = ()
    status_subresource: bool = True
    # The scale subresource (autoscaling/v1 Scale over spec.replicas), as apps/v1 Deployments have it.
    scale_subresource: bool = False
    # The main resource ignores status changes and /status ignores everything else, metadata.generation
    # counts spec changes (custom resources and batch/scheduling kinds; core nodes/pods stay lenient).
    strict_status: bool = True
    generation: bool = True
    schema: Schema | None = None  # OpenAPI v3 schema of the whole object (a CRD's openAPIV3Schema); None: anything
    columns: tuple[Column, ...] = ()
    source: str = ""  # where the schema comes from
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")
    # Strategic merge patch needs Go struct tags: the API server refuses it for custom resources.
    strategic_patch: bool = True
    # A faster hand-written extract_fields for hot kinds (pods: 150,000 objects in a bulk load).
    extractor: Callable[[Obj], tuple[str, ...]] | None = None

    key: str = field(init=False)
    api_version: str = field(init=False)
    list_kind: str = field(init=False)
    prefix: bytes = field(init=False)
    field_names: tuple[str, ...] = field(init=False)
    field_index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.singular = self.singular or self.kind.lower()
        self.key = self.plural if not self.group else f"{self.plural}.{self.group}"
        self.api_version = self.version if not self.group else f"{self.group}/{self.version}"
        self.list_kind = f"{self.kind}List"
        # Prefix turning a stored item (no kind/apiVersion) into a full object.
        self.prefix = f'{{"kind":"{self.kind}","apiVersion":"{self.api_version}",'.encode()
        self.field_names = ("metadata.name", "metadata.namespace", *self.fields)
        self.field_index = {f: i for i, f in enumerate(self.field_names)}
        self._paths = [tuple(f.split(".")) for f in self.field_names]

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def qualified_kind(self) -> str:
        """``Queue.scheduling.run.ai``, as API server messages name a kind."""
        return self.kind if not self.group else f"{self.kind}.{self.group}"

    def extract_fields(self, obj: Obj) -> tuple[str, ...]:
        """The values of :attr:`field_names` as strings (booleans as "true"/"false", missing as "")."""
        if self.extractor is not None:
            return self.extractor(obj)
        out = []
        for path in self._paths:
            value: Any = obj
            for part in path:
                value = value.get(part) if isinstance(value, dict) else None
                if value is None:
                    break
            if isinstance(value, bool):
                out.append("true" if value else "false")
            elif value is None:
                out.append("")
            else:
                out.append(str(value))
        return tuple(out)

    @cached_property
    def validator(self) -> SchemaValidator | None:
        """Pruning, defaulting and validation by :attr:`schema` (None when anything goes)."""
        return None if self.schema is None else SchemaValidator(self.schema)

    def discovery(self) -> list[Obj]:
        """Entries of an APIResourceList (the resource and its status subresource)."""
        entry: Obj = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        out = [entry]
        if self.status_subresource:
            out.append({"name": f"{self.plural}/status", "singularName": "", "namespaced": self.namespaced,
                        "kind": self.kind, "verbs": ["get", "patch", "update"]})
        if self.key == PODS:
            out.append({"name": "pods/binding", "singularName": "", "namespaced": True, "kind": "Binding",
                        "verbs": ["create"]})
        if self.scale_subresource:
            out.append({"name": f"{self.plural}/scale", "singularName": "", "namespaced": self.namespaced,
                        "group": "autoscaling", "version": "v1", "kind": "Scale",
                        "verbs": ["get", "patch", "update"]})
        return out


_REGISTRY: dict[str, Resource] = {}
_BY_PATH: dict[tuple[str, str, str], Resource] = {}  # (group, version, plural)


def register_resource(resource: Resource) -> Resource:
    """Serve ``resource`` from every emulator (existing ones pick it up at their next request)."""
    _REGISTRY[resource.key] = resource
    _BY_PATH[(resource.group, resource.version, resource.plural)] = resource
    return resource


def get_resource(key: str) -> Resource:
    """The resource registered under ``key`` ("nodes", "pods", "queues.scheduling.run.ai", ...)."""
    return _REGISTRY[key]


def find_resource(group: str, version: str, plural: str) -> Resource | None:
    return _BY_PATH.get((group, version, plural))


def resource_for_kind(api_version: str, kind: str) -> Resource | None:
    """The resource of an ``apiVersion`` and ``kind`` (as an ownerReference names its owner), or None."""
    for res in _REGISTRY.values():
        if res.kind == kind and res.api_version == api_version:
            return res
    return None


def resources() -> list[Resource]:
    return list(_REGISTRY.values())


def group_versions() -> dict[str, list[str]]:
    """Non-core groups and their versions, in registration order."""
    out: dict[str, list[str]] = {}
    for res in _REGISTRY.values():
        if res.group and res.version not in out.setdefault(res.group, []):
            out[res.group].append(res.version)
    return out


def register_crd(path: str | Path, version: str | None = None) -> Resource:
    """Register a custom resource from a CustomResourceDefinition manifest (YAML or JSON; its storage version
    unless ``version`` names another). A rule that does not compile refuses the CRD, as the API server does."""
    custom = crds.load(path, version)
    broken = [f"{at}: {rule.rule!r}: {rule.error}" for at, rule in custom.validator.rules() if rule.error]
    if broken:
        raise ValueError(f"{custom.key}: x-kubernetes-validations rules that do not compile: " + "; ".join(broken))
    columns = tuple((c.name, c.json_path, c.type, c.priority) for c in custom.columns)
    resource = Resource(
        group=custom.group,
        version=custom.version,
        plural=custom.plural,
        kind=custom.kind,
        singular=custom.singular,
        namespaced=custom.namespaced,
        short_names=custom.short_names,
        categories=custom.categories,
        status_subresource=custom.status_subresource,
        schema=custom.schema,
        columns=columns,
        strategic_patch=False,
        source=custom.source,
    )
    resource.__dict__["validator"] = custom.validator  # one compiled validator per CRD
    return register_resource(resource)


# --------------------------------------------------------------------------- built-in kinds

_POD_FIELDS = (
    "spec.nodeName",
    "status.phase",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.podIP",
    "status.nominatedNodeName",
)

def _node_fields(obj: Obj) -> tuple[str, ...]:
    return (obj["metadata"]["name"], "", "true" if (obj.get("spec") or {}).get("unschedulable") else "false")


def _pod_fields(obj: Obj) -> tuple[str, ...]:
    md, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    return (
        md["name"],
        md.get("namespace") or "",
        spec.get("nodeName") or "",
        status.get("phase") or "",
        spec.get("restartPolicy") or "",
        spec.get("schedulerName") or "",
        spec.get("serviceAccountName") or "",
        status.get("podIP") or "",
        status.get("nominatedNodeName") or "",
    )


register_resource(Resource(
    "", "v1", NODES, "Node", extractor=_node_fields, namespaced=False, short_names=("no",), fields=("spec.unschedulable",),
    strict_status=False, generation=False,
    columns=(("Status", "@node-status", "string"), ("Roles", "@node-roles", "string"), AGE,
             ("Version", "status.nodeInfo.kubeletVersion", "string"),
             ("Internal-IP", "@node-internal-ip", "string", 1), ("OS-Image", "status.nodeInfo.osImage", "string", 1),
             ("Kernel-Version", "status.nodeInfo.kernelVersion", "string", 1),
             ("Container-Runtime", "status.nodeInfo.containerRuntimeVersion", "string", 1)),
))
register_resource(Resource(
    "", "v1", PODS, "Pod", short_names=("po",), categories=("all",), fields=_POD_FIELDS, extractor=_pod_fields,
    strict_status=False, generation=False,
    columns=(("Ready", "@pod-ready", "string"), ("Status", "@pod-status", "string"),
             ("Restarts", "@pod-restarts", "integer"), AGE, ("IP", "status.podIP", "string", 1),
             ("Node", "spec.nodeName", "string", 1), ("Nominated Node", "status.nominatedNodeName", "string", 1)),
))
register_resource(Resource(
    "", "v1", "events", "Event", short_names=("ev",), status_subresource=False, strict_status=False,
    # The fields kubectl describe selects an object's events by, and the usual ones.
    generation=False, fields=("involvedObject.kind", "involvedObject.name", "involvedObject.namespace",
                              "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                              "involvedObject.fieldPath", "reason", "type", "source", "reportingComponent"),
    columns=(("Last Seen", "lastTimestamp", "date"), ("Type", "type", "string"), ("Reason", "reason", "string"),
             ("Object", "@event-object", "string"), ("Message", "message", "string")),
    # An Event keeps every field it is given (source, first/lastTimestamp, eventTime, reportingComponent, ...).
    schema={"type": "object", "required": ["involvedObject"], "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
        "involvedObject": {"type": "object"}, "type": {"type": "string"}, "reason": {"type": "string"},
        "message": {"type": "string"}, "count": {"type": "integer"}}},
))
# Namespaces are served by the emulator itself (they also exist while objects live in them).
NAMESPACE_RESOURCE = Resource(
    "", "v1", NAMESPACES, "Namespace", namespaced=False, short_names=("ns",), status_subresource=False,
    strict_status=False, generation=False, verbs=("create", "delete", "get", "list", "patch"),
    columns=(("Status", "status.phase", "string"), AGE),
)

_POD_TEMPLATE: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
register_resource(Resource(
    "batch", "v1", "jobs", "Job", categories=("all",), fields=("status.successful",),
    source="k8s.io/api batch/v1 JobSpec (required fields, minimums and defaults of the API server)",
    columns=(("Status", "@job-status", "string"), ("Completions", "@job-completions", "string"),
             ("Duration", "@job-duration", "string"), AGE, ("Containers", "@containers", "string", 1),
             ("Images", "@images", "string", 1), ("Selector", "@selector", "string", 1)),
    # parallelism and completions are defaulted together by kubesim.jobs.admit_job (a work-queue Job,
    # with parallelism and no completions, keeps none).
    schema={"type": "object", "required": ["spec"], "properties": {
        "spec": {"type": "object", "required": ["template"], "properties": {
            "parallelism": {"type": "integer", "minimum": 0},
            "completions": {"type": "integer", "minimum": 0},
            # backoffLimit and podReplacementPolicy are defaulted by kubesim.jobs.admit_job (6, or the int32 maximum
            # with a backoff limit per index; Failed with a podFailurePolicy).
            "backoffLimit": {"type": "integer", "minimum": 0},
            "backoffLimitPerIndex": {"type": "integer", "minimum": 0},
            "maxFailedIndexes": {"type": "integer", "minimum": 0},
            "podFailurePolicy": {"type": "object", "properties": {"rules": {"type": "array", "items": {
                "type": "object", "properties": {
                    "action": {"type": "string"},
                    "onExitCodes": {"type": "object", "properties": {
                        "containerName": {"type": "string"}, "operator": {"type": "string"},
                        "values": {"type": "array", "items": {"type": "integer", "format": "int32"}}}},
                    "onPodConditions": {"type": "array", "items": {"type": "object", "properties": {
                        "type": {"type": "string"}, "status": {"type": "string"}}}}}}}}},
            "activeDeadlineSeconds": {"type": "integer", "minimum": 1},
            "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
            "completionMode": {"type": "string", "enum": ["NonIndexed", "Indexed"], "default": "NonIndexed"},
            "suspend": {"type": "boolean", "default": False},
            "manualSelector": {"type": "boolean"},
            "selector": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "podReplacementPolicy": {"type": "string", "enum": ["TerminatingOrFailed", "Failed"]},
            "template": _POD_TEMPLATE,
        }, "x-kubernetes-preserve-unknown-fields": True},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }},
))
register_resource(Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False, short_names=("pc",),
    status_subresource=False, generation=False,
    source="k8s.io/api scheduling/v1 PriorityClass",
    columns=(("Value", "value", "integer"), ("Global-Default", "globalDefault", "boolean"), AGE,
             ("Preemption", "preemptionPolicy", "string")),
    schema={"type": "object", "required": ["value"], "properties": {
        "value": {"type": "integer", "minimum": -2147483648, "maximum": 1000000000},
        "globalDefault": {"type": "boolean", "default": False},
        "description": {"type": "string"},
        "preemptionPolicy": {"type": "string", "enum": ["Never", "PreemptLowerPriority"],
                             "default": "PreemptLowerPriority"},
    }},
))

# What an installation's manifests hold (kubectl apply -k deploy/overlays/...): stored as given, without
# schemas or controllers (a Deployment's pods never appear); deployments have the scale subresource that
# `kubectl scale` uses.
_ANY: Schema | None = None
_GENERIC = (
    # group, version, plural, kind, namespaced, short names, status subresource, columns
    ("", "v1", "configmaps", "ConfigMap", True, ("cm",), False, (("Data", "@data-count", "integer"), AGE)),
    ("", "v1", "secrets", "Secret", True, (), False,
     (("Type", "type", "string"), ("Data", "@data-count", "integer"), AGE)),
    ("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",), False, (AGE,)),
    ("", "v1", "services", "Service", True, ("svc",), True,
     (("Type", "spec.type", "string"), ("Cluster-IP", "spec.clusterIP", "string"), AGE)),
    ("apps", "v1", "deployments", "Deployment", True, ("deploy",), True,
     (("Ready", "@ready-replicas", "string"), ("Up-to-date", "status.updatedReplicas", "integer"),
      ("Available", "status.availableReplicas", "integer"), AGE)),
    ("batch", "v1", "cronjobs", "CronJob", True, ("cj",), True,
     (("Schedule", "spec.schedule", "string"), ("Suspend", "spec.suspend", "boolean"), AGE)),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",), True,
     (("Min Available", "spec.minAvailable", "string"), ("Max Unavailable", "spec.maxUnavailable", "string"), AGE)),
    ("networking.k8s.io", "v1", "ingresses", "Ingress", True, ("ing",), True,
     (("Class", "spec.ingressClassName", "string"), AGE)),
    ("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ("netpol",), False, (AGE,)),
    ("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, (), False, (AGE,)),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False, (), False,
     (("Role", "roleRef.name", "string"), AGE)),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", True, (), False, (AGE,)),
    ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, (), False,
     (("Role", "roleRef.name", "string"), AGE)),
)
# The API server's defaults that `kubectl get` shows (a Secret's type, a Service's type).
_DEFAULTS: dict[str, Schema] = {
    "secrets": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"type": {"type": "string", "default": "Opaque"}}},
    "services": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "default": {},
                 "properties": {"type": {"type": "string", "default": "ClusterIP"}}}}},
}
for _group, _version, _plural, _kind, _namespaced, _short, _status, _columns in _GENERIC:
    register_resource(Resource(
        _group, _version, _plural, _kind, namespaced=_namespaced, short_names=_short, status_subresource=_status,
        scale_subresource=_plural == "deployments", strict_status=_status, generation=_group in ("apps", "batch"),
        categories=("all",) if _plural in ("services", "deployments", "cronjobs") else (),
        columns=_columns, schema=_DEFAULTS.get(_plural, _ANY), source="stored as given (no schema but defaults)",
    ))

for _path in crds.manifests():
    register_crd(_path)


def resolve_resource(name: str | Resource) -> Resource:
    """A resource by key ("jobs.batch"), plural ("jobs"), kind ("Job") or short name ("pc")."""
    if isinstance(name, Resource):
        return name
    if name in _REGISTRY:
        return _REGISTRY[name]
    lowered = name.lower()
    for res in _REGISTRY.values():
        if lowered in (res.plural, res.singular, res.kind.lower(), *res.short_names):
            return res
    raise KeyError(f"no registered resource {name!r}")
