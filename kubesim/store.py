"""The object store: resourceVersions, the bounded event history, consistent paging and watch feeds.

Design notes
------------
* Objects are stored only as their serialized JSON bytes (plus the labels and
  selector fields needed for filtering), in plain tuples that the cyclic GC
  ignores.  List pages are built by joining bytes, single GETs and watch
  events by prefixing ``kind``/``apiVersion``.  150,000 pods + 5,000 nodes
  take ~450 MiB and a 500-pod page is built in under 1 ms.
* Keys ``(namespace, name)`` (``("", name)`` for cluster-scoped objects) are kept in a sorted
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
"""

from __future__ import annotations

import base64
import binascii
import bisect
import socket
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import orjson

from kubesim.errors import ApiError, _already_exists, _conflict, _expired_continue, _invalid, _not_found
from kubesim.factories import _CONDITION_REASONS, _node_condition, _pod_status, _sync_node_taints
from kubesim.gc import FOREGROUND_FINALIZER, GarbageCollectorMixin
from kubesim.jobs import JOBS, admit_job
from kubesim.patch import json_merge_patch, json_patch, strategic_merge_patch
from kubesim.resources import NODES, PODS, Resource, get_resource, resolve_resource
from kubesim.selectors import _Filter
from kubesim.util import Key, Labels, Obj, _dumps_compact, _gc_paused, _new_uid, _status_str



# One stored object: (item JSON without kind/apiVersion, resourceVersion, labels, selector fields).
# Plain tuples of strings/bytes/ints on purpose: CPython's cyclic GC untracks such tuples, so
# 150,000 stored objects cost nothing in full collections.  Class instances (and tuples holding a
# dict) stay tracked, and a process that also parses big list pages (tests, the benchmark) runs a
# full collection about once per page: walking 150,000 extra objects each time tripled its cost.
_Entry = tuple[bytes, int, Labels, tuple[str, ...]]

# etcd refuses a request over its --max-request-bytes, 1.5 MiB by default ("If not specified, server-side
# limit defaults to 1.5 MiB", etcd's dev-guide/limit.md); kube-apiserver passes etcd's words on as a 500
# Status "etcdserver: request is too large" (kubernetes/kubernetes#74600). An object whose JSON is larger
# is refused the same way (JSON is larger than the protobuf a real cluster stores: the emulator is a
# little stricter).
MAX_OBJECT_BYTES: Final = 3 * 1024 * 1024 // 2

# Who is writing through the HTTP API on this thread (set by the server around a client's write), so
# that the object records it in `metadata.managedFields` as the real API server does: the manager is
# the request's `fieldManager`, else the client's User-Agent program name.
WRITER = threading.local()


def _stamp_manager(obj: Obj, api_version: str, now: str) -> None:
    manager = getattr(WRITER, "manager", None)
    if not manager:
        return
    md = obj["metadata"]
    entries = [e for e in md.get("managedFields") or [] if isinstance(e, dict) and e.get("manager") != manager]
    entries.append({"manager": manager, "operation": getattr(WRITER, "operation", "Update"),
                    "apiVersion": api_version, "time": now, "fieldsType": "FieldsV1", "fieldsV1": {}})
    md["managedFields"] = entries


# The API server's generated names: generateName + five characters of this alphabet (k8s.io/apimachinery
# util/rand.String, names.SimpleNameGenerator: the base is cut to 58 characters).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# What the API server adds to a new object of a kind once its identity is settled.
_ADMISSION: dict[str, Callable[[Obj], None]] = {JOBS: admit_job}

# _Entry positions
_DATA: Final = 0
_RV: Final = 1
_LABELS: Final = 2
_FIELDS: Final = 3


class _Stores(dict):
    """Resource key -> its _Store, made on first use (resources can be registered at any time)."""

    def __missing__(self, kind: str) -> _Store:
        get_resource(kind)  # KeyError for an unregistered resource
        store = self[kind] = _Store(kind)
        return store


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


def _event_line(type_: str, kind: str, data: bytes) -> bytes:
    return b'{"type":"' + type_.encode() + b'","object":' + get_resource(kind).prefix + data[1:] + b"}\n"


