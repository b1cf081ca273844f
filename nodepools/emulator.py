"""Kubernetes API emulator for the GPU capacity console (in-process or standalone).

A small, fast, dependency-free (stdlib + orjson) HTTP server that speaks the
subset of the Kubernetes core/v1 API the console's sync uses: nodes, pods and
namespaces, with list paging (``limit``/``continue``), label and field
selectors, watches (chunked JSON lines, bookmarks, bounded history, 410
Expired) and node/pod PATCH (merge, strategic merge and JSON patch).  The
official ``kubernetes`` Python client works against it unchanged.

It is used by the product's tests, the demo (``make run``) and a benchmark, so
it also offers a scripting surface (:class:`KubeEmulator` methods, mirrored as
``POST /_emulator/<op>``), fault injection (dropped watches, injected error
responses, going offline, history compaction), a "chaos" mode that keeps a demo
cluster alive, and pure factories for realistic Node and Pod objects
(:func:`make_node`, :func:`make_pod`, :func:`generate_cluster`).

Design notes
------------
* Objects are stored only as their serialized JSON bytes (plus the labels and
  selector fields needed for filtering), in plain tuples that the cyclic GC
  ignores.  List pages are built by joining bytes, single GETs and watch
  events by prefixing ``kind``/``apiVersion``.  150,000 pods + 5,000 nodes
  take ~450 MiB and a 500-pod page is built in under 1 ms.
* Keys ``(namespace, name)`` (``("", name)`` for nodes) are kept in a sorted
  list maintained with :mod:`bisect`; a continue token carries the snapshot
  resourceVersion and the last key returned, so paging never sorts.
* Every change gets its own global resourceVersion and an event in a bounded
  ring buffer.  The ring serves watches (replay, then live) *and* consistent
  paging: a continued page reconstructs the snapshot state of keys changed
  since the first page from the events' previous object versions, like etcd's
  MVCC.  When the needed history has been dropped, watches answer an ERROR
  410 event and continue tokens a 410 ``Expired`` Status.
* One re-entrant lock guards all state; watchers wait on a condition variable
  tied to it and write to their sockets outside the lock.

Run standalone::

    python -m nodepools.emulator --port 8001 --kubeconfig /tmp/emulator.kubeconfig \
        [--scenario cluster.json] [--demo-nodes 40 [--demo-pods 320]] [--chaos 1.0]
"""

from __future__ import annotations

import argparse
import base64
import binascii
import bisect
import contextlib
import datetime as dt
import gc
import hashlib
import http.server
import json
import os
import random
import re
import select
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

import orjson

__all__ = [
    "ApiError",
    "KubeEmulator",
    "SelectorError",
    "generate_cluster",
    "iter_cluster",
    "json_merge_patch",
    "json_patch",
    "main",
    "make_node",
    "make_pod",
    "parse_field_selector",
    "parse_label_selector",
    "strategic_merge_patch",
]

NODES = "nodes"
PODS = "pods"
_KINDS = {NODES: "Node", PODS: "Pod"}
_LIST_KINDS = {NODES: "NodeList", PODS: "PodList"}
# Prefix turning a stored item (no kind/apiVersion) into a full object.
_FULL_PREFIX = {
    NODES: b'{"kind":"Node","apiVersion":"v1",',
    PODS: b'{"kind":"Pod","apiVersion":"v1",',
}
# Fields usable in fieldSelector, in the order stored in each entry's tuple.
_FIELD_NAMES: dict[str, tuple[str, ...]] = {
    NODES: ("metadata.name", "metadata.namespace", "spec.unschedulable"),
    PODS: (
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "status.phase",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.podIP",
        "status.nominatedNodeName",
    ),
}
_FIELD_INDEX = {kind: {f: i for i, f in enumerate(names)} for kind, names in _FIELD_NAMES.items()}
_GPU = "nvidia.com/gpu"

EXPIRED_CONTINUE_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter, or use the continue token "
    "in this response to retrieve the remainder of the results. Continuing with the "
    "provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may "
    "show up in the list."
)

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Gone",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
_FAULT_MESSAGES = {
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected fault",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted, but may still be processing the request",
}

Key = tuple[str, str]
Obj = dict[str, Any]


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """An error answered as a Kubernetes ``Status`` object (also raised by the Python API)."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        *,
        details: Mapping[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "InternalError")
        self.details = dict(details) if details else None
        self.retry_after = retry_after

    def status(self) -> Obj:
        """The ``Status`` body the real API server would send."""
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details = dict(self.details or {})
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            body["details"] = details
        return body


def _not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, f'{resource} "{name}" not found', "NotFound", details={"name": name, "kind": resource})


def _already_exists(resource: str, name: str) -> ApiError:
    return ApiError(
        409, f'{resource} "{name}" already exists', "AlreadyExists", details={"name": name, "kind": resource}
    )


def _conflict(resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "Conflict",
        details={"name": name, "kind": resource},
    )


def _expired_continue() -> ApiError:
    return ApiError(410, EXPIRED_CONTINUE_MESSAGE, "Expired")


# --------------------------------------------------------------------------- selectors


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
    """Compile a field selector for ``kind`` ("nodes" or "pods") into a predicate on the field tuple."""
    if not text or not text.strip():
        return None
    index = _FIELD_INDEX[kind]
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


# --------------------------------------------------------------------------- patches


# Strategic-merge list merge keys for the node/pod fields we care about
# (from the patchMergeKey tags of k8s.io/api/core/v1).
_MERGE_KEYS = {
    "conditions": "type",
    "addresses": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
}
_PRIMITIVE_MERGE_LISTS = {"finalizers"}


def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str | None = None) -> Any:
    """Kubernetes strategic merge patch, enough of it for core/v1 nodes and pods.

    Like a merge patch, plus: lists with a known merge key (``conditions`` by
    ``type``, ``containers`` by ``name``, ...) merge item by item, list items
    with ``"$patch": "delete"`` are removed, ``"$patch": "replace"`` replaces a
    map, ``finalizers`` merge as a set, and ``$deleteFromPrimitiveList/<f>``
    and ``$setElementOrder/<f>`` directives are honoured/ignored.
    """
    if isinstance(patch, list):
        return _strategic_merge_list(target, patch, field)
    if not isinstance(patch, dict):
        return patch
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: v for k, v in patch.items() if not k.startswith("$")}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.split("/", 1)[1]
            result[name] = [v for v in result.get(name) or [] if v not in value]
        elif key.startswith("$"):
            continue  # $setElementOrder/..., $retainKeys: ordering/pruning hints we do not need
        elif value is None:
            result.pop(key, None)
        else:
            merged = strategic_merge_patch(result.get(key), value, key)
            if merged is None and isinstance(value, dict) and value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = merged
    return result


def _strategic_merge_list(target: Any, patch: list[Any], field: str | None) -> list[Any]:
    current = list(target) if isinstance(target, list) else []
    if field in _PRIMITIVE_MERGE_LISTS:
        return current + [v for v in patch if v not in current]
    merge_key = _MERGE_KEYS.get(field or "")
    if merge_key is None or not all(isinstance(item, dict) for item in patch):
        return [item for item in patch if not (isinstance(item, dict) and item.get("$patch") == "delete")]
    for item in patch:
        if item.get("$patch") == "replace":
            return [i for i in patch if i.get("$patch") != "replace"]
        key_value = item.get(merge_key)
        idx = next(
            (i for i, old in enumerate(current) if isinstance(old, dict) and old.get(merge_key) == key_value),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                del current[idx]
        elif idx is None:
            current.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            current[idx] = strategic_merge_patch(current[idx], item)
    return current


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"invalid JSON pointer {path!r}", "Invalid")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, tokens: list[str]) -> Any:
    for token in tokens:
        if isinstance(doc, list):
            doc = doc[int(token)]
        else:
            doc = doc[token]
    return doc


def json_patch(doc: Any, operations: Sequence[Mapping[str, Any]]) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    doc = orjson.loads(orjson.dumps(doc))  # deep copy: a failing op must leave the original intact
    for op in operations:
        try:
            kind = op["op"]
            tokens = _pointer(op["path"])
            if kind == "test":
                if _resolve(doc, tokens) != op.get("value"):
                    raise ApiError(422, f"test operation failed at {op['path']}", "Invalid")
                continue
            if kind in ("move", "copy"):
                src = _pointer(op["from"])
                value = orjson.loads(orjson.dumps(_resolve(doc, src)))
                if kind == "move":
                    doc = _json_patch_apply(doc, src, "remove", None)
                doc = _json_patch_apply(doc, tokens, "add", value)
                continue
            doc = _json_patch_apply(doc, tokens, kind, op.get("value"))
        except ApiError:
            raise
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(422, f"invalid JSON patch operation {dict(op)!r}: {exc}", "Invalid") from exc
    return doc


def _json_patch_apply(doc: Any, tokens: list[str], kind: str, value: Any) -> Any:
    if not tokens:
        if kind in ("add", "replace"):
            return value
        raise ValueError("cannot remove the document root")
    parent = _resolve(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, list):
        if kind == "add":
            parent.insert(len(parent) if last == "-" else int(last), value)
        elif kind == "remove":
            del parent[int(last)]
        elif kind == "replace":
            parent[int(last)] = value
        else:
            raise ValueError(f"unknown op {kind}")
    else:
        if kind == "add":
            parent[last] = value
        elif kind == "remove":
            del parent[last]
        elif kind == "replace":
            if last not in parent:
                raise KeyError(last)
            parent[last] = value
        else:
            raise ValueError(f"unknown op {kind}")
    return doc


# --------------------------------------------------------------------------- factories


_GPU_PRODUCTS: dict[str, tuple[int, str]] = {
    "NVIDIA-A100-SXM4-80GB": (81920, "ampere"),
    "NVIDIA-A100-SXM4-40GB": (40960, "ampere"),
    "NVIDIA-A100-PCIE-40GB": (40960, "ampere"),
    "NVIDIA-A10G": (23028, "ampere"),
    "NVIDIA-H100-80GB-HBM3": (81559, "hopper"),
    "NVIDIA-H200": (143771, "hopper"),
    "NVIDIA-B200": (183359, "blackwell"),
    "NVIDIA-L4": (23034, "ada-lovelace"),
    "NVIDIA-L40S": (46068, "ada-lovelace"),
    "Tesla-T4": (15360, "turing"),
    "Tesla-V100-SXM2-16GB": (16384, "volta"),
}
_FAMILY_HINTS = (
    ("GB200", "blackwell"),
    ("B200", "blackwell"),
    ("B100", "blackwell"),
    ("H100", "hopper"),
    ("H200", "hopper"),
    ("L40", "ada-lovelace"),
    ("L4", "ada-lovelace"),
    ("A100", "ampere"),
    ("A10", "ampere"),
    ("A30", "ampere"),
    ("A40", "ampere"),
    ("T4", "turing"),
    ("V100", "volta"),
)
DEFAULT_GPU_PRODUCT = "NVIDIA-A100-SXM4-80GB"

_CONDITION_REASONS = {
    ("Ready", "True"): ("KubeletReady", "kubelet is posting ready status"),
    ("Ready", "False"): ("KubeletNotReady", "container runtime network not ready"),
    ("Ready", "Unknown"): ("NodeStatusUnknown", "Kubelet stopped posting node status."),
    ("MemoryPressure", "False"): ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("MemoryPressure", "True"): ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
    ("DiskPressure", "False"): ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("DiskPressure", "True"): ("KubeletHasDiskPressure", "kubelet has disk pressure"),
    ("PIDPressure", "False"): ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("PIDPressure", "True"): ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
    ("NetworkUnavailable", "False"): ("RouteCreated", "RouteController created a route"),
    ("NetworkUnavailable", "True"): ("NoRouteCreated", "RouteController failed to create a route"),
}
_NODE_CONDITION_TYPES = ("NetworkUnavailable", "MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
_DEFAULT_IMAGE = "registry.example.com/ml/workload:1.0"


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC during bulk object creation (which makes no cycles).

    With hundreds of thousands of live dicts, full collections triggered by
    allocation otherwise double the time of a bulk load or generation.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _new_uid() -> str:
    """A random RFC 4122 version-4 UUID string (4x faster than str(uuid.uuid4()))."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _timestamp(value: dt.datetime | str | None) -> str:
    """RFC 3339 seconds-precision UTC timestamp from a datetime, a string (kept) or now."""
    if value is None:
        return _now()
    if isinstance(value, str):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status_str(value: bool | str) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def _ip(seed: str, prefix: int) -> str:
    h = zlib.crc32(seed.encode())
    return f"10.{prefix}.{(h >> 8) & 0xFF}.{max(h & 0xFF, 2)}"


