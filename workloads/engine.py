"""OSMO's submission steps as pure functions: pod templates, variables, platforms, resource validation.

No Django model is imported here: the services, the submission flow, the pages and the tests share one
interpretation of

- pod templates merged in order (OSMO's `recursive_dict_update` with `merge_lists_on_name`):
  dictionaries merge recursively and the later value wins; lists merge by `name` (an item whose `name`
  matches an earlier item is merged into it, every other item is appended); a key that is a list only in
  the later template takes that list;
- the variables `USER_CPU`, `USER_GPU`, `USER_MEMORY`, `USER_STORAGE` (defaults 1, 0, 1Gi, 1Gi, then the
  pool's, the platform's and the user's values) and `WF_*` substituted where `{{ NAME }}` is written;
- a platform's nodes: labels matching its node selector, every `NoSchedule`/`NoExecute` taint tolerated
  (Kubernetes' toleration rules; `PreferNoSchedule` never keeps a pod off a node);
- resource validation rules `{operator, left_operand, right_operand, assert_message}` compared as
  Kubernetes quantities; rules naming node values (`K8_CPU`, `K8_MEMORY`, `K8_GPU`, `K8_STORAGE`: what is
  free on a node) pass when at least one node satisfies all of them;
- what a platform forbids (privileged containers, host network, host paths not allowed).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Mapping

from common.words import noun, verb
from kube.labels import dns1123_label_errors, label_key_errors, label_value_errors, node_selector_matches
from kube.quantity import QuantityError, parse_quantity
from kube.taints import TAINT_EFFECTS, taint_text, untolerated_taints
from kube import gpu as kube_gpu
from workloads import podsecurity

# ---------------------------------------------------------------------------------------------------
# Pod templates


class TemplateError(ValueError):
    """A template that cannot be used: an unknown variable, a malformed `{{ }}`, not a Pod spec."""

    def __init__(self, message: str, *, template: str, variable: str | None = None) -> None:
        self.template = template
        self.variable = variable
        self.message = message
        super().__init__(message)

    def __str__(self) -> str:
        return self.message


def _merge_lists_on_name(earlier: list, later: list) -> list:
    """OSMO's `merge_lists_on_name`: later items whose `name` matches an earlier item's are merged into
    it (recursively); every other later item is appended, in order."""
    name_to_index: dict[Any, int] = {}
    for index, item in enumerate(earlier):
        if isinstance(item, dict) and "name" in item:
            name_to_index[item["name"]] = index
    unmatched = []
    for item in later:
        if isinstance(item, dict) and "name" in item and item["name"] in name_to_index:
            index = name_to_index[item["name"]]
            earlier[index] = _merge_dicts(earlier[index], item)
        else:
            unmatched.append(item)
    earlier.extend(unmatched)
    return earlier


def _merge_dicts(earlier: dict, later: Mapping) -> dict:
    """OSMO's `recursive_dict_update(earlier, later, merge_lists_on_name)` (on copies)."""
    for key, value in later.items():
        if isinstance(value, dict):
            base = earlier.get(key)
            earlier[key] = _merge_dicts(base if isinstance(base, dict) else {}, value)
        elif isinstance(value, list):
            base = earlier.get(key)
            earlier[key] = _merge_lists_on_name(base, copy.deepcopy(value)) if isinstance(base, list) else copy.deepcopy(value)
        else:
            earlier[key] = value
    return earlier


def merge_templates(templates: list[tuple[str, dict]]) -> dict:
    """Merge `(name, body)` pod templates in order (pool's common ones, then the platform's overrides).

    Dictionaries merge recursively, the later value winning; lists merge by `name`; a key that is a list
    only in the later template takes that list. The bodies given are not changed."""
    merged: dict = {}
    for name, body in templates:
        if not isinstance(body, dict):
            raise TemplateError(
                f"Pod template '{name}' must be a mapping (a fragment of a Pod), not {type(body).__name__}.",
                template=name,
            )
        merged = _merge_dicts(merged, copy.deepcopy(body))
    return merged


# ---------------------------------------------------------------------------------------------------
# Variables

DEFAULT_VARIABLES: dict[str, str] = {"USER_CPU": "1", "USER_GPU": "0", "USER_MEMORY": "1Gi", "USER_STORAGE": "1Gi"}
USER_VARIABLES = tuple(DEFAULT_VARIABLES)
# OSMO's workflow variables the console knows how to fill (a submission gives the values).
WF_VARIABLES = ("WF_ID", "WF_UUID", "WF_TASK_NAME", "WF_SUBMITTED_BY", "WF_POOL", "WF_PLATFORM")
VARIABLE_NAME_RE = re.compile(r"^(USER|WF)_[A-Z0-9_]+\Z")
_TOKEN_RE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")


