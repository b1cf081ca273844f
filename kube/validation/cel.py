"""``x-kubernetes-validations`` rules: CEL through the ``cel`` library (PyPI ``common-expression-language``,
bindings to cel-rust), with the Kubernetes CEL libraries' functions it lacks.

The library evaluates the CEL language itself (macros ``has``/``all``/``exists``/``exists_one``/``map``/
``filter``, ``size``, conversions, ``matches``, ``startsWith``, ``endsWith``, ``contains``, timestamps and
durations); the extended string functions come from its own ``cel.stdlib`` (``charAt``, ``indexOf``,
``lastIndexOf``, ``lowerAscii``, ``upperAscii``, ``replace``, ``split``, ``substring``, ``trim``, ``join``,
``strings.quote``, the ``math.*`` and ``sets.*`` functions); this module adds the Kubernetes ones
(k8s.io/apiserver/pkg/cel/library): the regex library (``find``, ``findAll``) and the lists library
(``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf`` on lists).

A rule is compiled once (:func:`compile_rule`); it *fails to compile* when the library cannot parse it or
when it calls a function that neither the library nor this module provides (the Kubernetes quantity, URL,
IP/CIDR, authz and format libraries are not here: no CRD here uses them). The API server refuses such a CRD
at creation, so the emulator refuses to register it, and the test suite compiles every rule of every CRD
and evaluates each on valid objects (tests/kube/test_crd.py): no rule is ever skipped. An evaluation error
(a missing key, an integer that does not parse, ...) refuses the object in the API server's words
("<error> evaluating rule: <message>"), never a 500. Not done: the cost budget, type checking a rule
against the schema at compile time (cel-go's), optional-field syntax (``self.?x``, refused at compile).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

import cel
from cel import stdlib

# What the library evaluates itself (operators are spelled `_+_`, `!_`, `@in`, ... by Program.functions()).
NATIVE = frozenset({
    "size", "int", "uint", "double", "string", "bytes", "timestamp", "duration", "type", "dyn",
    "matches", "contains", "startsWith", "endsWith",
    "getFullYear", "getMonth", "getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear", "getHours",
    "getMinutes", "getSeconds", "getMilliseconds",
})


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def find(text: str, pattern: str) -> str:
    """k8s regex library: the first match of ``pattern`` in ``text``, "" when none."""
    match = _regex(pattern).search(text)
    return match.group(0) if match else ""


def find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    """k8s regex library: every match (at most ``limit`` when it is not negative)."""
    found = [m.group(0) for m in _regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


def is_sorted(items: list[Any]) -> bool:
    """k8s lists library: ``[1, 2, 2].isSorted()``."""
    return all(a <= b for a, b in zip(items, items[1:]))


def index_of(target: Any, item: Any, *rest: Any) -> int:
    """``indexOf`` of the strings extension (a substring) and of the k8s lists library (an element)."""
    if isinstance(target, str):
        return stdlib.index_of(target, item, *rest)
    return next((i for i, x in enumerate(target) if x == item), -1)


def last_index_of(target: Any, item: Any, *rest: Any) -> int:
    if isinstance(target, str):
        return stdlib.last_index_of(target, item, *rest)
    return next((i for i in range(len(target) - 1, -1, -1) if target[i] == item), -1)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    **stdlib.EXTENSIONS["core"], **stdlib.EXTENSIONS["strings"], **stdlib.EXTENSIONS["math"],
    **stdlib.EXTENSIONS["sets"], **stdlib.EXTENSIONS["encoders"],
    "find": find, "findAll": find_all, "isSorted": is_sorted, "indexOf": index_of, "lastIndexOf": last_index_of,
}
FUNCTIONS.pop("reverse", None)  # strings extension version 3, newer than the API server's (version 2)


def _unknown_functions(program: cel.Program) -> list[str]:
    return [name for name in program.functions()
            if not (name.startswith(("_", "@", "!", "-")) or name in NATIVE or name in FUNCTIONS)]


@dataclass(frozen=True)
class Rule:
    """One compiled ``x-kubernetes-validations`` entry."""

    rule: str
    message: str = ""
    message_expression: str = ""
    field_path: str = ""
    reason: str = ""
    optional_old_self: bool = False
    program: cel.Program | None = field(default=None, compare=False)
    message_program: cel.Program | None = field(default=None, compare=False)
    uses_old_self: bool = False
    error: str = ""  # why it does not compile ("" when it does)
    functions: dict[str, Callable[..., Any]] = field(default_factory=dict, compare=False)  # ours it calls

    @property
    def shown(self) -> str:
        """What the API server names the rule by in its messages: its message, else its expression."""
        return self.message.strip() or self.rule.strip()

    @property
    def failure(self) -> str:
        return self.message.strip() or f"failed rule: {self.rule.strip()}"


def _compile(text: str) -> tuple[cel.Program | None, str]:
    try:
        program = cel.compile(text)
    except Exception as exc:  # the library raises ValueError with the parser's report
        return None, str(exc).strip()
    unknown = _unknown_functions(program)
    if unknown:
        return None, f"undeclared reference to {', '.join(repr(u) for u in unknown)}"
    return program, ""


@lru_cache(maxsize=1024)
def _compile_rule(rule: str, message: str, message_expression: str, field_path: str, reason: str,
                  optional_old_self: bool) -> Rule:
    program, error = _compile(rule)
    message_program = None
    if not error and message_expression:
        message_program, problem = _compile(message_expression)
        if problem:
            error = f"messageExpression compilation failed: {problem}"
    used = {name for p in (program, message_program) if p is not None for name in p.functions()}
    return Rule(rule, message, message_expression, field_path, reason, optional_old_self, program,
                message_program, uses_old_self=program is not None and "oldSelf" in program.variables(), error=error,
                functions={name: FUNCTIONS[name] for name in sorted(used) if name in FUNCTIONS})


def compile_rule(spec: dict[str, Any]) -> Rule:
    """An ``x-kubernetes-validations`` entry (``rule``, ``message``, ``messageExpression``, ``fieldPath``,
    ``reason``, ``optionalOldSelf``) compiled once."""
    return _compile_rule(str(spec.get("rule") or ""), str(spec.get("message") or ""),
                         str(spec.get("messageExpression") or ""), str(spec.get("fieldPath") or ""),
                         str(spec.get("reason") or ""), bool(spec.get("optionalOldSelf")))


def _context(rule: Rule, variables: dict[str, Any]) -> cel.Context:
    return cel.Context(variables=variables, functions=rule.functions)  # only the functions it calls: cheaper


def error_text(exc: BaseException) -> str:
    """A library error in cel-go's words, as the API server shows them."""
    text = str(exc)
    if isinstance(exc, KeyError):
        return f"no such key: {exc.args[0] if exc.args else ''}"
    if isinstance(exc, ZeroDivisionError):
        return "division by zero"
    if isinstance(exc, TypeError) and text.lower().startswith(("no such overload", "unsupported operation")):
        return "no such overload"
    conversion = re.match(r"Function '(int|uint|double|bool|duration|timestamp)' error: (string )?parse", text)
    if conversion:
        return f"type conversion error from 'string' to '{conversion.group(1)}'"
    return text.split(". Check function arguments")[0]


