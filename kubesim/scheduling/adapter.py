"""The schedulers in the emulator: a thin layer that reads the store into the pure cores' snapshots and
writes their decisions back as the real components do (binding, conditions, events, status, deletions).

- :meth:`SchedulingMixin.default_scheduler_step` places the pending pods of the default scheduler
  (``schedulerName`` ``default-scheduler`` or none) — Kueue's admitted pods among them;
- :meth:`SchedulingMixin.kai_scheduler_step` runs KAI's pod grouper, one KAI cycle (every shard) and
  KAI's podgroup and queue controllers' status;
- :meth:`SchedulingMixin.scheduling_step` runs both.

The store is read like an informer: pods and nodes are parsed once per resourceVersion and kept, the
event history tells which changed since the last step (a full comparison when the history has moved
on), and the requests of the pods bound to each node are kept up to date as pods change. A pod the
default scheduler could not place is tried again only once the cluster changed (a node, a bound pod) or
five minutes passed, as kube-scheduler's unschedulable queue does.

Events are core/v1 Events as the components' recorders write them: one per (object, reason, message)
and source, repeated ones counted (``count``, ``lastTimestamp``, ``series``) instead of written again;
an object gets at most 25 events in a burst, then one per 5 minutes (client-go's spam filter).
"""
from __future__ import annotations

import datetime as dt
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import orjson

from kubesim.errors import ApiError
from kubesim.resources import NODES, PODS, get_resource
from kubesim.scheduling import default as default_core
from kubesim.scheduling import kai as kai_core
from kubesim.scheduling.fit import Cluster, NodeInfo, PodInfo, node_info, pod_info
from kubesim.factories import make_pod
from kubesim.util import Obj, _gc_paused
from kube import gpu as kgpu

PRIORITY_CLASSES = "priorityclasses.scheduling.k8s.io"
POD_GROUPS = "podgroups.scheduling.run.ai"
QUEUES = "queues.scheduling.run.ai"
SHARDS = "schedulingshards.kai.scheduler"
JOBS = "jobs.batch"
EVENTS = "events"
# What each step reads: with none of it changed since the step last ran, it has nothing to do.
_DEFAULT_INPUTS = (PODS, NODES, PRIORITY_CLASSES)
_GROUPER_INPUTS = (PODS, JOBS, POD_GROUPS, PRIORITY_CLASSES)
_KAI_INPUTS = (PODS, NODES, POD_GROUPS, QUEUES, SHARDS, PRIORITY_CLASSES)
_STATUS_INPUTS = (PODS, POD_GROUPS, QUEUES, PRIORITY_CLASSES)
UNSCHEDULABLE_RETRY_SECONDS = 300.0  # kube-scheduler's podMaxInUnschedulablePodsDuration
EVENT_BURST = 25
EVENT_REFILL_SECONDS = 300.0
EVENT_CACHE = 4096