def _variable_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def resolve_variables(*, pool_defaults: dict, platform_defaults: dict, user_values: dict) -> dict[str, str]:
    """USER_CPU=1, USER_GPU=0, USER_MEMORY=1Gi, USER_STORAGE=1Gi, overridden by the pool's default
    variables, then the platform's, then the user's values (a value left empty keeps the one before)."""
    resolved = dict(DEFAULT_VARIABLES)
    for layer in (pool_defaults or {}, platform_defaults or {}, user_values or {}):
        for name, value in layer.items():
            if value is None or (isinstance(value, str) and not value.strip()):
                continue
            resolved[str(name)] = _variable_text(value).strip()
    return resolved


def default_variables_errors(values: Any) -> list[str]:
    """What is wrong with a set of default variables (a pool's or a platform's); empty when valid."""
    if not isinstance(values, dict):
        return ["Default variables must be a mapping of variable name to value, e.g. {\"USER_GPU\": 1}."]
    errors = []
    for name, value in values.items():
        if not isinstance(name, str) or not VARIABLE_NAME_RE.match(name):
            errors.append(f"'{name}' is not a variable name: names are USER_* or WF_* in capitals, e.g. USER_GPU.")
            continue
        if isinstance(value, (dict, list)) or value is None:
            errors.append(f"{name}: a default value must be a number or a string, not {type(value).__name__}.")
            continue
        if name in USER_VARIABLES:
            try:
                amount = parse_quantity(value)
            except QuantityError as exc:
                errors.append(f"{name}: {exc}")
                continue
            if amount < 0:
                errors.append(f"{name}: must not be negative, got {value!r}.")
    return errors


def _substitute_text(text: str, variables: Mapping[str, str], template: str) -> str:
    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in variables:
            known = ", ".join(sorted(variables))
            raise TemplateError(
                f"Pod template '{template}' uses the unknown variable '{name}' (known: {known}).",
                template=template, variable=name,
            )
        return variables[name]

    if "{%" in text:
        raise TemplateError(
            f"Pod template '{template}' uses a control block ({{% ... %}}) in {text!r}: only {{{{ NAME }}}} "
            "variables are substituted.", template=template,
        )
    rest = _TOKEN_RE.sub("", text)
    if "{{" in rest or "}}" in rest:
        raise TemplateError(
            f"Pod template '{template}' has an unbalanced '{{{{' or '}}}}' in {text!r}: write variables as {{{{ NAME }}}}.",
            template=template,
        )
    return _TOKEN_RE.sub(replace, text)


def substitute(body: dict, variables: dict[str, str], *, template: str) -> dict:
    """A copy of `body` with every `{{ NAME }}` in its string values replaced by the variable's value.

    An unknown variable raises TemplateError naming the template and the variable."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, str):
            return _substitute_text(value, variables, template)
        return value

    return walk(body)


def template_variables(body: Any) -> set[str]:
    """The variable names a template uses (for checking a template when it is saved)."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            found.update(match.group(1) for match in _TOKEN_RE.finditer(value))

    walk(body)
    return found


# A Pod-spec fragment: what may appear at the top of a template (OSMO's templates are Pod objects:
# `spec`, `metadata`; `apiVersion`/`kind` are tolerated as in a full Pod).
POD_TEMPLATE_KEYS = ("apiVersion", "kind", "metadata", "spec")
_LIST_FIELDS = ("containers", "initContainers", "ephemeralContainers", "volumes", "tolerations",
                "imagePullSecrets", "hostAliases", "topologySpreadConstraints", "resourceClaims", "readinessGates")
_DICT_FIELDS = ("nodeSelector", "affinity", "securityContext", "overhead", "dnsConfig")


