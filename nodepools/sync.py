"""The live mirror of each cluster's Nodes and Pods (DOMAIN.md §9), as Kubernetes' informers keep theirs.

Per cluster, a `ClusterSync` runs one `Informer` thread per resource (nodes, pods) that lists (paginated,
`limit` 500, raw JSON read with orjson) then watches from the list's resourceVersion (bookmarks, a
client-side read timeout, a randomised 5-10 minute server timeout), resumes a watch that ends, relists on
410 Gone (also for an expired `continue`) and backs off with jitter on errors. The informers only talk
HTTP; they hand pages and events to the worker's single writer (the calling thread), which keeps a
`Mirror`: an in-memory index of every row (key -> uid, resourceVersion, hash of the stored values, and
what the node's derived state needs), so that it writes only rows that changed, in short batched
transactions, recomputing pool membership and node status only for the nodes a batch touched.

One process acts per cluster: on PostgreSQL an advisory lock held on a dedicated connection
(`PgLeadership`); every write transaction first proves that this lock is still held (a fence), so a
process that lost it writes nothing. On SQLite a single sync process is assumed (`SingleLeadership`).
"""
from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator

import orjson
from django.db import connection, connections, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone as dj_timezone
from django.utils.dateparse import parse_datetime

from nodepools import hints, kube
from nodepools.models import Cluster, ConnectionState, Node, NodePool, NodeStatus, Pod

logger = logging.getLogger("nodepools.sync")

NODES, PODS = "nodes", "pods"


@dataclass
class SyncOptions:
    """Tunables; the defaults are production values, tests shrink the intervals."""

    page_limit: int = 500
    backoff_base: float = 0.8
    backoff_max: float = 30.0
    connect_timeout: float = 10.0
    read_timeout: float = 90.0  # no byte for this long on a watch (bookmarks arrive ~every minute): reconnect
    list_timeout: float = 60.0
    watch_timeout_min: int = 300
    watch_timeout_max: int = 600
    unreachable_after: float = 20.0  # every watch failing this long: the cluster is unreachable
    batch_delay: float = 0.1  # gather events this long after the first one into one transaction
    batch_max: int = 2000  # objects per transaction (SQLite: keep write transactions short)
    queue_pages: int = 8  # list pages buffered between an informer and the writer (bounds memory)
    tick: float = 0.5  # the writer wakes at least this often (state, hints, leadership)
    hint_interval: float = 0.3  # at most one change hint per cluster this often
    lock_poll: float = 5.0  # standby retries the lock / leader re-checks it this often
    rescan: float = 10.0  # sync_clusters looks for added/removed clusters this often


# ---------------------------------------------------------------------------------------------------
# Kubernetes client

def api_client_for(cluster: Cluster):
    """An ApiClient for a cluster from its kubeconfig path/context or the in-cluster service account.

    Retries are off: the sync backs off itself, and a patch must fail fast with the API's message.
    """
    from kubernetes import client, config

    configuration = client.Configuration()
    if cluster.in_cluster:
        config.load_incluster_config(client_configuration=configuration)
    else:
        if not cluster.kubeconfig_path:
            raise ValueError(f"cluster {cluster.name} has neither a kubeconfig path nor in-cluster access")
        config.load_kube_config(
            config_file=cluster.kubeconfig_path, context=cluster.kube_context or None,
            client_configuration=configuration, persist_config=False,
        )
    configuration.retries = False
    return client.ApiClient(configuration)


def api_error_message(exc: BaseException) -> str:
    """The API's own message of a failed call (its Status `message`), else a short description."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        try:
            body = orjson.loads(exc.body or b"{}")
            if isinstance(body, dict) and body.get("message"):
                return f"{body['message']} (HTTP {exc.status})"
        except orjson.JSONDecodeError:
            pass
        return f"HTTP {exc.status} {exc.reason}".strip()
    text = str(exc)
    # urllib3 wraps connection errors deeply; the last part says what happened.
    if "Caused by" in text:
        text = text.split("Caused by", 1)[1].strip(" ()")
    return f"{type(exc).__name__}: {text}"[:500]


class StreamBroken(Exception):
    """A watch stream cut off mid-way (connection reset, read timeout)."""


class Gone(Exception):
    """410: the resourceVersion (or continue token) is older than the server's history: relist."""


class Backoff:
    """Jittered exponential backoff: about `base` doubling to `cap`."""

    def __init__(self, base: float, cap: float) -> None:
        self.base, self.cap, self.failures = base, cap, 0

    def next(self, at_least: float = 0.0) -> float:
        delay = min(self.cap, self.base * (2 ** self.failures))
        self.failures += 1
        return max(at_least, delay * random.uniform(0.8, 1.2))

    def reset(self) -> None:
        self.failures = 0


def _retry_after(exc: BaseException) -> float:
    headers = getattr(exc, "headers", None) or {}
    try:
        return float(headers.get("Retry-After") or 0)
    except (TypeError, ValueError):
        return 0.0


