"""What must change in a cluster so that it holds exactly the desired objects (a plan; nothing is sent).

Only objects carrying the console's managed-by label are ever updated or deleted. An object of the same
name without the label belongs to someone else: it is reported as a conflict and left alone. An owned
object "matches" when every field the console sets has the same value in the cluster (fields the API
server defaulted, status and metadata it keeps are not the console's business).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable

from enforcers.desired import MANAGED_BY, MANAGED_BY_LABEL, key_of
from kube.quantity import QuantityError, parse_quantity

def _quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity's value (the console's own parser), or None when it is not one."""
    if isinstance(value, bool) or value is None or value == "":
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def covers(actual: Any, desired: Any) -> bool:
    """Whether `actual` holds every value of `desired` (dicts: desired's keys; lists: item by item;
    quantities compared by value, so "0.5" equals the server's "500m")."""
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(k in actual and covers(actual[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(actual, list) and len(actual) == len(desired) and all(
            covers(a, d) for a, d in zip(actual, desired))
    if isinstance(desired, bool) or isinstance(actual, bool):
        return type(desired) is type(actual) and desired == actual  # True is not the quantity 1
    if desired == actual:
        return True
    a, d = _quantity(actual), _quantity(desired)
    return a is not None and d is not None and a == d


def is_owned(obj: dict) -> bool:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY


def owned_part(desired: dict) -> dict:
    """The fields of a desired object the console asserts (labels and body, not names or versions)."""
    body = {k: v for k, v in desired.items() if k not in ("apiVersion", "kind", "metadata")}
    body["metadata"] = {"labels": dict((desired.get("metadata") or {}).get("labels") or {})}
    return body


def differences(actual: dict, desired: dict, path: str = "") -> list[str]:
    """Dotted paths of the owned fields that differ (for the dry-run page and the drift record)."""
    out: list[str] = []
    if isinstance(desired, dict):
        if not isinstance(actual, dict):
            return [path or "."]
        for k, v in desired.items():
            sub = f"{path}.{k}" if path else k
            if k not in actual:
                out.append(sub)
            else:
                out.extend(differences(actual[k], v, sub))
        return out
    return [] if covers(actual, desired) else [path or "."]


@dataclass
class Plan:
    create: list[dict] = field(default_factory=list)
    update: list[tuple[dict, dict, list[str]]] = field(default_factory=list)  # (desired, actual, fields)
    delete: list[dict] = field(default_factory=list)
    conflicts: list[dict] = field(default_factory=list)  # desired objects whose name someone else holds
    unchanged: int = 0

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)

    def summary(self) -> dict[str, int]:
        return {"create": len(self.create), "update": len(self.update), "delete": len(self.delete),
                "conflicts": len(self.conflicts), "unchanged": self.unchanged}


def plan(desired: Iterable[dict], actual: Iterable[dict]) -> Plan:
    """Compare the desired objects with what the cluster holds (of the kinds the console manages)."""
    result = Plan()
    have = {key_of(obj): obj for obj in actual}
    wanted = {}
    for obj in desired:
        wanted[key_of(obj)] = obj
    for key, obj in wanted.items():
        current = have.get(key)
        if current is None:
            result.create.append(obj)
        elif not is_owned(current):
            result.conflicts.append(obj)
        else:
            fields = differences(current, owned_part(obj))
            if fields:
                result.update.append((obj, current, fields))
            else:
                result.unchanged += 1
    for key, obj in have.items():
        if key not in wanted and is_owned(obj):
            result.delete.append(obj)
    order = {k: i for i, k in enumerate(wanted)}
    result.create.sort(key=lambda o: order.get(key_of(o), 0))
    # Children before parents when deleting (project queues name their department's queue).
    result.delete.sort(key=lambda o: ((o.get("spec") or {}).get("parentQueue") is None, key_of(o)))
    return result


def merged(actual: dict, desired: dict) -> dict:
    """The object to PUT: the console's body (spec, or a PriorityClass's value) as desired, the
    cluster's metadata (resourceVersion for the conflict check, others' labels and annotations) with
    the console's labels put back. The API server applies its defaults again on the write."""
    out = {k: v for k, v in desired.items() if k != "metadata"}
    meta = {k: v for k, v in (actual.get("metadata") or {}).items() if k != "managedFields"}
    meta["labels"] = {**(meta.get("labels") or {}), **((desired.get("metadata") or {}).get("labels") or {})}
    out["metadata"] = meta
    return out