def pod_template_errors(body: Any) -> list[str]:
    """What keeps `body` from being a Pod-spec fragment (empty list: it is one). Each error names the field."""
    if not isinstance(body, dict):
        return [f"A pod template must be a mapping (a fragment of a Pod with 'spec' and/or 'metadata'), "
                f"not {type(body).__name__ if body is not None else 'empty'}."]
    errors = []
    for key in body:
        if key not in POD_TEMPLATE_KEYS:
            errors.append(f"'{key}': a pod template holds a Pod's {', '.join(POD_TEMPLATE_KEYS)}; "
                          f"put Pod spec fields such as '{key}' under 'spec'.")
    if "kind" in body and body["kind"] != "Pod":
        errors.append(f"kind: a pod template describes a Pod, not {body['kind']!r}.")
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            errors.append("metadata: must be a mapping.")
        else:
            for key in ("labels", "annotations"):
                if key in metadata and not isinstance(metadata[key], dict):
                    errors.append(f"metadata.{key}: must be a mapping of name to value.")
                elif key in metadata:
                    errors.extend(_metadata_errors(key, metadata[key]))
    spec = body.get("spec")
    if spec is not None:
        if not isinstance(spec, dict):
            errors.append("spec: must be a mapping (a Pod spec).")
        else:
            for key in _LIST_FIELDS:
                if key in spec and not isinstance(spec[key], list):
                    errors.append(f"spec.{key}: must be a list.")
                elif key in spec:
                    for index, item in enumerate(spec[key]):
                        if not isinstance(item, dict):
                            errors.append(f"spec.{key}[{index}]: must be a mapping.")
                        elif key in ("containers", "initContainers", "ephemeralContainers", "volumes") and "name" not in item:
                            errors.append(f"spec.{key}[{index}]: needs a 'name' (lists merge by name).")
            for key in _DICT_FIELDS:
                if key in spec and not isinstance(spec[key], dict):
                    errors.append(f"spec.{key}: must be a mapping.")
            for index, toleration in enumerate(spec.get("tolerations") or []):
                if isinstance(toleration, dict):
                    errors.extend(f"spec.tolerations[{index}].{message}" for message in toleration_errors(toleration))
            for key in ("containers", "initContainers", "ephemeralContainers", "volumes"):
                for index, item in enumerate(spec.get(key) if isinstance(spec.get(key), list) else []):
                    name = item.get("name") if isinstance(item, dict) else None
                    if isinstance(name, str) and "{{" not in name and dns1123_label_errors(name):
                        errors.append(f"spec.{key}[{index}].name: Invalid value: {name!r}: "
                                      + "; ".join(dns1123_label_errors(name)))
            # nodeName, schedulerName, priority: the console places and ranks pods itself.
            errors.extend(podsecurity.scheduling_bypass(spec))
    for name in sorted(template_variables(body)):
        if not VARIABLE_NAME_RE.match(name):
            errors.append(f"'{{{{ {name} }}}}': not a variable; templates use USER_* and WF_* variables, e.g. {{{{ USER_GPU }}}}.")
    return errors


# Kubernetes' limit on all the annotations of one object together (TotalAnnotationSizeLimitB).
ANNOTATIONS_MAX_BYTES = 256 * 1024


def _metadata_errors(kind: str, values: dict) -> list[str]:
    """Label and annotation keys by Kubernetes' rules; label values too (unless a variable fills them)."""
    errors = []
    for key, value in values.items():
        key_text = str(key)
        problems = label_key_errors(key_text)
        if problems:
            errors.append(f"metadata.{kind}[{key_text[:100]}]: Invalid value: " + "; ".join(problems))
        if kind == "labels":
            text = "" if value is None else str(value)
            if "{{" not in text and label_value_errors(text):
                errors.append(f"metadata.labels[{key_text[:100]}]: Invalid value: {text[:100]!r}: "
                              + "; ".join(label_value_errors(text)))
    if kind == "annotations":
        size = sum(len(str(k)) + len(str(v)) for k, v in values.items())
        if size > ANNOTATIONS_MAX_BYTES:
            errors.append(f"metadata.annotations: Too long: must have at most {ANNOTATIONS_MAX_BYTES} bytes (got {size})")
    return errors


# ---------------------------------------------------------------------------------------------------
# Platforms: which nodes


@dataclass(frozen=True)
class NodeView:
    """A node as the platform and validation steps see it: FREE amounts (allocatable minus what runs
    there), and allocatable ones for display. `storage_bytes` is None when the node's ephemeral storage
    is not known; rules naming K8_STORAGE are then not evaluated on it (as OSMO does for a missing value)."""

    name: str
    labels: dict = field(default_factory=dict)
    taints: list = field(default_factory=list)
    cpu_millis: int = 0
    memory_bytes: int = 0
    gpus: Decimal | int = 0
    storage_bytes: int | None = None
    cpu_allocatable_millis: int = 0
    memory_allocatable_bytes: int = 0
    gpu_allocatable: Decimal | int = 0
    storage_allocatable_bytes: int | None = None
    pool: str = ""
    ready: bool = True

    def __hash__(self) -> int:  # labels/taints are dicts/lists: hash by name
        return hash(self.name)


