"""A NodePool spec checked before it is sent: first by Karpenter's own `karpenter.sh/v1` NodePool CRD, its
OpenAPI schema and CEL rules (kube/crds/karpenter.sh_nodepools.yaml through kube.validation: what the API
server checks, with the code the emulator runs), then by the console's own policy, which adds only what the
API server lets through:

- restricted label domains: `kubernetes.io` and `k8s.io` in requirement keys and template label keys, apart
  from the well-known labels and `node.kubernetes.io` / `node-restriction.kubernetes.io` (the CRD's rules
  already refuse `karpenter.sh`, `kubernetes.io/hostname` and `karpenter.sh/nodepool`);
- what Karpenter's runtime validation refuses once the API server has taken it, leaving the NodePool never
  Ready (pkg/apis/v1/nodepool_validation.go, nodeclaim_validation.go): template label keys that are not
  qualified names, requirement values that are not label values (the CRD's pattern sits on the list, where
  the API server ignores it);
- no `values` with `Exists` / `DoesNotExist` (Kubernetes' rule for node selector requirements);
- limits that are quantities, not negative.

Every error names the field by its path, map entries in brackets (`spec.template.spec.requirements[2].key`,
`spec.limits[nvidia.com/gpu]`), with the API server's message; a policy error is not added where the CRD
already found one.
"""
from __future__ import annotations

import copy
import re
from kube import wellknown
from typing import Any

import orjson

from kube import crd
from kube.labels import dns1123_label_errors, dns1123_subdomain_errors, label_key_errors, label_value_errors
from kube.quantity import QuantityError, parse_quantity

NODEPOOLS = "nodepools.karpenter.sh"
VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
# Bounds of the console's own (the CRD has none for them): values of one requirement (AWS offers about 900
# instance types), taints, and the whole spec as JSON (Kubernetes stores at most 1.5 MiB per object; a
# NodePool is a few KiB). A spec over MAX_SPEC_BYTES is refused before anything else of it is checked.
MAX_REQUIREMENT_VALUES = 1000
MAX_TAINTS = 100
MAX_SPEC_BYTES = 65536
KIND_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*\Z")

_SPEC = crd.custom_resource(NODEPOOLS).schema["properties"]["spec"]
POLICIES = tuple(_SPEC["properties"]["disruption"]["properties"]["consolidationPolicy"]["enum"])
# Label keys Karpenter sets itself, usable in requirements and labels whatever their domain.
WELL_KNOWN = {
    wellknown.KARPENTER_CAPACITY_TYPE_LABEL, "kubernetes.io/arch", "kubernetes.io/os", "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region", "topology.kubernetes.io/zone", "node.kubernetes.io/windows-build",
    "beta.kubernetes.io/instance-type", "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "beta.kubernetes.io/arch", "beta.kubernetes.io/os",
}
RESTRICTED_DOMAINS = ("kubernetes.io", "k8s.io")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Errors:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((path, message))

    def __bool__(self) -> bool:
        return bool(self.items)


def _restricted_key(key: str) -> str | None:
    """The console's restricted label domains."""
    if key in WELL_KNOWN:
        return None
    domain = key.split("/", 1)[0] if "/" in key else ""
    for restricted in RESTRICTED_DOMAINS:
        if domain == restricted or domain.endswith("." + restricted):
            if restricted == "kubernetes.io" and (domain.endswith("node.kubernetes.io") or domain.endswith("node-restriction.kubernetes.io")):
                continue
            return f'label domain "{restricted}" is restricted'
    return None


def _key(errors: Errors, path: str, key: Any) -> None:
    if not isinstance(key, str):
        return  # the CRD's schema says what is wrong
    problems = label_key_errors(key)
    if problems:
        errors.add(path, f"Invalid value: {key!r}: " + "; ".join(problems))
        return
    restricted = _restricted_key(key)
    if restricted:
        errors.add(path, f"Invalid value: {key!r}: {restricted}")


def _requirements(errors: Errors, path: str, requirements: Any) -> None:
    if not isinstance(requirements, list):
        return
    for i, req in enumerate(requirements):
        at = f"{path}[{i}]"
        if not isinstance(req, dict):
            continue
        _key(errors, f"{at}.key", req.get("key"))
        values = req.get("values") or []
        if not isinstance(values, list):
            continue
        for j, value in enumerate(values):
            if isinstance(value, str) and (len(value) > 63 or not VALUE_RE.match(value)):
                errors.add(f"{at}.values[{j}]", f"Invalid value: {value!r}: " + "; ".join(
                    label_value_errors(value) or ["must be a valid label value"]))
        operator = req.get("operator")
        if operator in ("Exists", "DoesNotExist") and values:
            errors.add(f"{at}.values", f"Invalid value: requirements with operator '{operator}' must not have values")