def _full_object(kind: str, data: bytes) -> bytes:
    return get_resource(kind).prefix + data[1:]


def _labels_of(obj: Obj) -> Labels:
    return tuple((str(k), str(v)) for k, v in (obj["metadata"].get("labels") or {}).items())


def _extract_fields(kind: str, obj: Obj) -> tuple[str, ...]:
    return get_resource(kind).extract_fields(obj)


class _Watch:
    """State of one open watch stream."""

    __slots__ = ("kind", "namespace", "filter", "next_seq", "sock", "dropped", "started")

    def __init__(self, kind: str, namespace: str | None, flt: _Filter, next_seq: int, sock: socket.socket) -> None:
        self.kind = kind
        self.namespace = namespace
        self.filter = flt
        self.next_seq = next_seq
        self.sock = sock
        self.dropped = False
        self.started = False  # response headers sent


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




def _spec_of(obj: Obj) -> bytes:
    """Everything but metadata and status: what metadata.generation counts changes of."""
    return orjson.dumps({k: v for k, v in obj.items() if k not in ("metadata", "status")}, option=orjson.OPT_SORT_KEYS)


class Store(GarbageCollectorMixin):
    """Objects of every registered resource, their history and the Python API over them."""

    # ------------------------------------------------------------------ core mutation

    def _resource(self, kind: str) -> Resource:
        try:
            return get_resource(kind)
        except KeyError:
            raise ApiError(404, f"the server could not find the requested resource ({kind})", "NotFound") from None

    def _check_schema(self, res: Resource, obj: Obj, *, strict: bool = False, old: Obj | None = None) -> None:
        """Prune unknown fields, fill defaults and validate against the resource's schema (422 naming fields);
        ``old``: the stored object an update replaces (CEL transition rules)."""
        validator = res.validator
        if validator is None:
            return
        md = obj.pop("metadata")
        try:
            unknown = validator.prune(obj)
            if unknown and strict:
                fields = ", ".join(f'unknown field "{f}"' for f in unknown)
                raise ApiError(400, f"{res.kind} in version \"{res.version}\" cannot be handled as a {res.kind}: "
                                    f"strict decoding error: {fields}", "BadRequest")
            validator.default(obj)
            causes = validator.validate(obj, old={k: v for k, v in old.items() if k != "metadata"} if old else None)
        finally:
            obj["metadata"] = md
        if causes:
            raise _invalid(res.qualified_kind, md.get("name", ""), causes, res.group)

    def _normalize(self, kind: str, obj: Mapping[str, Any], *, strict: bool = False, client: bool = False) -> Obj:
        """Copy the parts we change, drop kind/apiVersion, fill uid/creationTimestamp/namespace/generation."""
        res = self._resource(kind)
        if kind == PODS:
            out: Obj = dict(obj)  # the hot path of bulk loads: pods are not edited below
        else:
            out = orjson.loads(orjson.dumps(obj))  # nodes get taint edits, custom resources defaults
        out.pop("kind", None)
        out.pop("apiVersion", None)
        md = dict(out.get("metadata") or {})
        out["metadata"] = md
        name = md.get("name")
        if not name and isinstance(md.get("generateName"), str) and md["generateName"]:
            # The API server names the object: generateName + five random characters.
            name = md["name"] = md["generateName"][:58] + "".join(
                self._names_rng.choice(_NAME_ALPHABET) for _ in range(5))
        if not name or not isinstance(name, str):
            raise ApiError(
                422, f"{res.kind}.{res.group or 'core'} \"\" is invalid: metadata.name: Required value: name or "
                     "generateName is required", "Invalid",
                details={"kind": res.kind, "causes": [{"reason": "FieldValueRequired", "message": "Required value: "
                         "name or generateName is required", "field": "metadata.name"}]},
            )
        if res.namespaced:
            md["namespace"] = sys.intern(md.get("namespace") or "default")
        else:
            md.pop("namespace", None)
        if not md.get("uid"):
            md["uid"] = _new_uid()
        now = self.clock.rfc3339()
        if not md.get("creationTimestamp"):
            md["creationTimestamp"] = now
        md.pop("resourceVersion", None)
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):  # only a DELETE sets them
            md.pop(field, None)
        if res.generation:
            md["generation"] = 1
        if client and res.strict_status and res.status_subresource:
            out.pop("status", None)  # the status subresource owns it: a client's create cannot set it
        self._check_schema(res, out, strict=strict)
        if kind == NODES and self.node_controller:
            _sync_node_taints(out, now)
        return out

    def _admit(self, kind: str, obj: Obj) -> None:
        """What the API server adds to a new object once its identity is settled (a Job's selector and
        pod-template labels, its defaults; see kubesim.jobs.admit_job)."""
        admit = _ADMISSION.get(kind)
        if admit is not None:
            admit(obj)

    @staticmethod
    def _key(kind: str, obj: Obj) -> Key:
        md = obj["metadata"]
        return (md.get("namespace", "") if get_resource(kind).namespaced else "", md["name"])

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
        self._kind_rv[kind] = rv
        if obj is None:
            assert prev is not None
            final = orjson.loads(prev[_DATA])
            final["metadata"]["resourceVersion"] = str(rv)
            data = _dumps_compact(final)
            del store.entries[key]
            i = bisect.bisect_left(store.keys, key)
            del store.keys[i]
            if key[0]:
                self._ns_counts[key[0]] -= 1
            self._record(_Event(rv, kind, key, "DELETED", data, prev[_LABELS], prev[_FIELDS], prev))
            entry = None
            gone_owners = self._owners_of.get((kind, key), ())
            if gone_owners:
                self._index_owners(kind, key, None)
        else:
            gone_owners = ()
            obj["metadata"]["resourceVersion"] = str(rv)
            _stamp_manager(obj, get_resource(kind).api_version, self.clock.rfc3339())
            refs = obj["metadata"].get("ownerReferences")
            if refs or (kind, key) in self._owners_of:
                self._index_owners(kind, key, refs)
            data = _dumps_compact(obj)
            if len(data) > MAX_OBJECT_BYTES:
                self._rv -= 1  # nothing was stored: the resourceVersion is not spent
                raise ApiError(500, "etcdserver: request is too large", "InternalError")
            labels = _labels_of(obj)
            fields = _extract_fields(kind, obj)
            entry = (data, rv, labels, fields)
            store.entries[key] = entry
            if prev is None:
                if index:
                    bisect.insort(store.keys, key)
                if key[0]:
                    self._ns_counts[key[0]] += 1
                    self._touch_namespace(key[0])
            self._record(_Event(rv, kind, key, "ADDED" if prev is None else "MODIFIED", data, labels, fields, prev))
        hooks = self._hooks.get(kind)
        if hooks:  # the controllers' notes of what changed (kubesim.controllers)
            for hook in hooks:
                hook(key, obj, gone_owners)
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
            self._namespace_meta[ns] = (_new_uid(), self._rv, self.clock.rfc3339())

    def _put(
        self, kind: str, obj: Mapping[str, Any], *, upsert: bool, strict: bool = False, client: bool = False
    ) -> Obj:
        with self._lock:
            norm = self._normalize(kind, obj, strict=strict, client=client)
            key = self._key(kind, norm)
            prev = self._stores[kind].entries.get(key)
            generated = not (obj.get("metadata") or {}).get("name")
            for _attempt in range(8):  # a generated name that is taken: draw another, as the API server retries
                if prev is None or not generated:
                    break
                norm = self._normalize(kind, obj, strict=strict, client=client)
                key = self._key(kind, norm)
                prev = self._stores[kind].entries.get(key)
            if prev is not None:
                if not upsert:
                    raise _already_exists(kind, key[1])
                self._keep_identity(norm, obj, prev)
            self._admit(kind, norm)
            self._commit(kind, key, norm)
            return norm

    @staticmethod
    def _keep_identity(norm: Obj, given: Mapping[str, Any], prev: _Entry) -> None:
        """A replace is an update: uid and creationTimestamp survive unless the caller gave them."""
        given_md = given.get("metadata") or {}
        old = orjson.loads(prev[_DATA])
        old_md = old["metadata"]
        for field in ("uid", "creationTimestamp"):
            if not given_md.get(field):
                norm["metadata"][field] = old_md[field]
        if "generation" in old_md:
            norm["metadata"]["generation"] = old_md["generation"] + (_spec_of(norm) != _spec_of(old))

    def _update(
        self,
        kind: str,
        key: Key,
        change: Callable[[Obj], Obj | None] | Mapping[str, Any],
        *,
        patch_type: str = "strategic",
        expect_rv: str | None = None,
        subresource: str | None = None,
        strict: bool = False,
    ) -> Obj:
        """Apply a callable or patch to one object; no-op changes keep the rv and emit nothing.

        ``subresource="status"`` changes only the status (of resources with a status subresource);
        otherwise their status is kept.  ``expect_rv``: 409 Conflict unless the object is at that version.
        """
        res = self._resource(kind)
        with self._lock:
            store = self._stores[kind]
            entry = store.entries.get(key)
            if entry is None:
                raise _not_found(kind, key[1])
            if expect_rv is not None and expect_rv != str(entry[_RV]):
                raise _conflict(kind, key[1])
            current = orjson.loads(entry[_DATA])
            # Server-owned identity fields cannot be changed by an update.
            old_md = current["metadata"]
            uid, created = old_md["uid"], old_md["creationTimestamp"]
            if callable(change):
                copy_ = orjson.loads(entry[_DATA])
                result = change(copy_)
                new = copy_ if result is None else result
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
            if md.get("name") != key[1] or (res.namespaced and md.get("namespace") != key[0]):
                raise ApiError(
                    422, f'{res.qualified_kind} "{key[1]}" is invalid: metadata.name: field is immutable', "Invalid"
                )
            if res.strict_status and res.status_subresource:
                if subresource == "status":
                    status = new.get("status")
                    new = orjson.loads(entry[_DATA])
                    if status is None:
                        new.pop("status", None)
                    else:
                        new["status"] = status
                    md = new["metadata"]
                elif "status" in current:
                    new["status"] = current["status"]
                else:
                    new.pop("status", None)
            md["uid"] = uid
            md["creationTimestamp"] = created
            md["resourceVersion"] = str(entry[_RV])
            for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):  # only a DELETE sets them
                if field in old_md:
                    md[field] = old_md[field]
                else:
                    md.pop(field, None)
            deleting = bool(old_md.get("deletionTimestamp"))
            if deleting and set(md.get("finalizers") or ()) - set(old_md.get("finalizers") or ()):
                raise ApiError(422, f'{res.qualified_kind} "{key[1]}" is invalid: metadata.finalizers: Forbidden: '
                                    "no new finalizers can be added if the object is being deleted", "Invalid")
            self._check_schema(res, new, strict=strict, old=current)
            if res.generation:
                md["generation"] = old_md.get("generation", 1) + (_spec_of(new) != _spec_of(current))
            if kind == NODES and self.node_controller:
                _sync_node_taints(new, self.clock.rfc3339())
            if orjson.dumps(new) == entry[_DATA]:
                return new  # like the real API server: a no-op patch changes nothing
            self._commit(kind, key, new)
            if deleting and not md.get("finalizers") and not md.get("deletionGracePeriodSeconds"):
                # The last finalizer of an object being deleted is gone: the API server removes it.
                self._remove(kind, key)
            return new

    def _delete(
        self,
        kind: str,
        key: Key,
        *,
        propagation: str | None = None,
        grace_period_seconds: int | None = None,
        preconditions: Mapping[str, Any] | None = None,
    ) -> Obj:
        """DELETE as the API server does it; returns the object as it is now (being deleted) or was last.

        ``propagation``: what becomes of the object's dependents (objects whose ``ownerReferences`` name
        it): ``Background`` (they are deleted once it is gone), ``Foreground`` (it stays, with
        ``deletionTimestamp`` and the ``foregroundDeletion`` finalizer, until its dependents that
        ``blockOwnerDeletion`` are gone), ``Orphan`` (they lose the reference and stay); default Orphan
        for batch/v1 Jobs (kept for compatibility, as upstream does), Background otherwise.  An object
        with finalizers only gets its ``deletionTimestamp``: it goes when the last finalizer is removed.
        With controllers on, a pod bound to a node is deleted gracefully: ``deletionTimestamp`` = now + its
        grace period, until the kubelet step has stopped it (``grace_period_seconds=0`` forces at once).
        ``preconditions``: ``{"uid": ..., "resourceVersion": ...}``, 409 Conflict when they do not hold.
        """
        with self._lock:
            entry = self._stores[kind].entries.get(key)
            if entry is None:
                raise _not_found(kind, key[1])
            obj: Obj = orjson.loads(entry[_DATA])
            md = obj["metadata"]
            self._check_preconditions(kind, key, md, preconditions)
            policy = self._propagation_policy(kind, propagation)
            uid = str(md.get("uid") or "")
            if md.get("deletionTimestamp"):
                if grace_period_seconds == 0 and md.get("deletionGracePeriodSeconds"):
                    return self._finish_graceful(kind, key)  # a forced delete of a pod being stopped
                return obj  # already being deleted: a second DELETE changes nothing
            if policy == "Orphan":
                self._orphan_dependents(uid)
            finalizers = list(md.get("finalizers") or [])
            if policy == "Foreground" and self._dependents.get(uid) and FOREGROUND_FINALIZER not in finalizers:
                finalizers.append(FOREGROUND_FINALIZER)
            grace = self._grace_period(kind, obj, grace_period_seconds)
            if not finalizers and not grace:
                return self._remove(kind, key)
            md["deletionTimestamp"] = self.clock.rfc3339(self.clock.now() + grace)
            md["deletionGracePeriodSeconds"] = grace
            md["finalizers"] = finalizers
            self._commit(kind, key, obj)
            if FOREGROUND_FINALIZER in finalizers:
                self._foreground[uid] = (kind, key)
                self._delete_dependents(uid, foreground=True)
                self._check_foreground(uid)
            current = self._get(kind, key)
            return current if current is not None else obj

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

    def delete_node(self, name: str, *, propagation_policy: str | None = None) -> Obj:
        """Delete a node (emits DELETED); returns the final object."""
        return self._delete(NODES, ("", name), propagation=propagation_policy)

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

    def delete_pod(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> Obj:
        """Delete a pod; returns the final object (emits DELETED), or, for a pod a kubelet must stop first
        (controllers on, bound, not finished), the pod with its ``deletionTimestamp``. ``grace_period_seconds=0``
        removes it at once."""
        return self._delete(PODS, (namespace, name), grace_period_seconds=grace_period_seconds)

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        """The stored pod (a copy), or ``None``."""
        return self._get(PODS, (namespace, name))

    def add_namespace(
        self, name: str, labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None
    ) -> None:
        """Make a namespace exist even without objects in it."""
        with self._lock:
            self._explicit_namespaces.add(name)
            self._touch_namespace(name)
            if labels:
                self._namespace_labels[name] = {str(k): str(v) for k, v in labels.items()}
            if annotations:
                self._namespace_annotations[name] = {str(k): str(v) for k, v in annotations.items()}

    def patch_namespace_metadata(self, name: str, labels: Mapping[str, str | None] | None = None,
                                 annotations: Mapping[str, str | None] | None = None) -> Obj:
        """Merge labels and annotations into a namespace (a None value removes the key), as a merge or
        strategic merge PATCH of its metadata does (kubectl apply, kubectl label/annotate)."""
        with self._lock:
            if not self._namespace_exists(name):
                raise _not_found("namespaces", name)
            self._explicit_namespaces.add(name)
            for store, changes in ((self._namespace_labels, labels), (self._namespace_annotations, annotations)):
                current = store.setdefault(name, {})
                for key, value in (changes or {}).items():
                    if value is None:
                        current.pop(key, None)
                    else:
                        current[str(key)] = str(value)
            return self._namespace_object(name)

    def delete_namespace(self, name: str) -> Obj:
        """Delete a namespace and every object in it; returns the namespace as last seen."""
        with self._lock:
            if not self._namespace_exists(name):
                raise _not_found("namespaces", name)
            final = self._namespace_object(name)
            for kind, store in list(self._stores.items()):
                lo, hi = store.scope(name)
                for key in list(store.keys[lo:hi]):
                    self._commit(kind, key, None)
            self._explicit_namespaces.discard(name)
            self._namespace_meta.pop(name, None)
            self._namespace_labels.pop(name, None)
            self._namespace_annotations.pop(name, None)
        final["status"] = {"phase": "Terminating"}
        return final

    def _delete_collection(self, kind: str, namespace: str | None, flt: _Filter, **options: Any) -> list[Obj]:
        """DELETE on a collection: every matching object (``options`` as :meth:`_delete` takes them).
        Returns the deleted objects."""
        with self._lock:
            store = self._stores[kind]
            lo, hi = store.scope(namespace)
            out = []
            for key in list(store.keys[lo:hi]):
                entry = store.entries.get(key)  # an earlier deletion may have cascaded to it
                if entry is None:
                    continue
                data, _rv, labels, fields = entry
                if flt.empty or flt(labels, fields):
                    out.append(self._delete(kind, key, **options))
            return out

    def load(
        self,
        nodes: Iterable[Mapping[str, Any]] = (),
        pods: Iterable[Mapping[str, Any]] = (),
        namespaces: Iterable[str] = (),
        *,
        emit_events: bool = True,
        objects: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
    ) -> int:
        """Bulk create-or-replace, fast enough for 150,000 objects; returns the new resourceVersion.

        With ``emit_events=True`` (default) every object gets its own
        resourceVersion and an ADDED/MODIFIED event, exactly as if added one by
        one (the bounded history keeps only the newest ``history_size``).
        With ``emit_events=False`` all objects share one new resourceVersion
        and no events are recorded; to stay honest to watchers the history is
        compacted and open watches are dropped, so clients relist (like an
        etcd restore).  ``objects`` maps other resources ("queues.scheduling.run.ai", ...) to their objects.
        """
        with self._lock, _gc_paused():
            for ns in namespaces:
                self._explicit_namespaces.add(ns)
                self._touch_namespace(ns)
            new_keys: Counter[str] = Counter()
            batch_rv = self._rv + 1  # the one rv shared by all objects when emit_events is off
            more = [(resolve_resource(k).key, v) for k, v in (objects or {}).items()]
            for kind, objs in ((NODES, nodes), (PODS, pods), *more):
                store = self._stores[kind]
                admit, hooks = _ADMISSION.get(kind), self._hooks.get(kind) or ()
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
                        if admit:
                            admit(norm)
                        if emit_events:
                            self._commit(kind, key, norm, notify=False, index=not lazy_index)
                        else:
                            norm["metadata"]["resourceVersion"] = str(batch_rv)
                            data, labels, fields = _dumps_compact(norm), _labels_of(norm), _extract_fields(kind, norm)
                            store.entries[key] = (data, batch_rv, labels, fields)
                            refs = norm["metadata"].get("ownerReferences")
                            if refs or (kind, key) in self._owners_of:
                                self._index_owners(kind, key, refs)
                            for hook in hooks:
                                hook(key, norm, ())
                            if prev is None and key[0]:
                                self._ns_counts[key[0]] += 1
                                self._touch_namespace(key[0])
                        if prev is None and lazy_index:
                            store.keys.append(key)
                finally:  # even when an object is invalid, the index must end up sorted
                    if lazy_index:
                        store.keys = sorted(set(store.keys))
            if not emit_events:
                self._rv = max(self._rv, batch_rv)
                for kind in new_keys:
                    self._kind_rv[kind] = self._rv
                self._floor_rv = self._rv
                self._min_seq = self._seq
            self._cond.notify_all()
            rv = self._rv
        if not emit_events:
            self.drop_watches()
        return rv

    # ------------------------------------------------------------------ any resource

    def create(self, resource: str, obj: Mapping[str, Any]) -> Obj:
        """Create an object of any registered resource ("jobs.batch", "queues", "Queue", ...); 409 if present."""
        return self._put(resolve_resource(resource).key, obj, upsert=False)

    def upsert(self, resource: str, obj: Mapping[str, Any]) -> Obj:
        """Create or replace an object of any registered resource."""
        return self._put(resolve_resource(resource).key, obj, upsert=True)

    def get(self, resource: str, name: str, namespace: str = "") -> Obj | None:
        """The stored object (a copy), or ``None``."""
        res = resolve_resource(resource)
        return self._get(res.key, (namespace or "default" if res.namespaced else "", name))

    def update(
        self,
        resource: str,
        name: str,
        fn_or_patch: Callable[[Obj], Obj | None] | Mapping[str, Any],
        namespace: str = "",
        *,
        patch_type: str = "strategic",
        subresource: str | None = None,
    ) -> Obj:
        """Change an object with a callable or a patch (``patch_type`` "strategic", "merge" or "json")."""
        res = resolve_resource(resource)
        key = (namespace or "default" if res.namespaced else "", name)
        return self._update(res.key, key, fn_or_patch, patch_type=patch_type, subresource=subresource)

    def delete(
        self,
        resource: str,
        name: str,
        namespace: str = "",
        *,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> Obj:
        """Delete an object as a DELETE request does (``propagation_policy`` "Background", "Foreground" or
        "Orphan"; see :meth:`_delete`); returns the final object, or the object being deleted."""
        res = resolve_resource(resource)
        return self._delete(res.key, (namespace or "default" if res.namespaced else "", name),
                            propagation=propagation_policy, grace_period_seconds=grace_period_seconds)

    def list(self, resource: str, namespace: str | None = None) -> list[Obj]:
        """Every stored object of a resource (in one namespace, or all), sorted by namespace and name."""
        res = resolve_resource(resource)
        with self._lock:
            store = self._stores[res.key]
            lo, hi = store.scope(namespace)
            return [orjson.loads(store.entries[k][_DATA]) for k in store.keys[lo:hi]]

    # ------------------------------------------------------------------ convenience

    def set_node_condition(self, name: str, type: str, status: bool | str, reason: str = "", message: str = "") -> Obj:
        """Set one node condition (transition time moves only when the status changes)."""
        status = _status_str(status)

        def change(node: Obj) -> None:
            now = self.clock.rfc3339()
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
            now = self.clock.rfc3339()
            start = old.get("startTime") or pod["metadata"].get("creationTimestamp") or now
            pod["status"] = _pod_status(namespace, name, pod.get("spec") or {}, phase, is_ready, start, now)

        return self.update_pod(namespace, name, change)

    def bind_pod(self, namespace: str, name: str, node: str) -> Obj:
        """Bind a pod to a node, as a scheduler does through the ``pods/binding`` subresource: sets
        ``spec.nodeName`` and the condition PodScheduled True (409 when it is bound already or being
        deleted). The kubelet step (controllers) then starts it."""

        def change(pod: Obj) -> None:
            spec = pod.setdefault("spec", {})
            if spec.get("nodeName"):
                raise ApiError(409, f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already '
                                    f'assigned to node "{spec["nodeName"]}"', "Conflict")
            if pod["metadata"].get("deletionTimestamp"):
                raise ApiError(409, f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is being '
                                    "deleted, cannot be assigned to a host", "Conflict")
            spec["nodeName"] = node
            status = pod.setdefault("status", {})
            status.setdefault("phase", "Pending")
            now = self.clock.rfc3339()
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": now})
            status["conditions"] = conditions

        return self.update_pod(namespace, name, change)

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
                    "objects": {k: len(v.entries) for k, v in self._stores.items() if v.entries},
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
        res = get_resource(kind)
        head = (
            b'{"kind":"' + res.list_kind.encode() + b'","apiVersion":"' + res.api_version.encode() + b'","metadata":'
            + orjson.dumps(metadata)
        )
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
            names = sorted(self._explicit_namespaces | {ns for ns, c in self._ns_counts.items() if c > 0})
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
                "labels": {**self._namespace_labels.get(ns, {}), "kubernetes.io/metadata.name": ns},
                **({"annotations": dict(self._namespace_annotations[ns])} if self._namespace_annotations.get(ns) else {}),
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }

    def _namespace_exists(self, ns: str) -> bool:
        with self._lock:
            return ns in self._explicit_namespaces or self._ns_counts.get(ns, 0) > 0

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

