"""A stand-in for the schedulers' status updaters: what KAI Scheduler and Kueue report about their queues.

The schedulers themselves are in :mod:`kubesim.scheduling`; this writes the status their controllers
report about the queues, so that a console reading it has something true to read:

- KAI ``scheduling.run.ai/v2`` Queue ``status.allocated`` / ``allocatedNonPreemptible`` / ``requested``
  (GPU in devices, CPU in millicpus, memory in megabytes, as ResourceList quantities) and PodGroup
  ``status.resourcesStatus``, as KAI's queue and podgroup controllers sum them from the PodGroups of the
  pods of ``kai-scheduler`` (:meth:`kubesim.scheduling.adapter.SchedulingMixin.report_kai_status`).
- Kueue ``kueue.x-k8s.io/v1beta2`` ClusterQueue ``status.pendingWorkloads`` / ``admittedWorkloads`` /
  ``flavorsUsage[].resources[].{total, borrowed}``, from the pods labelled
  ``kueue.x-k8s.io/queue-name`` (a LocalQueue of their namespace); a bound pod's flavor is its node's
  ``flavor_label`` value.
"""
from __future__ import annotations

from collections import defaultdict
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson

from kubesim.resources import NODES, PODS, get_resource
from kubesim.util import Obj

_KAI_QUEUES = "queues.scheduling.run.ai"
_CLUSTER_QUEUES = "clusterqueues.kueue.x-k8s.io"
_LOCAL_QUEUES = "localqueues.kueue.x-k8s.io"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GPU = "nvidia.com/gpu"
NON_PREEMPTIBLE_FROM = 100
_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": Decimal("0.001"), "k": 10**3, "M": 10**6,
           "G": 10**9, "T": 10**12}


def quantity(value: Any) -> Decimal:
    text = str(value or "0")
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix):
            try:
                return Decimal(text[: -len(suffix)]) * Decimal(_SUFFIX[suffix])
            except InvalidOperation:
                return Decimal(0)
    try:
        return Decimal(text)
    except InvalidOperation:
        return Decimal(0)


def _text(value: Decimal) -> str:
    value = value.normalize()
    return f"{value:f}"


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """GPU devices, CPU millicores and memory bytes a pod asks for (app containers; limits stand in for
    missing extended-resource requests)."""
    out = {GPU: Decimal(0), "cpu": Decimal(0), "memory": Decimal(0)}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        out[GPU] += quantity(requests.get(GPU) or limits.get(GPU))
        out["cpu"] += quantity(requests.get("cpu")) * 1000
        out["memory"] += quantity(requests.get("memory"))
    return out


class SchedulerStatusMixin:
    """Part of :class:`kubesim.KubeEmulator`."""

    #: The node label whose value names a pod's Kueue flavor (the console's pool label).
    flavor_label = "console.gpu-capacity.io/node-pool"

    def report_queue_status(self) -> int:
        """Write the status KAI and Kueue would report for their queues; returns how many changed.
        Reads nothing when there is no queue, or when no pod, node or queue changed since the last report."""
        if not self._stores[_KAI_QUEUES].keys and not self._stores[_CLUSTER_QUEUES].keys:
            return 0
        inputs = (PODS, NODES, _KAI_QUEUES, _CLUSTER_QUEUES, _LOCAL_QUEUES, "podgroups.scheduling.run.ai",
                  "priorityclasses.scheduling.k8s.io")
        if getattr(self, "_queue_status_seen", None) == tuple(self._kind_rv.get(k, 0) for k in inputs):
            return 0
        pods = self._queued_pods()
        changed = self._report_kai(pods) + self._report_kueue(pods)
        self._queue_status_seen = tuple(self._kind_rv.get(k, 0) for k in inputs)
        return changed

    def _queued_pods(self) -> list[Obj]:
        """The unfinished pods a queue may count: labelled with a KAI or Kueue queue, or bound in a project
        namespace (``runai-<project>``); the others are not even parsed."""
        index = get_resource(PODS).field_index
        node_at, phase_at = index["spec.nodeName"], index["status.phase"]
        out = []
        with self._lock:
            for key, (data, _rv, labels, fields) in self._stores[PODS].entries.items():
                if fields[phase_at] in ("Succeeded", "Failed"):
                    continue
                if (key[0].startswith("runai-") and fields[node_at]) or any(
                        k == KAI_QUEUE_LABEL or k == KUEUE_QUEUE_LABEL for k, _v in labels):
                    out.append(orjson.loads(data))
        return out

    def _set_status(self, resource: str, obj: Obj, status: Obj) -> int:
        current = obj.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return 0
        md = obj["metadata"]

        def change(o: Obj) -> None:
            o.setdefault("status", {}).update(status)

        self.update(resource, md["name"], change, md.get("namespace") or "", subresource="status")
        return 1

    def _report_kai(self, pods: list[Obj]) -> int:
        # KAI's podgroup and queue controllers, from the PodGroups (kubesim.scheduling.adapter).
        return self.report_kai_status()

    def _report_kueue(self, pods: list[Obj]) -> int:
        cluster_queues = self.list("clusterqueues.kueue.x-k8s.io")
        if not cluster_queues:
            return 0
        local = {(lq["metadata"].get("namespace"), lq["metadata"]["name"]): (lq.get("spec") or {}).get("clusterQueue")
                 for lq in self.list("localqueues.kueue.x-k8s.io")}
        flavor_of = {n["metadata"]["name"]: ((n["metadata"].get("labels") or {}).get(self.flavor_label) or "")
                     for n in self.list(NODES)}
        usage: dict[str, dict[str, dict[str, Decimal]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(Decimal)))
        pending: dict[str, int] = defaultdict(int)
        admitted: dict[str, int] = defaultdict(int)
        for pod in pods:
            md = pod.get("metadata") or {}
            queue = local.get((md.get("namespace"), (md.get("labels") or {}).get(KUEUE_QUEUE_LABEL)))
            if not queue:
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            if not node:
                pending[queue] += 1
                continue
            admitted[queue] += 1
            for name, value in pod_requests(pod).items():
                usage[queue][flavor_of.get(node, "")][name] += value
        changed = 0
        for cq in cluster_queues:
            name = cq["metadata"]["name"]
            nominal: dict[tuple[str, str], Decimal] = {}
            flavors: list[str] = []
            for group in (cq.get("spec") or {}).get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    flavors.append(flavor["name"])
                    for res in flavor.get("resources") or []:
                        nominal[(flavor["name"], res["name"])] = quantity(res.get("nominalQuota"))
            flavors_usage = []
            for flavor in flavors:
                used = usage[name].get(flavor, {})
                resources = []
                for res in (GPU, "cpu", "memory"):
                    total = used.get(res, Decimal(0))
                    if res == "cpu":
                        total = total / 1000
                    borrowed = max(total - nominal.get((flavor, res), Decimal(0)), Decimal(0))
                    resources.append({"name": res, "total": _text(total), "borrowed": _text(borrowed)})
                flavors_usage.append({"name": flavor, "resources": resources})
            status = {"pendingWorkloads": pending.get(name, 0), "reservingWorkloads": admitted.get(name, 0),
                      "admittedWorkloads": admitted.get(name, 0), "flavorsUsage": flavors_usage}
            changed += self._set_status("clusterqueues.kueue.x-k8s.io", cq, status)
        return changed