def _rfc3339(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Informer:
    """Parsed pods and nodes, kept in step with the store through its event history."""

    def __init__(self) -> None:
        self.seq = -1
        self.rv = 0  # the store's resourceVersion when we last caught up
        self.nodes: dict[str, tuple[int, NodeInfo]] = {}
        self.pods: dict[tuple[str, str], tuple[int, PodInfo]] = {}
        self.used: dict[str, dict[str, float]] = {}
        self.counts: dict[str, int] = {}
        self.free: dict[str, dict[str, float]] = {}  # per node: allocatable minus the active pods' requests
        self.free_pods: dict[str, float] = {}
        self.kai: set[tuple[str, str]] = set()  # the pods of kai-scheduler
        self.other_used: dict[str, dict[str, float]] = {}  # per node: what the other schedulers' pods request
        self.pending: set[tuple[str, str]] = set()
        self.node_generation = 0  # moves when a node changes
        self.generation = 0  # moves when a node or a bound pod changes: unschedulable pods may fit now
        self._node_list: list[NodeInfo] | None = None

    def node_list(self) -> list[NodeInfo]:
        if self._node_list is None:
            self._node_list = [info for _, (_, info) in sorted(self.nodes.items())]
        return self._node_list

    def _count(self, pod: PodInfo, sign: int) -> None:
        if pod.scheduler == kai_core.SCHEDULER_NAME:
            if sign > 0:
                self.kai.add((pod.namespace, pod.name))
            else:
                self.kai.discard((pod.namespace, pod.name))
        if not pod.node or not pod.active:
            return
        if pod.scheduler != kai_core.SCHEDULER_NAME and pod.namespace != kai_core.RESERVATION_NAMESPACE:
            other = self.other_used.setdefault(pod.node, {})
            for name, value in pod.requests.items():
                other[name] = other.get(name, 0.0) + sign * value
        into = self.used.setdefault(pod.node, {})
        free = self.free.get(pod.node)
        for name, value in pod.requests.items():
            into[name] = into.get(name, 0.0) + sign * value
            if free is not None:
                free[name] = free.get(name, 0.0) - sign * value
        self.counts[pod.node] = self.counts.get(pod.node, 0) + sign
        if pod.node in self.free_pods:
            self.free_pods[pod.node] -= sign

    def _refresh_free(self, name: str) -> None:
        """What is free on the node: its allocatable minus what its active pods request."""
        entry = self.nodes.get(name)
        if entry is None:
            self.free.pop(name, None)
            self.free_pods.pop(name, None)
            return
        allocatable = entry[1].allocatable
        used = self.used.get(name) or {}
        free = {r: v - used.get(r, 0.0) for r, v in allocatable.items()}
        for r, v in used.items():
            if r not in free:
                free[r] = -v
        self.free[name] = free
        self.free_pods[name] = allocatable.get("pods", 110.0) - self.counts.get(name, 0)

    def _set_pod(self, key: tuple[str, str], rv: int, data: bytes | None) -> None:
        old = self.pods.pop(key, None)
        if old is not None:
            self._count(old[1], -1)
            self.pending.discard(key)
            if old[1].node:
                self.generation += 1
        if data is None:
            return
        pod = pod_info(orjson.loads(data))
        self.pods[key] = (rv, pod)
        self._count(pod, 1)
        if not pod.node and pod.active and not pod.terminating:
            self.pending.add(key)

    def _set_node(self, name: str, rv: int, data: bytes | None) -> None:
        self.nodes.pop(name, None)
        if data is not None:
            self.nodes[name] = (rv, node_info(orjson.loads(data)))
        self._refresh_free(name)
        self.node_generation += 1
        self.generation += 1
        self._node_list = None

    def sync(self, emu: Any) -> None:
        """Catch up with the store (``emu``: the emulator; its lock is taken to read, not to parse)."""
        changed_pods: list[tuple[tuple[str, str], int, bytes | None]] = []
        changed_nodes: list[tuple[str, int, bytes | None]] = []
        with emu._lock:
            seq = emu._seq
            pods, nodes = emu._stores[PODS].entries, emu._stores[NODES].entries
            # From scratch the first time, after the history moved past us, or after a compaction (a bulk load
            # without events: its objects are in no event).
            full = (self.seq < 0 or self.seq < emu._min_seq or seq - self.seq > emu._ring_size
                    or emu._floor_rv > self.rv)
            self.rv = emu._rv
            if full:
                pod_keys = set(pods) | set(self.pods)
                node_keys = {k[1] for k in nodes} | set(self.nodes)
            else:
                pod_keys, node_keys = set(), set()
                size = emu._ring_size
                for s in range(self.seq, seq):
                    event = emu._ring[s % size]
                    if event is None:
                        continue
                    if event.kind == PODS:
                        pod_keys.add(event.key)
                    elif event.kind == NODES:
                        node_keys.add(event.key[1])
            for key in pod_keys:
                entry = pods.get(key)
                known = self.pods.get(key)
                if entry is None:
                    if known is not None:
                        changed_pods.append((key, 0, None))
                elif known is None or known[0] != entry[1]:
                    changed_pods.append((key, entry[1], entry[0]))
            for name in node_keys:
                entry = nodes.get(("", name))
                known = self.nodes.get(name)
                if entry is None:
                    if known is not None:
                        changed_nodes.append((name, 0, None))
                elif known is None or known[0] != entry[1]:
                    changed_nodes.append((name, entry[1], entry[0]))
            self.seq = seq
        with _gc_paused():
            for name, rv, data in changed_nodes:
                self._set_node(name, rv, data)
            for key, rv, data in changed_pods:
                self._set_pod(key, rv, data)


class _EventRecorder:
    """Deduplicating, rate-limited event writes (client-go's EventCorrelator, simplified)."""

    def __init__(self) -> None:
        self.names: OrderedDict[tuple, tuple[str, str]] = OrderedDict()  # key -> (namespace, name)
        self.buckets: dict[tuple, tuple[float, float]] = {}  # (source, object) -> (tokens, last refill)
        self.serial = 0

    def allow(self, source: tuple, now: float) -> bool:
        tokens, last = self.buckets.get(source, (float(EVENT_BURST), now))
        tokens = min(float(EVENT_BURST), tokens + (now - last) / EVENT_REFILL_SECONDS)
        if tokens < 1:
            self.buckets[source] = (tokens, now)
            return False
        self.buckets[source] = (tokens - 1, now)
        return True


class SchedulingMixin:
    """Part of :class:`kubesim.KubeEmulator`: the default scheduler and KAI Scheduler."""

    #: KAI's global ``nodePoolLabelKey`` (the label its shards partition by): the console's pool label, which
    #: the console stamps on every node, Queue and Job (KAI's own default is ``kai.scheduler/node-pool``).
    kai_node_pool_key = "console.gpu-capacity.io/node-pool"
    #: The host part of the default scheduler's ``reportingInstance``.
    scheduler_host = "kubesim"

    # ------------------------------------------------------------------ state

    def _init_scheduling(self, enabled: bool = True) -> None:
        """Put KAI's cycle, then the default scheduler's pass, into the controller loop's schedulers' slot."""
        if enabled:
            self.register_scheduler(_kai_step)
            self.register_scheduler(_default_step)

    def _scheduling(self) -> dict[str, Any]:
        state = getattr(self, "_scheduling_state", None)
        if state is None:
            with self._lock:
                state = getattr(self, "_scheduling_state", None)
                if state is None:
                    state = self._scheduling_state = {
                        "informer": _Informer(), "events": _EventRecorder(), "lock": threading.Lock(),
                        "step": threading.RLock(),  # one scheduler step at a time (loop thread, HTTP, tests)
                        "next_start": 0, "caches": None, "caches_generation": -1, "failed": {},
                    }
        return state

    def _scheduler_now(self, now: float | None = None) -> float:
        return float(now) if now is not None else float(self.clock.now())

    def _priority_classes(self) -> tuple[dict[str, int], int]:
        classes: dict[str, int] = {}
        default = 0
        for pc in self.list(PRIORITY_CLASSES):
            value = pc.get("value")
            if isinstance(value, int):
                classes[pc["metadata"]["name"]] = value
                if pc.get("globalDefault"):
                    default = value
        return classes, default

    # ------------------------------------------------------------------ events

    def record_event(self, involved: Mapping[str, Any], *, type_: str, reason: str, message: str,
                     component: str, action: str = "", instance: str = "", annotations: Mapping[str, str] | None = None,
                     now: float | None = None) -> Obj | None:
        """Write a core/v1 Event about ``involved`` (apiVersion, kind, namespace, name, uid) as a recorder
        does: a repeat of an earlier event is counted on it; returns the event, None when rate-limited."""
        moment = self._scheduler_now(now)
        state = self._scheduling()
        recorder: _EventRecorder = state["events"]
        namespace = involved.get("namespace") or "default"
        obj_key = (involved.get("kind"), namespace, involved.get("name"), involved.get("uid"))
        key = (component, *obj_key, type_, reason, message)
        with state["lock"]:
            if not recorder.allow((component, *obj_key), moment):
                return None
            known = recorder.names.get(key)
            if known is not None:
                recorder.names.move_to_end(key)
        stamp = _rfc3339(moment)
        if known is not None:
            def repeat(event: Obj) -> None:
                count = int(event.get("count") or 1) + 1
                event["count"] = count
                event["lastTimestamp"] = stamp
                event["series"] = {"count": count, "lastObservedTime": _micro(moment)}

            try:
                return self.update(EVENTS, known[1], repeat, known[0])
            except ApiError:
                pass  # deleted meanwhile: write it again
        with state["lock"]:
            recorder.serial += 1
            serial = recorder.serial
        event_name = f"{involved.get('name')}.{int(moment * 1e9) + serial:x}"
        event: Obj = {
            "metadata": {"name": event_name, "namespace": namespace, **({"annotations": dict(annotations)}
                                                                        if annotations else {})},
            "involvedObject": {k: involved[k] for k in ("apiVersion", "kind", "namespace", "name", "uid",
                                                        "resourceVersion") if involved.get(k)},
            "reason": reason, "message": message, "type": type_,
            "source": {"component": component},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "eventTime": _micro(moment),
            "reportingComponent": component, "reportingInstance": instance or component,
        }
        if action:
            event["action"] = action
        while True:
            try:
                stored = self.create(EVENTS, event)
                break
            except ApiError as err:
                if err.code != 409:
                    raise
                # Another recorder (the Job controller's, for a Job named as this PodGroup) took the name.
                with state["lock"]:
                    recorder.serial += 1
                    serial = recorder.serial
                event["metadata"]["name"] = event_name = f"{involved.get('name')}.{int(moment * 1e9) + serial:x}"
        with state["lock"]:
            recorder.names[key] = (namespace, event_name)
            while len(recorder.names) > EVENT_CACHE:
                recorder.names.popitem(last=False)
        return stored

    # ------------------------------------------------------------------ the default scheduler

    def default_scheduler_step(self) -> dict[str, int]:
        """Place the pending pods of the default scheduler; returns how many were bound and how many
        could not be placed."""
        # Thousands of short-lived objects: no full collections meanwhile.
        with self._scheduling()["step"], _gc_paused():
            return self._default_scheduler_step()

    def _unchanged(self, name: str, kinds: tuple[str, ...]) -> bool:
        """Whether no object of ``kinds`` changed since the step ``name`` last started (then it has nothing
        to do); otherwise notes the versions it starts from (what changes while it runs, its own writes
        included, makes the next step look again)."""
        state = self._scheduling()
        with self._lock:
            now = tuple(self._kind_rv.get(kind, 0) for kind in kinds)
        if state.get(("seen", name)) == now:
            return True
        state[("starting", name)] = now
        return False

    def _note_seen(self, name: str, kinds: tuple[str, ...]) -> None:
        state = self._scheduling()
        state[("seen", name)] = state.pop(("starting", name), None)

    def _default_scheduler_step(self) -> dict[str, int]:
        moment = self._scheduler_now()
        state = self._scheduling()
        retry_at = state.get("retry_at")
        if self._unchanged("default", _DEFAULT_INPUTS) and (retry_at is None or moment < retry_at):
            return {"bound": 0, "unschedulable": 0}
        try:
            return self._default_pass(moment)
        finally:
            failed = state["failed"]
            state["retry_at"] = min(when for _, when in failed.values()) + UNSCHEDULABLE_RETRY_SECONDS \
                if failed else None
            self._note_seen("default", _DEFAULT_INPUTS)

    def _default_pass(self, moment: float) -> dict[str, int]:
        state = self._scheduling()
        informer: _Informer = state["informer"]
        informer.sync(self)
        failed: dict[tuple[str, str], tuple[int, float]] = state["failed"]
        pending = []
        for key in informer.pending:
            pod = informer.pods[key][1]
            if not default_core.is_default(pod):
                continue
            seen = failed.get(key)
            if seen is not None and seen[0] == informer.generation and moment - seen[1] < UNSCHEDULABLE_RETRY_SECONDS:
                continue
            pending.append(pod)
        if not pending:
            return {"bound": 0, "unschedulable": 0}
        classes, default_priority = self._priority_classes()
        cluster = self._cluster(state, informer)
        result = default_core.schedule(cluster, pending, priority_classes=classes, default_priority=default_priority,
                                       start=state["next_start"])
        state["next_start"] = result.next_start
        instance = f"{default_core.SCHEDULER_NAME}-{self.scheduler_host}"
        bound = 0
        for bind in result.binds:
            try:
                pod = self.bind_pod(bind.namespace, bind.name, bind.node)
            except ApiError:
                continue  # deleted or bound by someone else meanwhile
            bound += 1
            failed.pop((bind.namespace, bind.name), None)
            self.record_event(_ref(pod), type_="Normal", reason="Scheduled", component=default_core.SCHEDULER_NAME,
                              instance=instance, action="Binding", now=moment,
                              message=f"Successfully assigned {bind.namespace}/{bind.name} to {bind.node}")
        informer.sync(self)
        for failure in result.failures:
            key = (failure.namespace, failure.name)
            failed[key] = (informer.generation, moment)
            pod = self._mark_unschedulable(failure.namespace, failure.name, failure.message, moment)
            if pod is not None:
                self.record_event(_ref(pod), type_="Warning", reason="FailedScheduling", message=failure.message,
                                  component=default_core.SCHEDULER_NAME, instance=instance, action="Scheduling",
                                  now=moment)
        for key in [k for k in failed if k not in informer.pending]:
            del failed[key]
        informer.sync(self)
        # Our own condition writes are no reason to try the failed pods again.
        for key, (_, when) in list(failed.items()):
            failed[key] = (informer.generation, when)
        return {"bound": bound, "unschedulable": len(result.failures)}

    def _cluster(self, state: dict[str, Any], informer: _Informer) -> Cluster:
        caches = state["caches"] if state["caches_generation"] == informer.node_generation else None
        cluster = Cluster.from_free(informer.node_list(), informer.free, informer.free_pods, caches=caches)
        state["caches"], state["caches_generation"] = cluster.caches, informer.node_generation
        return cluster

    def _mark_unschedulable(self, namespace: str, name: str, message: str, moment: float) -> Obj | None:
        """``PodScheduled=False``, reason ``Unschedulable``, with the scheduler's message (written only when
        it changed)."""
        stamp = _rfc3339(moment)

        def change(pod: Obj) -> None:
            if (pod.get("spec") or {}).get("nodeName"):
                return
            _set_condition(pod, {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": message, "lastProbeTime": None, "lastTransitionTime": stamp})

        try:
            return self._update(PODS, (namespace, name), change)
        except ApiError:
            return None

    # ------------------------------------------------------------------ KAI Scheduler

    def kai_pod_grouper_step(self) -> int:
        """KAI's pod grouper: a PodGroup for every pod of ``kai-scheduler`` and its ``pod-group-name``
        annotation; PodGroups whose owner is gone are deleted. Returns how many objects it wrote."""
        with self._scheduling()["step"]:
            return self._kai_pod_grouper_step()

    def _kai_pod_grouper_step(self) -> int:
        if self._unchanged("grouper", _GROUPER_INPUTS):
            return 0
        try:
            return self._kai_group_pods()
        finally:
            self._note_seen("grouper", _GROUPER_INPUTS)

    def _kai_group_pods(self) -> int:
        state = self._scheduling()
        informer: _Informer = state["informer"]
        informer.sync(self)
        classes, _ = self._priority_classes()
        jobs: dict[str, kai_core.Owner] = {}
        for job in self.list(JOBS):
            md = job["metadata"]
            jobs[md["uid"]] = kai_core.Owner("batch/v1", "Job", md["name"], md["uid"], md.get("labels") or {},
                                             md.get("annotations") or {})
        existing = {(g["metadata"]["namespace"], g["metadata"]["name"]): g for g in self.list(POD_GROUPS)}
        names: dict[str, set[str]] = {}
        for namespace, name in existing:
            names.setdefault(namespace, set()).add(name)
        wanted: dict[tuple[str, str], Obj] = {}
        writes = 0
        pod_uids = set()
        for key in list(informer.kai):
            pod = informer.pods[key][1]
            pod_uids.add(pod.uid)
            if kai_core.skips_grouper(pod.annotations):
                continue  # an external PodGroup's pod: left as it is
            if pod.owner is None and pod.annotations.get(kai_core.POD_GROUP_ANNOTATION):
                continue  # a pod of a PodGroup someone made
            owner = kai_core.owner_of(pod, jobs)
            if owner is None or kai_core.skips_grouper(owner.annotations):
                continue
            try:
                group = kai_core.pod_group_for(pod, owner, priority_classes=classes,
                                               node_pool_key=self.kai_node_pool_key,
                                               existing=names.get(pod.namespace, ()))
            except kai_core.GrouperError as err:
                self.record_event({"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                                   "uid": pod.uid}, type_="Warning", reason=kai_core.POD_GROUPER_WARNING,
                                  message=str(err), component=kai_core.POD_GROUPER)
                continue
            key = (group["metadata"]["namespace"], group["metadata"]["name"])
            if key in existing:
                group = kai_core.keep_external_fields(group, existing[key], node_pool_key=self.kai_node_pool_key)
            wanted[key] = group
            if pod.annotations.get(kai_core.POD_GROUP_ANNOTATION) != key[1]:
                try:
                    self._update(PODS, pod.key, {"metadata": {"annotations": {kai_core.POD_GROUP_ANNOTATION: key[1]}}},
                                 patch_type="merge")
                    writes += 1
                except ApiError:
                    pass
        for key, group in wanted.items():
            current = existing.get(key)
            if current is None:
                try:
                    self.create(POD_GROUPS, group)
                    writes += 1
                except ApiError:
                    pass
                continue
            if (current.get("spec") or {}) != {**(current.get("spec") or {}), **group["spec"]} or any(
                    (current["metadata"].get("labels") or {}).get(k) != v for k, v in group["metadata"]["labels"].items()):
                def change(obj: Obj, group: Obj = group) -> None:
                    obj.setdefault("spec", {}).update(group["spec"])
                    obj["metadata"].setdefault("labels", {}).update(group["metadata"]["labels"])

                self.update(POD_GROUPS, key[1], change, key[0])
                writes += 1
        # The garbage collector: a PodGroup goes with its owner.
        for key, group in existing.items():
            owners = group["metadata"].get("ownerReferences") or []
            if not owners or key in wanted:
                continue
            uid = owners[0].get("uid")
            if uid in jobs or uid in pod_uids:
                continue
            try:
                self.delete(POD_GROUPS, key[1], key[0])
                writes += 1
            except ApiError:
                pass
        return writes

    def _kai_snapshot(self, informer: _Informer) -> kai_core.Snapshot:
        classes, default = self._priority_classes()
        return kai_core.Snapshot(
            nodes=informer.node_list(), pods=[informer.pods[k][1] for k in informer.kai],
            other_used=informer.other_used,
            pod_groups=self.list(POD_GROUPS), queues=self.list(QUEUES), shards=self.list(SHARDS),
            priority_classes=classes, default_priority=default, node_pool_key=self.kai_node_pool_key,
            free=informer.free, free_pods=informer.free_pods)

    def kai_scheduler_step(self) -> dict[str, int]:
        """KAI's pod grouper, one scheduling cycle and its podgroup and queue controllers' status (three
        components of KAI, one after the other); returns what the cycle did."""
        with self._scheduling()["step"], _gc_paused():
            self.kai_pod_grouper_step()
            done = self.kai_cycle_step()
            self.report_kai_status()
            return done

    def kai_cycle_step(self) -> dict[str, int]:
        """One KAI scheduling cycle (every shard): decisions, then binds, evictions, the PodGroups' and pods'
        conditions and events."""
        with self._scheduling()["step"], _gc_paused():
            return self._kai_cycle_step()

    def _kai_cycle_step(self) -> dict[str, int]:
        if self._unchanged("kai", _KAI_INPUTS):
            return {"bound": 0, "evicted": 0, "unschedulable": 0}
        try:
            return self._kai_cycle()
        finally:
            self._note_seen("kai", _KAI_INPUTS)

    def _kai_cycle(self) -> dict[str, int]:
        moment = self._scheduler_now()
        state = self._scheduling()
        informer: _Informer = state["informer"]
        informer.sync(self)
        if not any(p.scheduler == kai_core.SCHEDULER_NAME for p in (informer.pods[k][1] for k in informer.pending)):
            decisions = kai_core.Decisions()
        else:
            decisions = kai_core.cycle(self._kai_snapshot(informer))
        groups = {(g["metadata"]["namespace"], g["metadata"]["name"]): g for g in self.list(POD_GROUPS)}
        component = kai_core.SCHEDULER_NAME
        for eviction in decisions.evictions:
            self._kai_evict(eviction, groups.get(eviction.group), moment)
        for bind in decisions.binds:
            try:
                if bind.gpu_group:
                    self._kai_reserve_gpu(bind)
                pod = self.bind_pod(bind.namespace, bind.name, bind.node)
            except ApiError:
                continue
            self.record_event(_ref(pod), type_="Normal", reason="Scheduled", component=component, now=moment,
                              message=f"Successfully assigned pod {bind.namespace}/{bind.name} to node {bind.node} "
                                      f"at node-pool {bind.node_pool}")
        for verdict in decisions.unschedulable:
            group = groups.get(verdict.group)
            if group is not None:
                self.record_event(_ref(group, "PodGroup", kai_core.POD_GROUP_API), type_="Normal",
                                  reason="Unschedulable", message=verdict.message, component=component, now=moment)
                if not verdict.has_running:
                    self._kai_scheduling_condition(verdict, moment)
            for (namespace, name), message in verdict.pod_messages.items():
                pod = self._mark_unschedulable(namespace, name, message, moment)
                if pod is not None:
                    self.record_event(_ref(pod), type_="Warning", reason="Unschedulable", message=message,
                                      component=component, now=moment)
        for key, message in decisions.not_ready:
            group = groups.get(key)
            if group is not None:
                self.record_event(_ref(group, "PodGroup", kai_core.POD_GROUP_API), type_="Normal", reason="NotReady",
                                  message=message, component=component, now=moment)
        self._kai_sync_reservations()
        return {"bound": len(decisions.binds), "evicted": len(decisions.evictions),
                "unschedulable": len(decisions.unschedulable)}

    # ------------------------------------------------------------------ KAI's binder: shared GPUs

    def _kai_reserve_gpu(self, bind: kai_core.Bind) -> None:
        """The binder's ReserveGpuDevice (pkg/binder/binding/resourcereservation/resource_reservation.go): the
        GPU group's reservation pod (created when the group is new: ``nvidia.com/gpu: 1`` on the node, in
        ``kai-resource-reservation``, labelled ``app`` and ``runai-gpu-group``, annotated
        ``karpenter.sh/do-not-disrupt``), then the ``runai-gpu-group`` label on the sharer."""
        name = kai_core.reservation_pod_name(bind.node, bind.gpu_group)
        if self.get_pod(kai_core.RESERVATION_NAMESPACE, name) is None:
            taken = {int(p["metadata"].get("annotations", {}).get(kai_core.GPU_INDEX_ANNOTATION, -1))
                     for p in self.list(PODS, kai_core.RESERVATION_NAMESPACE)
                     if (p.get("spec") or {}).get("nodeName") == bind.node}
            index = next(i for i in range(len(taken) + 1) if i not in taken)
            pod = make_pod(name, kai_core.RESERVATION_NAMESPACE, node=bind.node, phase="Running",
                           labels={"app": kai_core.RESERVATION_APP, kai_core.GPU_GROUP_LABEL: bind.gpu_group},
                           annotations={"karpenter.sh/do-not-disrupt": "true",
                                        kai_core.GPU_INDEX_ANNOTATION: str(index)},
                           containers=[{"name": "resource-reservation", "image": "ghcr.io/nvidia/kai-scheduler/"
                                        "resource-reservation", "requests": {kgpu.GPU_RESOURCE: 1},
                                        "limits": {kgpu.GPU_RESOURCE: 1}}],
                           created=self.clock.rfc3339())
            pod["spec"]["runtimeClassName"] = "nvidia"
            pod["spec"]["serviceAccountName"] = "kai-resource-reservation"
            try:
                self.create(PODS, pod)
            except ApiError as err:
                if err.code != 409:  # AlreadyExists: another bind made it, reuse it (as the binder does)
                    raise
        self._update(PODS, (bind.namespace, bind.name),
                     {"metadata": {"labels": {kai_core.GPU_GROUP_LABEL: bind.gpu_group}}}, patch_type="merge")

    def _kai_sync_reservations(self) -> int:
        """The binder's sync (syncForPods): a reservation pod whose GPU group has no pending or running sharer
        left is deleted. Returns how many."""
        reservations = self.list(PODS, kai_core.RESERVATION_NAMESPACE)
        if not reservations:
            return 0
        index = get_resource(PODS).field_index
        phase_at = index["status.phase"]
        with self._lock:
            entries = [(dict(labels), fields) for key, (_data, _rv, labels, fields) in self._stores[PODS].entries.items()
                       if key[0] != kai_core.RESERVATION_NAMESPACE and labels]
        groups = {labels[kai_core.GPU_GROUP_LABEL] for labels, fields in entries
                  if kai_core.GPU_GROUP_LABEL in labels and fields[phase_at] not in ("Succeeded", "Failed")}
        deleted = 0
        for pod in reservations:
            group = (pod["metadata"].get("labels") or {}).get(kai_core.GPU_GROUP_LABEL)
            if group in groups or pod["metadata"].get("deletionTimestamp"):
                continue
            try:
                self.delete_pod(kai_core.RESERVATION_NAMESPACE, pod["metadata"]["name"], grace_period_seconds=0)
                deleted += 1
            except ApiError:
                pass
        return deleted

    def _kai_evict(self, eviction: kai_core.Eviction, group: Obj | None, moment: float) -> None:
        """KAI's evictor (cache/evictor/default_evictor.go): with ``--update-pod-eviction-condition`` the pod's
        ``DisruptionTarget`` condition first, then its deletion; an ``Evict`` event on its PodGroup saying by
        whom."""
        stamp = _rfc3339(moment)

        def change(pod: Obj) -> None:
            _set_condition(pod, {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                                 "message": eviction.message, "lastProbeTime": None, "lastTransitionTime": stamp})

        try:
            if eviction.condition:
                self._update(PODS, (eviction.namespace, eviction.name), change, subresource="status")
            self.delete_pod(eviction.namespace, eviction.name)
        except ApiError:
            return
        if group is not None:
            self.record_event(
                _ref(group, "PodGroup", kai_core.POD_GROUP_API), type_="Normal", reason="Evict",
                message=eviction.message, component=kai_core.SCHEDULER_NAME, now=moment,
                annotations={"num-evicted-pods": str(eviction.gang_size), "evictor-action-type": eviction.action,
                             "evictor-pod-group-name": eviction.preemptor[1],
                             "evictor-pod-group-namespace": eviction.preemptor[0]})

    def _kai_scheduling_condition(self, verdict: kai_core.Unschedulable, moment: float) -> None:
        """``status.schedulingConditions``: one ``UnschedulableOnNodePool`` entry per node pool, the latest
        last, ``transitionID`` counting up (written only when it changed)."""
        stamp = _rfc3339(moment)

        def change(group: Obj) -> None:
            status = group.setdefault("status", {})
            conditions = [c for c in status.get("schedulingConditions") or [] if isinstance(c, dict)]
            last = conditions[-1] if conditions else None
            same = last is not None and all(last.get(k) == v for k, v in (
                ("type", "UnschedulableOnNodePool"), ("nodePool", verdict.node_pool), ("reason", "Unschedulable"),
                ("message", verdict.message), ("status", "True")))
            if same and last.get("reasons") == verdict.reasons:
                return
            try:
                transition = int((last or {}).get("transitionID") or 0) + 1
            except ValueError:
                transition = 1
            conditions = [c for c in conditions if c.get("nodePool") != verdict.node_pool]
            conditions.append({"type": "UnschedulableOnNodePool", "nodePool": verdict.node_pool,
                               "reason": "Unschedulable", "message": verdict.message, "reasons": verdict.reasons,
                               "transitionID": str(transition), "lastTransitionTime": stamp, "status": "True"})
            status["schedulingConditions"] = conditions

        try:
            self.update(POD_GROUPS, verdict.group[1], change, verdict.group[0], subresource="status")
        except ApiError:
            pass

    def report_kai_status(self) -> int:
        """What KAI's podgroup and queue controllers report: PodGroup ``status.resourcesStatus`` and Queue
        ``status`` (allocated, allocatedNonPreemptible, requested, childQueues); returns how many changed."""
        with self._scheduling()["step"]:
            return self._report_kai_status()

    def _report_kai_status(self) -> int:
        if self._unchanged("status", _STATUS_INPUTS):
            return 0
        try:
            return self._kai_status()
        finally:
            self._note_seen("status", _STATUS_INPUTS)

    def _kai_pods(self) -> list[PodInfo]:
        """The unfinished pods of kai-scheduler, read from the store (by its field index: no other pod is
        parsed)."""
        index = get_resource(PODS).field_index
        scheduler_at, phase_at = index["spec.schedulerName"], index["status.phase"]
        with self._lock:
            found = [data for data, _rv, _labels, fields in self._stores[PODS].entries.values()
                     if fields[scheduler_at] == kai_core.SCHEDULER_NAME
                     and fields[phase_at] not in ("Succeeded", "Failed")]
        return [pod_info(orjson.loads(data)) for data in found]

    def _kai_status(self) -> int:
        queues = self.list(QUEUES)
        groups = self.list(POD_GROUPS)
        if not queues and not groups:
            return 0
        classes, default = self._priority_classes()
        informer: _Informer = self._scheduling()["informer"]
        memories = {name: info.gpu_memory for name, (_rv, info) in informer.nodes.items() if info.gpu_memory}
        if not memories:
            memories = {n["metadata"]["name"]: node_info(n).gpu_memory for n in self.list(NODES)}
            memories = {k: v for k, v in memories.items() if v}
        group_status, queue_status = kai_core.controller_status(
            groups, self._kai_pods(), queues, priority_classes=classes, default_priority=default,
            node_gpu_memory=memories)
        changed = 0
        for group in groups:
            md = group["metadata"]
            figures = group_status.get((md["namespace"], md["name"]))
            if figures is not None and (group.get("status") or {}).get("resourcesStatus") != figures:
                changed += self._set_status(POD_GROUPS, group, {"resourcesStatus": figures})
        for queue in queues:
            figures = queue_status.get(queue["metadata"]["name"])
            if figures is not None:
                changed += self._set_status(QUEUES, queue, figures)
        return changed

    # ------------------------------------------------------------------ both

    def scheduling_step(self) -> dict[str, dict[str, int]]:
        """KAI's cycle, then the default scheduler's pass."""
        return {"kai": self.kai_scheduler_step(), "default": self.default_scheduler_step()}


def _kai_step(emu: SchedulingMixin) -> list[str]:
    done = emu.kai_scheduler_step()
    return [f"kai-scheduler: {', '.join(f'{v} {k}' for k, v in done.items() if v)}"] if any(done.values()) else []


def _default_step(emu: SchedulingMixin) -> list[str]:
    done = emu.default_scheduler_step()
    return [f"default-scheduler: {', '.join(f'{v} {k}' for k, v in done.items() if v)}"] if any(done.values()) else []


def _ref(obj: Mapping[str, Any], kind: str = "Pod", api_version: str = "v1") -> dict[str, Any]:
    md = obj.get("metadata") or {}
    return {"apiVersion": api_version, "kind": kind, "namespace": md.get("namespace"), "name": md.get("name"),
            "uid": md.get("uid"), "resourceVersion": md.get("resourceVersion")}


def _set_condition(pod: Obj, condition: dict[str, Any]) -> None:
    """Put ``condition`` among the pod's conditions (its transition time kept when the status did not move)."""
    status = pod.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    for index, current in enumerate(conditions):
        if current.get("type") == condition["type"]:
            if all(current.get(k) == condition.get(k) for k in ("status", "reason", "message")):
                return
            if current.get("status") == condition["status"] and current.get("lastTransitionTime"):
                condition["lastTransitionTime"] = current["lastTransitionTime"]
            conditions[index] = condition
            break
    else:
        conditions.append(condition)
    status["conditions"] = conditions
