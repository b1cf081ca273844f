"""Owner references, finalizers and cascading deletion: the API server's DELETE and the garbage collector.

Written from the Kubernetes documentation, "Garbage Collection"
(https://kubernetes.io/docs/concepts/architecture/garbage-collection/), "Owners and Dependents"
(https://kubernetes.io/docs/concepts/overview/working-with-objects/owners-dependents/), "Use Cascading
Deletion" (https://kubernetes.io/docs/tasks/administer-cluster/use-cascading-deletion/) and "Finalizers"
(https://kubernetes.io/docs/concepts/overview/working-with-objects/finalizers/):

- every object whose ``metadata.ownerReferences`` name an owner's ``uid`` is that owner's dependent (an
  index owner uid -> dependents, kept up to date on every write, makes this cheap);
- ``propagationPolicy`` of a DELETE: ``Background`` — the owner goes at once, then its dependents whose
  owners are all gone are deleted (those that keep a live owner only lose the dangling reference);
  ``Foreground`` — the owner stays "deletion in progress" (``deletionTimestamp``, finalizer
  ``foregroundDeletion``) while its dependents are deleted, and goes once no dependent with
  ``blockOwnerDeletion: true`` is left; ``Orphan`` — the dependents lose their reference to the owner and
  keep running.  The API's default is Background, except batch/v1 Jobs (Orphan, kept for compatibility);
- an object with ``metadata.finalizers`` is only marked (``deletionTimestamp``); the API server removes it
  when an update takes its last finalizer away; no finalizer can be added to it meanwhile;
- a pod bound to a node is deleted gracefully when controllers run: ``deletionTimestamp`` = now + its
  grace period (``terminationGracePeriodSeconds``, default 30 s, or the DELETE's ``gracePeriodSeconds``;
  0 removes it at once) and ``deletionGracePeriodSeconds``; the kubelet step stops it (terminal phase) and
  removes it (:meth:`GarbageCollectorMixin._finish_graceful`).

The garbage collector works synchronously here, inside the DELETE (or the update removing the last
finalizer), where the real one works from its informers a moment later; what a client observes is the same
sequence of states.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from kubesim.errors import ApiError
from kubesim.resources import PODS, Resource, resource_for_kind
from kubesim.util import Key, Obj

FOREGROUND_FINALIZER = "foregroundDeletion"
PROPAGATION_POLICIES = ("Orphan", "Background", "Foreground")
# Resources whose DELETE orphans dependents unless told otherwise (batch/v1 Jobs, for compatibility).
_ORPHAN_BY_DEFAULT = frozenset({"jobs.batch"})


class GarbageCollectorMixin:
    """Part of the store (:class:`kubesim.store.Store`): dependents, propagation, finalizers."""

    def _init_gc(self) -> None:
        # owner uid -> {(kind, key) of a dependent: its blockOwnerDeletion}
        self._dependents: dict[str, dict[tuple[str, Key], bool]] = {}
        # (kind, key) -> the owner uids it names (only objects that have owners)
        self._owners_of: dict[tuple[str, Key], tuple[str, ...]] = {}
        # uid of an owner in foreground deletion -> its (kind, key)
        self._foreground: dict[str, tuple[str, Key]] = {}

    # ------------------------------------------------------------------ the index (lock held)

    def _index_owners(self, kind: str, key: Key, refs: Any) -> None:
        ident = (kind, key)
        for uid in self._owners_of.pop(ident, ()):
            deps = self._dependents.get(uid)
            if deps is not None:
                deps.pop(ident, None)
                if not deps:
                    del self._dependents[uid]
        uids = []
        for ref in refs or ():
            if isinstance(ref, dict) and ref.get("uid"):
                uid = str(ref["uid"])
                uids.append(uid)
                self._dependents.setdefault(uid, {})[ident] = ref.get("blockOwnerDeletion") is True
        if uids:
            self._owners_of[ident] = tuple(uids)

    def dependents(self, uid: str) -> list[tuple[str, Key]]:
        """(resource key, (namespace, name)) of every object whose ownerReferences name ``uid``."""
        with self._lock:
            return sorted(self._dependents.get(uid, {}))

    # ------------------------------------------------------------------ DELETE's options

    @staticmethod
    def _propagation_policy(kind: str, given: str | None) -> str:
        if given is None or given == "":
            return "Orphan" if kind in _ORPHAN_BY_DEFAULT else "Background"
        if given not in PROPAGATION_POLICIES:
            raise ApiError(400, f'propagationPolicy: Unsupported value: "{given}": supported values: '
                                '"Foreground", "Background", "Orphan"', "BadRequest")
        return given

    @staticmethod
    def _check_preconditions(kind: str, key: Key, md: Obj, preconditions: Mapping[str, Any] | None) -> None:
        if not preconditions:
            return
        uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
        if uid and uid != md.get("uid"):
            raise ApiError(409, f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                f"{md.get('uid')}", "Conflict", details={"name": key[1], "kind": kind})
        if rv and str(rv) != str(md.get("resourceVersion")):
            raise ApiError(409, f"Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in "
                                f"object meta: {md.get('resourceVersion')}", "Conflict",
                           details={"name": key[1], "kind": kind})

    def _grace_period(self, kind: str, obj: Obj, requested: int | None) -> int:
        """Seconds a pod's deletion waits for its kubelet: > 0 only for a running pod bound to a node
        while controllers (and so a kubelet) run."""
        if kind != PODS or not self.controllers:
            return 0
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        if requested is not None:
            return max(int(requested), 0)
        grace = spec.get("terminationGracePeriodSeconds")
        return grace if isinstance(grace, int) and not isinstance(grace, bool) and grace >= 0 else 30

    # ------------------------------------------------------------------ removal and the collector (lock held)

    def _remove(self, kind: str, key: Key) -> Obj:
        """Take the object out of the store, then let the garbage collector react. Returns its last state."""
        entry = self._stores[kind].entries[key]
        final: Obj = orjson.loads(entry[0])
        self._commit(kind, key, None)
        md = final["metadata"]
        md["resourceVersion"] = str(self._rv)
        uid = str(md.get("uid") or "")
        self._foreground.pop(uid, None)
        self._delete_dependents(uid)
        for ref in md.get("ownerReferences") or ():
            owner = str(ref.get("uid") or "") if isinstance(ref, dict) else ""
            if owner in self._foreground:
                self._check_foreground(owner)
        return final

    def _finish_graceful(self, kind: str, key: Key) -> Obj:
        """The kubelet has stopped a pod being deleted: remove it (or, with finalizers left, wait for them)."""
        entry = self._stores[kind].entries.get(key)
        if entry is None:
            raise ApiError(404, f'{kind} "{key[1]}" not found', "NotFound")
        obj: Obj = orjson.loads(entry[0])
        if obj["metadata"].get("finalizers"):
            obj["metadata"]["deletionGracePeriodSeconds"] = 0
            self._commit(kind, key, obj)
            return obj
        return self._remove(kind, key)

    def _owner_alive(self, ref: Mapping[str, Any], namespace: str) -> bool:
        res: Resource | None = resource_for_kind(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""))
        if res is None:
            return True  # an owner of a kind this server does not serve cannot be checked: keep the dependent
        entry = self._stores[res.key].entries.get((namespace if res.namespaced else "", str(ref.get("name") or "")))
        if entry is None:
            return False
        return orjson.loads(entry[0])["metadata"].get("uid") == ref.get("uid")

    def _live_owner_refs(self, dependent: Obj, namespace: str, gone: str) -> list[Obj]:
        refs = [r for r in dependent["metadata"].get("ownerReferences") or [] if isinstance(r, dict)]
        return [r for r in refs if r.get("uid") != gone and r.get("uid") not in self._foreground
                and self._owner_alive(r, namespace)]

    def _delete_dependents(self, uid: str, *, foreground: bool = False) -> None:
        """The owner ``uid`` is gone (or, ``foreground``, waits for its dependents): delete its dependents that
        have no other live owner (in the foreground themselves, when their owner is and they have dependents);
        the others only lose the reference."""
        for dkind, dkey in sorted(self._dependents.get(uid, {})):
            entry = self._stores[dkind].entries.get(dkey)
            if entry is None:
                continue
            dependent = orjson.loads(entry[0])
            if dependent["metadata"].get("deletionTimestamp"):
                continue
            alive = self._live_owner_refs(dependent, dkey[0], uid)
            if alive:
                self._set_owner_refs(dkind, dkey, alive)
                continue
            cascading = foreground and bool(self._dependents.get(str(dependent["metadata"].get("uid") or "")))
            self._delete(dkind, dkey, propagation="Foreground" if cascading else "Background")

    def _check_foreground(self, uid: str) -> None:
        """An owner in foreground deletion goes once no dependent that blocks it is left."""
        owner = self._foreground.get(uid)
        if owner is None:
            return
        if any(self._dependents.get(uid, {}).values()):
            return
        del self._foreground[uid]
        kind, key = owner
        if key not in self._stores[kind].entries:
            return

        def drop(obj: Obj) -> None:
            obj["metadata"]["finalizers"] = [f for f in obj["metadata"].get("finalizers") or []
                                             if f != FOREGROUND_FINALIZER]

        self._update(kind, key, drop)

    def _orphan_dependents(self, uid: str) -> None:
        """Orphan propagation: every dependent loses its reference to ``uid`` and stays."""
        for dkind, dkey in sorted(self._dependents.get(uid, {})):
            entry = self._stores[dkind].entries.get(dkey)
            if entry is None:
                continue
            refs = orjson.loads(entry[0])["metadata"].get("ownerReferences") or []
            self._set_owner_refs(dkind, dkey, [r for r in refs if not isinstance(r, dict) or r.get("uid") != uid])

    def _set_owner_refs(self, kind: str, key: Key, refs: list[Obj]) -> None:
        def change(obj: Obj) -> None:
            if refs:
                obj["metadata"]["ownerReferences"] = refs
            else:
                obj["metadata"].pop("ownerReferences", None)

        self._update(kind, key, change)
