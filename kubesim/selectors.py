"""Label and field selectors, compiled into predicates."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from kubesim.resources import get_resource
from kubesim.util import Labels


class SelectorError(ValueError):
    """An unparsable or unsupported label/field selector (answered as 400 BadRequest)."""


_LABEL_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_RE_NOT_EXISTS = re.compile(rf"^!\s*({_LABEL_KEY})$")
_RE_SET = re.compile(rf"^({_LABEL_KEY})\s+(in|notin)\s*\(([^()]*)\)$")
_RE_EQ = re.compile(rf"^({_LABEL_KEY})\s*(==|=|!=)\s*({_LABEL_VALUE})$")
_RE_CMP = re.compile(rf"^({_LABEL_KEY})\s*(<|>)\s*(-?\d+)$")
_RE_EXISTS = re.compile(rf"^({_LABEL_KEY})$")
_RE_VALUE = re.compile(rf"^{_LABEL_VALUE}$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (``a in (x,y),b``)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced parenthesis in selector {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise SelectorError(f"unbalanced parenthesis in selector {text!r}")
    parts.append(text[start:])
    return parts


def _label_requirement(term: str) -> Callable[[Mapping[str, str]], bool]:
    if m := _RE_NOT_EXISTS.match(term):
        key = m.group(1)
        return lambda labels: key not in labels
    if m := _RE_SET.match(term):
        key, op, raw = m.group(1), m.group(2), m.group(3)
        values = frozenset(v.strip() for v in raw.split(",") if v.strip())
        for v in values:
            if not _RE_VALUE.match(v):
                raise SelectorError(f"invalid label value {v!r}")
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _RE_EQ.match(term):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _RE_CMP.match(term):
        key, op, bound = m.group(1), m.group(2), int(m.group(3))

        def compare(labels: Mapping[str, str]) -> bool:
            try:
                value = int(labels[key])
            except (KeyError, ValueError):
                return False
            return value > bound if op == ">" else value < bound

        return compare
    if m := _RE_EXISTS.match(term):
        key = m.group(1)
        return lambda labels: key in labels
    raise SelectorError(f"unable to parse requirement: {term!r}")


def parse_label_selector(text: str | None) -> Callable[[Mapping[str, str]], bool] | None:
    """Compile a Kubernetes label selector into a predicate on a labels mapping.

    Supports ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``,
    ``k notin (a,b)``, ``k>n``, ``k<n``; comma-separated terms are ANDed.
    Returns ``None`` for an empty selector (matches everything).
    """
    if not text or not text.strip():
        return None
    reqs = [_label_requirement(t.strip()) for t in _split_top_level(text) if t.strip()]
    if not reqs:
        return None
    if len(reqs) == 1:
        return reqs[0]
    return lambda labels: all(r(labels) for r in reqs)


def _field_requirement(i: int, equal: bool, value: str) -> Callable[[Sequence[str]], bool]:
    if equal:
        return lambda fields: fields[i] == value
    return lambda fields: fields[i] != value


def parse_field_selector(kind: str, text: str | None) -> Callable[[Sequence[str]], bool] | None:
    """Compile a field selector for resource ``kind`` ("nodes", "pods", "jobs.batch", ...) into a predicate
    on the object's field tuple (see :attr:`kubesim.resources.Resource.fields`)."""
    if not text or not text.strip():
        return None
    index = get_resource(kind).field_index
    reqs: list[Callable[[Sequence[str]], bool]] = []
    for term in text.split(","):
        term = term.strip()
        if not term:
            continue
        m = re.match(r"^([A-Za-z.]+)\s*(==|=|!=)\s*(.*)$", term)
        if not m:
            raise SelectorError(f"invalid field selector requirement: {term!r}")
        field, op, value = m.group(1), m.group(2), m.group(3).strip()
        if field not in index:
            raise SelectorError(f'"{field}" is not a known field selector: only "{", ".join(index)}"')
        reqs.append(_field_requirement(index[field], op != "!=", value))
    if not reqs:
        return None
    if len(reqs) == 1:
        return reqs[0]
    return lambda fields: all(r(fields) for r in reqs)


class _Filter:
    """A label + field selector pair; ``None`` parts match everything."""

    __slots__ = ("labels", "fields")

    def __init__(self, kind: str, label_selector: str | None, field_selector: str | None) -> None:
        self.labels = parse_label_selector(label_selector)
        self.fields = parse_field_selector(kind, field_selector)

    @property
    def empty(self) -> bool:
        return self.labels is None and self.fields is None

    def __call__(self, labels: Labels, fields: Sequence[str]) -> bool:
        if self.fields is not None and not self.fields(fields):
            return False  # checked first: cheap, and spares building the labels dict
        return self.labels is None or self.labels(dict(labels))