TOLERATION_OPERATORS = ("Equal", "Exists")


def toleration_errors(toleration: Any) -> list[str]:
    """A toleration's errors in the API server's words (field name first); empty when valid."""
    if not isinstance(toleration, dict):
        return ["must be a mapping with key, operator, value, effect"]
    errors = []
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if operator not in TOLERATION_OPERATORS:
        errors.append(f"operator: Unsupported value: {operator!r}: supported values: \"Equal\", \"Exists\"")
    if not key and operator != "Exists":
        errors.append("operator: Invalid value: must be 'Exists' when `key` is empty, which means \"match all values and all keys\"")
    if operator == "Exists" and toleration.get("value"):
        errors.append("operator: Invalid value: value must be empty when `operator` is 'Exists'")
    effect = toleration.get("effect") or ""
    if effect and effect not in TAINT_EFFECTS:
        errors.append(f"effect: Unsupported value: {effect!r}: supported values: \"NoExecute\", \"NoSchedule\", \"PreferNoSchedule\"")
    return errors


def platform_nodes(*, node_selector: dict, tolerations: list[dict], nodes: list[NodeView]) -> list[NodeView]:
    """The nodes whose labels match the selector and whose NoSchedule/NoExecute taints are all tolerated."""
    return [
        node for node in nodes
        if node_selector_matches(node_selector, node.labels) and not untolerated_taints(node.taints or [], tolerations or [])
    ]


def node_exclusion_reason(*, node_selector: dict, tolerations: list[dict], node: NodeView) -> str:
    """Why a node of the pool is not one of the platform's (empty when it is)."""
    missing = [f"{k}={v}" for k, v in (node_selector or {}).items() if str(node.labels.get(k)) != str(v) or k not in node.labels]
    if missing:
        return "labels do not match " + ", ".join(missing)
    taints = untolerated_taints(node.taints or [], tolerations or [])
    if taints:
        return "taint not tolerated: " + ", ".join(taint_text(t) for t in taints)
    return ""


# ---------------------------------------------------------------------------------------------------
# Resource validation

OPERATORS = ("GT", "GE", "LT", "LE", "EQ")
_OPERATOR_TEXT = {"GT": ">", "GE": "≥", "LT": "<", "LE": "≤", "EQ": "="}
NODE_VARIABLES = ("K8_CPU", "K8_MEMORY", "K8_GPU", "K8_STORAGE")
RULE_VARIABLES = USER_VARIABLES + NODE_VARIABLES
_OPERAND_RE = re.compile(
    r"^\s*(?:\{\{\s*(?P<var>[A-Za-z0-9_]+)\s*\}\}|(?P<bare>[A-Z][A-Z0-9_]*_[A-Z0-9_]+)|(?P<literal>[^\s*{}]+))"
    r"\s*(?:\*\s*(?P<factor>[0-9]*\.?[0-9]+))?\s*$"
)


class RuleError(ValueError):
    """A rule set that cannot be saved; `field` names where (e.g. `rules[1].operator`)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


@dataclass
class Rule:
    """One resource validation rule (OSMO's `operator`, `left_operand`, `right_operand`, `assert_message`)."""

    operator: str
    left: str
    right: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"operator": self.operator, "left_operand": self.left, "right_operand": self.right,
                "assert_message": self.message}

    @property
    def names_node_values(self) -> bool:
        return any(name in NODE_VARIABLES for name in _operand_variables(self.left) | _operand_variables(self.right))


@dataclass(frozen=True)
class RuleFailure:
    """A rule not satisfied: its message (variables filled in) and, per node, why that node fails it.

    `words`: the refusal for people, when the rule compares a request with what a node has free ("8 GPUs
    requested: no node of pool default has that many free. The most free on one node is 4 GPUs, of its 8; …");
    the rule's own message and its variables then follow, for the administrator who wrote it."""

    rule: Rule
    message: str
    reasons: tuple[str, ...] = ()
    words: str = ""

    def __str__(self) -> str:
        rule = self.message + (" (" + "; ".join(self.reasons) + ")" if self.reasons else "")
        if not self.words:
            return rule
        return f"{self.words}. The pool's rule: {rule}"


@dataclass(frozen=True)
class _Operand:
    text: str
    variable: str | None
    literal: str | None
    factor: Decimal | None


