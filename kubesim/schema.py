"""A small OpenAPI v3 (structural schema) subset: defaulting, pruning and validation, as the API server
does for custom resources.

Supported keywords: type, properties, required, additionalProperties, items, enum, default, nullable,
minimum/maximum (and exclusive*), minLength/maxLength, pattern, minItems/maxItems, min/maxProperties,
anyOf (only as the int-or-string form), x-kubernetes-int-or-string, x-kubernetes-preserve-unknown-fields, and
the CEL rules (x-kubernetes-validations) that kubesim.cel implements in Python (others are not evaluated;
transition rules only on an update, with the stored object as ``old``).  Messages and cause reasons follow
k8s.io/apiextensions-apiserver so that clients and people see what a real cluster says.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kubesim.cel import failed as failed_rules

Schema = dict[str, Any]


@dataclass(frozen=True)
class Cause:
    """One field error: ``reason`` is FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, ..."""

    reason: str
    field: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "object" if isinstance(value, dict) else "array"
    return str(value)


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None  # a Go-only construct: not checked rather than wrongly refused


def _int_or_string(schema: Schema) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return True
    kinds = {s.get("type") for s in schema.get("anyOf") or ()}
    return kinds == {"integer", "string"}


def _preserves(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))


def apply_defaults(schema: Schema, value: Any) -> Any:
    """Fill ``default`` values of absent properties, in place (as structural defaulting does)."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                apply_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name, item in value.items():
                if name not in props:
                    apply_defaults(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(schema["items"], item)
    return value


def prune(schema: Schema, value: Any, path: str = "") -> list[str]:
    """Drop unknown fields and nulls of non-nullable fields in place; returns the unknown fields' paths."""
    unknown: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for name in list(value):
            sub = (props or {}).get(name)
            if sub is None and isinstance(extra, dict):
                sub = extra
            if sub is None:
                if props is not None and extra is not True and not _preserves(schema):
                    unknown.append(_join(path, name))
                    del value[name]
                continue
            if value[name] is None and not sub.get("nullable"):
                del value[name]
                continue
            unknown += prune(sub, value[name], _join(path, name))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            unknown += prune(schema["items"], item, f"{path}[{i}]")
    return unknown


def validate(schema: Schema, value: Any, path: str = "", old: Any = None) -> list[Cause]:
    """Every violation of ``schema`` by ``value``, with the field path the API server reports; ``old``: the
    stored object an update replaces (for CEL transition rules)."""
    causes: list[Cause] = []
    _validate(schema, value, path, causes, old)
    return causes


def _validate(schema: Schema, value: Any, path: str, causes: list[Cause], old: Any = None) -> None:
    if value is None:
        if not schema.get("nullable") and schema.get("type"):
            causes.append(Cause("FieldValueTypeInvalid", path, f"Invalid value: \"null\": {path} in body must be of "
                                                                 f"type {schema['type']}: \"null\""))
        return
    actual = _type_of(value)
    wanted = schema.get("type")
    if _int_or_string(schema):
        if actual not in ("integer", "string"):
            causes.append(Cause("FieldValueTypeInvalid", path, f"Invalid value: {_show(value)}: {path} in body must be "
                                                                 f"of type integer,string: {_show(value)}"))
            return
        wanted = None
    elif wanted and not (actual == wanted or (wanted == "number" and actual == "integer")):
        causes.append(Cause("FieldValueTypeInvalid", path,
                            f'Invalid value: "{actual}": {path} in body must be of type {wanted}: "{actual}"'))
        return
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_show(v) for v in schema["enum"])
        causes.append(Cause("FieldValueNotSupported", path,
                            f"Unsupported value: {_show(value)}: supported values: {supported}"))
    if actual in ("integer", "number"):
        _numeric(schema, value, path, causes)
    elif actual == "string":
        _string(schema, value, path, causes)
    elif actual == "array":
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append(Cause("FieldValueInvalid", path, f"Invalid value: {len(value)}: {path} in body should have "
                                                             f"at least {schema['minItems']} items"))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append(Cause("FieldValueTooMany", path,
                                f"Too many: {len(value)}: must have at most {schema['maxItems']} items"))
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                # Items of a list are not correlated with the old list's (atomic lists): no oldSelf there.
                _validate(items, item, f"{path}[{i}]", causes)
    elif actual == "object":
        props = schema.get("properties") or {}
        for name in schema.get("required") or ():
            if name not in value or value[name] is None:
                causes.append(Cause("FieldValueRequired", _join(path, name), "Required value"))
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            causes.append(Cause("FieldValueInvalid", path, f"Invalid value: {len(value)}: {path} in body should have "
                                                             f"at least {schema['minProperties']} properties"))
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            causes.append(Cause("FieldValueTooMany", path, f"Too many: {len(value)}: must have at most "
                                                             f"{schema['maxProperties']} items"))
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            sub = props.get(name)
            if sub is None and isinstance(extra, dict):
                sub = extra
            if sub is not None:
                _validate(sub, item, _join(path, name), causes, old.get(name) if isinstance(old, dict) else None)
    rules = schema.get("x-kubernetes-validations")
    if rules:
        for message in failed_rules(rules, value, old):
            causes.append(Cause("FieldValueInvalid", path, f'Invalid value: "{wanted or actual}": {message}'))


def _numeric(schema: Schema, value: float, path: str, causes: list[Cause]) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None:
        if schema.get("exclusiveMinimum") and value <= low:
            causes.append(Cause("FieldValueInvalid", path,
                                f"Invalid value: {_show(value)}: {path} in body should be greater than {low}"))
        elif value < low:
            causes.append(Cause("FieldValueInvalid", path, f"Invalid value: {_show(value)}: {path} in body should be "
                                                             f"greater than or equal to {low}"))
    if high is not None:
        if schema.get("exclusiveMaximum") and value >= high:
            causes.append(Cause("FieldValueInvalid", path,
                                f"Invalid value: {_show(value)}: {path} in body should be less than {high}"))
        elif value > high:
            causes.append(Cause("FieldValueInvalid", path, f"Invalid value: {_show(value)}: {path} in body should be "
                                                             f"less than or equal to {high}"))


def _string(schema: Schema, value: str, path: str, causes: list[Cause]) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        causes.append(Cause("FieldValueTooLong", path, f"Too long: may not be more than {schema['maxLength']} bytes"))
    if "minLength" in schema and len(value) < schema["minLength"]:
        causes.append(Cause("FieldValueInvalid", path, f"Invalid value: {_show(value)}: {path} in body should be at "
                                                         f"least {schema['minLength']} chars long"))
    pattern = schema.get("pattern")
    if pattern and (rx := _regex(pattern)) is not None and not rx.search(value):
        causes.append(Cause("FieldValueInvalid", path,
                            f"Invalid value: {_show(value)}: {path} in body should match '{pattern}'"))
