"""Taints against tolerations, with upstream's rules (k8s.io/api/core/v1 `Toleration.ToleratesTaint`,
k8s.io/component-helpers/scheduling/corev1 `FindMatchingUntoleratedTaint`):

- an empty toleration effect matches every effect, else the effects must be equal;
- an empty toleration key matches every key (with `Exists`: every taint), else the keys must be equal;
- `Equal` (also the empty operator, its default) needs the same value, `Exists` any value;
- `Gt`/`Lt` (TaintTolerationComparisonOperators) compare the taint's value with the toleration's as 64-bit
  integers, a value that is no integer tolerating nothing; any other operator tolerates nothing;
- only `NoSchedule` and `NoExecute` keep a pod off a node: `PreferNoSchedule` is a preference.

Taints and tolerations are the JSON dicts of the API (`key`, `value`, `effect`, `operator`); entries that are
not mappings are ignored, so a malformed object never crashes a caller.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "SCHEDULING_EFFECTS", "TAINT_EFFECTS", "common_taints", "first_untolerated_taint", "taint_text", "tolerates",
    "tolerations_tolerate", "untolerated_taints",
]

SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_INT64_RE = re.compile(r"^[+-]?[0-9]+\Z")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _int64(text: str) -> int | None:
    if not _INT64_RE.match(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether one toleration tolerates one taint (Toleration.ToleratesTaint)."""
    if not isinstance(toleration, Mapping) or not isinstance(taint, Mapping):
        return False
    effect = _text(toleration.get("effect"))
    if effect and effect != _text(taint.get("effect")):
        return False
    key = _text(toleration.get("key"))
    if key and key != _text(taint.get("key")):
        return False
    operator = _text(toleration.get("operator"))
    if operator in ("", "Equal"):
        return _text(toleration.get("value")) == _text(taint.get("value"))
    if operator == "Exists":
        return True
    if operator in ("Gt", "Lt"):
        bound, have = _int64(_text(toleration.get("value"))), _int64(_text(taint.get("value")))
        if bound is None or have is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def tolerations_tolerate(tolerations: Iterable[Mapping[str, Any]] | None, taint: Mapping[str, Any]) -> bool:
    """Some toleration tolerates the taint (TolerationsTolerateTaint)."""
    return any(tolerates(t, taint) for t in tolerations or [])


def untolerated_taints(taints: Iterable[Mapping[str, Any]] | None, tolerations: Iterable[Mapping[str, Any]] | None,
                       effects: Sequence[str] = SCHEDULING_EFFECTS) -> list[dict[str, Any]]:
    """The taints with one of `effects` (by default the two that keep a pod off a node) that no toleration
    tolerates, in their order."""
    tolerations = [t for t in tolerations or [] if isinstance(t, Mapping)]
    return [dict(taint) for taint in taints or []
            if isinstance(taint, Mapping) and taint.get("effect") in effects
            and not tolerations_tolerate(tolerations, taint)]


def first_untolerated_taint(taints: Iterable[Mapping[str, Any]] | None,
                            tolerations: Iterable[Mapping[str, Any]] | None,
                            effects: Sequence[str] = SCHEDULING_EFFECTS) -> dict[str, Any] | None:
    """The first taint with one of `effects` no toleration tolerates (FindMatchingUntoleratedTaint), or None."""
    tolerations = [t for t in tolerations or [] if isinstance(t, Mapping)]
    for taint in taints or []:
        if (isinstance(taint, Mapping) and taint.get("effect") in effects
                and not tolerations_tolerate(tolerations, taint)):
            return dict(taint)
    return None


def common_taints(taint_lists: Iterable[Iterable[Mapping[str, Any]] | None],
                  effects: Sequence[str] = SCHEDULING_EFFECTS) -> tuple[dict[str, Any], ...]:
    """The taints with one of `effects` that every one of these nodes carries (each as `key`, `value`,
    `effect` where not empty), in the first node's order: what a pod needs to tolerate on all of them."""
    common: list[dict[str, Any]] | None = None
    for taints in taint_lists:
        mine = [{k: t[k] for k in ("key", "value", "effect") if t.get(k) not in (None, "")}
                for t in taints or [] if isinstance(t, Mapping) and t.get("effect") in effects]
        common = mine if common is None else [t for t in common if t in mine]
    return tuple(common or ())


def taint_text(taint: Mapping[str, Any]) -> str:
    """`key=value:Effect` (`key:Effect` without a value), as kubectl prints a taint."""
    key, value, effect = taint.get("key") or "", taint.get("value"), taint.get("effect") or ""
    return f"{key}{'=' + str(value) if value not in (None, '') else ''}:{effect}"