def _parse_operand(text: Any, field: str) -> _Operand:
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise RuleError(field, f"must be a variable such as {{{{USER_CPU}}}} or a quantity such as 8 or 32Gi, got {text!r}.")
    text = str(text)
    match = _OPERAND_RE.match(text)
    if not match:
        raise RuleError(field, f"{text!r} is neither a variable ({{{{USER_CPU}}}}, {{{{K8_GPU}}}}, ...) nor a quantity "
                               "(8, 500m, 32Gi), optionally times a number (\"{{K8_MEMORY}} * 0.8\").")
    variable = match.group("var") or match.group("bare")
    literal = match.group("literal")
    factor = Decimal(match.group("factor")) if match.group("factor") else None
    if variable is not None and variable not in RULE_VARIABLES:
        raise RuleError(field, f"unknown variable '{variable}': rules compare {', '.join(RULE_VARIABLES)}.")
    if literal is not None:
        try:
            parse_quantity(literal)
        except QuantityError as exc:
            raise RuleError(field, f"{literal!r} is not a quantity ({exc}).") from exc
    return _Operand(text=text, variable=variable, literal=literal, factor=factor)


def _operand_variables(text: str) -> set[str]:
    try:
        operand = _parse_operand(text, "operand")
    except RuleError:
        return set()
    return {operand.variable} if operand.variable else set()


_RULE_KEYS = {"operator": ("operator",), "left": ("left_operand", "left"), "right": ("right_operand", "right"),
              "message": ("assert_message", "message")}


def parse_rules(raw: Any, *, field: str = "rules") -> list[Rule]:
    """Rules from their JSON (OSMO's keys `operator`, `left_operand`, `right_operand`, `assert_message`;
    `left`, `right`, `message` also accepted). Raises RuleError naming the field at fault."""
    if not isinstance(raw, list):
        raise RuleError(field, "must be a list of rules, each {operator, left_operand, right_operand, assert_message}.")
    rules = []
    for index, item in enumerate(raw):
        where = f"{field}[{index}]"
        if not isinstance(item, dict):
            raise RuleError(where, "must be a mapping {operator, left_operand, right_operand, assert_message}.")
        allowed = {key for keys in _RULE_KEYS.values() for key in keys}
        unknown = sorted(set(item) - allowed)
        if unknown:
            raise RuleError(f"{where}.{unknown[0]}", "unknown field: a rule has operator, left_operand, right_operand, assert_message.")
        values = {}
        for attr, keys in _RULE_KEYS.items():
            present = [key for key in keys if key in item]
            if not present:
                if attr == "message":
                    values[attr] = ""
                    continue
                raise RuleError(f"{where}.{keys[0]}", "is required.")
            values[attr] = item[present[0]]
        operator = values["operator"]
        if not isinstance(operator, str) or operator.upper() not in OPERATORS:
            raise RuleError(f"{where}.operator", f"{operator!r} is not one of {', '.join(OPERATORS)}.")
        left = _parse_operand(values["left"], f"{where}.left_operand")
        right = _parse_operand(values["right"], f"{where}.right_operand")
        if left.variable is None and right.variable is None:
            raise RuleError(f"{where}.left_operand", "a rule must compare at least one variable (USER_* or K8_*).")
        message = values["message"]
        if not isinstance(message, str):
            raise RuleError(f"{where}.assert_message", "must be text.")
        for name in sorted(match.group(1) for match in _TOKEN_RE.finditer(message)):
            if name not in RULE_VARIABLES:
                raise RuleError(f"{where}.assert_message", f"unknown variable '{name}': messages may use {', '.join(RULE_VARIABLES)}.")
        rules.append(Rule(operator=operator.upper(), left=left.text, right=right.text, message=message))
    return rules


def _format_bytes(amount: Decimal) -> str:
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if abs(amount) >= size:
            value = (amount / size).quantize(Decimal("0.01")).normalize()
            return f"{value:f}{unit}"
    return f"{amount.normalize():f}"


def _format_cpu(cores: Decimal) -> str:
    if cores == cores.to_integral_value():
        return f"{int(cores)}"
    return f"{int((cores * 1000).to_integral_value())}m"


def node_values(node: NodeView) -> dict[str, Decimal | None]:
    """K8_* values of a node, in base units: CPU cores, memory and storage bytes, GPUs."""
    return {
        "K8_CPU": Decimal(node.cpu_millis) / 1000,
        "K8_MEMORY": Decimal(node.memory_bytes),
        "K8_GPU": Decimal(node.gpus),
        "K8_STORAGE": Decimal(node.storage_bytes) if node.storage_bytes is not None else None,
    }


def _node_display(name: str, value: Decimal) -> str:
    if name in ("K8_MEMORY", "K8_STORAGE"):
        return _format_bytes(value)
    if name == "K8_CPU":
        return _format_cpu(value)
    return f"{value.normalize():f}"


