"""A custom resource checked as the API server checks it against its CRD's ``openAPIV3Schema``.

In the API server's order (k8s.io/apiextensions-apiserver): unknown fields are *pruned* (kept under
``x-kubernetes-preserve-unknown-fields``; nulls of fields that are not ``nullable`` dropped), *defaults*
filled (structural defaulting, nested defaults inside a defaulted value too), then the object *validated*:

- the OpenAPI v3 keywords through the ``jsonschema`` library's Draft 4 validator (Draft 4 is what OpenAPI
  v3.0 schemas build on: boolean ``exclusiveMinimum``/``exclusiveMaximum``), adapted the way the API
  server reads a structural schema: ``nullable`` lets null through, ``x-kubernetes-int-or-string`` is the
  type "integer,string" (its ``anyOf`` then says nothing more), ``format: date-time`` is checked, other
  formats (int32, int64, ...) are not;
- ``x-kubernetes-list-type: set`` / ``map`` lists hold no duplicate (items, or keys);
- the ``x-kubernetes-validations`` CEL rules (:mod:`kube.validation.cel`) with ``self`` the value at the
  schema node that carries the rule and, on an update, ``oldSelf`` the old value there when the API server
  can correlate it (through object fields, map keys and ``x-kubernetes-list-type: map`` items; not
  through other lists); transition rules (those naming ``oldSelf``) only then. As the API server does, the
  rules are not evaluated when the schema already found a type, required, enum, too-long or too-many
  error: a last cause "some validation rules were not checked ..." says so.

Every violation is a :class:`Cause` as the API server reports it (reason, field path, message): schema
errors name map entries ``spec.limits.cpu`` and repeat the path in their message, as kube-openapi does;
rule errors name them ``spec.limits[cpu]``, as field.Path does. Not done: the cost budget of CEL rules,
ratcheting of unchanged invalid fields on updates, the ``metadata`` of the root (checked elsewhere).
"""
from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jsonschema import Draft4Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError

from kube.validation import cel as celrules

Schema = dict[str, Any]
PathPart = tuple[str, Any]  # ("field", name) | ("key", map key) | ("index", i)

FIELD_VALUE_INVALID = "FieldValueInvalid"
FIELD_VALUE_REQUIRED = "FieldValueRequired"
FIELD_VALUE_NOT_SUPPORTED = "FieldValueNotSupported"
FIELD_VALUE_TYPE_INVALID = "FieldValueTypeInvalid"
FIELD_VALUE_TOO_LONG = "FieldValueTooLong"
FIELD_VALUE_TOO_MANY = "FieldValueTooMany"
FIELD_VALUE_DUPLICATE = "FieldValueDuplicate"
FIELD_VALUE_FORBIDDEN = "FieldValueForbidden"
# Schema errors after which the API server evaluates no CEL rule (apiextensions strategy.go hasBlockingErr).
BLOCKING = frozenset({FIELD_VALUE_NOT_SUPPORTED, FIELD_VALUE_REQUIRED, FIELD_VALUE_TOO_LONG, FIELD_VALUE_TOO_MANY,
                      FIELD_VALUE_TYPE_INVALID})
NOT_CHECKED_MESSAGE = ('Invalid value: "null": some validation rules were not checked because the object was '
                       "invalid; correct the existing errors to complete validation")


def render(path: tuple[PathPart, ...], *, keys_in_brackets: bool = False) -> str:
    """``spec.template.spec.requirements[2].key``; map keys as ``.key`` (kube-openapi) or ``[key]`` (field.Path)."""
    out = ""
    for kind, part in path:
        if kind == "index" or (kind == "key" and keys_in_brackets):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


