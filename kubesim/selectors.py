"""Label and field selectors, compiled into predicates (label selectors: kube.labels, as upstream)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from kube.labels import SelectorError, compile_selector, parse_selector
from kubesim.resources import get_resource
from kubesim.util import Labels


def parse_label_selector(text: str | None) -> Callable[[Mapping[str, str]], bool] | None:
    """Compile a Kubernetes label selector (kube.labels.parse_selector: ``k=v``, ``k==v``, ``k!=v``, ``k``,
    ``!k``, ``k in (a,b)``, ``k notin (a,b)``, ``k>n``, ``k<n``, ANDed by commas) into a predicate on a
    labels mapping. Returns ``None`` for an empty selector (matches everything); raises SelectorError."""
    requirements = parse_selector(text)
    if not requirements:
        return None
    return compile_selector(requirements)


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