class _Unevaluable(Exception):
    pass


def _operand_value(operand: _Operand, values: Mapping[str, str], node: Mapping[str, Decimal | None] | None) -> tuple[Decimal, str]:
    """(value, display) of an operand; raises _Unevaluable when a node value is not known, ValueError
    when a user value is not a quantity."""
    if operand.variable is None:
        amount = parse_quantity(operand.literal)
        display = operand.literal
    elif operand.variable in NODE_VARIABLES:
        if node is None or node.get(operand.variable) is None:
            raise _Unevaluable(operand.variable)
        amount = node[operand.variable]
        display = f"{operand.variable} {_node_display(operand.variable, amount)}"
    else:
        raw = values.get(operand.variable, DEFAULT_VARIABLES.get(operand.variable))
        try:
            amount = parse_quantity(raw)
        except QuantityError as exc:
            raise ValueError(f"{operand.variable} {raw!r} is not a quantity ({exc})") from exc
        display = f"{operand.variable} {raw}"
    if operand.factor is not None:
        amount = amount * operand.factor
        display = f"{display} × {operand.factor}"
    return amount, display


def _compare(operator: str, left: Decimal, right: Decimal) -> bool:
    return {
        "GT": left > right, "GE": left >= right, "LT": left < right, "LE": left <= right, "EQ": left == right,
    }[operator]


def _why(left: Decimal, left_text: str, right: Decimal, right_text: str, node_first: bool) -> str:
    """The relation that holds, e.g. 'K8_GPU 2 < USER_GPU 4' (node value first when one is named)."""
    if node_first:
        left, left_text, right, right_text = right, right_text, left, left_text
    relation = "<" if left < right else ">" if left > right else "="
    return f"{left_text} {relation} {right_text}"


def _evaluate(rule: Rule, values: Mapping[str, str], node: Mapping[str, Decimal | None] | None) -> str | None:
    """None when the rule holds (or cannot be evaluated); else why it does not."""
    left_op = _parse_operand(rule.left, "left_operand")
    right_op = _parse_operand(rule.right, "right_operand")
    try:
        left, left_text = _operand_value(left_op, values, node)
        right, right_text = _operand_value(right_op, values, node)
    except _Unevaluable:
        return None
    except ValueError as exc:
        return str(exc)
    if _compare(rule.operator, left, right):
        return None
    node_first = right_op.variable in NODE_VARIABLES and left_op.variable not in NODE_VARIABLES
    return _why(left, left_text, right, right_text, node_first)


def _render_message(rule: Rule, values: Mapping[str, str], node_fill: Mapping[str, str]) -> str:
    message = rule.message or f"{rule.left} {_OPERATOR_TEXT[rule.operator]} {rule.right} does not hold"

    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name in node_fill:
            return node_fill[name]
        return str(values.get(name, DEFAULT_VARIABLES.get(name, match.group(0))))

    return _TOKEN_RE.sub(replace, message)


# What each node variable is, in words: (singular, plural) of its unit and the NodeView's allocatable field.
_RESOURCE_WORDS = {
    "K8_GPU": ("GPU", "GPUs", "gpu_allocatable"),
    "K8_CPU": ("CPU core", "CPU cores", "cpu_allocatable_millis"),
    "K8_MEMORY": ("of memory", "of memory", "memory_allocatable_bytes"),
    "K8_STORAGE": ("of ephemeral storage", "of ephemeral storage", "storage_allocatable_bytes"),
}
_USER_OF_NODE = {"K8_GPU": "USER_GPU", "K8_CPU": "USER_CPU", "K8_MEMORY": "USER_MEMORY", "K8_STORAGE": "USER_STORAGE"}
_NODES_NAMED = 5


def _amount_words(name: str, value: Decimal) -> str:
    one, many, _ = _RESOURCE_WORDS[name]
    shown = _node_display(name, value)
    if name in ("K8_MEMORY", "K8_STORAGE"):
        return f"{shown} {one}"
    return f"{shown} {one if value == 1 else many}"


def _allocatable(name: str, node: NodeView, free: Decimal) -> Decimal | None:
    """What the node has in all (None when not known: then only the free amount is said)."""
    raw = getattr(node, _RESOURCE_WORDS[name][2])
    if raw is None:
        return None
    value = Decimal(raw) / 1000 if name == "K8_CPU" else Decimal(raw)
    return value if value and value >= free else None