def _quantities(errors: Errors, path: str, limits: Any) -> None:
    if limits is None:
        return
    if not isinstance(limits, dict):
        errors.add(path, "Invalid value: must be a map of resource name to quantity")
        return
    for name, value in limits.items():
        at = f"{path}[{name}]"
        if _is_int(value):
            value = str(value)
        try:
            if not isinstance(value, str):
                raise QuantityError("", "must be a quantity (a string or an integer)")
            amount = parse_quantity(value)
        except QuantityError as exc:
            errors.add(at, f"Invalid value: {value!r}: {exc.reason}")
            continue
        if amount < 0:
            errors.add(at, f"Invalid value: {value!r}: must be greater than or equal to 0")


def policy_errors(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """The console's own rules, beyond the CRD's (see the module's doc)."""
    errors = Errors()
    _quantities(errors, "spec.limits", spec.get("limits"))
    template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
    metadata = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    labels = metadata.get("labels")
    if isinstance(labels, dict):
        for key in labels:
            _key(errors, f"spec.template.metadata.labels[{key}]", key)
    tspec = template.get("spec") if isinstance(template.get("spec"), dict) else {}
    _requirements(errors, "spec.template.spec.requirements", tspec.get("requirements"))
    ref = tspec.get("nodeClassRef")
    name = ref.get("name") if isinstance(ref, dict) else None
    # The NodeClass is an object of the cluster: its name follows the object-name rule (DNS-1123 subdomain).
    if isinstance(name, str) and name and dns1123_subdomain_errors(name):
        errors.add("spec.template.spec.nodeClassRef.name", f"Invalid value: {name!r}: "
                   + "; ".join(dns1123_subdomain_errors(name)))
    kind = ref.get("kind") if isinstance(ref, dict) else None
    if isinstance(kind, str) and kind and (len(kind) > 63 or not KIND_RE.match(kind)):
        errors.add("spec.template.spec.nodeClassRef.kind", f"Invalid value: {kind!r}: a kind is letters and "
                                                           "digits, starting with a letter (e.g. EC2NodeClass)")
    return errors.items


def _bounds(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """The console's bounds on lists and size, checked before anything else of the spec is read: a hostile
    spec costs a count and a length, never a walk of its schema and rules."""
    errors = Errors()
    template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
    tspec = template.get("spec") if isinstance(template.get("spec"), dict) else {}
    requirements = tspec.get("requirements")
    for i, req in enumerate(requirements if isinstance(requirements, list) else []):
        values = req.get("values") if isinstance(req, dict) else None
        if isinstance(values, list) and len(values) > MAX_REQUIREMENT_VALUES:
            errors.add(f"spec.template.spec.requirements[{i}].values",
                       f"Too many: {len(values)}: must have at most {MAX_REQUIREMENT_VALUES} items")
    for field in ("taints", "startupTaints"):
        taints = tspec.get(field)
        if isinstance(taints, list) and len(taints) > MAX_TAINTS:
            errors.add(f"spec.template.spec.{field}", f"Too many: {len(taints)}: must have at most {MAX_TAINTS} items")
    if not errors:
        _size(errors, spec)
    return errors.items


def crd_errors(spec: dict[str, Any], old_spec: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """What the API server would refuse in a NodePool of this spec (and, for a change, its transition rules
    against ``old_spec``), as (path, message)."""
    from kube.validation import NOT_CHECKED_MESSAGE  # with the validator, on first use (the sync never loads it)

    validator = crd.custom_resource(NODEPOOLS).validator
    obj = {"spec": copy.deepcopy(spec)}
    validator.prune(obj)
    validator.default(obj)
    old = None
    if old_spec is not None:
        old = {"spec": copy.deepcopy(old_spec)}
        validator.prune(old)
        validator.default(old)
    out = []
    for cause in validator.validate(obj, old=old):
        if cause.message == NOT_CHECKED_MESSAGE:
            out.append(("__all__", NOT_CHECKED_MESSAGE.split(": ", 2)[2].capitalize()))  # the API server's words
        else:
            out.append((cause.bracketed, cause.message))
    return out


def spec_errors(spec: Any, old_spec: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """Every rule the NodePool's spec breaks, as (path, message); empty when the API server would take it and
    the console's policy allows it."""
    if not isinstance(spec, dict):
        return [("spec", "Required value: the NodePool's spec is an object")]
    too_big = _bounds(spec)
    if too_big:
        return too_big  # nothing else of an oversized spec is looked at
    errors = crd_errors(spec, old_spec)
    found = [path for path, _ in errors]
    for path, message in policy_errors(spec):
        if path not in found:
            errors.append((path, message))
    return errors


def _size(errors: Errors, spec: dict[str, Any]) -> None:
    try:
        size = len(orjson.dumps(spec))
    except (TypeError, orjson.JSONEncodeError):
        errors.add("spec", "Invalid value: the spec must be JSON (objects, lists, strings, numbers)")
        return
    if size > MAX_SPEC_BYTES:
        errors.add("spec", f"Too long: the NodePool's spec is {size} bytes as JSON: may not be longer than "
                           f"{MAX_SPEC_BYTES}")


def name_errors(name: Any) -> list[str]:
    if not isinstance(name, str) or not name:
        return ["Required value: a name"]
    return dns1123_label_errors(name)
