"""``application/json;as=Table`` answers: what ``kubectl get`` prints (columns like the real API server's)."""

from __future__ import annotations

import datetime as dt
import re
from functools import lru_cache
from typing import Any

from kubesim.resources import Resource
from kubesim.util import Obj


def human_age(created: str | None, now: dt.datetime | None = None) -> str:
    """Like k8s.io/apimachinery duration.HumanDuration: 45s, 3m12s, 25m, 5h3m, 2d4h, 30d, 2y."""
    if not created:
        return "<unknown>"
    try:
        then = dt.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return "<unknown>"
    seconds = int(((now or dt.datetime.now(dt.UTC)) - then).total_seconds())
    if seconds < 0:
        return "0s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


def _path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


# ------------------------------------------------------------------ a CRD's printer columns (k8s JSONPath)
#
# What `additionalPrinterColumns[].jsonPath` may say (k8s.io/client-go/util/jsonpath, as the API server's
# CRD table convertor runs it): `.a.b`, dots inside a name escaped (`.metadata.labels.karpenter\.sh/nodepool`),
# `['name']`, `[0]`, `[*]` and filters `[?(@.type=="Ready")]` (==, !=, <, <=, >, >= against a quoted string,
# a number, true or false; `[?(@.x)]`: present). No Python library reads this dialect (escaped dots, Go
# filters), hence these few lines.

_STEP = re.compile(r"""\.((?:\\.|[^.\[\\])+)|\[\s*'([^']*)'\s*\]|\[\s*"([^"]*)"\s*\]|\[(-?\d+)\]|\[\*\]|\[\?\((.*?)\)\]""")
_FILTER = re.compile(r"""^\s*@((?:\.(?:\\.|[^.\s=!<>\\])+)+)\s*(?:(==|!=|<=|>=|<|>)\s*('[^']*'|"[^"]*"|-?[0-9.]+|true|false))?\s*$""")


@lru_cache(maxsize=256)
def _steps(path: str) -> tuple[tuple[str, Any], ...]:
    steps: list[tuple[str, Any]] = []
    pos = 0
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    while pos < len(path):
        match = _STEP.match(path, pos)
        if match is None:
            raise ValueError(f"unsupported JSONPath {path!r} at {pos}")
        name, quoted1, quoted2, index, condition = match.groups()
        if name is not None:
            steps.append(("field", re.sub(r"\\(.)", r"\1", name)))
        elif quoted1 is not None or quoted2 is not None:
            steps.append(("field", quoted1 if quoted1 is not None else quoted2))
        elif index is not None:
            steps.append(("index", int(index)))
        elif condition is not None:
            cond = _FILTER.match(condition)
            if cond is None:
                raise ValueError(f"unsupported JSONPath filter {condition!r}")
            inner, op, literal = cond.groups()
            steps.append(("filter", (_steps(inner), op, _literal(literal) if literal is not None else None)))
        else:
            steps.append(("all", None))
        pos = match.end()
    return tuple(steps)


def _literal(text: str) -> Any:
    if text[0] in "'\"":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    return float(text) if "." in text else int(text)


def _compare(value: Any, op: str, literal: Any) -> bool:
    if op in ("==", "!="):
        equal = value == literal and isinstance(value, bool) == isinstance(literal, bool)
        return equal if op == "==" else not equal
    try:
        return {"<": value < literal, "<=": value <= literal, ">": value > literal, ">=": value >= literal}[op]
    except TypeError:
        return False


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Every value ``path`` (k8s JSONPath) finds in ``obj``, in order; missing keys find nothing."""
    return _walk(obj, _steps(path))


def _walk(obj: Any, steps: tuple[tuple[str, Any], ...]) -> list[Any]:
    found = [obj]
    for kind, arg in steps:
        out: list[Any] = []
        for value in found:
            if kind == "field":
                if isinstance(value, dict) and arg in value:
                    out.append(value[arg])
            elif kind == "index":
                if isinstance(value, list) and -len(value) <= arg < len(value):
                    out.append(value[arg])
            elif kind == "all":
                out.extend(value if isinstance(value, list) else value.values() if isinstance(value, dict) else ())
            else:
                inner, op, literal = arg
                items = value if isinstance(value, list) else [value]
                for item in items:
                    hits = _walk(item, inner)
                    if hits and (op is None or _compare(hits[0], op, literal)):
                        out.append(item)
        found = out
    return found


def _go_text(value: Any) -> str:
    """A value as kubectl's JSONPath printer writes it (Go's fmt.Fprint of a JSON value)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return "[" + " ".join(_go_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_text(v)}" for k, v in sorted(value.items())) + "]"
    return str(value)