@dataclass(frozen=True)
class Cause:
    """One field error: ``reason`` FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, ...;
    ``field`` the path as the API server names it ("<nil>" for none); ``path`` its parts."""

    reason: str
    field: str
    message: str
    path: tuple[PathPart, ...] = ()

    def as_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    @property
    def bracketed(self) -> str:
        """The path with map keys in brackets (``spec.limits[nvidia.com/gpu]``), as forms show it."""
        return render(self.path, keys_in_brackets=True) if self.path else self.field


def shown(value: Any) -> str:
    """A bad value as field.Error shows it (Go's %q for strings, %v for numbers and booleans)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return '"null"'
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _int_or_string(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-int-or-string"))


# ------------------------------------------------------------------------------------ the OpenAPI keywords

_DRAFT4 = Draft4Validator.VALIDATORS


def _type(validator: Any, types: Any, instance: Any, schema: Schema) -> Iterator[ValidationError]:
    if instance is None and schema.get("nullable"):
        return
    yield from _DRAFT4["type"](validator, types, instance, schema)


def _int_or_string_type(validator: Any, on: Any, instance: Any, schema: Schema) -> Iterator[ValidationError]:
    if not on or (instance is None and schema.get("nullable")):
        return
    if isinstance(instance, str) or (isinstance(instance, int) and not isinstance(instance, bool)):
        return
    yield ValidationError("not an integer or string", validator="type", validator_value=["integer", "string"],
                          instance=instance, schema=schema)


def _any_of(validator: Any, any_of: Any, instance: Any, schema: Schema) -> Iterator[ValidationError]:
    if _int_or_string(schema):
        return  # [integer, string]: the type above says it
    yield from _DRAFT4["anyOf"](validator, any_of, instance, schema)


def _required(validator: Any, required: Any, instance: Any, schema: Schema) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    for name in required:
        if instance.get(name) is None:
            yield ValidationError(f"{name!r} is a required property", validator="required", path=[name],
                                  validator_value=required, instance=instance, schema=schema)


def _no_check(validator: Any, value: Any, instance: Any, schema: Schema) -> Iterator[ValidationError]:
    return iter(())


_OpenAPIValidator = validators.extend(Draft4Validator, {
    "type": _type, "anyOf": _any_of, "required": _required, "x-kubernetes-int-or-string": _int_or_string_type,
    # Draft 4 checks these against a "$schema"-less root too; the API server ignores them.
    "dependencies": _no_check,
})

_FORMATS = FormatChecker(())


@_FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    datetime.fromisoformat(value.replace("z", "Z"))
    return "T" in value.upper()


def _schema_path(root: Schema, path: Any) -> tuple[tuple[PathPart, ...], Schema | None]:
    """An instance path of jsonschema as parts, telling fields from map keys by the schema."""
    node: Schema | None = root
    parts: list[PathPart] = []
    for part in path:
        if isinstance(part, int):
            parts.append(("index", part))
            node = node.get("items") if isinstance(node, dict) else None
            continue
        props = node.get("properties") if isinstance(node, dict) else None
        if props and part in props:
            parts.append(("field", part))
            node = props[part]
        elif isinstance(node, dict) and isinstance(node.get("additionalProperties"), dict):
            parts.append(("key", part))
            node = node["additionalProperties"]
        else:
            parts.append(("field", part))
            node = None
    return tuple(parts), node


def _schema_cause(root: Schema, error: ValidationError, base: tuple[PathPart, ...]) -> Cause:
    parts, _ = _schema_path(root, error.absolute_path)
    parts = base + parts
    at = render(parts) or "<nil>"
    keyword, wanted, value, node = error.validator, error.validator_value, error.instance, error.schema

    def invalid(detail: str, bad: Any = None, reason: str = FIELD_VALUE_INVALID) -> Cause:
        return Cause(reason, at, f"Invalid value: {shown(value if bad is None else bad)}: {at} in body {detail}", parts)

    if keyword == "required":
        return Cause(FIELD_VALUE_REQUIRED, at, "Required value", parts)
    if keyword == "type":
        kinds = ",".join(wanted) if isinstance(wanted, list) else str(wanted)
        if _int_or_string(node):
            kinds = "integer,string"
        actual = type_name(value)
        return Cause(FIELD_VALUE_TYPE_INVALID, at,
                     f'Invalid value: "{actual}": {at} in body must be of type {kinds}: "{actual}"', parts)
    if keyword == "enum":
        supported = ", ".join(json.dumps(v) if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
                              for v in wanted)
        return Cause(FIELD_VALUE_NOT_SUPPORTED, at, f"Unsupported value: {shown(value)}: supported values: {supported}",
                     parts)
    if keyword == "maxLength":
        return Cause(FIELD_VALUE_TOO_LONG, at, f"Too long: may not be more than {wanted} bytes", parts)
    if keyword in ("maxItems", "maxProperties"):
        return Cause(FIELD_VALUE_TOO_MANY, at, f"Too many: {len(value)}: must have at most {wanted} items", parts)
    if keyword == "format":
        return Cause(FIELD_VALUE_TYPE_INVALID, at,
                     f"Invalid value: {shown(value)}: {at} in body must be of type {wanted}: {shown(value)}", parts)
    if keyword == "minimum":
        strict = node.get("exclusiveMinimum") is True
        return invalid(f"should be greater than {'' if strict else 'or equal to '}{shown(wanted)}")
    if keyword == "maximum":
        strict = node.get("exclusiveMaximum") is True
        return invalid(f"should be less than {'' if strict else 'or equal to '}{shown(wanted)}")
    if keyword == "minLength":
        return invalid(f"should be at least {wanted} chars long")
    if keyword == "pattern":
        return invalid(f"should match '{wanted}'")
    if keyword == "minItems":
        return invalid(f"should have at least {wanted} items", len(value))
    if keyword == "minProperties":
        return invalid(f"should have at least {wanted} properties", len(value))
    if keyword == "multipleOf":
        return invalid(f"should be a multiple of {shown(wanted)}")
    if keyword == "uniqueItems":
        return invalid("shouldn't contain duplicates")
    if keyword == "oneOf":
        return invalid("must validate one and only one schema (oneOf)")
    if keyword == "anyOf":
        return invalid("must validate at least one schema (anyOf)")
    if keyword == "not":
        return invalid("must not validate the schema (not)")
    return invalid(error.message)


# ------------------------------------------------------------------------------------ list types

def _go_value(value: Any) -> str:
    """A duplicate list item as field.Duplicate shows it (Go's %#v of a JSON value)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        inner = ", ".join(f"{json.dumps(k)}:{_go_value(v)}" for k, v in sorted(value.items()))
        return f"map[string]interface {{}}{{{inner}}}"
    return shown(value)


def _list_duplicates(schema: Schema, value: Any, parts: tuple[PathPart, ...], out: list[Cause]) -> None:
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            if name in props:
                _list_duplicates(props[name], item, (*parts, ("field", name)), out)
            elif isinstance(extra, dict):
                _list_duplicates(extra, item, (*parts, ("key", name)), out)
    elif isinstance(value, list):
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        list_type = schema.get("x-kubernetes-list-type")
        seen: set[str] = set()
        for i, item in enumerate(value):
            at = (*parts, ("index", i))
            if list_type in ("set", "map"):
                keys = schema.get("x-kubernetes-list-map-keys") or ()
                ident = item if list_type == "set" or not isinstance(item, dict) else {k: item.get(k) for k in keys}
                token = json.dumps(ident, sort_keys=True)
                if token in seen:
                    out.append(Cause(FIELD_VALUE_DUPLICATE, render(at), f"Duplicate value: {_go_value(ident)}", at))
                seen.add(token)
            _list_duplicates(items, item, at, out)


# ------------------------------------------------------------------------------------ CEL rules

def _nodes_with_rules(schema: Any, out: set[int]) -> bool:
    """Collect the ids of the schema nodes with a rule at or below them; True when ``schema`` is one."""
    if not isinstance(schema, dict):
        return False
    subs = [*(schema.get("properties") or {}).values(), schema.get("items"), schema.get("additionalProperties"),
            *(schema.get("allOf") or ())]
    found = bool(schema.get("x-kubernetes-validations"))
    for sub in subs:
        found = _nodes_with_rules(sub, out) or found
    if found:
        out.add(id(schema))
    return found


def _rule_path(base: tuple[PathPart, ...], field_path: str) -> tuple[PathPart, ...]:
    """A rule's ``fieldPath`` (``.spec.x`` or ``['key']``) under the node's path (field.Path.Child)."""
    if not field_path:
        return base
    return (*base, ("field", field_path.lstrip(".")))


class SchemaValidator:
    """Pruning, defaulting and validation by one ``openAPIV3Schema`` (compiled once, reused)."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self._json = _OpenAPIValidator(schema, format_checker=_FORMATS)
        with_rules: set[int] = set()
        self.has_rules = _nodes_with_rules(schema, with_rules)
        self._with_rules = frozenset(with_rules)

    # -------------------------------------------------------------- pruning and defaulting

    def prune(self, value: Any) -> list[str]:
        """Drop unknown fields and nulls of fields that are not nullable, in place; the unknown fields' paths."""
        unknown: list[str] = []
        _prune(self.schema, value, (), unknown)
        return unknown

    def default(self, value: Any) -> Any:
        """Fill the ``default`` of absent fields, in place (structural defaulting); returns ``value``."""
        _default(self.schema, value)
        return value

    # -------------------------------------------------------------- validation

    def schema_causes(self, value: Any, base: tuple[PathPart, ...] = ()) -> list[Cause]:
        causes = [_schema_cause(self.schema, e, base) for e in self._json.iter_errors(value)]
        _list_duplicates(self.schema, value, base, causes)
        return causes

    def rule_causes(self, value: Any, old: Any = celrules.UNSET, base: tuple[PathPart, ...] = ()) -> list[Cause]:
        causes: list[Cause] = []
        _rules(self.schema, value, old, base, causes, self._with_rules)
        return causes

    def validate(self, value: Any, old: Any = None, base: tuple[PathPart, ...] = ()) -> list[Cause]:
        """Every violation of the schema and its rules by ``value``; ``old``: the stored value an update
        replaces (None on a create)."""
        causes = self.schema_causes(value, base)
        if self.has_rules:
            if any(c.reason in BLOCKING for c in causes):
                causes.append(Cause(FIELD_VALUE_INVALID, "<nil>", NOT_CHECKED_MESSAGE))
            else:
                causes += self.rule_causes(value, celrules.UNSET if old is None else old, base)
        return causes

    def rules(self) -> list[tuple[str, celrules.Rule]]:
        """Every rule of the schema, compiled, with the schema path that carries it."""
        out: list[tuple[str, celrules.Rule]] = []
        _collect_rules(self.schema, "", out)
        return out


def _collect_rules(schema: Any, at: str, out: list[tuple[str, celrules.Rule]]) -> None:
    if not isinstance(schema, dict):
        return
    for spec in schema.get("x-kubernetes-validations") or ():
        out.append((at or "<root>", celrules.compile_rule(spec)))
    for name, sub in (schema.get("properties") or {}).items():
        _collect_rules(sub, f"{at}.{name}" if at else name, out)
    _collect_rules(schema.get("items"), f"{at}[*]", out)
    _collect_rules(schema.get("additionalProperties"), f"{at}[*]", out)
    for sub in schema.get("allOf") or ():
        _collect_rules(sub, at, out)


def _prune(schema: Any, value: Any, parts: tuple[PathPart, ...], unknown: list[str]) -> None:
    if not isinstance(schema, dict):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields")
        for name in list(value):
            sub = (props or {}).get(name)
            kind = "field"
            if sub is None and isinstance(extra, dict):
                sub, kind = extra, "key"
            if sub is None:
                # A node without properties keeps its fields (the emulator's hand schemas of built-in kinds);
                # no CRD here has one besides the root's metadata, which is checked elsewhere.
                if props is not None and extra is not True and not preserve:
                    unknown.append(render((*parts, ("field", name))))
                    del value[name]
                continue
            if value[name] is None and not sub.get("nullable"):
                del value[name]
                continue
            _prune(sub, value[name], (*parts, (kind, name)), unknown)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _prune(schema["items"], item, (*parts, ("index", i)), unknown)


def _default(schema: Any, value: Any) -> None:
    if not isinstance(schema, dict):
        return
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if "default" in sub and (name not in value or (value[name] is None and not sub.get("nullable"))):
                value[name] = copy.deepcopy(sub["default"])
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            if name in props:
                _default(props[name], item)
            elif isinstance(extra, dict):
                _default(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(schema["items"], item)


def _correlated_item(schema: Schema, item: Any, old_list: Any) -> Any:
    """The old item of an ``x-kubernetes-list-type: map`` list with the same keys (UNSET otherwise)."""
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old_list, list) or not isinstance(item, dict):
        return celrules.UNSET
    keys = schema.get("x-kubernetes-list-map-keys") or ()
    for old in old_list:
        if isinstance(old, dict) and all(old.get(k) == item.get(k) for k in keys):
            return old
    return celrules.UNSET


def _rules(schema: Any, value: Any, old: Any, parts: tuple[PathPart, ...], causes: list[Cause],
           with_rules: frozenset[int]) -> None:
    if value is None or id(schema) not in with_rules:
        return
    specs = schema.get("x-kubernetes-validations") or ()
    if specs:
        self_value = celrules.schema_value(value, schema)
        old_value = celrules.UNSET if old is celrules.UNSET or old is None else celrules.schema_value(old, schema)
        shown_type = "integer,string" if _int_or_string(schema) else (schema.get("type") or type_name(value))
        for spec in specs:
            rule = celrules.compile_rule(spec)
            outcome = celrules.evaluate(rule, self_value, old_value)
            if not outcome.passed:
                at = _rule_path(parts, rule.field_path) if outcome.rule_false else parts
                causes.append(_rule_cause(rule, at, shown_type, outcome.detail, outcome.rule_false))
    for sub in schema.get("allOf") or ():
        _rules(sub, value, old, parts, causes, with_rules)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        old_map = old if isinstance(old, dict) else {}
        for name, item in value.items():
            if name in props:
                _rules(props[name], item, old_map.get(name, celrules.UNSET), (*parts, ("field", name)), causes,
                       with_rules)
            elif isinstance(extra, dict):
                _rules(extra, item, old_map.get(name, celrules.UNSET), (*parts, ("key", name)), causes, with_rules)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _rules(schema["items"], item, _correlated_item(schema, item, old), (*parts, ("index", i)), causes,
                   with_rules)


def _rule_cause(rule: celrules.Rule, parts: tuple[PathPart, ...], shown_type: str, detail: str,
                rule_false: bool) -> Cause:
    at = render(parts, keys_in_brackets=True) or "<nil>"
    reason = rule.reason if rule_false else ""
    if reason == FIELD_VALUE_FORBIDDEN:
        return Cause(FIELD_VALUE_FORBIDDEN, at, f"Forbidden: {detail}", parts)
    if reason == FIELD_VALUE_REQUIRED:
        return Cause(FIELD_VALUE_REQUIRED, at, f"Required value: {detail}", parts)
    if reason == FIELD_VALUE_DUPLICATE:
        return Cause(FIELD_VALUE_DUPLICATE, at, f'Duplicate value: "{shown_type}"', parts)
    return Cause(FIELD_VALUE_INVALID, at, f'Invalid value: "{shown_type}": {detail}', parts)