def _capacity_words(rule: Rule, values: Mapping[str, str], per_node: list) -> str:
    """The refusal of a "request ≤ what a node has free" rule in words, or "" for any other rule."""
    left, right = _parse_operand(rule.left, "left_operand"), _parse_operand(rule.right, "right_operand")
    user, node_var = (left, right) if right.variable in NODE_VARIABLES else (right, left)
    # Only "request ≤ (or <) what a node has free", however it is written round.
    at_most = ("LE", "LT") if user is left else ("GE", "GT")
    if (node_var.variable not in NODE_VARIABLES or user.variable != _USER_OF_NODE[node_var.variable]
            or user.factor is not None or node_var.factor is not None or rule.operator not in at_most):
        return ""
    name = node_var.variable
    try:
        requested = parse_quantity(values.get(user.variable, DEFAULT_VARIABLES.get(user.variable)))
    except QuantityError:
        return ""
    known = [(node, nv[name]) for node, nv in per_node if nv[name] is not None]
    if not known:
        return ""
    pools = {node.pool for node, _ in known if node.pool}
    where = f"pool {pools.pop()}" if len(pools) == 1 else "the pool"
    holding = [node.name for node, nv in per_node if nv[name] is not None and _evaluate(rule, values, nv) is None]
    if holding:
        # Nodes with enough of this free lack something else asked: that rule's refusal says what.
        shown = ", ".join(holding[:_NODES_NAMED]) + (f" and {len(holding) - _NODES_NAMED} more"
                                                      if len(holding) > _NODES_NAMED else "")
        return (f"{_amount_words(name, requested)} requested: {noun(len(holding), 'node')} {shown} of {where} "
                f"{verb(len(holding), 'has', 'have')} that many free but not the rest of what is asked")
    best_node, best = max(known, key=lambda item: item[1])
    of = _allocatable(name, best_node, best)
    most = _amount_words(name, best) + (f", of its {_node_display(name, of)}" if of is not None else "")
    free = [f"{node.name} {_node_display(name, value)}"
            + (f" of {_node_display(name, _allocatable(name, node, value))}"
               if _allocatable(name, node, value) is not None else "")
            for node, value in sorted(known, key=lambda item: (-item[1], item[0].name))[:_NODES_NAMED]]
    more = f" and {len(known) - _NODES_NAMED} more" if len(known) > _NODES_NAMED else ""
    return (f"{_amount_words(name, requested)} requested: no node of {where} has that many free. The most free on "
            f"one node is {most}; free per node now: {', '.join(free)}{more}")


def check_rules(rules: list[Rule], *, values: dict[str, str], nodes: list[NodeView]) -> list[RuleFailure]:
    """The rules not satisfied (empty: the request passes).

    Rules naming only user values are checked once. Rules naming node values (K8_*) pass when at least
    one node satisfies ALL of them; when none does, each such rule a node fails is reported with, per
    node, why (e.g. 'gpu-node-3: K8_GPU 2 < USER_GPU 4')."""
    failures: list[RuleFailure] = []
    static = [rule for rule in rules if not rule.names_node_values]
    node_rules = [rule for rule in rules if rule.names_node_values]
    for rule in static:
        why = _evaluate(rule, values, None)
        if why is not None:
            failures.append(RuleFailure(rule=rule, message=_render_message(rule, values, {}), reasons=(why,)))
    if not node_rules:
        return failures
    per_node = [(node, node_values(node)) for node in nodes]
    results = [(node, [_evaluate(rule, values, nv) for rule in node_rules]) for node, nv in per_node]
    if any(all(why is None for why in whys) for _, whys in results):
        return failures
    # The largest free amount of any node fills K8_* in messages ("exceeds node capacity 2"): K8_* are the
    # amounts a node has FREE (allocatable minus what runs there), as `words` says them.
    best: dict[str, str] = {}
    for name in NODE_VARIABLES:
        known = [nv[name] for _, nv in per_node if nv[name] is not None]
        if known:
            best[name] = _node_display(name, max(known))
    for index, rule in enumerate(node_rules):
        if not nodes:
            reasons: tuple[str, ...] = ("the platform has no nodes",)
        else:
            reasons = tuple(f"{node.name}: {whys[index]}" for node, whys in results if whys[index] is not None)
            if not reasons:
                continue
        words = _capacity_words(rule, values, per_node) if nodes else ""
        failures.append(RuleFailure(rule=rule, message=_render_message(rule, values, best), reasons=reasons,
                                    words=words))
    return failures