def _crd_cell(obj: Obj, path: str, type_: str) -> Any:
    """A printer column's cell as the API server's CRD table convertor makes it: the first value found,
    None (kubectl prints <none>) when there is none."""
    results = jsonpath(obj, path)
    if not results:
        return None
    value = results[0]
    if type_ == "string":
        return _go_text(value)
    if type_ == "date":
        return human_age(value) if isinstance(value, str) else None
    if type_ == "integer":
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if type_ == "number":
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if type_ == "boolean":
        return value if isinstance(value, bool) else None
    return _go_text(value)


def _node_status(obj: Obj) -> str:
    ready = next((c.get("status") for c in (obj.get("status") or {}).get("conditions") or []
                  if c.get("type") == "Ready"), "Unknown")
    status = {"True": "Ready", "False": "NotReady"}.get(ready, "Unknown")
    if (obj.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _node_roles(obj: Obj) -> str:
    roles = sorted(k.split("/", 1)[1] for k in (obj["metadata"].get("labels") or {})
                   if k.startswith("node-role.kubernetes.io/"))
    return ",".join(roles) or "<none>"


def _pod_ready(obj: Obj) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    total = len((obj.get("spec") or {}).get("containers") or []) or len(statuses)
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(obj: Obj) -> str:
    """STATUS of ``kubectl get pods`` (kubectl's printPod): the phase, or the pod's reason, or a container's
    waiting / terminated reason (ContainerCreating, Completed, Error, ...), Terminating while being deleted."""
    status = obj.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    running = False
    for cs in reversed(status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated")
        if waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated is not None:
            reason = terminated.get("reason") or (f"Signal:{terminated['signal']}" if terminated.get("signal")
                                                  else f"ExitCode:{terminated.get('exitCode', 0)}")
        elif cs.get("ready") and state.get("running") is not None:
            running = True
    if reason == "Completed" and running:
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        reason = "Running" if ready else "NotReady"
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod_restarts(obj: Obj) -> int:
    return sum(int(s.get("restartCount") or 0) for s in (obj.get("status") or {}).get("containerStatuses") or [])


def _job_status(obj: Obj) -> str:
    """STATUS of ``kubectl get jobs`` (kubectl 1.32's printJob): the first of Complete, Failed, Terminating
    (being deleted), Suspended, FailureTarget, SuccessCriteriaMet that holds, else Running."""
    true = {c.get("type") for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}
    for status, holds in (("Complete", "Complete" in true), ("Failed", "Failed" in true),
                          ("Terminating", bool((obj.get("metadata") or {}).get("deletionTimestamp"))),
                          ("Suspended", "Suspended" in true), ("FailureTarget", "FailureTarget" in true),
                          ("SuccessCriteriaMet", "SuccessCriteriaMet" in true)):
        if holds:
            return status
    return "Running"


def _job_completions(obj: Obj) -> str:
    """COMPLETIONS: succeeded/completions; without completions, succeeded/1 (or "/1 of <parallelism>")."""
    spec, succeeded = obj.get("spec") or {}, (obj.get("status") or {}).get("succeeded") or 0
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = spec.get("parallelism") or 0
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def _node_internal_ip(obj: Obj) -> str:
    return next((a.get("address") for a in (obj.get("status") or {}).get("addresses") or []
                 if a.get("type") == "InternalIP"), "<none>")


def _job_duration(obj: Obj, now: dt.datetime | None = None) -> str:
    """DURATION: from startTime to completionTime, or to now while the Job runs; empty before it starts."""
    status = obj.get("status") or {}
    start = status.get("startTime")
    if not start:
        return ""
    end = _parse(status.get("completionTime")) if status.get("completionTime") else None
    return human_age(start, end or now)


def _parse(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except (TypeError, ValueError):
        return None


def _containers(obj: Obj) -> str:
    return ",".join(c.get("name", "") for c in _template_containers(obj))


def _images(obj: Obj) -> str:
    return ",".join(c.get("image", "") for c in _template_containers(obj))


def _template_containers(obj: Obj) -> list[Obj]:
    return ((((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or []


def _selector(obj: Obj) -> str:
    """metav1.FormatLabelSelector of spec.selector (matchLabels and matchExpressions)."""
    selector = (obj.get("spec") or {}).get("selector")
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, values = expr.get("operator"), ",".join(sorted(expr.get("values") or []))
        parts.append({"In": f"{expr.get('key')} in ({values})", "NotIn": f"{expr.get('key')} notin ({values})",
                      "Exists": str(expr.get("key")), "DoesNotExist": f"!{expr.get('key')}"}.get(op, ""))
    return ",".join(parts) or "<none>"


def _event_object(obj: Obj) -> str:
    involved = obj.get("involvedObject") or {}
    return f"{(involved.get('kind') or '').lower()}/{involved.get('name', '')}"


def _ready_replicas(obj: Obj) -> str:
    """READY of a Deployment or StatefulSet: ready / wanted replicas."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return f"{status.get('readyReplicas') or 0}/{spec.get('replicas', 1)}"


def _data_count(obj: Obj) -> int:
    return len(obj.get("data") or {}) + len(obj.get("binaryData") or {})


_COMPUTED = {
    "@data-count": _data_count,
    "@ready-replicas": _ready_replicas,
    "@node-status": _node_status,
    "@node-roles": _node_roles,
    "@pod-ready": _pod_ready,
    "@pod-restarts": _pod_restarts,
    "@pod-status": _pod_status,
    "@job-status": _job_status,
    "@job-completions": _job_completions,
    "@job-duration": _job_duration,
    "@containers": _containers,
    "@images": _images,
    "@selector": _selector,
    "@node-internal-ip": _node_internal_ip,
    "@event-object": _event_object,
}


def _cell(obj: Obj, path: str, type_: str, now: dt.datetime | None = None) -> Any:
    if path == "@job-duration":
        return _job_duration(obj, now)
    if path in _COMPUTED:
        return _COMPUTED[path](obj)
    if path.startswith("."):
        return _crd_cell(obj, path, type_)
    value = _path(obj, path)
    if value is None:
        return "<none>" if type_ == "string" else None
    if type_ == "date" and isinstance(value, str):
        return human_age(value, now)
    if isinstance(value, (dict, list)):
        return str(value)
    return value


def _row_object(res: Resource, obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def table_for_list(res: Resource, listing: Obj, query: dict[str, str], now: dt.datetime | None = None) -> Obj:
    """A meta.k8s.io/v1 Table of a list (or of one object wrapped in ``items``); ages and durations up to
    ``now`` (the emulator's clock; default the wall clock)."""
    columns = [("Name", "metadata.name", "string"), *res.columns]
    if not any(c[0] == "Age" for c in columns):
        columns.append(("Age", "metadata.creationTimestamp", "date"))
    include = query.get("includeObject", "Metadata")
    rows = []
    for obj in listing.get("items") or []:
        obj.setdefault("kind", res.kind)
        obj.setdefault("apiVersion", res.api_version)
        row: Obj = {"cells": [_cell(obj, c[1], c[2], now) for c in columns]}
        row_obj = _row_object(res, obj, include)
        if row_obj is not None:
            row["object"] = row_obj
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {k: v for k, v in (listing.get("metadata") or {}).items() if k in ("resourceVersion", "continue")},
        "columnDefinitions": [
            {"name": c[0], "type": "string" if c[2] == "date" else c[2], "format": "name" if c[0] == "Name" else "",
             "description": "", "priority": c[3] if len(c) > 3 else 0}
            for c in columns
        ],
        "rows": rows,
    }
