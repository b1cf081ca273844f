"""Reading the few protobuf bodies kubectl sends.

kubectl's typed generators (``kubectl create namespace|job|priorityclass``) post built-in kinds as
``application/vnd.kubernetes.protobuf``: the ``k8s\\x00`` envelope around a runtime.Unknown holding the
object.  We decode only the fields those generators set (field numbers from k8s.io/api's generated.proto)
into the JSON form; anything else is answered 415 so that a client can use JSON instead.
"""

from __future__ import annotations

import base64
from typing import Any

from kubesim.errors import ApiError

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

# message -> field number -> (JSON name, type, repeated); type: "string", "int", "bool", "map", or a message.
_MESSAGES: dict[str, dict[int, tuple[str, str, bool]]] = {
    "Unknown": {1: ("typeMeta", "TypeMeta", False), 2: ("raw", "bytes", False)},
    "TypeMeta": {1: ("apiVersion", "string", False), 2: ("kind", "string", False)},
    "ObjectMeta": {
        1: ("name", "string", False), 2: ("generateName", "string", False), 3: ("namespace", "string", False),
        11: ("labels", "map", False), 12: ("annotations", "map", False), 14: ("finalizers", "string", True),
    },
    "Namespace": {1: ("metadata", "ObjectMeta", False), 2: ("spec", "NamespaceSpec", False)},
    "NamespaceSpec": {1: ("finalizers", "string", True)},
    "PriorityClass": {
        1: ("metadata", "ObjectMeta", False), 2: ("value", "int", False), 3: ("globalDefault", "bool", False),
        4: ("description", "string", False), 5: ("preemptionPolicy", "string", False),
    },
    "Job": {1: ("metadata", "ObjectMeta", False), 2: ("spec", "JobSpec", False)},
    "JobSpec": {
        1: ("parallelism", "int", False), 2: ("completions", "int", False), 3: ("activeDeadlineSeconds", "int", False),
        5: ("manualSelector", "bool", False), 6: ("template", "PodTemplateSpec", False),
        7: ("backoffLimit", "int", False), 8: ("ttlSecondsAfterFinished", "int", False),
        9: ("completionMode", "string", False), 10: ("suspend", "bool", False),
    },
    "PodTemplateSpec": {1: ("metadata", "ObjectMeta", False), 2: ("spec", "PodSpec", False)},
    "PodSpec": {
        2: ("containers", "Container", True), 3: ("restartPolicy", "string", False),
        7: ("nodeSelector", "map", False), 8: ("serviceAccountName", "string", False),
        10: ("nodeName", "string", False),
    },
    "Container": {
        1: ("name", "string", False), 2: ("image", "string", False), 3: ("command", "string", True),
        4: ("args", "string", True), 8: ("resources", "ResourceRequirements", False),
        14: ("imagePullPolicy", "string", False),
    },
    "ResourceRequirements": {1: ("limits", "quantities", False), 2: ("requests", "quantities", False)},
    # kubectl create secret generic|tls|docker-registry
    "Secret": {
        1: ("metadata", "ObjectMeta", False), 2: ("data", "bytesmap", False), 3: ("type", "string", False),
        4: ("stringData", "map", False), 5: ("immutable", "bool", False),
    },
    # kubectl delete: meta/v1 DeleteOptions
    "DeleteOptions": {
        1: ("gracePeriodSeconds", "int", False), 2: ("preconditions", "Preconditions", False),
        3: ("orphanDependents", "bool", False), 4: ("propagationPolicy", "string", False),
        5: ("dryRun", "string", True),
    },
    "Preconditions": {1: ("uid", "string", False), 2: ("resourceVersion", "string", False)},
}
_KINDS = {"Namespace", "PriorityClass", "Job", "Secret"}


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message; length-delimited values as bytes."""
    out, i = [], 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i : i + size], i + size
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _decode(message: str, data: bytes) -> dict[str, Any]:
    spec = _MESSAGES[message]
    out: dict[str, Any] = {}
    for number, _wire, value in _fields(data):
        if number not in spec:
            continue
        name, type_, repeated = spec[number]
        if type_ == "string":
            item: Any = value.decode()
            if not item and not repeated:
                continue  # Go's JSON leaves empty strings out (omitempty); protobuf writes them
        elif type_ == "bytes":
            item = value
        elif type_ == "int":
            item = _signed(value)
        elif type_ == "bool":
            item = bool(value)
        elif type_ == "bytesmap":  # map<string, bytes>: base64 in JSON
            entry = {n: v for n, _w, v in _fields(value)}
            out.setdefault(name, {})[entry.get(1, b"").decode()] = base64.b64encode(entry.get(2, b"")).decode()
            continue
        elif type_ in ("map", "quantities"):
            entry = {n: v for n, _w, v in _fields(value)}
            key = entry.get(1, b"").decode()
            raw = entry.get(2, b"")
            if type_ == "quantities":
                raw = {n: v for n, _w, v in _fields(raw)}.get(1, b"")
            out.setdefault(name, {})[key] = raw.decode()
            continue
        else:
            item = _decode(type_, value)
            if not item and type_ == "ObjectMeta":
                continue
        if repeated:
            out.setdefault(name, []).append(item)
        else:
            out[name] = item
    return out


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded Namespace, PriorityClass, Job or Secret (415 for anything else)."""
    if not body.startswith(MAGIC):
        raise ApiError(415, "the body is not a Kubernetes protobuf message", "UnsupportedMediaType")
    try:
        unknown = _decode("Unknown", body[len(MAGIC):])
        type_meta = unknown.get("typeMeta", {})
        kind = type_meta.get("kind", "")
        if kind not in _KINDS:
            raise ApiError(415, f"protobuf bodies of kind {kind!r} are not supported: send application/json",
                           "UnsupportedMediaType")
        obj = _decode(kind, unknown.get("raw", b""))
    except (ValueError, UnicodeDecodeError, KeyError) as exc:
        raise ApiError(400, f"invalid protobuf body: {exc}", "BadRequest") from exc
    return {"apiVersion": type_meta.get("apiVersion", ""), "kind": kind, **obj}


def decode_delete_options(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded DeleteOptions (kubectl delete), or 400."""
    if not body.startswith(MAGIC):
        raise ApiError(415, "the body is not a Kubernetes protobuf message", "UnsupportedMediaType")
    try:
        unknown = _decode("Unknown", body[len(MAGIC):])
        return _decode("DeleteOptions", unknown.get("raw", b""))
    except (ValueError, UnicodeDecodeError, KeyError) as exc:
        raise ApiError(400, f"invalid protobuf body: {exc}", "BadRequest") from exc