# OSMO's shipped rule sets (its documentation's `resourceValidations`), created for every cluster.
DEFAULT_RULE_SETS: dict[str, list[dict[str, str]]] = {
    "default_cpu": [
        {"operator": "LE", "left_operand": "{{USER_CPU}}", "right_operand": "{{K8_CPU}}",
         "assert_message": "CPU {{USER_CPU}} exceeds node capacity {{K8_CPU}}"},
        {"operator": "GT", "left_operand": "{{USER_CPU}}", "right_operand": "0",
         "assert_message": "CPU {{USER_CPU}} must be greater than 0"},
    ],
    "default_gpu": [
        {"operator": "LE", "left_operand": "{{USER_GPU}}", "right_operand": "{{K8_GPU}}",
         "assert_message": "GPU {{USER_GPU}} exceeds node capacity {{K8_GPU}}"},
        {"operator": "GE", "left_operand": "{{USER_GPU}}", "right_operand": "0",
         "assert_message": "GPU {{USER_GPU}} cannot be negative"},
    ],
    "default_memory": [
        {"operator": "LT", "left_operand": "{{USER_MEMORY}}", "right_operand": "{{K8_MEMORY}}",
         "assert_message": "Memory {{USER_MEMORY}} exceeds node capacity {{K8_MEMORY}}"},
        {"operator": "GT", "left_operand": "{{USER_MEMORY}}", "right_operand": "0",
         "assert_message": "Memory {{USER_MEMORY}} must be greater than 0"},
    ],
    "default_storage": [
        {"operator": "LT", "left_operand": "{{USER_STORAGE}}", "right_operand": "{{K8_STORAGE}}",
         "assert_message": "Storage {{USER_STORAGE}} exceeds node capacity {{K8_STORAGE}}"},
        {"operator": "GT", "left_operand": "{{USER_STORAGE}}", "right_operand": "0",
         "assert_message": "Storage {{USER_STORAGE}} must be greater than 0"},
    ],
}

# OSMO's documented base templates, adapted to the console's single user container (`{{ WF_TASK_NAME }}`
# names it; `default_amd64` keeps workloads on amd64 nodes).
DEFAULT_POD_TEMPLATES: dict[str, dict] = {
    "default_user": {
        "spec": {
            "containers": [{
                "name": "{{ WF_TASK_NAME }}",
                "resources": {
                    "limits": {"cpu": "{{ USER_CPU }}", "memory": "{{ USER_MEMORY }}",
                               kube_gpu.GPU_RESOURCE: "{{ USER_GPU }}", "ephemeral-storage": "{{ USER_STORAGE }}"},
                    "requests": {"cpu": "{{ USER_CPU }}", "memory": "{{ USER_MEMORY }}",
                                 kube_gpu.GPU_RESOURCE: "{{ USER_GPU }}", "ephemeral-storage": "{{ USER_STORAGE }}"},
                },
            }],
        },
    },
    "default_amd64": {"spec": {"nodeSelector": {"kubernetes.io/arch": "amd64"}}},
}


# ---------------------------------------------------------------------------------------------------
# What a platform forbids

_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def platform_violations(pod_spec: dict, *, privileged_allowed: bool, host_network_allowed: bool,
                        allowed_mounts: list[str]) -> list[str]:
    """Sentences naming each container or field that the platform does not allow (empty: allowed).

    `pod_spec` is a Pod's spec (or a whole Pod / template body with a `spec`)."""
    spec = pod_spec.get("spec") if isinstance(pod_spec.get("spec"), dict) else pod_spec
    problems = []
    if spec.get("hostNetwork") and not host_network_allowed:
        problems.append("spec.hostNetwork is true, but this platform does not allow host networking.")
    for flag in ("hostPID", "hostIPC"):
        if spec.get(flag) and not privileged_allowed:
            problems.append(f"spec.{flag} is true, but this platform does not allow privileged pods.")
    for list_name in _CONTAINER_LISTS:
        for container in spec.get(list_name) or []:
            if not isinstance(container, dict):
                continue
            context = container.get("securityContext") or {}
            if context.get("privileged") and not privileged_allowed:
                problems.append(
                    f"Container '{container.get('name', '?')}' ({list_name}) sets securityContext.privileged, "
                    "but this platform does not allow privileged containers."
                )
    allowed = set(allowed_mounts or [])
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, dict) or not isinstance(volume.get("hostPath"), dict):
            continue
        path = volume["hostPath"].get("path", "")
        if path not in allowed:
            permitted = ", ".join(sorted(allowed)) if allowed else "none"
            problems.append(
                f"Volume '{volume.get('name', '?')}' mounts host path {path!r}, which this platform does not allow "
                f"(allowed host mounts: {permitted})."
            )
    return problems