class Informer(threading.Thread):
    """List then watch one resource; sends ("page"|"listed"|"events"|"health", ...) to the writer's queue."""

    def __init__(self, kind: str, api: Any, out: queue.Queue, options: SyncOptions, cluster_name: str) -> None:
        super().__init__(name=f"informer:{cluster_name}:{kind}", daemon=True)
        self.kind, self.out, self.options, self.cluster_name = kind, out, options, cluster_name
        self.list_fn = api.list_node if kind == NODES else api.list_pod_for_all_namespaces
        self.stop_event = threading.Event()
        self.healthy: bool | None = None
        self._response = None
        self._quick_breaks = 0

    def stop(self) -> None:
        self.stop_event.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # unblocks a read waiting on the watch socket
            except Exception:  # pragma: no cover - best effort
                pass

    def _put(self, message: tuple) -> None:
        while not self.stop_event.is_set():
            try:
                self.out.put(message, timeout=0.2)
                return
            except queue.Full:
                continue

    def _health(self, error: str | None) -> None:
        healthy = error is None
        if healthy != self.healthy or not healthy:
            self.healthy = healthy
            self._put(("health", self.kind, error))

    def run(self) -> None:
        backoff = Backoff(self.options.backoff_base, self.options.backoff_max)
        rv: str | None = None
        while not self.stop_event.is_set():
            try:
                if rv is None:
                    rv = self._list()
                if self.stop_event.is_set():
                    break
                rv = self._watch(rv)
                backoff.reset()
            except Gone as exc:
                logger.info("cluster %s: %s: %s; relisting", self.cluster_name, self.kind, exc)
                if rv is None:  # the list itself kept expiring: do not spin
                    self.stop_event.wait(backoff.next())
                rv = None
            except Exception as exc:  # network, 429, 5xx, bad JSON: back off and resume from `rv`
                if self.stop_event.is_set():
                    break
                from kubernetes.client.exceptions import ApiException

                if isinstance(exc, ApiException) and exc.status == 410:
                    rv = None
                    continue
                message = api_error_message(exc)
                delay = backoff.next(_retry_after(exc))
                logger.warning("cluster %s: %s: %s; retrying in %.1fs", self.cluster_name, self.kind, message, delay)
                self._health(f"{self.kind}: {message}")
                self.stop_event.wait(delay)
            finally:
                self._response = None

    def _list(self) -> str:
        """Every page (raw JSON) to the writer, then ("listed", seen keys); returns the list's rv."""
        from kubernetes.client.exceptions import ApiException

        token, seen, rv = None, set(), ""
        timeout = (self.options.connect_timeout, self.options.list_timeout)
        while True:
            try:
                response = self.list_fn(limit=self.options.page_limit, _continue=token, _preload_content=False,
                                        _request_timeout=timeout)
            except ApiException as exc:
                if exc.status == 410:
                    raise Gone("list continue token expired") from exc
                raise
            body = orjson.loads(response.data)
            if self.stop_event.is_set():
                return rv
            self._health(None)
            metadata = body.get("metadata") or {}
            rv = metadata.get("resourceVersion") or rv
            self._put(("page", self.kind, body.get("items") or [], seen))
            token = metadata.get("continue")
            if not token:
                break
        self._put(("listed", self.kind, seen, rv))
        return rv

    def _watch(self, rv: str) -> str:
        """Watch from `rv` until the stream ends; returns the last rv seen (events or bookmarks)."""
        options = self.options
        response = self.list_fn(
            watch=True, resource_version=rv, allow_watch_bookmarks=True,
            timeout_seconds=random.randint(options.watch_timeout_min, options.watch_timeout_max),
            _preload_content=False, _request_timeout=(options.connect_timeout, options.read_timeout),
        )
        self._response = response
        opened, received = time.monotonic(), False
        try:
            if response.status != 200:  # pragma: no cover - the client raises for error statuses
                raise RuntimeError(f"watch answered HTTP {response.status}")
            self._health(None)
            buffer = b""
            for chunk in self._chunks(response):
                received = True
                if self.stop_event.is_set():
                    break
                buffer += chunk
                if b"\n" not in buffer:
                    continue
                *lines, buffer = buffer.split(b"\n")
                events = []
                for line in lines:
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise Gone(obj.get("message") or "watch history expired")
                        raise RuntimeError(f"watch error: {obj.get('message') or obj}")
                    new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if kind != "BOOKMARK":
                        events.append((kind, obj))
                    if new_rv:
                        rv = new_rv
                if events:
                    self._put(("events", self.kind, events))
        except StreamBroken as exc:
            worked = received or time.monotonic() - opened > 1.0
            self._quick_breaks = 0 if worked else self._quick_breaks + 1
            if self._quick_breaks > 1:
                raise exc.__cause__ from None  # streams keep breaking at once: an error, with backoff
            # A watch that worked ended abruptly (or was silent past the read timeout): resume from rv.
            logger.info("cluster %s: %s watch ended (%s); resuming from %s", self.cluster_name, self.kind,
                        exc.__cause__.__class__.__name__, rv)
        finally:
            response.release_conn()
        return rv

    @staticmethod
    def _chunks(response) -> Iterator[bytes]:
        from urllib3.exceptions import ProtocolError, ReadTimeoutError

        try:
            yield from response.stream(amt=None, decode_content=False)
        except (ProtocolError, ReadTimeoutError, OSError) as exc:
            raise StreamBroken() from exc


# ---------------------------------------------------------------------------------------------------
# The mirror: an in-memory index of one cluster's rows, writing only what changed

NODE_VALUE_FIELDS = [
    "uid", "labels", "taints", "conditions", "unschedulable", "cpu_capacity_millis", "cpu_allocatable_millis",
    "memory_capacity_bytes", "memory_allocatable_bytes", "gpu_capacity", "gpu_allocatable", "gpu_product",
    "gpu_memory_mib", "gpu_family", "gpu_count_label", "mig_strategy", "is_gpu_node", "zone", "instance_type",
    "capacity_type", "created_in_cluster", "resource_version",
]
NODE_DERIVED_FIELDS = ["pool", "pool_conflicts", "status", "status_reasons"]
POD_VALUE_FIELDS = [
    "uid", "node_name", "phase", "priority", "priority_class", "labels", "node_selector", "ready", "cpu_millis",
    "memory_bytes", "gpus", "created_in_cluster", "resource_version",
]


def _when(value: str | None) -> datetime | None:
    return parse_datetime(value) if value else None


def _hash(values: list) -> int:
    # resourceVersion (last) is left out: an object whose stored fields did not change is not rewritten.
    return hash(orjson.dumps(values[:-1], default=str))