def _gpu_family(product: str) -> str:
    if product in _GPU_PRODUCTS:
        return _GPU_PRODUCTS[product][1]
    upper = product.upper()
    return next((family for hint, family in _FAMILY_HINTS if hint in upper), "unknown")


def _node_condition(ctype: str, status: str, ts: str, reason: str = "", message: str = "") -> Obj:
    default_reason, default_message = _CONDITION_REASONS.get((ctype, status), ("", ""))
    return {
        "type": ctype,
        "status": status,
        "lastHeartbeatTime": ts,
        "lastTransitionTime": ts,
        "reason": reason or default_reason,
        "message": message or default_message,
    }


def _sync_node_taints(node: Obj) -> None:
    """Emulate the node lifecycle controller: taints follow spec.unschedulable and conditions."""
    spec = node.setdefault("spec", {})
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    wanted: list[tuple[str, str]] = []
    if spec.get("unschedulable"):
        wanted.append(("node.kubernetes.io/unschedulable", "NoSchedule"))
    ready = conditions.get("Ready", "True")
    if ready == "False":
        wanted += [("node.kubernetes.io/not-ready", "NoSchedule"), ("node.kubernetes.io/not-ready", "NoExecute")]
    elif ready == "Unknown":
        wanted += [("node.kubernetes.io/unreachable", "NoSchedule"), ("node.kubernetes.io/unreachable", "NoExecute")]
    if conditions.get("MemoryPressure") == "True":
        wanted.append(("node.kubernetes.io/memory-pressure", "NoSchedule"))
    if conditions.get("DiskPressure") == "True":
        wanted.append(("node.kubernetes.io/disk-pressure", "NoSchedule"))
    if conditions.get("PIDPressure") == "True":
        wanted.append(("node.kubernetes.io/pid-pressure", "NoSchedule"))
    managed = {
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/pid-pressure",
    }
    taints = [
        t for t in spec.get("taints") or [] if t.get("key") not in managed or (t["key"], t.get("effect")) in wanted
    ]
    present = {(t.get("key"), t.get("effect")) for t in taints}
    for key, effect in wanted:
        if (key, effect) not in present:
            taint: Obj = {"key": key, "effect": effect}
            if effect == "NoExecute" or key == "node.kubernetes.io/unschedulable":
                taint["timeAdded"] = _now()
            taints.append(taint)
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)


def make_node(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    gpus: int = 0,
    gpu_product: str | None = None,
    gpu_memory_mib: int | None = None,
    cpu: str = "64",
    memory: str = "512Gi",
    ready: bool | str = True,
    unschedulable: bool = False,
    conditions: Mapping[str, bool | str] | Sequence[Mapping[str, Any]] | None = None,
    taints: Sequence[Mapping[str, Any]] | None = None,
    zone: str | None = None,
    instance_type: str | None = None,
    capacity_type: str | None = None,
    created: dt.datetime | str | None = None,
    annotations: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
) -> Obj:
    """Build a realistic core/v1 Node (no uid/resourceVersion: the emulator assigns those).

    GPU nodes (``gpus > 0``) get ``nvidia.com/gpu`` capacity/allocatable and
    the NVIDIA GPU feature discovery labels.  Allocatable equals capacity for
    cpu, memory and GPUs (``pods`` is 110) unless ``allocatable`` overrides
    entries.  ``conditions`` is either ``{type: status}`` or a list of full
    condition dicts (merged by type over the defaults).  Taints for
    unschedulable / not-ready / pressure are added as the node lifecycle
    controller would; ``taints`` adds more.
    """
    ts = _timestamp(created)
    node_labels: dict[str, str] = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
    }
    if zone:
        node_labels["topology.kubernetes.io/zone"] = zone
        node_labels["topology.kubernetes.io/region"] = zone[:-1] if zone[-1:].isalpha() else zone
    if instance_type:
        node_labels["node.kubernetes.io/instance-type"] = instance_type
    if capacity_type:
        node_labels["karpenter.sh/capacity-type"] = capacity_type
    capacity = {
        "cpu": str(cpu),
        "ephemeral-storage": "1073741824Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": str(memory),
        "pods": "110",
    }
    if gpus > 0:
        product = gpu_product or DEFAULT_GPU_PRODUCT
        mem = gpu_memory_mib if gpu_memory_mib is not None else _GPU_PRODUCTS.get(product, (0, ""))[0]
        node_labels.update(
            {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.family": _gpu_family(product),
                "nvidia.com/gpu.replicas": "1",
            }
        )
        if mem:
            node_labels["nvidia.com/gpu.memory"] = str(mem)
        capacity["nvidia.com/gpu"] = str(gpus)
    node_labels.update(labels or {})
    alloc = dict(capacity)
    alloc["ephemeral-storage"] = "989560464Ki"
    alloc.update(allocatable or {})

    statuses = {ctype: "False" for ctype in _NODE_CONDITION_TYPES}
    statuses["Ready"] = _status_str(ready)
    extra_conditions: dict[str, Obj] = {}
    if isinstance(conditions, Mapping):
        statuses.update({k: _status_str(v) for k, v in conditions.items()})
    elif conditions:
        for cond in conditions:
            statuses[cond["type"]] = _status_str(cond.get("status", "True"))
            extra_conditions[cond["type"]] = dict(cond)
    node_conditions = []
    for ctype, status in statuses.items():
        cond = _node_condition(ctype, status, ts)
        cond.update({k: v for k, v in extra_conditions.get(ctype, {}).items() if k != "status"})
        cond["status"] = status
        node_conditions.append(cond)

    digest = hashlib.sha1(name.encode()).hexdigest()
    internal_ip = _ip(name, 0)
    node: Obj = {
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                **(annotations or {}),
            },
            "creationTimestamp": ts,
        },
        "spec": {
            "podCIDR": f"10.244.{zlib.crc32(name.encode()) & 0xFF}.0/24",
            "providerID": f"emulator:///{zone or 'zone-a'}/{name}",
        },
        "status": {
            "capacity": capacity,
            "allocatable": alloc,
            "conditions": node_conditions,
            "addresses": [
                {"type": "InternalIP", "address": internal_ip},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": digest[:32],
                "systemUUID": str(uuid.UUID(digest[:32])),
                "bootID": str(uuid.UUID(hashlib.md5(name.encode()).hexdigest())),
                "kernelVersion": "6.1.0-27-cloud-amd64",
                "osImage": "Ubuntu 22.04.5 LTS",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.31.4",
                "kubeProxyVersion": "v1.31.4",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }
    if unschedulable:
        node["spec"]["unschedulable"] = True
    if taints:
        node["spec"]["taints"] = [dict(t) for t in taints]
    _sync_node_taints(node)
    return node


def _container_spec(spec: Mapping[str, Any]) -> Obj:
    resources = dict(spec.get("resources") or {})
    requests = {k: str(v) for k, v in (spec.get("requests") or resources.get("requests") or {}).items()}
    limits = {k: str(v) for k, v in (spec.get("limits") or resources.get("limits") or {}).items()}
    # Extended resources (GPUs) must have limits == requests on a real API server.
    for res in set(requests) | set(limits):
        if "/" in res and not res.startswith("hugepages"):
            requests[res] = limits[res] = limits.get(res) or requests[res]
    out: Obj = {"name": spec.get("name", "main"), "image": spec.get("image", _DEFAULT_IMAGE)}
    res_out: Obj = {}
    if limits:
        res_out["limits"] = limits
    if requests:
        res_out["requests"] = requests
    out["resources"] = res_out
    out["imagePullPolicy"] = "IfNotPresent"
    return out


def _qos_class(containers: Sequence[Mapping[str, Any]]) -> str:
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or req.get(r, lim[r]) != lim[r]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _pod_status(
    namespace: str,
    name: str,
    spec: Mapping[str, Any],
    phase: str,
    ready: bool,
    start: str,
    now: str | None = None,
) -> Obj:
    """A status consistent with phase/readiness/node, as the kubelet would report it."""
    now = now or start
    node = spec.get("nodeName")
    containers = spec.get("containers") or []
    status: Obj = {"phase": phase}
    if not node:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": start,
                "reason": "Unschedulable",
                "message": "0/0 nodes are available: insufficient resources.",
            }
        ]
        status["qosClass"] = _qos_class(containers)
        return status
    running = phase == "Running"
    is_ready = running and ready
    terminated = phase in ("Succeeded", "Failed")

    def cond(ctype: str, ok: bool, reason: str | None = None) -> Obj:
        c: Obj = {"type": ctype, "status": "True" if ok else "False", "lastProbeTime": None, "lastTransitionTime": now}
        if not ok and reason:
            c["reason"] = reason
        return c

    not_ready_reason = "PodCompleted" if terminated else "ContainersNotReady"
    status["conditions"] = [
        cond("Initialized", True),
        cond("Ready", is_ready, not_ready_reason),
        cond("ContainersReady", is_ready, not_ready_reason),
        cond("PodScheduled", True),
    ]
    status["hostIP"] = _ip(node, 0)
    if not terminated:
        pod_ip = _ip(f"{namespace}/{name}", 128)
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    status["startTime"] = start
    statuses = []
    for c in containers:
        digest = hashlib.sha256(f"{namespace}/{name}/{c.get('name')}".encode()).hexdigest()
        if phase == "Pending":
            state: Obj = {"waiting": {"reason": "ContainerCreating"}}
        elif terminated:
            code = 0 if phase == "Succeeded" else 1
            state = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": start,
                    "finishedAt": now,
                    "containerID": f"containerd://{digest}",
                }
            }
        else:
            state = {"running": {"startedAt": start}}
        statuses.append(
            {
                "name": c.get("name"),
                "state": state,
                "ready": is_ready,
                "restartCount": 0,
                "image": c.get("image", _DEFAULT_IMAGE),
                "imageID": "",
                "containerID": f"containerd://{digest}" if phase != "Pending" else "",
                "started": running,
            }
        )
    status["containerStatuses"] = statuses
    status["qosClass"] = _qos_class(containers)
    return status


