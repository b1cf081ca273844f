"""The CEL validation rules (``x-kubernetes-validations``) of the CRDs the emulator serves, in Python.

There is no CEL engine here: each rule the emulator knows is keyed by its exact text as the CRD has it
(kubesim/crds/, copied from the upstream CRD) and implemented as a Python predicate ``(self, old) -> bool``,
where ``old`` is the value at the same place in the stored object (None on create, or where the API server
cannot correlate it, e.g. inside a list). A rule the emulator does not know is not evaluated (accepted),
as before. Transition rules (those naming ``oldSelf``) are only evaluated on an update with an old value,
as the API server does. A failed rule is reported as the API server reports it: ``FieldValueInvalid`` on
the path of the schema node carrying the rule, "Invalid value: \"<type>\": <message>". Where CEL would
stop with an evaluation error (e.g. ``int()`` of a value that is no integer) the rule counts as failed,
with its message.

Known rules: those of Karpenter's ``karpenter.sh/v1`` NodePool and NodeClaim (pkg/apis/crds/karpenter.sh_nodepools.yaml,
karpenter.sh_nodeclaims.yaml).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[Any, Any], bool]

_DOMAIN = re.compile(r"^([^/]+)")
_KARPENTER_ALLOWED = ("karpenter.sh/capacity-type", "karpenter.sh/nodepool")


def _domain(key: str) -> str:
    """CEL's ``x.find("^([^/]+)")``: the text before the first "/" (the whole key without one)."""
    match = _DOMAIN.search(key)
    return match.group(0) if match else ""


def _karpenter_domain_ok(key: Any) -> bool:
    return not isinstance(key, str) or key in _KARPENTER_ALLOWED or not _domain(key).endswith("karpenter.sh")


def _keys(value: Any) -> list[Any]:
    """CEL's ``self.all(x, ...)`` over a map iterates its keys, over a list its items."""
    if isinstance(value, Mapping):
        return list(value)
    return list(value) if isinstance(value, list) else []


def _values(req: Any) -> list[Any]:
    values = req.get("values") if isinstance(req, Mapping) else None
    return values if isinstance(values, list) else []


def _positive_int(text: Any) -> bool:
    """CEL ``int(x) >= 0`` for a string: an integer literal (a sign allowed), not negative."""
    return isinstance(text, str) and re.fullmatch(r"[+-]?[0-9]+", text.strip()) is not None and int(text) >= 0


def _has(value: Any, name: str) -> bool:
    return isinstance(value, Mapping) and name in value and value[name] is not None


def _single_integer(req: Any) -> bool:
    if not isinstance(req, Mapping) or req.get("operator") not in ("Gt", "Lt", "Gte", "Lte"):
        return True
    values = _values(req)
    return len(values) == 1 and _positive_int(values[0])


def _min_values(req: Any) -> bool:
    if not isinstance(req, Mapping) or req.get("operator") != "In" or not _has(req, "minValues"):
        return True
    minimum = req["minValues"]
    return not isinstance(minimum, int) or len(_values(req)) >= minimum


RULES: dict[str, Predicate] = {
    # spec.disruption.budgets
    "self.all(x, has(x.schedule) == has(x.duration))":
        lambda self, old: all(_has(x, "schedule") == _has(x, "duration") for x in _keys(self)),
    # spec.template.metadata.labels (a map: its keys)
    'self.all(x, x in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || '
    '!x.find("^([^/]+)").endsWith("karpenter.sh"))':
        lambda self, old: all(_karpenter_domain_ok(x) for x in _keys(self)),
    'self.all(x, x != "karpenter.sh/nodepool")': lambda self, old: "karpenter.sh/nodepool" not in _keys(self),
    'self.all(x, x != "kubernetes.io/hostname")': lambda self, old: "kubernetes.io/hostname" not in _keys(self),
    # spec.template.spec.requirements[].key
    'self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || '
    '!self.find("^([^/]+)").endsWith("karpenter.sh")': lambda self, old: _karpenter_domain_ok(self),
    'self != "karpenter.sh/nodepool"': lambda self, old: self != "karpenter.sh/nodepool",
    'self != "kubernetes.io/hostname"': lambda self, old: self != "kubernetes.io/hostname",
    # spec.template.spec.requirements
    "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)":
        lambda self, old: all(not (isinstance(x, Mapping) and x.get("operator") == "In") or len(_values(x)) != 0
                              for x in _keys(self)),
    "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? "
    "(x.values.size() == 1 && int(x.values[0]) >= 0) : true)":
        lambda self, old: all(_single_integer(x) for x in _keys(self)),
    "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)":
        lambda self, old: all(_min_values(x) for x in _keys(self)),
    # spec.template.spec.nodeClassRef and its fields
    "self != ''": lambda self, old: self != "",
    "self.group == oldSelf.group": lambda self, old: (self or {}).get("group") == (old or {}).get("group"),
    "self.kind == oldSelf.kind": lambda self, old: (self or {}).get("kind") == (old or {}).get("kind"),
    # spec (static NodePools: replicas set)
    "has(self.replicas) == has(oldSelf.replicas)": lambda self, old: _has(self, "replicas") == _has(old, "replicas"),
    "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && "
    "'nodes' in self.limits))":
        lambda self, old: not _has(self, "replicas") or not _has(self, "limits") or len(self["limits"]) == 0 or (
            len(self["limits"]) == 1 and "nodes" in self["limits"]),
    "!has(self.replicas) || !has(self.weight)": lambda self, old: not _has(self, "replicas") or not _has(self, "weight"),
    # NodeClaim spec
    "self == oldSelf": lambda self, old: self == old,
}


def is_transition(rule: str) -> bool:
    return "oldSelf" in rule


def failed(rules: list[Mapping[str, Any]], value: Any, old: Any) -> list[str]:
    """The messages of the rules `value` breaks (unknown rules and, without `old`, transition rules skipped)."""
    out = []
    for rule in rules:
        text = str(rule.get("rule") or "")
        check = RULES.get(text)
        if check is None or (is_transition(text) and old is None):
            continue
        try:
            ok = check(value, old)
        except (TypeError, ValueError, AttributeError, KeyError):
            ok = False  # CEL would stop with an evaluation error: the object is refused all the same
        if not ok:
            out.append(str(rule.get("message") or f"failed rule: {text}"))
    return out