def node_values(obj: dict[str, Any]) -> tuple[list, kube.NodeFacts]:
    """The stored values of a Node object (NODE_VALUE_FIELDS order); raises on a malformed object."""
    facts = kube.node_facts(obj)
    values = [
        facts.uid, facts.labels, facts.taints, facts.conditions, facts.unschedulable,
        facts.capacity.cpu_millis, facts.allocatable.cpu_millis, facts.capacity.memory_bytes,
        facts.allocatable.memory_bytes, int(facts.capacity.gpus), int(facts.allocatable.gpus), facts.gpu_product,
        facts.gpu_memory_mib, facts.gpu_family, facts.gpu_count_label, facts.mig_strategy, facts.is_gpu_node,
        facts.zone, facts.instance_type, facts.capacity_type, facts.created, facts.resource_version,
    ]
    return values, facts


def pod_values(obj: dict[str, Any]) -> list:
    """The stored values of a Pod object (POD_VALUE_FIELDS order); raises on a malformed one (`12x`)."""
    metadata = obj["metadata"]
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    requests = kube.pod_requests(obj)
    labels = metadata.get("labels") or {}
    selector = spec.get("nodeSelector") or {}
    if not isinstance(labels, dict) or not isinstance(selector, dict):
        raise TypeError("labels and nodeSelector must be objects")
    return [
        metadata.get("uid") or "", spec.get("nodeName") or "", status.get("phase") or "",
        int(spec.get("priority") or 0), spec.get("priorityClassName") or "", labels, selector,
        kube.pod_is_ready(obj), requests.cpu_millis, requests.memory_bytes, requests.gpus,
        metadata.get("creationTimestamp"), str(metadata.get("resourceVersion") or ""),
    ]


def _object_name(obj: Any) -> str:
    try:
        metadata = obj.get("metadata") or {}
        return "/".join(filter(None, [metadata.get("namespace"), metadata.get("name")])) or "<unnamed>"
    except AttributeError:
        return "<not an object>"


class NodeEntry:
    __slots__ = ("pk", "uid", "rv", "h", "labels", "is_gpu", "cond", "pool_id", "conflicts", "status", "reasons")

    def __init__(self, pk=None, uid="", rv="", h=None, labels=None, is_gpu=False, cond=(), pool_id=None,
                 conflicts=(), status=None, reasons=()):
        self.pk, self.uid, self.rv, self.h = pk, uid, rv, h
        self.labels, self.is_gpu, self.cond = labels or {}, is_gpu, list(cond)
        self.pool_id, self.conflicts, self.status, self.reasons = pool_id, list(conflicts), status, list(reasons)


class PodEntry:
    """A pod's row id and version, and what it contributes to its node's status."""

    __slots__ = ("pk", "uid", "rv", "h", "node", "operand", "selector")

    def __init__(self, pk=None, uid="", rv="", h=None, node="", operand=None, selector=()):
        self.pk, self.uid, self.rv, self.h = pk, uid, rv, h
        self.node, self.operand, self.selector = node, operand, selector


def _contribution(node_name: str, phase: str, ready: bool, labels: dict, selector: dict) -> tuple[str | None, tuple]:
    """(ready NVIDIA operand app, nodeSelector pairs) of an active pod; nothing for inactive pods."""
    if not node_name or phase in Pod.FINISHED_PHASES:
        return None, ()
    app = labels.get("app") if isinstance(labels, dict) else None
    operand = app if ready and app in kube.OPERANDS else None
    return operand, tuple(sorted(selector.items())) if selector else ()