def make_pod(
    name: str,
    namespace: str = "default",
    *,
    node: str | None = None,
    phase: str = "Running",
    containers: Sequence[Mapping[str, Any]] | None = None,
    init_containers: Sequence[Mapping[str, Any]] | None = None,
    overhead: Mapping[str, str] | None = None,
    priority: int | None = None,
    priority_class: str | None = None,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    created: dt.datetime | str | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """Build a realistic core/v1 Pod (no uid/resourceVersion: the emulator assigns those).

    ``containers``/``init_containers`` are ``[{"name", "requests", "limits",
    "image"?}]`` (a ``resources`` dict is accepted too); resource values may be
    ints.  GPU (extended resource) requests are mirrored into limits as the API
    server requires.  The status (conditions, containerStatuses, IPs,
    qosClass) is derived from ``phase``, ``ready`` and ``node``.
    """
    ts = _timestamp(created)
    specs = [_container_spec(c) for c in (containers or [{"name": "main"}])]
    spec: Obj = {"containers": specs}
    if init_containers:
        spec["initContainers"] = [_container_spec(c) for c in init_containers]
    spec.update(
        {
            "restartPolicy": "Never" if phase in ("Succeeded", "Failed") else "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        }
    )
    if any("nvidia.com/gpu" in (c["resources"].get("requests") or {}) for c in specs):
        spec["tolerations"].append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    if node:
        spec["nodeName"] = node
    spec["priority"] = int(priority) if priority is not None else 0
    if priority_class:
        spec["priorityClassName"] = priority_class
    if overhead:
        spec["overhead"] = {k: str(v) for k, v in overhead.items()}
    metadata: Obj = {"name": name, "namespace": namespace, "creationTimestamp": ts}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"metadata": metadata, "spec": spec, "status": _pod_status(namespace, name, spec, phase, ready, ts)}


_POOLS = (
    # (pool, product, gpus, instance type, capacity type, cpu, memory)
    ("a100-train", "NVIDIA-A100-SXM4-80GB", 8, "p4de.24xlarge", "on-demand", "96", "1152Gi"),
    ("h100-train", "NVIDIA-H100-80GB-HBM3", 8, "p5.48xlarge", "on-demand", "192", "2048Gi"),
    ("a100-spot", "NVIDIA-A100-SXM4-40GB", 8, "p4d.24xlarge", "spot", "96", "1152Gi"),
    ("l4-inference", "NVIDIA-L4", 4, "g6.12xlarge", "on-demand", "48", "192Gi"),
    ("t4-batch", "Tesla-T4", 1, "g4dn.xlarge", "spot", "4", "16Gi"),
    ("cpu-general", None, 0, "m7i.4xlarge", "on-demand", "16", "64Gi"),
)
_NAMESPACES = ("ml-training", "inference", "research", "batch", "data-eng", "kube-system")
_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


def generate_cluster(nodes: int = 40, pods: int | None = None, *, seed: int = 0) -> tuple[list[Obj], list[Obj]]:
    """A deterministic, plausible GPU fleet: ``nodes`` nodes across six pools and ``pods`` pods.

    Pods (default: 8 per node) are spread over nodes, request whole GPUs
    without over-committing a node, and a few are Pending (unscheduled) or
    Succeeded.  Useful for the demo and for benchmarks (5,000 nodes / 150,000
    pods take a few seconds).  See :func:`iter_cluster` to stream the pods.
    """
    with _gc_paused():
        node_objs, pod_iter = iter_cluster(nodes, pods, seed=seed)
        return node_objs, list(pod_iter)


def iter_cluster(nodes: int = 40, pods: int | None = None, *, seed: int = 0) -> tuple[list[Obj], Iterator[Obj]]:
    """Like :func:`generate_cluster` (same objects), but the pods come from a lazy iterator.

    ``emu.load(nodes=nodes, pods=pod_iter)`` then never holds all pod dicts at
    once, which keeps a 150,000-pod emulator process near 450 MiB instead of
    over 1 GiB (freed dicts leave the allocator's arenas fragmented).
    """
    rng = random.Random(seed)
    created = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    node_objs: list[Obj] = []
    free_gpus: list[int] = []
    for i in range(nodes):
        pool, product, gpus, itype, ctype, cpu, mem = _POOLS[i % len(_POOLS)]
        node_objs.append(
            make_node(
                f"{pool}-{i:05d}",
                labels={"karpenter.sh/nodepool": pool},
                gpus=gpus,
                gpu_product=product,
                cpu=cpu,
                memory=mem,
                zone=_ZONES[i % len(_ZONES)],
                instance_type=itype,
                capacity_type=ctype,
                created=created + dt.timedelta(minutes=i),
                ready=rng.random() > 0.02,
            )
        )
        free_gpus.append(gpus)
    node_names = [n["metadata"]["name"] for n in node_objs]
    return node_objs, _iter_pods(nodes * 8 if pods is None else pods, node_names, free_gpus, rng, created)


def _iter_pods(
    count: int, node_names: list[str], free_gpus: list[int], rng: random.Random, created: dt.datetime
) -> Iterator[Obj]:
    for j in range(count):
        ns = _NAMESPACES[j % len(_NAMESPACES)]
        name = f"job-{j:06d}"
        labels = {"app": name[:9], "team": ns}
        roll = rng.random()
        if not node_names or roll < 0.02:
            containers = [{"name": "main", "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1}}]
            yield make_pod(name, ns, phase="Pending", containers=containers, labels=labels, created=created)
            continue
        n = rng.randrange(len(node_names))
        gpu = min(rng.choice((1, 1, 2, 4, 8)), free_gpus[n])  # never over-commit a node's GPUs
        free_gpus[n] -= gpu
        requests: dict[str, Any] = {"cpu": str(rng.choice((1, 2, 4, 8))), "memory": f"{rng.choice((4, 8, 16, 32))}Gi"}
        if gpu:
            requests["nvidia.com/gpu"] = gpu
        yield make_pod(
            name,
            ns,
            node=node_names[n],
            phase="Succeeded" if roll > 0.97 else "Running",
            containers=[{"name": "main", "requests": requests, "limits": dict(requests)}],
            priority=rng.choice((0, 0, 1000, 100000)),
            labels=labels,
            created=created,
        )


# --------------------------------------------------------------------------- storage


# One stored object: (item JSON without kind/apiVersion, resourceVersion, labels, selector fields).
# Plain tuples of strings/bytes/ints on purpose: CPython's cyclic GC untracks such tuples, so
# 150,000 stored objects cost nothing in full collections.  Class instances (and tuples holding a
# dict) stay tracked, and a process that also parses big list pages (tests, the benchmark) runs a
# full collection about once per page: walking 150,000 extra objects each time tripled its cost.
Labels = tuple[tuple[str, str], ...]  # labels as (key, value) pairs: a dict would keep the tuple tracked
_Entry = tuple[bytes, int, Labels, tuple[str, ...]]
# _Entry positions
_DATA: Final = 0
_RV: Final = 1
_LABELS: Final = 2
_FIELDS: Final = 3


class _Store:
    """Objects of one kind, with a sorted key index for paging."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.entries: dict[Key, _Entry] = {}
        self.keys: list[Key] = []  # sorted; maintained with bisect

    def scope(self, namespace: str | None) -> tuple[int, int]:
        """Index range of ``keys`` inside ``namespace`` (all keys for ``None``)."""
        if namespace is None:
            return 0, len(self.keys)
        return bisect.bisect_left(self.keys, (namespace,)), bisect.bisect_left(self.keys, (namespace + "\x00",))


class _Event:
    """A change in the bounded history: new and previous versions, for watches and snapshots."""

    __slots__ = ("rv", "kind", "key", "type", "data", "labels", "fields", "prev", "prev_labels", "prev_fields", "_line")

    def __init__(
        self,
        rv: int,
        kind: str,
        key: Key,
        type_: str,
        data: bytes,
        labels: Labels,
        fields: tuple[str, ...],
        prev: _Entry | None,
    ) -> None:
        self.rv = rv
        self.kind = kind
        self.key = key
        self.type = type_
        self.data = data
        self.labels = labels
        self.fields = fields
        self.prev = prev[_DATA] if prev else None
        self.prev_labels = prev[_LABELS] if prev else None
        self.prev_fields = prev[_FIELDS] if prev else None
        self._line: bytes | None = None

    def line(self, type_: str | None = None) -> bytes:
        """The JSON line a watcher receives (optionally with another event type)."""
        if type_ is None or type_ == self.type:
            if self._line is None:
                self._line = _event_line(self.type, self.kind, self.data)
            return self._line
        return _event_line(type_, self.kind, self.data)


def _dumps_compact(obj: Obj) -> bytes:
    """Serialize for long-term storage: orjson leaves up to ~2x slack in its buffer, so copy to exact size."""
    return memoryview(orjson.dumps(obj)).tobytes()


def _event_line(type_: str, kind: str, data: bytes) -> bytes:
    return b'{"type":"' + type_.encode() + b'","object":' + _FULL_PREFIX[kind] + data[1:] + b"}\n"


def _full_object(kind: str, data: bytes) -> bytes:
    return _FULL_PREFIX[kind] + data[1:]


def _labels_of(obj: Obj) -> Labels:
    return tuple((str(k), str(v)) for k, v in (obj["metadata"].get("labels") or {}).items())


def _extract_fields(kind: str, obj: Obj) -> tuple[str, ...]:
    md = obj["metadata"]
    spec = obj.get("spec") or {}
    if kind == NODES:
        return (md["name"], "", "true" if spec.get("unschedulable") else "false")
    status = obj.get("status") or {}
    return (
        md["name"],
        md.get("namespace") or "",
        spec.get("nodeName") or "",
        status.get("phase") or "",
        spec.get("restartPolicy") or "",
        spec.get("schedulerName") or "",
        spec.get("serviceAccountName") or "",
        status.get("podIP") or "",
        status.get("nominatedNodeName") or "",
    )


class _Watch:
    """State of one open watch stream."""

    __slots__ = ("kind", "namespace", "filter", "next_seq", "sock", "dropped")

    def __init__(self, kind: str, namespace: str | None, flt: _Filter, next_seq: int, sock: socket.socket) -> None:
        self.kind = kind
        self.namespace = namespace
        self.filter = flt
        self.next_seq = next_seq
        self.sock = sock
        self.dropped = False


class _Fault:
    __slots__ = ("remaining", "status", "path_prefix", "retry_after")

    def __init__(self, remaining: int, status: int, path_prefix: str | None, retry_after: int | None) -> None:
        self.remaining = remaining
        self.status = status
        self.path_prefix = path_prefix
        self.retry_after = retry_after


def _encode_continue(rv: int, key: Key) -> str:
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(key)})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, Key]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
        ns, name = data["start"]
        return int(data["rv"]), (str(ns), str(name))
    except (binascii.Error, ValueError, KeyError, TypeError, orjson.JSONDecodeError) as exc:
        raise ApiError(400, f"continue key is not valid: {exc}", "BadRequest") from exc


# --------------------------------------------------------------------------- emulator


class KubeEmulator:
    """A thread-safe, scriptable Kubernetes API server emulator (nodes, pods, namespaces).

    Use as a context manager or call :meth:`start`/:meth:`stop`::

        with KubeEmulator() as emu:
            emu.add_node(make_node("gpu-1", gpus=8))
            emu.write_kubeconfig("/tmp/kc")
            ...

    Every mutating method takes effect atomically, assigns the next global
    resourceVersion and records an event that open watches receive.
    ``update_*`` callables run under the emulator lock and receive a private
    copy of the object (mutate it in place or return a new dict).
    """

    def __init__(
        self,
        *,
        history_size: int = 10_000,
        bookmark_interval: float = 1.0,
        initial_resource_version: int = 1000,
        watch_timeout: float = 1800.0,
        node_controller: bool = True,
    ) -> None:
        """
        :param history_size: events kept for watch replay and consistent paging.
        :param bookmark_interval: seconds between BOOKMARK events on watches that allow them.
        :param initial_resource_version: the first resourceVersion handed out is this + 1.
        :param watch_timeout: watch duration when the client gives no ``timeoutSeconds``.
        :param node_controller: keep node taints in line with spec.unschedulable and
            conditions, as the node lifecycle controller does.
        """
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.node_controller = node_controller
        self.url: str | None = None

        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._stores = {NODES: _Store(NODES), PODS: _Store(PODS)}
        self._rv = initial_resource_version
        # Event ring buffer: event with sequence number s lives at _ring[s % _ring_size]
        # while s >= _seq - _ring_size.  _floor_rv: watches/continues from an rv below it
        # cannot be served completely any more (410).
        self._ring_size = max(1, int(history_size))
        self._ring: list[_Event | None] = [None] * self._ring_size
        self._seq = 0
        self._min_seq = 0  # compact() makes older (still physically present) events unusable
        self._floor_rv = initial_resource_version
        self._explicit_namespaces: set[str] = set()
        self._pod_namespaces: Counter[str] = Counter()
        self._namespace_meta: dict[str, tuple[str, int, str]] = {}  # name -> (uid, rv, created)

        self._watches: set[_Watch] = set()
        self._faults: list[_Fault] = []
        self._stats_lock = threading.Lock()
        self._stats: Counter[str] = Counter()
        self._requests: Counter[str] = Counter()
        self._responses: Counter[str] = Counter()

        self._server: _Server | None = None
        self._server_thread: threading.Thread | None = None
        self._host = "127.0.0.1"
        self._port = 0
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self._offline_mode: str | None = None  # None, "refuse" or "reset"
        self._offline_timer: threading.Timer | None = None
        self._chaos_thread: threading.Thread | None = None
        self._chaos_pods: list[Key] = []
        self._chaos_serial = 0
        self._chaos_stop = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on ``host:port`` (0 = any free port); returns and sets :attr:`url`."""
        with self._lock:
            if self._server is not None:
                raise RuntimeError("emulator already started")
            self._host = host
            self._offline_mode = None
            self._bind(port)
            shown = f"[{host}]" if ":" in host else host
            self.url = f"http://{shown}:{self._port}"
            return self.url

    def stop(self) -> None:
        """Stop chaos, close all watches and connections and the listening socket."""
        self.stop_chaos()
        with self._lock:
            if self._offline_timer is not None:
                self._offline_timer.cancel()
                self._offline_timer = None
            self._offline_mode = None
        self.drop_watches()
        self._unbind()

    def __enter__(self) -> KubeEmulator:
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _bind(self, port: int) -> None:
        server_cls = _Server6 if ":" in self._host else _Server
        server = server_cls((self._host, port), _Handler)
        server.emulator = self
        self._port = server.server_address[1]
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"kube-emulator:{self._port}", daemon=True
        )
        self._server, self._server_thread = server, thread
        thread.start()

    def _unbind(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        self._cut_connections()

    def write_kubeconfig(
        self, path: str | os.PathLike[str], context: str = "emulator", cluster_name: str = "emulator"
    ) -> str:
        """Write a kubeconfig (server = :attr:`url`, TLS verify off, dummy bearer token); returns the path."""
        if self.url is None:
            raise RuntimeError("start() the emulator before writing a kubeconfig")
        path = os.fspath(path)
        user = f"{cluster_name}-user"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": cluster_name, "cluster": {"server": self.url, "insecure-skip-tls-verify": True}}],
            "users": [{"name": user, "user": {"token": "emulator-token"}}],
            "contexts": [{"name": context, "context": {"cluster": cluster_name, "user": user, "namespace": "default"}}],
            "current-context": context,
            "preferences": {},
        }
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        # JSON is valid YAML, so kubernetes.config (yaml.safe_load) reads it.
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(config, fh, indent=2)
            fh.write("\n")
        return path

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion."""
        with self._lock:
            return self._rv

    # ------------------------------------------------------------------ core mutation

    def _normalize(self, kind: str, obj: Mapping[str, Any]) -> Obj:
        """Copy the parts we change, drop kind/apiVersion, fill uid/creationTimestamp/namespace."""
        if kind == NODES:
            out: Obj = orjson.loads(orjson.dumps(obj))  # nodes get taint edits: deep copy
        else:
            out = dict(obj)
        out.pop("kind", None)
        out.pop("apiVersion", None)
        md = dict(out.get("metadata") or {})
        out["metadata"] = md
        name = md.get("name")
        if not name or not isinstance(name, str):
            raise ApiError(422, f"{_KINDS[kind]} must have metadata.name", "Invalid")
        if kind == PODS:
            md["namespace"] = sys.intern(md.get("namespace") or "default")
        else:
            md.pop("namespace", None)
        if not md.get("uid"):
            md["uid"] = _new_uid()
        if not md.get("creationTimestamp"):
            md["creationTimestamp"] = _now()
        md.pop("resourceVersion", None)
        if kind == NODES and self.node_controller:
            _sync_node_taints(out)
        return out

    @staticmethod
    def _key(kind: str, obj: Obj) -> Key:
        md = obj["metadata"]
        return (md.get("namespace", "") if kind == PODS else "", md["name"])

    def _commit(
        self, kind: str, key: Key, obj: Obj | None, *, notify: bool = True, index: bool = True
    ) -> _Entry | None:
        """Store ``obj`` under ``key`` (``None`` deletes) with a new rv and record the event. Lock held."""
        store = self._stores[kind]
        prev = store.entries.get(key)
        if obj is None and prev is None:
            raise _not_found(kind, key[1])
        self._rv += 1
        rv = self._rv
        if obj is None:
            assert prev is not None
            final = orjson.loads(prev[_DATA])
            final["metadata"]["resourceVersion"] = str(rv)
            data = _dumps_compact(final)
            del store.entries[key]
            i = bisect.bisect_left(store.keys, key)
            del store.keys[i]
            if kind == PODS:
                self._pod_namespaces[key[0]] -= 1
            self._record(_Event(rv, kind, key, "DELETED", data, prev[_LABELS], prev[_FIELDS], prev))
            entry = None
        else:
            obj["metadata"]["resourceVersion"] = str(rv)
            data = _dumps_compact(obj)
            labels = _labels_of(obj)
            fields = _extract_fields(kind, obj)
            entry = (data, rv, labels, fields)
            store.entries[key] = entry
            if prev is None:
                if index:
                    bisect.insort(store.keys, key)
                if kind == PODS:
                    self._pod_namespaces[key[0]] += 1
                    self._touch_namespace(key[0])
            self._record(_Event(rv, kind, key, "ADDED" if prev is None else "MODIFIED", data, labels, fields, prev))
        if notify:
            self._cond.notify_all()
        return entry

    def _record(self, event: _Event) -> None:
        slot = self._seq % self._ring_size
        evicted = self._ring[slot]
        if evicted is not None and evicted.rv > self._floor_rv:
            self._floor_rv = evicted.rv
        self._ring[slot] = event
        self._seq += 1

    def _touch_namespace(self, ns: str) -> None:
        if ns not in self._namespace_meta:
            self._rv += 1
            self._namespace_meta[ns] = (_new_uid(), self._rv, _now())

    def _put(self, kind: str, obj: Mapping[str, Any], *, upsert: bool) -> Obj:
        with self._lock:
            norm = self._normalize(kind, obj)
            key = self._key(kind, norm)
            prev = self._stores[kind].entries.get(key)
            if prev is not None:
                if not upsert:
                    raise _already_exists(kind, key[1])
                self._keep_identity(norm, obj, prev)
            self._commit(kind, key, norm)
            return norm

    @staticmethod
    def _keep_identity(norm: Obj, given: Mapping[str, Any], prev: _Entry) -> None:
        """A replace is an update: uid and creationTimestamp survive unless the caller gave them."""
        given_md = given.get("metadata") or {}
        old_md = orjson.loads(prev[_DATA])["metadata"]
        for field in ("uid", "creationTimestamp"):
            if not given_md.get(field):
                norm["metadata"][field] = old_md[field]

    def _update(
        self,
        kind: str,
        key: Key,
        change: Callable[[Obj], Obj | None] | Mapping[str, Any],
        *,
        patch_type: str = "strategic",
        expect_rv: str | None = None,
    ) -> Obj:
        """Apply a callable or patch to one object; no-op changes keep the rv and emit nothing."""
        with self._lock:
            store = self._stores[kind]
            entry = store.entries.get(key)
            if entry is None:
                raise _not_found(kind, key[1])
            if expect_rv is not None and expect_rv != str(entry[_RV]):
                raise _conflict(kind, key[1])
            current = orjson.loads(entry[_DATA])
            # Server-owned identity fields cannot be changed by an update.
            uid, created = current["metadata"]["uid"], current["metadata"]["creationTimestamp"]
            if callable(change):
                result = change(current)
                new = current if result is None else result
            elif patch_type == "merge":
                new = json_merge_patch(current, change)
            elif patch_type == "json":
                new = json_patch(current, change)  # type: ignore[arg-type]
            else:
                new = strategic_merge_patch(current, change)
            if not isinstance(new, dict) or not isinstance(new.get("metadata", {}), dict):
                raise ApiError(422, "the updated object is not a valid object", "Invalid")
            new.pop("kind", None)
            new.pop("apiVersion", None)
            md = new.setdefault("metadata", {})
            if md.get("name") != key[1] or (kind == PODS and md.get("namespace") != key[0]):
                raise ApiError(
                    422, f'{_KINDS[kind]} "{key[1]}" is invalid: metadata.name: field is immutable', "Invalid"
                )
            md["uid"] = uid
            md["creationTimestamp"] = created
            md["resourceVersion"] = str(entry[_RV])
            if kind == NODES and self.node_controller:
                _sync_node_taints(new)
            if orjson.dumps(new) == entry[_DATA]:
                return new  # like the real API server: a no-op patch changes nothing
            self._commit(kind, key, new)
            return new

    def _delete(self, kind: str, key: Key) -> Obj:
        with self._lock:
            entry = self._stores[kind].entries.get(key)
            if entry is None:
                raise _not_found(kind, key[1])
            self._commit(kind, key, None)
            obj: Obj = orjson.loads(entry[_DATA])
            obj["metadata"]["resourceVersion"] = str(self._rv)
            return obj

    def _get(self, kind: str, key: Key) -> Obj | None:
        with self._lock:
            entry = self._stores[kind].entries.get(key)
            return None if entry is None else orjson.loads(entry[_DATA])

    # ------------------------------------------------------------------ nodes

    def add_node(self, obj: Mapping[str, Any]) -> Obj:
        """Create a node (409 AlreadyExists if present); returns the stored object."""
        return self._put(NODES, obj, upsert=False)

    def upsert_node(self, obj: Mapping[str, Any]) -> Obj:
        """Create or replace a node (keeps uid/creationTimestamp on replace)."""
        return self._put(NODES, obj, upsert=True)

    def update_node(self, name: str, fn_or_patch: Callable[[Obj], Obj | None] | Mapping[str, Any]) -> Obj:
        """Change a node with a callable (mutate/return the dict) or a strategic-merge patch dict."""
        return self._update(NODES, ("", name), fn_or_patch)

    def delete_node(self, name: str) -> Obj:
        """Delete a node (emits DELETED); returns the final object."""
        return self._delete(NODES, ("", name))

    def get_node(self, name: str) -> Obj | None:
        """The stored node (a copy), or ``None``."""
        return self._get(NODES, ("", name))

    # ------------------------------------------------------------------ pods

    def add_pod(self, obj: Mapping[str, Any]) -> Obj:
        """Create a pod (409 AlreadyExists if present); namespace defaults to "default"."""
        return self._put(PODS, obj, upsert=False)

    def upsert_pod(self, obj: Mapping[str, Any]) -> Obj:
        """Create or replace a pod."""
        return self._put(PODS, obj, upsert=True)

    def update_pod(
        self, namespace: str, name: str, fn_or_patch: Callable[[Obj], Obj | None] | Mapping[str, Any]
    ) -> Obj:
        """Change a pod with a callable or a strategic-merge patch dict."""
        return self._update(PODS, (namespace, name), fn_or_patch)

    def delete_pod(self, namespace: str, name: str) -> Obj:
        """Delete a pod (emits DELETED); returns the final object."""
        return self._delete(PODS, (namespace, name))

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        """The stored pod (a copy), or ``None``."""
        return self._get(PODS, (namespace, name))

    def add_namespace(self, name: str) -> None:
        """Make a namespace exist even without pods."""
        with self._lock:
            self._explicit_namespaces.add(name)
            self._touch_namespace(name)

    def load(
        self,
        nodes: Iterable[Mapping[str, Any]] = (),
        pods: Iterable[Mapping[str, Any]] = (),
        namespaces: Iterable[str] = (),
        *,
        emit_events: bool = True,
    ) -> int:
        """Bulk create-or-replace, fast enough for 150,000 objects; returns the new resourceVersion.

        With ``emit_events=True`` (default) every object gets its own
        resourceVersion and an ADDED/MODIFIED event, exactly as if added one by
        one (the bounded history keeps only the newest ``history_size``).
        With ``emit_events=False`` all objects share one new resourceVersion
        and no events are recorded; to stay honest to watchers the history is
        compacted and open watches are dropped, so clients relist (like an
        etcd restore).
        """
        with self._lock, _gc_paused():
            for ns in namespaces:
                self._explicit_namespaces.add(ns)
                self._touch_namespace(ns)
            new_keys = {NODES: 0, PODS: 0}
            batch_rv = self._rv + 1  # the one rv shared by all objects when emit_events is off
            for kind, objs in ((NODES, nodes), (PODS, pods)):
                store = self._stores[kind]
                lazy_index = False  # past 1,000 new keys: append, then sort once (beats 150k insorts)
                try:
                    for obj in objs:
                        norm = self._normalize(kind, obj)
                        key = self._key(kind, norm)
                        prev = store.entries.get(key)
                        if prev is not None:
                            self._keep_identity(norm, obj, prev)
                        else:
                            new_keys[kind] += 1
                            lazy_index = lazy_index or new_keys[kind] > 1000 or not emit_events
                        if emit_events:
                            self._commit(kind, key, norm, notify=False, index=not lazy_index)
                        else:
                            norm["metadata"]["resourceVersion"] = str(batch_rv)
                            data, labels, fields = _dumps_compact(norm), _labels_of(norm), _extract_fields(kind, norm)
                            store.entries[key] = (data, batch_rv, labels, fields)
                            if prev is None and kind == PODS:
                                self._pod_namespaces[key[0]] += 1
                                self._touch_namespace(key[0])
                        if prev is None and lazy_index:
                            store.keys.append(key)
                finally:  # even when an object is invalid, the index must end up sorted
                    if lazy_index:
                        store.keys = sorted(set(store.keys))
            if not emit_events:
                self._rv = max(self._rv, batch_rv)
                self._floor_rv = self._rv
                self._min_seq = self._seq
            self._cond.notify_all()
            rv = self._rv
        if not emit_events:
            self.drop_watches()
        return rv

    # ------------------------------------------------------------------ convenience

    def set_node_condition(self, name: str, type: str, status: bool | str, reason: str = "", message: str = "") -> Obj:
        """Set one node condition (transition time moves only when the status changes)."""
        status = _status_str(status)

        def change(node: Obj) -> None:
            now = _now()
            conditions = node.setdefault("status", {}).setdefault("conditions", [])
            cond = next((c for c in conditions if c.get("type") == type), None)
            if cond is None:
                conditions.append(_node_condition(type, status, now, reason, message))
                return
            default_reason, default_message = _CONDITION_REASONS.get((type, status), ("", ""))
            if cond.get("status") != status:
                cond["lastTransitionTime"] = now
            cond.update(
                status=status,
                lastHeartbeatTime=now,
                reason=reason or default_reason,
                message=message or default_message,
            )

        return self.update_node(name, change)

    def cordon(self, name: str, unschedulable: bool = True) -> Obj:
        """``kubectl cordon``/``uncordon``: set spec.unschedulable (the taint follows)."""

        def change(node: Obj) -> None:
            spec = node.setdefault("spec", {})
            if unschedulable:
                spec["unschedulable"] = True
            else:
                spec.pop("unschedulable", None)

        return self.update_node(name, change)

    def set_node_labels(self, name: str, labels: Mapping[str, str | None]) -> Obj:
        """Set node labels; a ``None`` value removes the label."""
        return self._update(NODES, ("", name), {"metadata": {"labels": dict(labels)}}, patch_type="merge")

    def set_pod_phase(self, namespace: str, name: str, phase: str, ready: bool | None = None) -> Obj:
        """Move a pod to ``phase`` with a matching kubelet-style status."""

        def change(pod: Obj) -> None:
            old = pod.get("status") or {}
            is_ready = ready if ready is not None else phase == "Running"
            start = old.get("startTime") or pod["metadata"].get("creationTimestamp") or _now()
            pod["status"] = _pod_status(namespace, name, pod.get("spec") or {}, phase, is_ready, start, _now())

        return self.update_pod(namespace, name, change)

    # ------------------------------------------------------------------ faults

    def drop_watches(self) -> int:
        """Abruptly close every open watch stream (no final chunk); returns how many."""
        with self._lock:
            watches = list(self._watches)
            for w in watches:
                w.dropped = True
            # Gone at once, as far as anyone asking the emulator is concerned; the serving threads
            # still see `dropped` and end without a final chunk.
            self._watches.clear()
            self._cond.notify_all()
        for w in watches:
            _shutdown_socket(w.sock)
        return len(watches)

    def fail_next(
        self, n: int = 1, status: int = 500, path_prefix: str | None = None, retry_after: int | None = 1
    ) -> None:
        """Answer the next ``n`` API requests (whose path starts with ``path_prefix``) with an error Status.

        429 carries a ``Retry-After`` header and ``details.retryAfterSeconds``
        (``retry_after=None`` leaves them out).  Note that urllib3, under the
        kubernetes client, transparently retries a 429 with ``Retry-After``
        (after sleeping that long) unless the client's ``retries`` are off.
        Control (/_emulator) requests are never affected.
        """
        with self._lock:
            self._faults.append(_Fault(int(n), int(status), path_prefix, retry_after))

    def set_offline(self, offline: bool = True, mode: str = "refuse", duration: float | None = None) -> None:
        """Take the API offline or back online.

        ``mode="refuse"``: the listening socket is closed (connection refused)
        and open connections are cut; coming back reopens the same port.
        ``mode="reset"``: the server keeps listening but closes every API
        request's connection without a response (``/_emulator`` still works).
        ``duration``: come back online automatically after that many seconds.
        """
        if mode not in ("refuse", "reset"):
            raise ApiError(400, f"unknown offline mode {mode!r}", "BadRequest")
        # All under the lock, timer armed last: a short duration must not race the unbind.
        with self._lock:
            if self._offline_timer is not None:
                self._offline_timer.cancel()
                self._offline_timer = None
            started = self.url is not None
            if not offline:
                if self._offline_mode == "refuse" and self._server is None and started:
                    self._bind(self._port)
                self._offline_mode = None
                return
            self._offline_mode = mode
            self.drop_watches()
            if mode == "refuse":
                self._unbind()
            else:
                if self._server is None and started:
                    self._bind(self._port)  # from "refuse" to "reset": listen again
                self._cut_connections()  # idle keep-alive connections must not keep working
            if duration is not None:
                timer = threading.Timer(duration, self.set_offline, args=(False,))
                timer.daemon = True
                self._offline_timer = timer
                timer.start()

    def _cut_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            _shutdown_socket(conn)

    @property
    def offline(self) -> bool:
        return self._offline_mode is not None

    def compact(self) -> int:
        """Forget all history: every rv handed out so far gives 410 on watch and on continue.

        The resourceVersion moves on by one (with no event) so that lists made after the
        compaction are valid starting points; returns that new rv.
        """
        with self._lock:
            self._rv += 1
            self._floor_rv = self._rv
            self._min_seq = self._seq
            return self._rv

    def set_history_size(self, n: int) -> None:
        """Resize the event history (keeps the newest events that fit)."""
        n = max(1, int(n))
        with self._lock:
            lo = max(self._seq - self._ring_size, 0)
            events = [self._ring[s % self._ring_size] for s in range(lo, self._seq)]
            ring: list[_Event | None] = [None] * n
            kept_from = max(self._seq - n, lo)
            for s in range(lo, kept_from):
                ev = events[s - lo]
                if ev is not None and ev.rv > self._floor_rv:
                    self._floor_rv = ev.rv
            for s in range(kept_from, self._seq):
                ring[s % n] = events[s - lo]
            self._ring, self._ring_size = ring, n

    # ------------------------------------------------------------------ stats

    def _count(self, name: str, n: int = 1) -> None:
        with self._stats_lock:
            self._stats[name] += n

    def _count_request(self, label: str) -> None:
        with self._stats_lock:
            self._requests[label] += 1
            self._stats["requests_total"] += 1

    def _count_response(self, code: int) -> None:
        with self._stats_lock:
            self._responses[str(code)] += 1

    def stats(self) -> Obj:
        """Counters for tests and the benchmark.

        ``requests``: by "verb resource" ("list pods", "watch nodes", "patch nodes",
        "fault 429", "control cordon", ...); ``responses``: by HTTP status code
        ("200", "404", "410", ...; a watch counts as its 200); ``watch_expired``:
        watches answered with an ERROR 410 event; plus list pages/items, watch
        streams opened/active/dropped, events and bookmarks sent, faults injected,
        object counts, the resourceVersion and the history window.
        """
        with self._stats_lock:
            out: Obj = {
                "requests": dict(self._requests),
                "responses": dict(self._responses),
                "watch_expired": self._stats["watch_expired"],
                "requests_total": self._stats["requests_total"],
                "list_pages": self._stats["list_pages"],
                "list_items": self._stats["list_items"],
                "watch_streams_opened": self._stats["watch_streams_opened"],
                "events_sent": self._stats["events_sent"],
                "bookmarks_sent": self._stats["bookmarks_sent"],
                "faults_injected": self._stats["faults_injected"],
                "watches_dropped": self._stats["watches_dropped"],
            }
        with self._lock:
            out.update(
                {
                    "watch_streams_active": len(self._watches),
                    "resource_version": self._rv,
                    "nodes": len(self._stores[NODES].entries),
                    "pods": len(self._stores[PODS].entries),
                    "history": {
                        "size": self._ring_size,
                        "events": min(self._seq, self._ring_size, self._seq - self._min_seq),
                        "floor_resource_version": self._floor_rv,
                    },
                    "offline": self._offline_mode,
                }
            )
        return out

    def reset_stats(self) -> None:
        """Zero all counters."""
        with self._stats_lock:
            self._stats.clear()
            self._requests.clear()
            self._responses.clear()

    # ------------------------------------------------------------------ serving: lists

    def _take_fault(self, path: str) -> ApiError | None:
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and (fault.path_prefix is None or path.startswith(fault.path_prefix)):
                    fault.remaining -= 1
                    break
            else:
                return None
            self._faults = [f for f in self._faults if f.remaining > 0]
        self._count("faults_injected")
        retry = fault.retry_after if fault.status == 429 else None
        message = _FAULT_MESSAGES.get(fault.status, f"injected fault {fault.status}")
        return ApiError(fault.status, message, retry_after=retry)

    def _list_page(self, kind: str, namespace: str | None, flt: _Filter, limit: int | None, token: str | None) -> bytes:
        """One list page as bytes, consistent with the snapshot of the first page."""
        with self._lock:
            store = self._stores[kind]
            lo, hi = store.scope(namespace)
            overrides: dict[Key, tuple[bytes | None, Any, Any]] = {}
            if token:
                snapshot_rv, after = _decode_continue(token)
                if snapshot_rv < self._floor_rv:
                    raise _expired_continue()
                start = max(lo, bisect.bisect_right(store.keys, after))
                if snapshot_rv < self._rv:
                    overrides = self._snapshot_overrides(kind, namespace, snapshot_rv, after)
            else:
                snapshot_rv, after, start = self._rv, None, lo
            # Keys that existed at the snapshot but are deleted now.
            extra = sorted(k for k, v in overrides.items() if v[0] is not None and k not in store.entries)
            items: list[bytes] = []
            keys, entries = store.keys, store.entries
            i, j = start, 0
            last: Key | None = None
            more = False
            check = not flt.empty
            while i < hi or j < len(extra):
                if j < len(extra) and (i >= hi or extra[j] < keys[i]):
                    key = extra[j]
                    j += 1
                else:
                    key = keys[i]
                    i += 1
                if limit is not None and len(items) >= limit:
                    more = True
                    break
                if key in overrides:
                    data, labels, fields = overrides[key]
                    if data is None:
                        continue
                else:
                    data, _rv, labels, fields = entries[key]
                if check and not flt(labels, fields):
                    continue
                items.append(data)
                last = key
            metadata: Obj = {"resourceVersion": str(snapshot_rv)}
            if more and last is not None:
                metadata["continue"] = _encode_continue(snapshot_rv, last)
                if flt.empty and not overrides:
                    metadata["remainingItemCount"] = hi - bisect.bisect_right(keys, last, lo, hi)
        self._count("list_pages")
        self._count("list_items", len(items))
        head = b'{"kind":"' + _LIST_KINDS[kind].encode() + b'","apiVersion":"v1","metadata":' + orjson.dumps(metadata)
        return head + b',"items":[' + b",".join(items) + b"]}"

    def _first_seq_after(self, rv: int) -> int:
        """Sequence number of the first retained event with rv > ``rv``. Lock held."""
        lo = max(self._seq - self._ring_size, self._min_seq, 0)
        hi = self._seq
        while lo < hi:
            mid = (lo + hi) // 2
            ev = self._ring[mid % self._ring_size]
            if ev is not None and ev.rv > rv:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _snapshot_overrides(
        self, kind: str, namespace: str | None, snapshot_rv: int, after: Key
    ) -> dict[Key, tuple[bytes | None, Any, Any]]:
        """State at ``snapshot_rv`` of keys changed since: the previous version of their first later event."""
        overrides: dict[Key, tuple[bytes | None, Any, Any]] = {}
        for seq in range(self._first_seq_after(snapshot_rv), self._seq):
            ev = self._ring[seq % self._ring_size]
            if ev is None or ev.kind != kind or ev.key <= after or ev.key in overrides:
                continue
            if namespace is not None and ev.key[0] != namespace:
                continue
            overrides[ev.key] = (ev.prev, ev.prev_labels, ev.prev_fields)
        return overrides

    def _namespace_objects(self, flt: Callable[[Mapping[str, str]], bool] | None, field_name: str | None) -> list[Obj]:
        with self._lock:
            names = sorted(self._explicit_namespaces | {ns for ns, c in self._pod_namespaces.items() if c > 0})
            out = []
            for ns in names:
                obj = self._namespace_object(ns)
                if flt is not None and not flt(obj["metadata"]["labels"]):
                    continue
                if field_name is not None and field_name != ns:
                    continue
                out.append(obj)
            return out

    def _namespace_object(self, ns: str) -> Obj:
        uid, rv, created = self._namespace_meta[ns]
        return {
            "metadata": {
                "name": ns,
                "uid": uid,
                "resourceVersion": str(rv),
                "creationTimestamp": created,
                "labels": {"kubernetes.io/metadata.name": ns},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }

    def _namespace_exists(self, ns: str) -> bool:
        with self._lock:
            return ns in self._explicit_namespaces or self._pod_namespaces.get(ns, 0) > 0

    # ------------------------------------------------------------------ serving: watches

    def _open_watch(
        self, kind: str, namespace: str | None, flt: _Filter, rv_param: str, sock: socket.socket
    ) -> tuple[_Watch, list[bytes], bytes | None]:
        """Register a watch.

        Returns it, the stored items to send as synthetic ADDED first (rv omitted or "0"),
        and an ERROR line when the stream must only say 410 and end.
        """
        with self._lock:
            w = _Watch(kind, namespace, flt, self._seq, sock)
            initial: list[bytes] = []
            if rv_param in ("", "0"):
                # No rv / "0": synthetic ADDED for the current state, then live.  Only
                # references to the stored bytes are taken here; lines are built while writing.
                store = self._stores[kind]
                lo, hi = store.scope(namespace)
                for key in store.keys[lo:hi]:
                    data, _rv, labels, fields = store.entries[key]
                    if flt.empty or flt(labels, fields):
                        initial.append(data)
            else:
                try:
                    rv = int(rv_param)
                except ValueError:
                    raise ApiError(400, f"invalid resource version: {rv_param!r}", "BadRequest") from None
                if rv < self._floor_rv:
                    status = ApiError(410, f"too old resource version: {rv} ({self._floor_rv + 1})", "Expired").status()
                    self._count("watch_expired")
                    return w, [], b'{"type":"ERROR","object":' + orjson.dumps(status) + b"}\n"
                w.next_seq = self._first_seq_after(rv)
            self._watches.add(w)
        self._count("watch_streams_opened")
        return w, initial, None

    def _close_watch(self, w: _Watch) -> bool:
        """Unregister a watch; False when drop_watches() got to it first."""
        with self._lock:
            self._watches.discard(w)
            return not w.dropped

    def _watch_poll(self, w: _Watch, timeout: float) -> tuple[list[bytes], int, str]:
        """Wait up to ``timeout`` for events; returns (lines, rv caught up to, state).

        state is "ok", "dropped" (end abruptly) or "expired" (lines hold an ERROR 410; end).
        """
        with self._cond:
            if not w.dropped and w.next_seq >= self._seq and timeout > 0:
                self._cond.wait(timeout)
            if w.dropped:
                return [], self._rv, "dropped"
            if w.next_seq < self._seq - self._ring_size:
                # This watcher fell further behind than the history keeps.
                status = ApiError(
                    410, f"too old resource version: watcher fell behind ({self._floor_rv + 1})", "Expired"
                ).status()
                return [b'{"type":"ERROR","object":' + orjson.dumps(status) + b"}\n"], self._rv, "expired"
            lines: list[bytes] = []
            flt, kind, ns = w.filter, w.kind, w.namespace
            plain = flt.empty
            for seq in range(w.next_seq, self._seq):
                ev = self._ring[seq % self._ring_size]
                if ev is None or ev.kind != kind or (ns is not None and ev.key[0] != ns):
                    continue
                if plain:
                    lines.append(ev.line())
                    continue
                # With selectors an object entering/leaving the selection is ADDED/DELETED.
                now_match = flt(ev.labels, ev.fields)
                if ev.type == "MODIFIED":
                    was_match = flt(ev.prev_labels or (), ev.prev_fields or ())
                    if now_match and was_match:
                        lines.append(ev.line())
                    elif now_match:
                        lines.append(ev.line("ADDED"))
                    elif was_match:
                        lines.append(ev.line("DELETED"))
                elif now_match:
                    lines.append(ev.line())
            w.next_seq = self._seq
            return lines, self._rv, "ok"

    # ------------------------------------------------------------------ connection tracking

    def _track(self, conn: socket.socket) -> None:
        with self._conns_lock:
            self._conns.add(conn)

    def _untrack(self, conn: socket.socket) -> None:
        with self._conns_lock:
            self._conns.discard(conn)

    # ------------------------------------------------------------------ chaos

    def start_chaos(self, interval: float = 1.0, seed: int | None = None) -> None:
        """Every ``interval`` seconds make one plausible change (see :meth:`chaos_step`)."""
        self.stop_chaos()
        rng = random.Random(seed)
        self._chaos_stop = threading.Event()
        stop = self._chaos_stop

        def run() -> None:
            while not stop.wait(interval):
                try:
                    self.chaos_step(rng)
                except ApiError:
                    pass  # the object vanished meanwhile (e.g. deleted by a test): try again next tick

        self._chaos_thread = threading.Thread(target=run, name="kube-emulator-chaos", daemon=True)
        self._chaos_thread.start()

    def stop_chaos(self) -> None:
        """Stop the chaos thread if running."""
        self._chaos_stop.set()
        thread, self._chaos_thread = self._chaos_thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _gpus_in_use(self, node: str) -> int:
        """GPUs requested by the unfinished pods bound to a node (call with the lock held)."""
        name_at = _FIELD_INDEX[PODS]["spec.nodeName"]
        phase_at = _FIELD_INDEX[PODS]["status.phase"]
        used = 0
        for entry in self._stores[PODS].entries.values():
            fields = entry[_FIELDS]
            if fields[name_at] != node or fields[phase_at] in ("Succeeded", "Failed"):
                continue
            for container in orjson.loads(entry[_DATA]).get("spec", {}).get("containers", []):
                resources = container.get("resources") or {}
                gpus = (resources.get("requests") or {}).get(_GPU) or (resources.get("limits") or {}).get(_GPU) or 0
                used += int(gpus) if str(gpus).isdigit() else 0
        return used

    def chaos_step(self, rng: random.Random | None = None) -> str:
        """Make one random plausible change; returns a short description of it.

        Toggles a node's Ready or MemoryPressure condition, cordons/uncordons a
        node, starts a pod requesting GPUs on a GPU node, or finishes (then
        later deletes) a pod that chaos started, keeping at most ~50 of them.
        """
        rng = rng or random.Random()
        with self._lock:
            nodes, pods = self._stores[NODES], self._stores[PODS]
            if not nodes.keys:
                return "no nodes"
            node = rng.choice(nodes.keys)[1]
            node_obj = orjson.loads(nodes.entries[("", node)][_DATA])
            gpu_nodes: list[tuple[str, int]] = []  # (name, GPU count) among a random sample
            for key in rng.sample(nodes.keys, min(20, len(nodes.keys))):
                labels = dict(nodes.entries[key][_LABELS])
                if "nvidia.com/gpu.present" in labels:
                    gpu_nodes.append((key[1], int(labels.get("nvidia.com/gpu.count") or 1)))
            self._chaos_pods = [k for k in self._chaos_pods if k in pods.entries]
            phase_index = _FIELD_INDEX[PODS]["status.phase"]
            chaos_pods = {k: pods.entries[k][_FIELDS][phase_index] for k in self._chaos_pods}
        actions = ("ready", "cordon", "memory", "pod", "pod", "finish", "finish")
        action = "finish" if len(chaos_pods) > 50 else rng.choice(actions)
        conditions = {c["type"]: c["status"] for c in node_obj.get("status", {}).get("conditions", [])}
        if action == "ready":
            new = "False" if conditions.get("Ready") == "True" else "True"
            self.set_node_condition(node, "Ready", new)
            return f"node {node} Ready={new}"
        if action == "cordon":
            on = not node_obj.get("spec", {}).get("unschedulable", False)
            self.cordon(node, on)
            return f"node {node} unschedulable={on}"
        if action == "memory":
            new = "False" if conditions.get("MemoryPressure") == "True" else "True"
            self.set_node_condition(node, "MemoryPressure", new)
            return f"node {node} MemoryPressure={new}"
        if action == "finish" and chaos_pods:
            (ns, name), phase = rng.choice(sorted(chaos_pods.items()))
            if phase in ("Succeeded", "Failed"):
                self.delete_pod(ns, name)
                return f"pod {ns}/{name} deleted"
            phase = rng.choice(("Succeeded", "Succeeded", "Failed"))
            self.set_pod_phase(ns, name, phase)
            return f"pod {ns}/{name} {phase}"
        # Like the scheduler, place GPU pods only where GPUs are free.
        with self._lock:
            free = [(name, count - self._gpus_in_use(name)) for name, count in gpu_nodes]
        free = [(name, gpus) for name, gpus in free if gpus > 0]
        target, gpus = rng.choice(free) if free else (node, 0)
        requests: dict[str, Any] = {"cpu": str(rng.choice((1, 2, 4))), "memory": f"{rng.choice((4, 8, 16))}Gi"}
        if gpus:
            requests["nvidia.com/gpu"] = rng.choice([g for g in (1, 2, 4, 8) if g <= gpus])
        ns = rng.choice(_NAMESPACES[:5])
        with self._lock:
            self._chaos_serial += 1  # unique even when two steps draw the same random bits
            name = f"chaos-{self._chaos_serial:05d}-{rng.getrandbits(24):06x}"
        pod = make_pod(
            name, ns, node=target, containers=[{"name": "main", "requests": requests}], labels={"app": "chaos"}
        )
        self.add_pod(pod)
        with self._lock:
            self._chaos_pods.append((ns, name))
        return f"pod {ns}/{name} started on {target}"

    # ------------------------------------------------------------------ HTTP control surface

    _CONTROL_OPS = frozenset(
        {
            "add_node",
            "upsert_node",
            "update_node",
            "delete_node",
            "get_node",
            "add_pod",
            "upsert_pod",
            "update_pod",
            "delete_pod",
            "get_pod",
            "add_namespace",
            "load",
            "set_node_condition",
            "cordon",
            "set_node_labels",
            "set_pod_phase",
            "drop_watches",
            "fail_next",
            "set_offline",
            "compact",
            "set_history_size",
            "stats",
            "reset_stats",
            "start_chaos",
            "stop_chaos",
            "chaos_step",
        }
    )

    def _control_args(self, op: str, args: Obj) -> Obj:
        """Validate and convert the JSON body of ``POST /_emulator/<op>`` into keyword arguments."""
        if op not in self._CONTROL_OPS:
            raise ApiError(404, f"unknown emulator operation {op!r}", "NotFound")
        args = dict(args)
        # {"make": {...}} builds the object with the factories: handy from curl.
        if op in ("add_node", "upsert_node", "add_pod", "upsert_pod") and "make" in args:
            make = dict(args.pop("make"))
            try:
                args["obj"] = (
                    make_node(make.pop("name"), **make) if "node" in op else make_pod(make.pop("name"), **make)
                )
            except (KeyError, TypeError) as exc:
                raise ApiError(400, f"bad factory arguments for {op}: {exc}", "BadRequest") from exc
        if op in ("update_node", "update_pod") and "patch" in args:
            args["fn_or_patch"] = args.pop("patch")
        if op == "set_offline":
            # Over HTTP "reset" is the default: with "refuse" nothing could reach us to come back.
            args.setdefault("mode", "reset")
            if args.get("offline", True) and args["mode"] == "refuse" and args.get("duration") is None:
                raise ApiError(400, "set_offline over HTTP with mode=refuse needs a duration", "BadRequest")
            if args["mode"] not in ("refuse", "reset"):
                raise ApiError(400, f"unknown offline mode {args['mode']!r}", "BadRequest")
        if op == "chaos_step":
            args = {"rng": random.Random(args["seed"])} if "seed" in args else {}
        return args

    def _control_call(self, op: str, args: Obj) -> Any:
        try:
            return getattr(self, op)(**args)
        except TypeError as exc:
            raise ApiError(400, f"bad arguments for {op}: {exc}", "BadRequest") from exc


def _shutdown_socket(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _peer_closed(sock: socket.socket) -> bool:
    """True when the client has closed its side (readable with EOF)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


# --------------------------------------------------------------------------- HTTP


class _Server(http.server.ThreadingHTTPServer):
    """Thread-per-connection server; daemon threads so stop() never blocks on clients."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128
    emulator: KubeEmulator


class _Server6(_Server):
    address_family = socket.AF_INET6


_TRUE = {"true", "1", "yes"}


class _Handler(http.server.BaseHTTPRequestHandler):
    """Routes core/v1 requests to the emulator; speaks HTTP/1.1 keep-alive and chunked watches."""

    protocol_version = "HTTP/1.1"
    server_version = "kube-emulator/1.0"
    sys_version = ""
    disable_nagle_algorithm = True  # small chunks (watch events) must not wait for delayed ACKs
    timeout = 300  # reclaim idle keep-alive connections
    server: _Server

    @property
    def emu(self) -> KubeEmulator:
        return self.server.emulator

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests and the benchmark make many requests

    def setup(self) -> None:
        super().setup()
        self.emu._track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.emu._untrack(self.connection)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    # ------------------------------------------------------------------ plumbing

    def _send(
        self, code: int, body: bytes, content_type: str = "application/json", headers: Mapping[str, str] | None = None
    ) -> None:
        lines = [
            f"HTTP/1.1 {code} {self.responses.get(code, ('Error',))[0]}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-cache, private",
        ]
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.emu._count_response(code)
        if len(body) < 65536:
            self.wfile.write(head + body)
        else:
            self.wfile.write(head)
            self.wfile.write(body)

    def _send_json(self, obj: Any, code: int = 200) -> None:
        self._send(code, orjson.dumps(obj))

    def _send_error(self, err: ApiError) -> None:
        headers = {"Retry-After": str(err.retry_after)} if err.retry_after is not None else None
        self._send(err.code, orjson.dumps(err.status()), headers=headers)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _dispatch(self, method: str) -> None:
        emu = self.emu
        split = urlsplit(self.path)
        path = split.path
        try:
            is_control = path.startswith("/_emulator")
            if emu._offline_mode is not None and not is_control:
                # Offline: drop the connection without answering.
                self.close_connection = True
                _shutdown_socket(self.connection)
                return
            body = self._read_body()
            query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
            if is_control:
                self._control(method, path, body)
                return
            fault = emu._take_fault(path)
            if fault is not None:
                emu._count_request(f"fault {fault.code}")
                self._send_error(fault)
                return
            self._route(method, path, query, body)
        except ApiError as err:
            self._send_error(err)
        except SelectorError as err:
            self._send_error(ApiError(400, f"unable to parse requirement: {err}", "BadRequest"))
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            self.close_connection = True
        except Exception as exc:  # a bug must come back as a Status, not a hung client
            try:
                self._send_error(ApiError(500, f"emulator internal error: {exc!r}", "InternalError"))
            except OSError:
                self.close_connection = True

    def _control(self, method: str, path: str, body: bytes) -> None:
        op = path[len("/_emulator") :].strip("/")
        self.emu._count_request(f"control {op}")
        if method == "GET" and op in ("stats", ""):
            self._send_json(self.emu.stats())
            return
        if method != "POST":
            raise ApiError(405, f"use POST /_emulator/{op}", "MethodNotAllowed")
        try:
            args = orjson.loads(body) if body.strip() else {}
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"invalid JSON body: {exc}", "BadRequest") from exc
        if not isinstance(args, dict):
            raise ApiError(400, "the JSON body must be an object of keyword arguments", "BadRequest")
        kwargs = self.emu._control_args(op, args)
        if op == "set_offline":
            # Going offline cuts every connection, this one included: answer first.
            self.close_connection = True
            self._send_json({"ok": True, "result": None})
            self.emu._control_call(op, kwargs)
            return
        result = self.emu._control_call(op, kwargs)
        self._send_json({"ok": True, "result": result})

    def _route(self, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        if parts[:2] != ["api", "v1"]:
            self._discovery(method, parts)
            return
        rest = parts[2:]
        n = len(rest)
        if rest[:1] == ["nodes"]:
            if n == 1:
                self._collection(method, NODES, None, query, body)
                return
            if n == 2 or (n == 3 and rest[2] == "status"):
                self._item(method, NODES, ("", rest[1]), query, body)
                return
        elif rest[:1] == ["pods"] and n == 1:
            self._collection(method, PODS, None, query, body)
            return
        elif rest[:1] == ["namespaces"]:
            if n == 1:
                self._namespaces(method, query)
                return
            if n == 2:
                self._namespace(method, rest[1])
                return
            if rest[2] == "pods":
                if n == 3:
                    self._collection(method, PODS, rest[1], query, body)
                    return
                if n == 4 or (n == 5 and rest[4] == "status"):
                    self._item(method, PODS, (rest[1], rest[3]), query, body)
                    return
        elif not rest:
            self._discovery(method, parts)
            return
        self.emu._count_request(f"{method.lower()} unknown")
        raise ApiError(404, "the server could not find the requested resource", "NotFound")

    # ------------------------------------------------------------------ resources

    def _collection(self, method: str, kind: str, namespace: str | None, query: dict[str, str], body: bytes) -> None:
        emu = self.emu
        if method == "POST":
            emu._count_request(f"create {kind}")
            obj = _parse_json_object(body)
            if kind == PODS and namespace is not None:
                md = obj.setdefault("metadata", {})
                if md.get("namespace") not in (None, namespace):
                    raise ApiError(
                        400,
                        "the namespace of the provided object does not match the namespace sent on the request",
                        "BadRequest",
                    )
                md["namespace"] = namespace
            stored = emu._put(kind, obj, upsert=False)
            self._send(201, orjson.dumps({"kind": _KINDS[kind], "apiVersion": "v1", **stored}))
            return
        if method != "GET":
            raise ApiError(405, f"method {method} not allowed on {kind} collection", "MethodNotAllowed")
        flt = _Filter(kind, query.get("labelSelector"), query.get("fieldSelector"))
        if query.get("watch", "").lower() in _TRUE:
            emu._count_request(f"watch {kind}")
            self._watch(kind, namespace, flt, query)
            return
        emu._count_request(f"list {kind}")
        limit: int | None = None
        token = query.get("continue") or None
        if query.get("limit"):
            try:
                limit = int(query["limit"])
            except ValueError:
                raise ApiError(400, f"invalid limit {query['limit']!r}", "BadRequest") from None
            limit = limit if limit > 0 else None
        if query.get("resourceVersion") == "0" and not token:
            limit = None  # rv=0 is served "from the watch cache", which ignores limit
        self._send(200, emu._list_page(kind, namespace, flt, limit, token))

    def _item(self, method: str, kind: str, key: Key, query: dict[str, str], body: bytes) -> None:
        emu = self.emu
        verb = {"GET": "get", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}.get(method, method.lower())
        emu._count_request(f"{verb} {kind}")
        if method == "GET":
            with emu._lock:
                entry = emu._stores[kind].entries.get(key)
                data = entry[_DATA] if entry else None
            if data is None:
                raise _not_found(kind, key[1])
            self._send(200, _full_object(kind, data))
            return
        if method == "PATCH":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            patch_type = {
                "application/merge-patch+json": "merge",
                "application/strategic-merge-patch+json": "strategic",
                "application/json-patch+json": "json",
            }.get(ctype)
            if patch_type is None:
                raise ApiError(
                    415,
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, "
                    f"application/strategic-merge-patch+json (got {ctype!r})",
                    "UnsupportedMediaType",
                )
            try:
                patch = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise ApiError(400, f"invalid JSON patch: {exc}", "BadRequest") from exc
            if patch_type == "json" and not isinstance(patch, list):
                raise ApiError(400, "a JSON patch must be a list of operations", "BadRequest")
            if patch_type != "json" and not isinstance(patch, dict):
                raise ApiError(400, "a merge patch must be a JSON object", "BadRequest")
            expect = None
            if isinstance(patch, dict):
                expect = (patch.get("metadata") or {}).get("resourceVersion")
            new = emu._update(kind, key, patch, patch_type=patch_type, expect_rv=expect)
            self._send(200, orjson.dumps({"kind": _KINDS[kind], "apiVersion": "v1", **new}))
            return
        if method == "PUT":
            obj = _parse_json_object(body)
            if kind == PODS:
                obj.setdefault("metadata", {}).setdefault("namespace", key[0])
            expect = (obj.get("metadata") or {}).get("resourceVersion")
            new = emu._update(kind, key, lambda _cur: obj, expect_rv=expect)
            self._send(200, orjson.dumps({"kind": _KINDS[kind], "apiVersion": "v1", **new}))
            return
        if method == "DELETE":
            final = emu._delete(kind, key)
            self._send(200, orjson.dumps({"kind": _KINDS[kind], "apiVersion": "v1", **final}))
            return
        raise ApiError(405, f"method {method} not allowed", "MethodNotAllowed")

    def _namespaces(self, method: str, query: dict[str, str]) -> None:
        self.emu._count_request("list namespaces")
        if method != "GET" or query.get("watch", "").lower() in _TRUE:
            raise ApiError(405, "only list is supported for namespaces", "MethodNotAllowed")
        field_name = None
        for term in filter(None, (query.get("fieldSelector") or "").split(",")):
            field, _, value = term.partition("=")
            if field.strip() != "metadata.name":
                raise SelectorError(f'"{field}" is not a known field selector: only "metadata.name"')
            field_name = value.lstrip("=").strip()
        objs = self.emu._namespace_objects(parse_label_selector(query.get("labelSelector")), field_name)
        body = {
            "kind": "NamespaceList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self.emu.resource_version)},
            "items": objs,
        }
        self._send_json(body)

    def _namespace(self, method: str, name: str) -> None:
        self.emu._count_request("get namespaces")
        if method != "GET":
            raise ApiError(405, "only get is supported for a namespace", "MethodNotAllowed")
        emu = self.emu
        with emu._lock:
            if not emu._namespace_exists(name):
                raise _not_found("namespaces", name)
            obj = emu._namespace_object(name)
        self._send_json({"kind": "Namespace", "apiVersion": "v1", **obj})

    def _discovery(self, method: str, parts: list[str]) -> None:
        self.emu._count_request(f"{method.lower()} discovery")
        if method != "GET":
            raise ApiError(405, "method not allowed", "MethodNotAllowed")
        host = self.headers.get("Host") or "127.0.0.1"
        if parts == ["version"]:
            self._send_json(
                {
                    "major": "1",
                    "minor": "31",
                    "gitVersion": "v1.31.4-emulator",
                    "gitCommit": "0000000000000000000000000000000000000000",
                    "gitTreeState": "clean",
                    "buildDate": "2025-01-01T00:00:00Z",
                    "goVersion": "go1.22.10",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                }
            )
        elif parts == ["api"]:
            self._send_json(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
                }
            )
        elif parts == ["api", "v1"]:
            verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
            self._send_json(
                {
                    "kind": "APIResourceList",
                    "groupVersion": "v1",
                    "resources": [
                        {
                            "name": "namespaces",
                            "singularName": "namespace",
                            "namespaced": False,
                            "kind": "Namespace",
                            "verbs": ["get", "list"],
                            "shortNames": ["ns"],
                        },
                        {
                            "name": "nodes",
                            "singularName": "node",
                            "namespaced": False,
                            "kind": "Node",
                            "verbs": verbs,
                            "shortNames": ["no"],
                        },
                        {
                            "name": "nodes/status",
                            "singularName": "",
                            "namespaced": False,
                            "kind": "Node",
                            "verbs": ["get", "patch"],
                        },
                        {
                            "name": "pods",
                            "singularName": "pod",
                            "namespaced": True,
                            "kind": "Pod",
                            "verbs": verbs,
                            "shortNames": ["po"],
                        },
                        {
                            "name": "pods/status",
                            "singularName": "",
                            "namespaced": True,
                            "kind": "Pod",
                            "verbs": ["get", "patch"],
                        },
                    ],
                }
            )
        elif parts == ["apis"]:
            self._send_json({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        elif parts in (["healthz"], ["livez"], ["readyz"]):
            self._send(200, b"ok", "text/plain; charset=utf-8")
        else:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")

    # ------------------------------------------------------------------ watch streaming

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")

    def _watch(self, kind: str, namespace: str | None, flt: _Filter, query: dict[str, str]) -> None:
        emu = self.emu
        bookmarks = query.get("allowWatchBookmarks", "").lower() in _TRUE
        try:
            timeout = float(query.get("timeoutSeconds") or emu.watch_timeout)
        except ValueError:
            raise ApiError(400, "invalid timeoutSeconds", "BadRequest") from None
        w, initial, error = emu._open_watch(kind, namespace, flt, query.get("resourceVersion", ""), self.connection)
        emu._count_response(200)
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            b"Cache-Control: no-cache, private\r\n\r\n"
        )
        pending: list[bytes] = [error] if error else []
        finished = error is not None
        bookmark_prefix = (
            b'{"type":"BOOKMARK","object":{"kind":"'
            + _KINDS[kind].encode()
            + b'","apiVersion":"v1","metadata":{"resourceVersion":"'
        )
        interval = max(emu.bookmark_interval, 0.01)
        start = time.monotonic()
        deadline = start + timeout
        next_bookmark = start + interval
        abrupt = False
        bookmark_pending = 0
        try:
            for i in range(0, len(initial), 500):  # the initial state, in bounded chunks
                batch = initial[i : i + 500]
                self._write_chunk(b"".join([_event_line("ADDED", kind, data) for data in batch]))
                emu._count("events_sent", len(batch))
            del initial
            while True:
                if pending:
                    self._write_chunk(b"".join(pending))
                    emu._count("events_sent", len(pending) - bookmark_pending)
                    pending, bookmark_pending = [], 0
                now = time.monotonic()
                if finished or now >= deadline:
                    break
                wait = min(deadline, next_bookmark if bookmarks else deadline, now + 1.0) - now
                pending, caught_up_rv, state = emu._watch_poll(w, max(wait, 0.0))
                if state == "dropped":
                    abrupt = True
                    emu._count("watches_dropped")
                    break
                if state == "expired":
                    emu._count("watch_expired")
                    finished = True
                    continue
                now = time.monotonic()
                if bookmarks and now >= next_bookmark and now < deadline:
                    pending.append(bookmark_prefix + str(caught_up_rv).encode() + b'"}}}\n')
                    bookmark_pending = 1
                    emu._count("bookmarks_sent")
                    next_bookmark = now + interval
                if not pending and _peer_closed(self.connection):
                    abrupt = True
                    break
            if not abrupt:
                # Unregister before the terminator: once the client has it, it may reuse this
                # connection for another request, which drop_watches() must not cut.
                if not emu._close_watch(w):
                    abrupt = True  # dropped meanwhile: the socket is already shut down
                else:
                    self.wfile.write(b"0\r\n\r\n")
        except OSError:
            abrupt = True
        except Exception:  # a bug mid-stream: the response cannot turn into a Status any more
            abrupt = True
            traceback.print_exc()
        finally:
            emu._close_watch(w)
            if abrupt:
                self.close_connection = True


def _parse_json_object(body: bytes) -> Obj:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"invalid JSON body: {exc}", "BadRequest") from exc
    if not isinstance(obj, dict):
        raise ApiError(400, "the body must be a JSON object", "BadRequest")
    return obj


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nodepools.emulator``: serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m nodepools.emulator", description="Kubernetes API emulator (nodes, pods, namespaces)."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8001, help="port to listen on; 0 picks a free one (default 8001)")
    parser.add_argument(
        "--kubeconfig", help="where to write a kubeconfig for this server (default: a file in the temp dir)"
    )
    parser.add_argument("--context", default="emulator", help="kubeconfig context name (default emulator)")
    parser.add_argument("--scenario", help='JSON file {"nodes": [...], "pods": [...], "namespaces": [...]} to load')
    parser.add_argument(
        "--demo-nodes",
        type=int,
        default=0,
        help="generate a demo fleet of this many nodes when no scenario is given",
    )
    parser.add_argument(
        "--demo-pods", type=int, default=None, help="pods in the generated demo fleet (default: 8 per node)"
    )
    parser.add_argument("--chaos", type=float, metavar="SECONDS", help="make one plausible random change every SECONDS")
    parser.add_argument("--seed", type=int, default=None, help="random seed for --chaos and --demo-nodes")
    parser.add_argument(
        "--history-size", type=int, default=10_000, help="watch history length in events (default 10000)"
    )
    parser.add_argument(
        "--bookmark-interval", type=float, default=1.0, help="seconds between watch bookmarks (default 1.0)"
    )
    args = parser.parse_args(argv)

    emu = KubeEmulator(history_size=args.history_size, bookmark_interval=args.bookmark_interval)
    # The source objects are dropped right after loading: the store keeps only serialized bytes.
    if args.scenario:
        with open(args.scenario, "rb") as fh:
            scenario = orjson.loads(fh.read())
        emu.load(
            nodes=scenario.get("nodes", []), pods=scenario.get("pods", []), namespaces=scenario.get("namespaces", [])
        )
        del scenario
    elif args.demo_nodes:
        nodes, pod_iter = iter_cluster(args.demo_nodes, args.demo_pods, seed=args.seed or 0)
        emu.load(nodes=nodes, pods=pod_iter)
        del nodes, pod_iter
    gc.collect()
    url = emu.start(args.host, args.port)
    kubeconfig = args.kubeconfig or os.path.join(tempfile.gettempdir(), f"kube-emulator-{emu._port}.kubeconfig")
    emu.write_kubeconfig(kubeconfig, context=args.context)
    if args.chaos:
        emu.start_chaos(args.chaos, args.seed)
    stats = emu.stats()
    print(f"Kubernetes API emulator listening on {url}", flush=True)
    print(f"kubeconfig: {os.path.abspath(kubeconfig)} (context {args.context})", flush=True)
    print(
        f"objects: {stats['nodes']} nodes, {stats['pods']} pods"
        + (f"; chaos every {args.chaos}s" if args.chaos else ""),
        flush=True,
    )

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop.wait(0.5):
        pass
    emu.stop()
    print("emulator stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
