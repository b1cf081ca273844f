"""Patch formats: JSON merge patch (RFC 7386), strategic merge patch, JSON patch (RFC 6902)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from kubesim.errors import ApiError



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