class _Unset:
    pass


UNSET = _Unset()  # oldSelf absent (a create, or a value the API server cannot correlate)


@dataclass(frozen=True)
class Outcome:
    """``passed``; else ``detail`` (the rule's message, or the API server's text for an evaluation error) and
    ``rule_false`` (the rule evaluated to false, rather than failing to evaluate)."""

    passed: bool
    detail: str = ""
    rule_false: bool = False


PASSED = Outcome(True)


def evaluate(rule: Rule, value: Any, old: Any = UNSET) -> Outcome:
    """Run ``rule`` with ``self`` = ``value`` and ``oldSelf`` = ``old``; a transition rule (naming ``oldSelf``)
    without an old value is skipped (passes), unless it sets ``optionalOldSelf``."""
    if rule.program is None:
        return Outcome(False, f"rule compile error: {rule.error}")
    if rule.uses_old_self and old is UNSET and not rule.optional_old_self:
        return PASSED
    variables: dict[str, Any] = {"self": value}
    if rule.uses_old_self:
        if rule.optional_old_self:
            variables["oldSelf"] = cel.OptionalValue.none() if old is UNSET else cel.OptionalValue.of(old)
        else:
            variables["oldSelf"] = old
    try:
        result = rule.program.execute(_context(rule, variables))
    except Exception as exc:
        problem = error_text(exc)
        if problem == "no such overload":
            return Outcome(False, f"'{problem}': call arguments did not match a supported operator, function or "
                                  f"macro signature for rule: {rule.shown}")
        return Outcome(False, f"{problem} evaluating rule: {rule.shown}")
    if result is True:
        return PASSED
    if rule.message_program is not None:
        try:
            text = rule.message_program.execute(_context(rule, variables))
            if isinstance(text, str) and text.strip() and "\n" not in text.strip():
                return Outcome(False, text.strip(), rule_false=True)
        except Exception:  # the API server falls back to the message (and only logs)
            pass
    return Outcome(False, rule.failure, rule_false=True)


def schema_value(value: Any, schema: dict[str, Any] | None) -> Any:
    """``value`` as the API server hands it to CEL: numbers of ``type: number`` fields as doubles, ``format:
    date-time`` strings as timestamps, ``format: duration`` strings as durations; objects, maps and lists
    through their schemas (a new value: ``value`` is not changed)."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        return {k: schema_value(v, props.get(k) if k in props else (extra if isinstance(extra, dict) else None))
                for k, v in value.items()}
    if isinstance(value, list):
        return [schema_value(v, schema.get("items")) for v in value]
    if schema.get("type") == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if schema.get("format") == "duration" and isinstance(value, str):
        parsed = _go_duration(value)
        return parsed if parsed is not None else value
    if schema.get("format") == "date-time" and isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return value
    return value


_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _go_duration(text: str) -> timedelta | None:
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    if body == "0":
        return timedelta(0)
    parts = _DURATION.findall(body)
    if not parts or "".join(n + u for n, u in parts) != body:
        return None
    return timedelta(seconds=sign * sum(float(n) * _UNIT[u] for n, u in parts))