class Mirror:
    """What the database holds of one cluster, indexed in memory; `flush()` writes the pending changes.

    Feed it objects (`apply`), deletions (`delete`) and the end of full lists (`sweep`); `flush()`
    (inside a transaction) writes changed rows only, in bulk, with pool membership and node status
    recomputed for the nodes the changes touched.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.cid = cluster.pk
        self.nodes: dict[str, NodeEntry] = {}
        self.pods: dict[tuple[str, str], PodEntry] = {}
        self.operands: dict[str, Counter] = {}
        self.selectors: dict[str, Counter] = {}
        self.pods_per_node: Counter = Counter()
        self.unreachable = cluster.connection_state == ConnectionState.UNREACHABLE
        self.pool_rows: list[tuple] | None = None
        self.default_pool_id: int | None = None
        self.pool_selectors: list[tuple[int, str, str]] = []
        self.pool_by_label: dict[tuple[str, str], int] = {}
        self.pool_names: dict[int, str] = {}
        self.namespaces: dict[str, int] | None = None
        self.node_up: dict[str, list] = {}
        self.node_del: dict[str, int] = {}
        self.pod_up: dict[tuple[str, str], list] = {}
        self.pod_del: dict[tuple[str, str], int] = {}
        self.dirty: set[str] = set()
        self.skipped = 0
        self.stats: Counter = Counter()
        self._load()

    # -- loading -------------------------------------------------------------------------------
    def _load(self) -> None:
        for row in Node.objects.filter(cluster_id=self.cid).values_list(
            "pk", "name", "uid", "resource_version", "labels", "is_gpu_node", "conditions", "unschedulable",
            "pool_id", "pool_conflicts", "status", "status_reasons",
        ).iterator(chunk_size=2000):
            pk, name, uid, rv, labels, is_gpu, conditions, unschedulable, pool_id, conflicts, status, reasons = row
            cond = kube.node_condition_reasons({"spec": {"unschedulable": unschedulable},
                                                "status": {"conditions": conditions}})
            self.nodes[name] = NodeEntry(pk, uid, rv, None, labels, is_gpu, cond, pool_id, conflicts, status, reasons)
        for row in Pod.objects.filter(cluster_id=self.cid).values_list(
            "pk", "namespace", "name", "uid", "resource_version", "node_name", "phase", "ready", "labels__app",
            "node_selector",
        ).iterator(chunk_size=5000):
            pk, ns, name, uid, rv, node_name, phase, ready, app, selector = row
            operand, sel = _contribution(node_name, phase, ready, {"app": app}, selector or {})
            entry = PodEntry(pk, uid, rv, None, node_name, operand, sel)
            self.pods[(ns, name)] = entry
            self._add_contribution(entry)
            if node_name:
                self.pods_per_node[node_name] += 1
        self._refresh_context(initial=True)

    def _refresh_context(self, initial: bool = False) -> None:
        """Re-read pools and project namespaces (small); relabel or relink when they changed."""
        rows = list(NodePool.objects.filter(cluster_id=self.cid).order_by("created", "pk").values_list(
            "pk", "name", "is_default", "label_key", "label_value"))
        if rows != self.pool_rows:
            self.pool_rows = rows
            self.default_pool_id = next((pk for pk, _, default, _, _ in rows if default), None)
            self.pool_selectors = [(pk, key, value) for pk, _, default, key, value in rows if not default]
            self.pool_by_label = {}
            for pk, key, value in self.pool_selectors:
                self.pool_by_label.setdefault((key, value), pk)
            self.pool_names = {pk: name for pk, name, *_ in rows}
            if not initial:
                # A pool service already reassigned nodes in the database: start from what it wrote.
                for pk, name, pool_id, conflicts, status, reasons in Node.objects.filter(cluster_id=self.cid).values_list(
                    "pk", "name", "pool_id", "pool_conflicts", "status", "status_reasons"
                ):
                    entry = self.nodes.get(name)
                    if entry is not None and entry.pk == pk:
                        entry.pool_id, entry.conflicts, entry.status, entry.reasons = pool_id, conflicts, status, reasons
            self.dirty.update(self.nodes)
        from projects.models import ProjectNamespace

        namespaces = dict(ProjectNamespace.objects.filter(cluster_id=self.cid).values_list("name", "project_id"))
        if namespaces != self.namespaces:
            changed = self.namespaces is not None
            self.namespaces = namespaces
            if changed:
                Pod.objects.filter(cluster_id=self.cid).update(project=Subquery(
                    ProjectNamespace.objects.filter(cluster_id=self.cid, name=OuterRef("namespace")).values("project")[:1]
                ))
                self.stats["relinked"] += 1

    # -- contributions of pods to their node's status ------------------------------------------------
    def _add_contribution(self, entry: PodEntry, sign: int = 1) -> None:
        if entry.operand:
            counter = self.operands.setdefault(entry.node, Counter())
            counter[entry.operand] += sign
        if entry.selector:
            counter = self.selectors.setdefault(entry.node, Counter())
            for pair in entry.selector:
                counter[pair] += sign

    # -- feeding -----------------------------------------------------------------------------------
    def apply(self, kind: str, obj: dict[str, Any], seen: set | None = None) -> None:
        """An object as listed or as an ADDED/MODIFIED event."""
        try:
            metadata = obj["metadata"]
            key = metadata["name"] if kind == NODES else (metadata["namespace"], metadata["name"])
            if not isinstance(key, (str, tuple)) or not key:
                raise TypeError("metadata.name must be a string")
        except (KeyError, TypeError, AttributeError) as exc:
            self._skip(kind, obj, exc)
            return
        if seen is not None:
            seen.add(key)
        index = self.nodes if kind == NODES else self.pods
        entry = index.get(key)
        uid = metadata.get("uid") or ""
        rv = str(metadata.get("resourceVersion") or "")
        if entry is not None and rv and entry.rv == rv and entry.uid == uid:
            self.stats["unchanged"] += 1
            return
        try:
            if kind == NODES:
                values, facts = node_values(obj)
            else:
                values, facts = pod_values(obj), None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self._skip(kind, obj, exc)
            return
        h = _hash(values)
        if entry is not None and entry.h == h:
            entry.rv = rv  # a change of nothing the console stores (e.g. an annotation): no write
            self.stats["unchanged"] += 1
            return
        if kind == NODES:
            if entry is None:
                entry = self.nodes[key] = NodeEntry()
            entry.uid, entry.rv, entry.h = uid, rv, h
            entry.labels, entry.is_gpu, entry.cond = facts.labels, facts.is_gpu_node, facts.condition_reasons
            self.node_up[key] = values
            self.dirty.add(key)
        else:
            if entry is None:
                entry = self.pods[key] = PodEntry()
            else:
                self._add_contribution(entry, -1)
                if entry.operand or entry.selector:
                    self.dirty.add(entry.node)
            if entry.node:
                self.pods_per_node[entry.node] -= 1
            entry.uid, entry.rv, entry.h = uid, rv, h
            entry.node = values[1]
            entry.operand, entry.selector = _contribution(values[1], values[2], values[7], values[5], values[6])
            self._add_contribution(entry)
            if entry.operand or entry.selector:
                self.dirty.add(entry.node)
            if entry.node:
                self.pods_per_node[entry.node] += 1
            self.pod_up[key] = values

    def _skip(self, kind: str, obj: Any, exc: BaseException) -> None:
        self.skipped += 1
        what = "Node" if kind == NODES else "Pod"
        logger.warning("cluster %s: skipped malformed %s %s: %s", self.cluster.name, what, _object_name(obj), exc)

    def delete(self, kind: str, obj: dict[str, Any]) -> None:
        try:
            metadata = obj["metadata"]
            key = metadata["name"] if kind == NODES else (metadata["namespace"], metadata["name"])
        except (KeyError, TypeError, AttributeError):
            return
        self._delete_key(kind, key)

    def _delete_key(self, kind: str, key: Any) -> None:
        if kind == NODES:
            entry = self.nodes.pop(key, None)
            if entry is None:
                return
            self.node_up.pop(key, None)
            self.dirty.discard(key)
            if entry.pk:
                self.node_del[key] = entry.pk
        else:
            entry = self.pods.pop(key, None)
            if entry is None:
                return
            self.pod_up.pop(key, None)
            self._add_contribution(entry, -1)
            if entry.operand or entry.selector:
                self.dirty.add(entry.node)
            if entry.node:
                self.pods_per_node[entry.node] -= 1
            if entry.pk:
                self.pod_del[key] = entry.pk

    def sweep(self, kind: str, seen: set) -> int:
        """After a complete list: forget (and delete) every row the list did not contain."""
        index = self.nodes if kind == NODES else self.pods
        stale = [key for key in index if key not in seen]
        for key in stale:
            self._delete_key(kind, key)
        return len(stale)

    def set_unreachable(self, unreachable: bool) -> None:
        if unreachable != self.unreachable:
            self.unreachable = unreachable
            self.dirty.update(self.nodes)

    @property
    def pending(self) -> bool:
        return bool(self.node_up or self.node_del or self.pod_up or self.pod_del or self.dirty)

    # -- deriving ----------------------------------------------------------------------------------
    def _derive(self, name: str, entry: NodeEntry) -> tuple[int | None, list[str], str, list[str]]:
        matched, conflicts = kube.resolve_pool(entry.labels, self.pool_selectors)
        pool_id = matched if matched is not None else self.default_pool_id
        conflict_names = [self.pool_names[pk] for pk in conflicts]
        operands = {app for app, n in (self.operands.get(name) or {}).items() if n > 0}
        reasons = list(entry.cond) + kube.missing_operand_reasons(entry.labels, entry.is_gpu, operands)
        for pair, n in (self.selectors.get(name) or {}).items():
            if n > 0:
                target = self.pool_by_label.get(pair)
                if target is not None and target != pool_id:
                    reasons.append(kube.NodeReason.UNDRAINED_MIGRATED)
                    break
        reasons = kube.sort_reasons(reasons)
        if self.unreachable:
            status = NodeStatus.UNKNOWN
        else:
            status = NodeStatus.NOT_READY if reasons else NodeStatus.READY
        return pool_id, conflict_names, str(status), reasons

    # -- writing -----------------------------------------------------------------------------------
    def flush(self) -> dict[str, int]:
        """Write the pending changes (call inside a transaction); returns counts of rows written."""
        written: Counter = Counter()
        self._refresh_context()
        now = dj_timezone.now()
        # Deletions first: an object deleted and created again in one batch gets a new row.
        if self.pod_del:
            table = connection.ops.quote_name(Pod._meta.db_table)
            with connection.cursor() as cursor:
                cursor.executemany(f"DELETE FROM {table} WHERE cluster_id = %s AND namespace = %s AND name = %s",
                                   [(self.cid, ns, name) for ns, name in self.pod_del])
            written["pods_deleted"] += len(self.pod_del)
        node_del = list(self.node_del.values())
        for i in range(0, len(node_del), 500):
            written["nodes_deleted"] += Node.objects.filter(pk__in=node_del[i:i + 500]).delete()[1].get("nodepools.Node", 0)
        self.pod_del.clear()
        self.node_del.clear()

        node_rows, derived_rows, new_names = [], [], []
        for name in self.dirty:
            entry = self.nodes.get(name)
            if entry is None:
                continue
            derived = self._derive(name, entry)
            values = self.node_up.get(name)
            if values is None and entry.pk and derived == (entry.pool_id, entry.conflicts, entry.status, entry.reasons):
                continue
            entry.pool_id, entry.conflicts, entry.status, entry.reasons = derived
            fields = dict(pool_id=derived[0], pool_conflicts=derived[1], status=derived[2], status_reasons=derived[3])
            if values is None:
                derived_rows.append(Node(pk=entry.pk, updated=now, **fields))
                continue
            row = Node(cluster_id=self.cid, name=name, **dict(zip(NODE_VALUE_FIELDS, values)), **fields)
            row.created_in_cluster = _when(row.created_in_cluster)
            node_rows.append(row)
            if not entry.pk:
                new_names.append(name)
        self.dirty.clear()
        self.node_up.clear()
        if node_rows:
            Node.objects.bulk_create(
                node_rows, update_conflicts=True, unique_fields=["cluster", "name"],
                update_fields=NODE_VALUE_FIELDS + NODE_DERIVED_FIELDS + ["updated"], batch_size=500,
            )
            for row in node_rows:
                self.nodes[row.name].pk = row.pk
            written["nodes"] += len(node_rows)
        if derived_rows:
            Node.objects.bulk_update(derived_rows, NODE_DERIVED_FIELDS + ["updated"], batch_size=500)
            written["nodes"] += len(derived_rows)

        # Pods already stored whose node row is new (the pods' list came first): link them.
        orphans = [name for name in new_names if self.pods_per_node.get(name)]
        for i in range(0, len(orphans), 500):
            chunk = orphans[i:i + 500]
            Pod.objects.filter(cluster_id=self.cid, node_name__in=chunk, node__isnull=True).update(
                node=Subquery(Node.objects.filter(cluster_id=self.cid, name=OuterRef("node_name")).values("pk")[:1]))

        if self.pod_up:
            written["pods"] += self._write_pods(now)
            self.pod_up.clear()
        self.stats.update(written)
        return dict(written)


    def _write_pods(self, now: datetime) -> int:
        """Upsert the pending pods with one prepared INSERT .. ON CONFLICT DO UPDATE run per row batch.

        Plain `executemany`: Django's bulk_create costs ~10x more per row in SQL compilation, and pods are
        what a cluster has most of. Values are adapted by the fields themselves (dates, decimals, JSON).
        """
        opts = Pod._meta
        quote = connection.ops.quote_name
        columns = ["cluster_id", "namespace", "name"] + [opts.get_field(f).column for f in POD_VALUE_FIELDS] + [
            "node_id", "project_id", "updated"]
        json_cast = "::jsonb" if connection.vendor == "postgresql" else ""
        placeholders = ["%s" + (json_cast if c in ("labels", "node_selector") else "") for c in columns]
        keys = {"cluster_id", "namespace", "name"}
        sql = (
            f"INSERT INTO {quote(opts.db_table)} ({', '.join(quote(c) for c in columns)}) "
            f"VALUES ({', '.join(placeholders)}) ON CONFLICT ({quote('cluster_id')}, {quote('namespace')}, "
            f"{quote('name')}) DO UPDATE SET "
            + ", ".join(f"{quote(c)} = EXCLUDED.{quote(c)}" for c in columns if c not in keys)
        )
        when_field, gpus_field = opts.get_field("created_in_cluster"), opts.get_field("gpus")
        adapted: dict = {}  # few distinct timestamps and GPU counts: adapt each once

        def when(text):
            try:
                return adapted[text]
            except KeyError:
                value = adapted[text] = when_field.get_db_prep_save(_when(text), connection)
                return value

        def gpus(value):
            try:
                return adapted[value]
            except KeyError:
                result = adapted[value] = gpus_field.get_db_prep_save(value, connection)
                return result
        stamp = opts.get_field("updated").get_db_prep_save(now, connection)
        namespaces, nodes, cid = self.namespaces or {}, self.nodes, self.cid
        dumps = orjson.dumps
        rows = []
        for (ns, name), v in self.pod_up.items():
            node = nodes.get(v[1]) if v[1] else None
            rows.append((
                cid, ns, name, v[0], v[1], v[2], v[3], v[4], dumps(v[5]).decode(), dumps(v[6]).decode(), v[7], v[8],
                v[9], gpus(v[10]), when(v[11]),
                v[12], node.pk if node is not None else None, namespaces.get(ns), stamp,
            ))
        with connection.cursor() as cursor:
            for i in range(0, len(rows), 1000):
                cursor.executemany(sql, rows[i:i + 1000])
        for key in self.pod_up:
            self.pods[key].pk = True
        return len(rows)


# ---------------------------------------------------------------------------------------------------
# Leadership: one sync process acts per cluster

class LeadershipLost(Exception):
    pass


class SingleLeadership:
    """SQLite: one sync process is assumed (run a single `sync_clusters`); always the leader."""

    def acquire(self, stop: threading.Event) -> bool:
        return True

    def check(self) -> bool:
        return True

    def fence(self) -> None:
        pass

    def release(self) -> None:
        pass


LEADER_KEY, FENCE_KEY = 0x6770, 0x6771  # advisory lock classes ("gp", "gq"); the object is the cluster id


class PgLeadership:
    """pg_try_advisory_lock(LEADER_KEY, cluster) held on a dedicated psycopg connection.

    Each write transaction calls `fence()`: it takes the cluster's FENCE_KEY lock shared and checks in
    pg_locks that our lock connection still holds the leader lock; a new leader takes FENCE_KEY
    exclusively once before writing, so it starts only after every write of the old leader has ended,
    and the old leader's later transactions fail the check.
    """

    def __init__(self, cluster_id: int, poll: float) -> None:
        self.cluster_id, self.poll = cluster_id, poll
        self.conn = None
        self.backend_pid: int | None = None

    def _connect(self):
        import psycopg

        params = connection.settings_dict
        kwargs = {"dbname": params["NAME"], "user": params.get("USER") or None,
                  "password": params.get("PASSWORD") or None, "host": params.get("HOST") or None,
                  "port": params.get("PORT") or None, "autocommit": True, "connect_timeout": 10,
                  "application_name": f"gpu-console-sync-lock:{self.cluster_id}"}
        return psycopg.connect(**{k: v for k, v in kwargs.items() if v is not None})

    def acquire(self, stop: threading.Event) -> bool:
        """Wait (as standby) until the lock is ours; False if stopped first."""
        while not stop.is_set():
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = self._connect()
                    self.backend_pid = self.conn.info.backend_pid
                got = self.conn.execute("SELECT pg_try_advisory_lock(%s, %s)", [LEADER_KEY, self.cluster_id]).fetchone()[0]
                if got:
                    # Wait for any write of a previous leader still in flight, then start.
                    self.conn.execute("SELECT pg_advisory_lock(%s, %s)", [FENCE_KEY, self.cluster_id])
                    self.conn.execute("SELECT pg_advisory_unlock(%s, %s)", [FENCE_KEY, self.cluster_id])
                    return True
            except Exception as exc:
                logger.warning("cluster %s: leader lock: %s", self.cluster_id, exc)
                self._close()
            stop.wait(self.poll)
        return False

    def check(self) -> bool:
        try:
            return bool(self.conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = %s "
                "AND objid::bigint = %s AND objsubid = 2 AND pid = pg_backend_pid() AND granted)",
                [LEADER_KEY, self.cluster_id],
            ).fetchone()[0])
        except Exception as exc:
            logger.warning("cluster %s: leader lock connection lost: %s", self.cluster_id, exc)
            return False

    def fence(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", [FENCE_KEY, self.cluster_id])
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = %s "
                "AND objid::bigint = %s AND objsubid = 2 AND pid = %s AND granted)",
                [LEADER_KEY, self.cluster_id, self.backend_pid],
            )
            if not cursor.fetchone()[0]:
                raise LeadershipLost(f"cluster {self.cluster_id}: the leader lock is no longer ours")

    def _close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # pragma: no cover
                pass
        self.conn = None

    def release(self) -> None:
        self._close()  # closing the session releases its advisory locks


def leadership_for(cluster_id: int, options: SyncOptions):
    if connection.vendor == "postgresql":
        return PgLeadership(cluster_id, options.lock_poll)
    return SingleLeadership()


# ---------------------------------------------------------------------------------------------------
# Change hints, coalesced

_hint_loop: Any = None
_hint_loop_lock = threading.Lock()


def _hints_loop():
    """One event loop thread for publishing hints: works from any thread (even one running its own
    event loop, as a test driving a browser does) and never makes the writer wait for Redis."""
    global _hint_loop
    with _hint_loop_lock:
        if _hint_loop is None:
            import asyncio

            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="sync-hints", daemon=True).start()
            _hint_loop = loop
        return _hint_loop


class Hinter:
    """Coalesces the kinds changed by committed batches into at most one hint per `interval`."""

    def __init__(self, cluster_id: int, interval: float) -> None:
        self.cluster_id, self.interval = cluster_id, interval
        self.kinds: set[str] = set()
        self.last = 0.0
        self.sent = 0

    def add(self, kinds: Iterable[str]) -> None:
        self.kinds.update(kinds)

    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.kinds or (not force and now - self.last < self.interval):
            return
        import asyncio

        kinds, self.kinds, self.last = self.kinds, set(), now
        hints.record(self.cluster_id)
        future = asyncio.run_coroutine_threadsafe(hints.publish_async(self.cluster_id, kinds), _hints_loop())
        future.add_done_callback(self._published)
        self.sent += 1

    def _published(self, future) -> None:
        if future.exception() is not None:  # the live pages miss a hint; the sync goes on
            logger.warning("cluster %s: could not publish a change hint: %s", self.cluster_id, future.exception())


# ---------------------------------------------------------------------------------------------------
# One cluster's worker

class ClusterSync:
    """Informers for one cluster plus the writer that applies their output (in the calling thread).

    `start()`, then `step()` repeatedly (or `run_until(...)` in tests, `run(stop)` in production),
    then `stop()`.
    """

    def __init__(self, cluster: Cluster, options: SyncOptions | None = None, leadership=None) -> None:
        self.cluster = cluster
        self.options = options or SyncOptions()
        self.leadership = leadership or SingleLeadership()
        self.queue: queue.Queue = queue.Queue(maxsize=max(4, self.options.queue_pages))
        self.mirror: Mirror | None = None
        self.api_client = None
        self.informers: list[Informer] = []
        self.health: dict[str, tuple[bool, float, str]] = {}
        self.listed: set[str] = set()
        self.listing: set[str] = set()
        self.state: str | None = None
        self.last_error: str | None = None
        self.full_sync_at: datetime | None = None
        self.hinter = Hinter(cluster.pk, self.options.hint_interval)
        self.batches = 0
        self.started = time.monotonic()

    def start(self) -> None:
        from kubernetes import client

        self.mirror = Mirror(self.cluster)
        self.state = self.cluster.connection_state
        self.started = time.monotonic()
        try:
            self.api_client = api_client_for(self.cluster)
        except Exception as exc:
            # A broken kubeconfig: the cluster is unreachable until it is fixed (the runner retries).
            self.health = {NODES: (False, self.started, str(exc)), PODS: (False, self.started, str(exc))}
            self.last_error = f"cannot configure the client: {exc}"
            raise
        api = client.CoreV1Api(self.api_client)
        self.informers = [Informer(kind, api, self.queue, self.options, self.cluster.name) for kind in (NODES, PODS)]
        for informer in self.informers:
            informer.start()

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()
        for informer in self.informers:
            informer.join(timeout=5)
        if self.api_client is not None:
            try:
                self.api_client.close()
            except Exception:  # pragma: no cover
                pass

    # -- the writer --------------------------------------------------------------------------------
    def _gather(self, timeout: float) -> list[tuple]:
        messages = []
        try:
            messages.append(self.queue.get(timeout=timeout))
        except queue.Empty:
            return messages
        deadline = time.monotonic() + self.options.batch_delay
        objects = self._size(messages[0])
        while objects < self.options.batch_max:
            remaining = deadline - time.monotonic()
            try:
                message = self.queue.get(timeout=remaining) if remaining > 0 else self.queue.get_nowait()
            except queue.Empty:
                break
            messages.append(message)
            objects += self._size(message)
        return messages

    @staticmethod
    def _size(message: tuple) -> int:
        return len(message[2]) if message[0] in ("page", "events") else 1

    def step(self, timeout: float | None = None) -> dict[str, int]:
        """Take what the informers sent (waiting up to `timeout`), write it in one transaction."""
        messages = self._gather(self.options.tick if timeout is None else timeout)
        mirror = self.mirror
        full_list = False
        for message in messages:
            what, kind = message[0], message[1]
            if what == "page":
                self.listing.add(kind)
                seen = message[3]
                for obj in message[2]:
                    mirror.apply(kind, obj, seen)
            elif what == "events":
                for event_type, obj in message[2]:
                    if event_type == "DELETED":
                        mirror.delete(kind, obj)
                    else:
                        mirror.apply(kind, obj)
            elif what == "listed":
                swept = mirror.sweep(kind, message[2])
                if swept:
                    logger.info("cluster %s: %d %s gone since the last list", self.cluster.name, swept, kind)
                self.listed.add(kind)
                self.listing.discard(kind)
                self.health[kind] = (True, time.monotonic(), "")
                full_list = True
            elif what == "health":
                error = message[2]
                previous = self.health.get(kind)
                if error is None:
                    self.health[kind] = (True, time.monotonic(), "")
                else:
                    since = previous[1] if previous and not previous[0] else time.monotonic()
                    self.health[kind] = (False, since, error)
                    self.last_error = error
        cluster_changes = self._state_changes(full_list)
        written: dict[str, int] = {}
        if mirror.pending or cluster_changes:
            written = self._write(cluster_changes)
        self.hinter.flush()
        return written

    def _state_changes(self, full_list: bool) -> dict[str, Any]:
        now = time.monotonic()
        failing = [kind for kind in (NODES, PODS) if kind in self.health and not self.health[kind][0]]
        if not failing:
            state = ConnectionState.CONNECTED if len(self.health) == 2 else self.state
        elif len(failing) == 2 and min(self.health[k][1] for k in failing) <= now - self.options.unreachable_after:
            state = ConnectionState.UNREACHABLE
        else:
            state = ConnectionState.DEGRADED
        changes: dict[str, Any] = {}
        if state != self.state:
            changes["connection_state"] = state
        if self.last_error is not None and self.last_error != self.cluster.last_error:
            changes["last_error"] = self.last_error[:2000]
        if full_list and self.listed >= {NODES, PODS} and not self.listing:  # every resource listed afresh
            changes["last_full_sync"] = dj_timezone.now()
        if "connection_state" in changes:
            self.mirror.set_unreachable(state == ConnectionState.UNREACHABLE)
        return changes

    def _write(self, cluster_changes: dict[str, Any]) -> dict[str, int]:
        try:
            with transaction.atomic():
                self.leadership.fence()
                written = self.mirror.flush()
                if cluster_changes:
                    Cluster.objects.filter(pk=self.cluster.pk).update(**cluster_changes)
        except LeadershipLost:
            raise
        except Exception:
            # The transaction rolled back: the in-memory index no longer matches the database.
            self.mirror = None
            raise
        for field, value in cluster_changes.items():
            setattr(self.cluster, field, value)
        if "connection_state" in cluster_changes:
            self.state = cluster_changes["connection_state"]
            logger.info("cluster %s: %s", self.cluster.name, self.state)
        self.batches += 1
        kinds = set()
        if written.get("nodes") or written.get("nodes_deleted"):
            kinds.add("nodes")
        if written.get("pods") or written.get("pods_deleted"):
            kinds.add("pods")
        if cluster_changes:
            kinds.add("cluster")
        if kinds:
            logger.info("cluster %s: wrote %s", self.cluster.name,
                        ", ".join(f"{n} {k}" for k, n in sorted(written.items()) if n) or "cluster state")
            self.hinter.add(kinds)
        return written

    def run_until(self, condition: Callable[[], bool], timeout: float = 20.0) -> bool:
        """Step until `condition()` holds (checked after each step); False on timeout. For tests."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.step(timeout=0.05)
            if condition():
                self.hinter.flush(force=True)
                return True
        return False

    def run(self, stop: threading.Event) -> None:
        """Until `stop` is set or the leadership is lost (raises LeadershipLost)."""
        next_check = time.monotonic() + self.options.lock_poll
        while not stop.is_set():
            self.step()
            if time.monotonic() >= next_check:
                if not self.leadership.check():
                    raise LeadershipLost(f"cluster {self.cluster.name}: lost the leader lock")
                next_check = time.monotonic() + self.options.lock_poll
        self.hinter.flush(force=True)


