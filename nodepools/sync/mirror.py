"""The mirror: an in-memory index of one cluster's rows, so that only what changed is written.

Per registered resource: key -> (row id, uid, resourceVersion, hash of the stored values). Objects
(`apply`), deletions (`delete`) and the ends of full lists (`sweep`, mark-and-sweep) become pending
upserts and deletions; `flush()` (inside the caller's transaction) writes them through each resource's
`TableWriter`, with derived node state (pool, status, reasons) recomputed for the nodes they touched: in
Python for small batches, set-wise in SQL over the cluster's nodes on PostgreSQL's bulk path
(`derived.py`).
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from django.utils import timezone as dj_timezone

from nodepools import kube
from django.db import connection

from nodepools.models import Cluster, ConnectionState, Node, NodePool, NodeStatus, Pod, project_namespace_model
from nodepools.sync.derived import DerivedNodes, derive_nodes_sql
from nodepools.sync.lifetimes import lifetime_key, lifetimes_end, lifetimes_upsert
from kube import gpu as kube_gpu
from nodepools.sync.resources import (NODES, POD_GPU_REQUEST_AT, POD_GPU_UNIT_AT, POD_GPU_UNITS_AT, POD_GPUS_AT,
                                      POD_NODE_AT, PODS, REGISTRY, Resource, when)
from nodepools.sync.writer import TableWriter, link_orphan_pods, relink_projects, update_node_derived

logger = logging.getLogger("nodepools.sync")


class Entry:
    """What the mirror remembers of one stored object."""

    __slots__ = ("pk", "uid", "rv", "h")

    def __init__(self, pk=None, uid="", rv="", h=None):
        self.pk, self.uid, self.rv, self.h = pk, uid, rv, h


def _object_name(obj: Any) -> str:
    try:
        metadata = obj.get("metadata") or {}
        return "/".join(filter(None, [metadata.get("namespace"), metadata.get("name")])) or "<unnamed>"
    except AttributeError:
        return "<not an object>"


class Mirror:
    """What the database holds of one cluster, indexed in memory; `flush()` writes the pending changes."""

    def __init__(self, cluster: Cluster, resources: list[str] | None = None, copy_min_rows: int = 1000) -> None:
        self.cluster = cluster
        self.cid = cluster.pk
        self.resources: dict[str, Resource] = {name: REGISTRY[name] for name in (resources or list(REGISTRY))}
        self.index: dict[str, dict[Any, Entry]] = {name: {} for name in self.resources}
        self.up: dict[str, dict[Any, tuple[list, Any]]] = {name: {} for name in self.resources}
        self.dels: dict[str, set] = {name: set() for name in self.resources}
        self.writers = {name: TableWriter(r, self.cid, copy_min_rows) for name, r in self.resources.items()}
        self.copy_min_rows = copy_min_rows
        self.postgres = connection.vendor == "postgresql"
        # Set by the worker while a full list is arriving (and its informer is healthy): set-wise
        # derivation waits for the list's end, so that it runs once per list, not once per batch, and
        # no node is judged on half of its pods (an operand pod on a later page is not "missing").
        self.list_in_progress = False
        # Set by the worker while the pods' full list arrives (its informer healthy): the lifetimes of the pods
        # written wait for the list's end, which writes every pod's (`sweep`), instead of once per batch.
        self.pods_listing = False
        self.derived = DerivedNodes()
        self.derived.unreachable = cluster.connection_state == ConnectionState.UNREACHABLE
        self.pool_rows: list[tuple] | None = None
        self.namespaces: dict[str, int] | None = None
        self.skipped = 0
        self.stats: Counter = Counter()
        # Pods' lifetimes (the GPU-hours ledger, `lifetimes.py`): those ending in this batch {key: (ended,
        # reason)}; whether every pod's lifetime is to be written (a full list ended, orphans linked); and
        # the last moment the mirror of the pods was known complete (the worker moves it while its watch
        # is healthy): a pod a list no longer holds ended then, as far as anyone can tell.
        self.lifetime_ends: dict[str, tuple] = {}
        self.lifetime_keys: set = set()
        self.lifetimes_all = False
        self.in_view_at = Cluster.objects.filter(pk=self.cid).values_list("pods_current_at", flat=True).first()
        # Per node name, its GPUs as kube.gpu reads them: a pod's GPU request is priced on its node when the pod
        # is written (a replica of a time-sliced GPU is 1/replicas of it); the nodes whose pricing changed
        # (a new MIG layout, replicas, GPU memory) have their pods priced again (`_regauge`).
        self.gpu_nodes: dict[str, kube_gpu.NodeGpus] = {}
        self.regauge: set[str] = set()
        self._load()

    # Back-compat views used by callers and tests.
    @property
    def nodes(self) -> dict:
        return self.index[NODES]

    @property
    def pods(self) -> dict:
        return self.index[PODS]

    # -- loading -------------------------------------------------------------------------------
    def _load(self) -> None:
        derived = self.derived
        if NODES in self.index:
            for row in Node.objects.filter(cluster_id=self.cid).values_list(
                "pk", "name", "uid", "resource_version", "labels", "is_gpu_node", "conditions", "unschedulable",
                "pool_id", "pool_conflicts", "status", "status_reasons", "gpu_sharing", "gpu_product",
                "gpu_memory_mib", "gpu_capacity",
            ).iterator(chunk_size=2000):
                (pk, name, uid, rv, labels, is_gpu, conditions, unschedulable, pool_id, conflicts, status, reasons,
                 sharing, product, memory, physical) = row
                self.gpu_nodes[name] = kube_gpu.node_from_record(sharing, product=product, memory_mib=memory,
                                                                 physical=physical)
                cond = kube.node_condition_reasons({"spec": {"unschedulable": unschedulable},
                                                    "status": {"conditions": conditions}})
                self.index[NODES][name] = Entry(pk, uid, rv, None)
                derived.node_loaded(name, labels, is_gpu, cond, pool_id, conflicts, status, reasons)
        if PODS in self.index:
            pods = self.index[PODS]
            for row in Pod.objects.filter(cluster_id=self.cid).values_list(
                "pk", "namespace", "name", "uid", "resource_version", "node_name", "phase", "ready", "labels__app",
                "node_selector",
            ).iterator(chunk_size=5000):
                pk, ns, name, uid, rv, node_name, phase, ready, app, selector = row
                pods[(ns, name)] = Entry(pk, uid, rv, None)
                derived.pod_changed((ns, name), node_name, phase, ready, {"app": app}, selector or {}, mark=False)
        for kind, resource in self.resources.items():
            if kind in (NODES, PODS):
                continue
            # Any other registered resource: its stored keys, so that a full list sweeps what is gone.
            index = self.index[kind]
            for row in resource.model.objects.filter(cluster_id=self.cid, **resource.live).values_list(
                "pk", *resource.key_fields, "uid", "resource_version",
            ).iterator(chunk_size=5000):
                pk, *key, uid, rv = row
                index[tuple(key) if resource.namespaced else key[0]] = Entry(pk, uid, rv, None)
        self._refresh_context(initial=True)

    def _refresh_context(self, initial: bool = False) -> None:
        """Re-read pools and project namespaces (small); relabel or relink when they changed."""
        rows = list(NodePool.objects.filter(cluster_id=self.cid).order_by("created", "pk").values_list(
            "pk", "name", "is_default", "label_key", "label_value"))
        if rows != self.pool_rows:
            self.pool_rows = rows
            if not initial:
                # A pool service already reassigned nodes in the database: start from what it wrote.
                for pk, name, pool_id, conflicts, status, reasons in Node.objects.filter(cluster_id=self.cid).values_list(
                    "pk", "name", "pool_id", "pool_conflicts", "status", "status_reasons"
                ):
                    entry, facts = self.index[NODES].get(name), self.derived.nodes.get(name)
                    if entry is not None and entry.pk == pk and facts is not None:
                        facts.pool_id, facts.conflicts, facts.status, facts.reasons = pool_id, conflicts, status, reasons
            self.derived.set_pools(rows)
        namespaces = dict(project_namespace_model().objects.filter(cluster_id=self.cid)
                          .values_list("name", "project_id"))
        if namespaces != self.namespaces:
            changed = self.namespaces is not None
            self.namespaces = namespaces
            if changed:
                relink_projects(self.cid)
                self.stats["relinked"] += 1

    # -- feeding -----------------------------------------------------------------------------------
    def apply(self, kind: str, obj: dict[str, Any], seen: set | None = None) -> None:
        """An object as listed or as an ADDED/MODIFIED event."""
        resource = self.resources[kind]
        try:
            key = resource.key(obj)
            metadata = obj["metadata"]
        except (KeyError, TypeError, AttributeError) as exc:
            self._skip(resource, obj, exc)
            return
        if seen is not None:
            seen.add(key)
        index = self.index[kind]
        entry = index.get(key)
        uid = metadata.get("uid") or ""
        rv = str(metadata.get("resourceVersion") or "")
        if entry is not None and rv and entry.rv == rv and entry.uid == uid:
            self.stats["unchanged"] += 1
            return
        try:
            values, facts = resource.values(obj)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self._skip(resource, obj, exc)
            return
        h = resource.hash(values)
        if entry is not None and entry.h == h:
            entry.rv = rv  # a change of nothing the console stores (e.g. an annotation): no write
            self.stats["unchanged"] += 1
            return
        if entry is None:
            entry = index[key] = Entry()
        elif kind == PODS and entry.pk and entry.uid != uid:
            # Another pod of the same name (its predecessor's deletion was missed): the old one ended
            # before this one was created.
            self._end_lifetime(key, entry.uid, when(metadata.get("creationTimestamp")) or self.in_view_at,
                               "replaced")
        entry.uid, entry.rv, entry.h = uid, rv, h
        self.up[kind][key] = values
        if kind == NODES:
            self.derived.node_changed(key, facts)
            self._gpu_node(key, facts.gpus)
        elif kind == PODS:
            self.derived.pod_changed(key, values[1], values[2], values[7], values[5], values[6])

    def _gpu_node(self, name: str, inventory: kube_gpu.NodeGpus | None) -> None:
        """Keep the node's GPUs for pricing its pods; note the node when what prices them changed."""
        old = self.gpu_nodes.get(name)
        if inventory is None:
            self.gpu_nodes.pop(name, None)
            return
        self.gpu_nodes[name] = inventory
        if old is None or (old.units, old.memory_mib, old.product) != (inventory.units, inventory.memory_mib,
                                                                        inventory.product):
            self.regauge.add(name)

    def price(self, values: list) -> list:
        """A pod's values with its GPUs in GPU-equivalents on its node (`kube.gpu.demand_on`)."""
        record = values[POD_GPU_REQUEST_AT]
        if not record:
            return values
        node = self.gpu_nodes.get(values[POD_NODE_AT]) if values[POD_NODE_AT] else None
        priced = kube.gpu_priced(record, node)
        if priced != (values[POD_GPUS_AT], values[POD_GPU_UNIT_AT], values[POD_GPU_UNITS_AT]):
            values = list(values)
            values[POD_GPUS_AT], values[POD_GPU_UNIT_AT], values[POD_GPU_UNITS_AT] = priced
        return values

    def _regauge(self) -> int:
        """Price again the stored pods of the nodes whose GPUs changed how they price (set-wise per node)."""
        names, self.regauge = sorted(self.regauge), set()
        changed = []
        for i in range(0, len(names), 500):
            for pod in Pod.objects.filter(cluster_id=self.cid, node_name__in=names[i:i + 500]).exclude(
                    gpu_request={}).only("pk", "node_name", "gpus", "gpu_request", "gpu_unit", "gpu_units"):
                node = self.gpu_nodes.get(pod.node_name)
                priced = kube.gpu_priced(pod.gpu_request, node)
                if priced != (pod.gpus, pod.gpu_unit, pod.gpu_units):
                    pod.gpus, pod.gpu_unit, pod.gpu_units = priced
                    changed.append(pod)
        if changed:
            Pod.objects.bulk_update(changed, ["gpus", "gpu_unit", "gpu_units"], batch_size=500)
        return len(changed)

    def _skip(self, resource: Resource, obj: Any, exc: BaseException) -> None:
        self.skipped += 1
        logger.warning("cluster %s: skipped malformed %s %s: %s", self.cluster.name, resource.kind,
                       _object_name(obj), exc)

    def delete(self, kind: str, obj: dict[str, Any]) -> None:
        try:
            key = self.resources[kind].key(obj)
        except (KeyError, TypeError, AttributeError):
            return
        ended = None
        if kind == PODS:
            # The pod held its resources until its containers stopped (their finishedAt when the last
            # state says), else until it was removed: now, or its deletion deadline if that is earlier.
            now = dj_timezone.now()
            try:
                _, finished = kube.pod_times(obj)
                deadline = when((obj.get("metadata") or {}).get("deletionTimestamp"))
            except (AttributeError, TypeError, ValueError):
                finished, deadline = None, None
            ended = when(finished) or (min(now, deadline) if deadline is not None else now)
        self._delete_key(kind, key, ended=ended, reason="deleted")

    def _end_lifetime(self, key: Any, uid: str, ended, reason: str) -> None:
        self.lifetime_ends[lifetime_key(uid, key[0], key[1])] = (ended or dj_timezone.now(), reason)

    def _delete_key(self, kind: str, key: Any, ended=None, reason: str = "gone") -> None:
        entry = self.index[kind].pop(key, None)
        if entry is None:
            return
        if kind == PODS and entry.pk:
            self._end_lifetime(key, entry.uid, ended or self.in_view_at, reason)
        self.up[kind].pop(key, None)
        if entry.pk:
            self.dels[kind].add(key)
        if kind == NODES:
            self.derived.node_deleted(key)
            self._gpu_node(key, None)
        elif kind == PODS:
            self.derived.pod_deleted(key)

    def sweep(self, kind: str, seen: set) -> int:
        """After a complete list: forget (and delete) every row the list did not contain."""
        index = self.index[kind]
        stale = [key for key in index if key not in seen]
        for key in stale:
            self._delete_key(kind, key)
        if kind == PODS:
            self.lifetimes_all = True  # every pod's lifetime from the rows of this complete list
        return len(stale)

    def set_unreachable(self, unreachable: bool) -> None:
        self.derived.set_unreachable(unreachable)

    @property
    def unreachable(self) -> bool:
        return self.derived.unreachable

    @property
    def pending(self) -> bool:
        return (any(self.up[k] or self.dels[k] for k in self.resources) or bool(self.lifetime_ends)
                or (self.lifetimes_all or bool(self.lifetime_keys)) and not self.derivation_deferred()
                and not self.pods_listing
                or bool(self.derived.dirty) and not self.derivation_deferred())

    def pending_count(self) -> int:
        return sum(len(self.up[k]) + len(self.dels[k]) for k in self.resources)

    # -- writing -----------------------------------------------------------------------------------
    def derives_in_sql(self) -> bool:
        """Whether the next flush derives node state set-wise in SQL: on PostgreSQL, when the batch goes
        through the bulk path (a full list or a relist) or many nodes need deriving (pools changed, the
        cluster became unreachable). Small batches (watch events) derive their dirty nodes in Python."""
        if not self.postgres or NODES not in self.resources or PODS not in self.resources:
            return False
        return self.pending_count() >= self.copy_min_rows or len(self.derived.dirty) >= self.copy_min_rows

    def derivation_deferred(self) -> bool:
        """Set-wise derivation waits while a full list arrives (not while the cluster is unreachable:
        its nodes turn Unknown at once)."""
        return self.list_in_progress and not self.derived.unreachable and self.derives_in_sql()

    def flush(self) -> dict[str, int]:
        """Write the pending changes (call inside a transaction); returns counts of rows written."""
        written: Counter = Counter()
        self._refresh_context()
        now = dj_timezone.now()
        self.flushed_at = now  # the rows' `updated` stamp (the change hints say until when they are written)
        in_sql = self.derives_in_sql()
        deferred = in_sql and self.derivation_deferred()
        if self.lifetime_ends:
            lifetimes_end(self.cid, self.lifetime_ends, now)
            self.stats["lifetimes_ended"] += len(self.lifetime_ends)  # (no change hint: no page shows them)
            self.lifetime_ends = {}
        # Deletions first: an object deleted and created again in one batch gets a new row.
        for kind in self.resources:
            if self.dels[kind]:
                keys = list(self.dels[kind])
                written[f"{kind}_deleted"] += self.writers[kind].delete(keys, now)
                self.dels[kind].clear()
                if self.resources[kind].deleted is not None:
                    self.resources[kind].deleted(self.cid, keys, now)
        if NODES in self.resources:
            written.update(self._flush_nodes(now, in_sql))
        for kind in self.resources:
            if kind == NODES or not self.up[kind]:
                continue
            items = self.up[kind]
            if kind == PODS:
                nodes, namespaces = self.index.get(NODES, {}), self.namespaces or {}

                def links(key, values):
                    node = nodes.get(values[1]) if values[1] else None
                    return (node.pk if node is not None else None, namespaces.get(key[0]))
            else:
                def links(key, values):
                    return ()
            if kind == PODS:
                price = self.price
                written[kind] += self.writers[kind].upsert(
                    [(key, v, links(key, v)) for key, v in ((k, price(v)) for k, v in items.items())], now)
            else:
                written[kind] += self.writers[kind].upsert([(key, v, links(key, v)) for key, v in items.items()],
                                                           now)
            if self.resources[kind].written is not None:
                self.resources[kind].written(self.cid, list(items), now)
            if kind == PODS and not self.lifetimes_all:
                self.lifetime_keys.update(items)  # (a full list writes them all at its end)
            index = self.index[kind]
            for key in items:
                entry = index.get(key)
                if entry is not None and not entry.pk:
                    entry.pk = True  # stored; its id is looked up only if something needs it
            items.clear()
        if self.regauge and PODS in self.resources:
            priced = self._regauge()
            if priced:
                written["pods_priced"] += priced
        if in_sql and not deferred:
            written[NODES] += self._derive_in_sql(now)
        if PODS in self.resources and not deferred and not self.pods_listing:
            # Once the nodes' pools are derived: the lifetimes of the pods written (every bound pod's at the
            # end of a full list), set-wise.
            if self.lifetimes_all:
                lifetimes_upsert(self.cid, now)
                self.stats["lifetimes_written"] += 1
            elif self.lifetime_keys:
                lifetimes_upsert(self.cid, now, list(self.lifetime_keys))
                self.stats["lifetimes_written"] += 1
            self.lifetimes_all = False
            self.lifetime_keys = set()
        self.stats.update(written)
        return dict(written)

    def _derive_in_sql(self, now) -> int:
        """Every node's derived state, set-wise in SQL, once this batch's nodes and pods are stored; the
        in-memory facts take what it wrote, so that later watch events compare against the stored state."""
        rows = derive_nodes_sql(self.cid, self.derived.default_pool_id, self.derived.unreachable, now)
        nodes = self.derived.nodes
        for name, pool_id, conflicts, status, reasons in rows:
            facts = nodes.get(name)
            if facts is not None:
                facts.pool_id, facts.conflicts, facts.status, facts.reasons = pool_id, conflicts, status, reasons
        self.derived.dirty.clear()
        self.stats["derived_in_sql"] += 1
        return len(rows)

    def _flush_nodes(self, now, in_sql: bool = False) -> Counter:
        """Upsert the pending nodes. In Python (`in_sql` false) their derived state and that of every
        dirty node is computed here; otherwise the rows keep the derived state they have (a new row:
        none yet) and `_derive_in_sql` computes it once the batch's pods are stored too."""
        written: Counter = Counter()
        derived, index, pending = self.derived, self.index[NODES], self.up[NODES]
        rows, derived_rows, new_names = [], [], []
        if in_sql:
            for name, values in pending.items():
                entry, facts = index.get(name), derived.nodes.get(name)
                if entry is None or facts is None:
                    continue
                if not entry.pk:  # a new row: what the columns' defaults say until SQL derives it
                    facts.pool_id, facts.conflicts, facts.status, facts.reasons = None, [], str(NodeStatus.UNKNOWN), []
                    new_names.append(name)
                rows.append((name, values, facts.derived()))
            # The dirty set stays for `_derive_in_sql` (now, or at the end of the list being received).
        if derived.dirty and not in_sql:
            self.stats["derived_in_python"] += 1
        for name in () if in_sql else derived.dirty:
            entry, facts = index.get(name), derived.nodes.get(name)
            if entry is None or facts is None:
                continue
            result = derived.derive(name, facts)
            values = pending.get(name)
            if values is None and entry.pk and result == facts.derived():
                continue
            facts.pool_id, facts.conflicts, facts.status, facts.reasons = result
            if values is None:
                derived_rows.append((entry.pk, *result))
                continue
            rows.append((name, values, result))
            if not entry.pk:
                new_names.append(name)
        if not in_sql:
            derived.dirty.clear()
        pending.clear()
        if rows:
            written[NODES] += self.writers[NODES].upsert(rows, now)
        if new_names:
            pks = self.writers[NODES].pks()
            for name in new_names:
                index[name].pk = pks.get(name)
        if derived_rows:
            written[NODES] += update_node_derived(derived_rows, now)
        orphans = [name for name in new_names if derived.pods_per_node.get(name)]
        if orphans:
            link_orphan_pods(self.cid, orphans)
            self.regauge.update(orphans)
            self.lifetimes_all = True  # their lifetimes learn the pool and GPU model of their node
        return written
