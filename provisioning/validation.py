"""A NodePool spec checked against the rules of Karpenter's `karpenter.sh/v1` NodePool CRD, before it is
sent: its OpenAPI types, enums, patterns and limits (kubesim/crds/karpenter.sh_nodepools.json) and its
CEL rules (pkg/apis/v1/nodepool.go, nodeclaim.go in kubernetes-sigs/karpenter). Every error names the
field by its path in the object (`spec.template.spec.requirements[2].operator`), as the API server does.
"""
from __future__ import annotations

import re
from typing import Any

import orjson

from nodepools import kube

DURATION_RE = re.compile(r"^(([0-9]+(s|m|h))+|Never)\Z")  # consolidateAfter, expireAfter
GRACE_RE = re.compile(r"^([0-9]+(s|m|h))+\Z")  # terminationGracePeriod
BUDGET_DURATION_RE = re.compile(r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)\Z")
BUDGET_NODES_RE = re.compile(r"^((100|[0-9]{1,2})%|[0-9]+)\Z")
SCHEDULE_RE = re.compile(r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$")
QUANTITY_RE = re.compile(r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?\Z")
KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
POLICIES = ("WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced")
REASONS = ("Underutilized", "Empty", "Drifted")
MAX_REQUIREMENTS = 100
MAX_BUDGETS = 50
MAX_LABELS = 100
# Bounds of the console's own (the CRD has none for them): values of one requirement (AWS offers about 900
# instance types), taints, and the whole spec as JSON (Kubernetes stores at most 1.5 MiB per object; a
# NodePool is a few KiB). A spec over MAX_SPEC_BYTES is refused before anything else of it is checked.
MAX_REQUIREMENT_VALUES = 1000
MAX_TAINTS = 100
MAX_SPEC_BYTES = 65536
KIND_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*\Z")
# Label keys Karpenter sets itself (CRD rules "label domain ... is restricted"), apart from its well-known ones.
WELL_KNOWN = {
    "karpenter.sh/capacity-type", "kubernetes.io/arch", "kubernetes.io/os", "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region", "topology.kubernetes.io/zone", "node.kubernetes.io/windows-build",
    "beta.kubernetes.io/instance-type", "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "beta.kubernetes.io/arch", "beta.kubernetes.io/os",
}
RESTRICTED_DOMAINS = ("kubernetes.io", "k8s.io", "karpenter.sh")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Errors:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((path, message))

    def __bool__(self) -> bool:
        return bool(self.items)


def _restricted_key(key: str, where: str) -> str | None:
    """The CRD's CEL rules on requirement and template label keys."""
    if key == "kubernetes.io/hostname":
        return 'label "kubernetes.io/hostname" is restricted'
    if key == "karpenter.sh/nodepool":
        return 'label "karpenter.sh/nodepool" is restricted' if where == "label" else (
            'label "karpenter.sh/nodepool" is restricted: Karpenter sets it from the NodePool\'s name')
    if key in WELL_KNOWN:
        return None
    domain = key.split("/", 1)[0] if "/" in key else ""
    for restricted in RESTRICTED_DOMAINS:
        if domain == restricted or domain.endswith("." + restricted):
            if restricted == "kubernetes.io" and (domain.endswith("node.kubernetes.io") or domain.endswith("node-restriction.kubernetes.io")):
                continue
            return f'label domain "{restricted}" is restricted'
    return None


def _key(errors: Errors, path: str, key: Any, where: str) -> None:
    if not isinstance(key, str) or not key:
        errors.add(path, "Required value: a label key")
        return
    if len(key) > 316:
        errors.add(path, f"Too long: may not be longer than 316 (got {len(key)})")
    problems = kube.label_key_errors(key)
    if problems or not KEY_RE.match(key):
        errors.add(path, f"Invalid value: {key!r}: " + "; ".join(problems or ["not a qualified label key"]))
        return
    restricted = _restricted_key(key, where)
    if restricted:
        errors.add(path, f"Invalid value: {key!r}: {restricted}")


def _taints(errors: Errors, path: str, taints: Any) -> None:
    if taints is None:
        return
    if not isinstance(taints, list):
        errors.add(path, "Invalid value: must be a list of taints")
        return
    if len(taints) > MAX_TAINTS:
        errors.add(path, f"Too many: {len(taints)}: must have at most {MAX_TAINTS} items")
        return
    for i, taint in enumerate(taints):
        at = f"{path}[{i}]"
        if not isinstance(taint, dict):
            errors.add(at, "Invalid value: a taint is an object with key, value and effect")
            continue
        key = taint.get("key")
        if not isinstance(key, str) or not key:
            errors.add(f"{at}.key", "Required value: a taint needs a key")
        elif not KEY_RE.match(key) or kube.label_key_errors(key):
            errors.add(f"{at}.key", f"Invalid value: {key!r}: " + "; ".join(kube.label_key_errors(key) or ["not a qualified key"]))
        value = taint.get("value")
        if value not in (None, "") and (not isinstance(value, str) or not KEY_RE.match(value)):
            errors.add(f"{at}.value", f"Invalid value: {value!r}: a taint value must be 63 characters or fewer, "
                                      "start and end with a letter or digit")
        effect = taint.get("effect")
        if effect not in EFFECTS:
            errors.add(f"{at}.effect", f"Unsupported value: {effect!r}: supported values: "
                                       + ", ".join(f'"{e}"' for e in EFFECTS))


def _requirements(errors: Errors, path: str, requirements: Any) -> None:
    if not isinstance(requirements, list):
        errors.add(path, "Required value: a list of requirements (may be empty)")
        return
    if len(requirements) > MAX_REQUIREMENTS:
        errors.add(path, f"Too many: {len(requirements)}: must have at most {MAX_REQUIREMENTS} items")
    for i, req in enumerate(requirements):
        at = f"{path}[{i}]"
        if not isinstance(req, dict):
            errors.add(at, "Invalid value: a requirement is an object with key, operator and values")
            continue
        _key(errors, f"{at}.key", req.get("key"), "requirement")
        operator = req.get("operator")
        if operator not in OPERATORS:
            errors.add(f"{at}.operator", f"Unsupported value: {operator!r}: supported values: "
                                         + ", ".join(f'"{o}"' for o in OPERATORS))
        values = req.get("values")
        if values is None:
            values = []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            errors.add(f"{at}.values", "Invalid value: must be a list of strings")
            continue
        if len(values) > MAX_REQUIREMENT_VALUES:
            errors.add(f"{at}.values", f"Too many: {len(values)}: must have at most {MAX_REQUIREMENT_VALUES} items")
            continue
        for j, value in enumerate(values):
            if len(value) > 63 or not VALUE_RE.match(value):
                errors.add(f"{at}.values[{j}]", f"Invalid value: {value!r}: " + "; ".join(
                    kube.label_value_errors(value) or ["must be a valid label value"]))
        if operator == "In" and not values:
            errors.add(f"{at}.values", "Invalid value: requirements with operator 'In' must have a value defined")
        if operator in ("Exists", "DoesNotExist") and values:
            errors.add(f"{at}.values", f"Invalid value: requirements with operator '{operator}' must not have values")
        if operator in ("Gt", "Lt", "Gte", "Lte"):
            if len(values) != 1 or not values[0].isdigit():
                errors.add(f"{at}.values", f"Invalid value: requirements operator '{operator}' must have a single "
                                           "positive integer value")
        min_values = req.get("minValues")
        if min_values is not None:
            if not _is_int(min_values) or not 1 <= min_values <= 50:
                errors.add(f"{at}.minValues", f"Invalid value: {min_values!r}: must be an integer from 1 to 50")
            elif operator == "In" and len(values) < min_values:
                errors.add(f"{at}.minValues", "Invalid value: requirements with 'minValues' must have at least "
                                              "that many values specified in the 'values' field")


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
        if not isinstance(value, str) or not QUANTITY_RE.match(value):
            errors.add(at, f"Invalid value: {value!r}: quantities must match the regular expression "
                           "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
        elif value.startswith("-"):
            errors.add(at, f"Invalid value: {value!r}: must be greater than or equal to 0")


def _duration(errors: Errors, path: str, value: Any, pattern: re.Pattern, example: str) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not pattern.match(value):
        errors.add(path, f"Invalid value: {value!r}: a duration such as {example}")


def spec_errors(spec: Any) -> list[tuple[str, str]]:
    """Every rule the NodePool's spec breaks, as (path, message); empty when the API server would take it."""
    errors = Errors()
    if not isinstance(spec, dict):
        return [("spec", "Required value: the NodePool's spec is an object")]
    weight = spec.get("weight")
    if weight is not None and (not _is_int(weight) or not 1 <= weight <= 100):
        errors.add("spec.weight", f"Invalid value: {weight!r}: spec.weight in body should be an integer from 1 to 100")
    replicas = spec.get("replicas")
    if replicas is not None and (not _is_int(replicas) or replicas < 0):
        errors.add("spec.replicas", f"Invalid value: {replicas!r}: must be an integer of at least 0")
    _quantities(errors, "spec.limits", spec.get("limits"))

    disruption = spec.get("disruption")
    if disruption is not None:
        if not isinstance(disruption, dict):
            errors.add("spec.disruption", "Invalid value: must be an object")
        else:
            policy = disruption.get("consolidationPolicy")
            if policy is not None and policy not in POLICIES:
                errors.add("spec.disruption.consolidationPolicy", f"Unsupported value: {policy!r}: supported values: "
                                                                  + ", ".join(f'"{p}"' for p in POLICIES))
            _duration(errors, "spec.disruption.consolidateAfter", disruption.get("consolidateAfter"), DURATION_RE,
                      "30s, 5m, 720h or Never")
            budgets = disruption.get("budgets")
            if budgets is not None:
                if not isinstance(budgets, list):
                    errors.add("spec.disruption.budgets", "Invalid value: must be a list of budgets")
                    budgets = []
                if len(budgets) > MAX_BUDGETS:
                    errors.add("spec.disruption.budgets", f"Too many: {len(budgets)}: must have at most {MAX_BUDGETS} items")
                for i, budget in enumerate(budgets):
                    at = f"spec.disruption.budgets[{i}]"
                    if not isinstance(budget, dict):
                        errors.add(at, "Invalid value: a budget is an object with nodes (and schedule, duration, reasons)")
                        continue
                    nodes = budget.get("nodes")
                    if not isinstance(nodes, str) or not BUDGET_NODES_RE.match(nodes):
                        errors.add(f"{at}.nodes", f"Invalid value: {nodes!r}: a number of nodes (e.g. 1) or a "
                                                  "percentage from 0% to 100% (e.g. 10%)")
                    schedule, duration = budget.get("schedule"), budget.get("duration")
                    if schedule is not None and (not isinstance(schedule, str) or not SCHEDULE_RE.match(schedule)):
                        errors.add(f"{at}.schedule", f"Invalid value: {schedule!r}: a cron schedule of five fields "
                                                     "(e.g. 0 9 * * mon-fri) or @daily, @weekly, ...")
                    _duration(errors, f"{at}.duration", duration, BUDGET_DURATION_RE, "8h, 30m or 1h30m")
                    if (schedule is None) != (duration is None):
                        errors.add(f"{at}.schedule" if schedule is None else f"{at}.duration",
                                   "Invalid value: 'schedule' must be set with 'duration'")
                    reasons = budget.get("reasons")
                    if reasons is not None:
                        if not isinstance(reasons, list) or len(reasons) > 50:
                            errors.add(f"{at}.reasons", "Invalid value: a list of at most 50 reasons")
                        else:
                            for j, reason in enumerate(reasons):
                                if reason not in REASONS:
                                    errors.add(f"{at}.reasons[{j}]", f"Unsupported value: {reason!r}: supported "
                                                                     "values: " + ", ".join(f'"{r}"' for r in REASONS))

    template = spec.get("template")
    if not isinstance(template, dict):
        errors.add("spec.template", "Required value: the template of the NodeClaims")
        return errors.items
    metadata = template.get("metadata") or {}
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if labels is not None:
        if not isinstance(labels, dict):
            errors.add("spec.template.metadata.labels", "Invalid value: must be a map of label key to value")
        else:
            if len(labels) > MAX_LABELS:
                errors.add("spec.template.metadata.labels", f"Too many: {len(labels)}: must have at most {MAX_LABELS} items")
            for key, value in labels.items():
                at = f"spec.template.metadata.labels[{key}]"
                _key(errors, at, key, "label")
                if not isinstance(value, str) or len(value) > 63 or not VALUE_RE.match(value):
                    errors.add(at, f"Invalid value: {value!r}: " + "; ".join(
                        kube.label_value_errors(value) if isinstance(value, str) else ["must be a string"]))
    tspec = template.get("spec")
    if not isinstance(tspec, dict):
        errors.add("spec.template.spec", "Required value: nodeClassRef and requirements")
        return errors.items
    ref = tspec.get("nodeClassRef")
    if not isinstance(ref, dict):
        errors.add("spec.template.spec.nodeClassRef", "Required value: the NodeClass (group, kind, name) nodes are made from")
    else:
        for part in ("group", "kind", "name"):
            if not isinstance(ref.get(part), str) or not ref.get(part):
                errors.add(f"spec.template.spec.nodeClassRef.{part}", f"Required value: nodeClassRef.{part}")
        group, kind, name = ref.get("group"), ref.get("kind"), ref.get("name")
        if isinstance(group, str) and group and "/" in group:
            errors.add("spec.template.spec.nodeClassRef.group", f"Invalid value: {group!r}: a group has no '/'")
        elif isinstance(group, str) and group and kube.dns1123_subdomain_errors(group):
            errors.add("spec.template.spec.nodeClassRef.group", f"Invalid value: {group!r}: "
                       + "; ".join(kube.dns1123_subdomain_errors(group)))
        if isinstance(kind, str) and kind and (len(kind) > 63 or not KIND_RE.match(kind)):
            errors.add("spec.template.spec.nodeClassRef.kind", f"Invalid value: {kind!r}: a kind is letters and "
                                                               "digits, starting with a letter (e.g. EC2NodeClass)")
        # The NodeClass is an object of the cluster: its name follows the object-name rule (DNS-1123 subdomain).
        if isinstance(name, str) and name and kube.dns1123_subdomain_errors(name):
            errors.add("spec.template.spec.nodeClassRef.name", f"Invalid value: {name!r}: "
                       + "; ".join(kube.dns1123_subdomain_errors(name)))
    _requirements(errors, "spec.template.spec.requirements", tspec.get("requirements"))
    _taints(errors, "spec.template.spec.taints", tspec.get("taints"))
    _taints(errors, "spec.template.spec.startupTaints", tspec.get("startupTaints"))
    _duration(errors, "spec.template.spec.expireAfter", tspec.get("expireAfter"), DURATION_RE, "720h or Never")
    _duration(errors, "spec.template.spec.terminationGracePeriod", tspec.get("terminationGracePeriod"), GRACE_RE,
              "30s, 10m or 48h")
    _size(errors, spec)
    return errors.items


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
    return kube.dns1123_label_errors(name)