class ClusterRunner(threading.Thread):
    """sync_clusters' thread for one cluster: standby until leader, then sync; again after any failure."""

    def __init__(self, cluster_id: int, options: SyncOptions) -> None:
        super().__init__(name=f"sync:{cluster_id}", daemon=True)
        self.cluster_id, self.options = cluster_id, options
        self.stop_event = threading.Event()

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        from audit.context import via

        with via("sync"):
            try:
                self._run()
            finally:
                connections.close_all()

    def _run(self) -> None:
        backoff = Backoff(self.options.backoff_base, self.options.backoff_max)
        while not self.stop_event.is_set():
            leadership = leadership_for(self.cluster_id, self.options)
            worker = None
            try:
                cluster = Cluster.objects.filter(pk=self.cluster_id).first()
                if cluster is None:
                    return
                if isinstance(leadership, PgLeadership):
                    logger.info("cluster %s: standby, waiting for the leader lock", cluster.name)
                if not leadership.acquire(self.stop_event):
                    return
                cluster.refresh_from_db()
                logger.info("cluster %s: leader; syncing", cluster.name)
                worker = ClusterSync(cluster, self.options, leadership)
                try:
                    worker.start()
                except Exception as exc:
                    self._unreachable(cluster, f"cannot reach the cluster: {exc}", leadership)
                    raise
                worker.run(self.stop_event)
                backoff.reset()
            except LeadershipLost as exc:
                logger.warning("cluster %s: lost leadership: %s; standing by", self.cluster_id, exc)
            except Exception as exc:
                delay = backoff.next()
                logger.exception("cluster %s: sync failed (%s); restarting in %.1fs", self.cluster_id, exc, delay)
                self._record_failure(exc, leadership)
                self.stop_event.wait(delay)
            finally:
                if worker is not None:
                    worker.stop()
                leadership.release()
                connections.close_all()

    @staticmethod
    def _unreachable(cluster: Cluster, error: str, leadership) -> None:
        """No client at all (e.g. the kubeconfig is gone): unreachable, its nodes Unknown, nothing deleted."""
        try:
            with transaction.atomic():
                leadership.fence()
                Cluster.objects.filter(pk=cluster.pk).update(connection_state=ConnectionState.UNREACHABLE,
                                                             last_error=error[:2000])
                Node.objects.filter(cluster=cluster).exclude(status=NodeStatus.UNKNOWN).update(status=NodeStatus.UNKNOWN)
        except Exception:
            logger.exception("cluster %s: could not record that it is unreachable", cluster.name)

    def _record_failure(self, exc: BaseException, leadership) -> None:
        try:
            with transaction.atomic():
                leadership.fence()
                Cluster.objects.filter(pk=self.cluster_id).update(last_error=str(exc)[:2000])
        except Exception:
            pass


def run_clusters(stop: threading.Event, options: SyncOptions, names: list[str] | None = None) -> None:
    """sync_clusters' loop: keep one runner per registered cluster until `stop` is set."""
    runners: dict[int, ClusterRunner] = {}
    try:
        while not stop.is_set():
            clusters = Cluster.objects.all()
            if names:
                clusters = clusters.filter(name__in=names)
            wanted = set(clusters.values_list("pk", flat=True))
            connections.close_all()
            for pk in wanted - set(runners):
                runners[pk] = ClusterRunner(pk, options)
                runners[pk].start()
            for pk in set(runners) - wanted:
                runners.pop(pk).stop()
            for pk, runner in list(runners.items()):
                if not runner.is_alive():  # the cluster vanished or the runner ended: look again later
                    runners.pop(pk)
            stop.wait(options.rescan)
    finally:
        for runner in runners.values():
            runner.stop()
        for runner in runners.values():
            runner.join(timeout=10)
