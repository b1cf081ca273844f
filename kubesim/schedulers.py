"""A stand-in for KAI Scheduler's status updater: what it reports about its queues.

No scheduling happens here; only the status KAI would write back is computed from the pods, so that a
console reading it has something true to read: ``scheduling.run.ai/v2`` Queue ``status.allocated`` /
``allocatedNonPreemptible`` / ``requested`` (GPU in devices, CPU in millicpus, memory in megabytes, as
ResourceList quantities), for leaf queues from the pods labelled ``kai.scheduler/queue``, for parent queues
the sum of their children.

Kueue's ClusterQueue and LocalQueue status come from its admissions (:mod:`kubesim.scheduling.kueue`,
written by ``kueue_step``), not from pods.

A pod's requests are Kubernetes' (``kube.requests``: init containers, sidecars, overhead); a pod whose
quantity is none is left out and reported (``kubesim.reports``), never counted as 0.
"""
from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

import orjson

from kube import requests as kube_requests
from kube.quantity import QuantityError, plain_quantity
from kubesim.reports import unreadable
from kubesim.resources import NODES, PODS, get_resource
from kubesim.util import Obj

_KAI_QUEUES = "queues.scheduling.run.ai"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
GPU = kube_requests.GPU
NON_PREEMPTIBLE_FROM = 100


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """GPU devices, CPU millicores and memory bytes a pod asks for (kube.requests.pod_requests). Raises
    QuantityError naming the container and resource of a quantity that is none."""
    asks = kube_requests.pod_requests(pod)
    return {GPU: asks.get(GPU, Decimal(0)), "cpu": asks.get(kube_requests.CPU, Decimal(0)) * 1000,
            "memory": asks.get(kube_requests.MEMORY, Decimal(0))}


class SchedulerStatusMixin:
    """Part of :class:`kubesim.KubeEmulator`."""

    #: The node label whose value names a node's pool (the console's pool label).
    flavor_label = "console.gpu-capacity.io/node-pool"

    def report_queue_status(self) -> int:
        """Write the status KAI would report for its queues; returns how many changed.
        Reads nothing when there is no queue, or when no pod, node or queue changed since the last report."""
        if not self._stores[_KAI_QUEUES].keys:
            return 0
        inputs = (PODS, NODES, _KAI_QUEUES)
        if getattr(self, "_queue_status_seen", None) == tuple(self._kind_rv.get(k, 0) for k in inputs):
            return 0
        pods = self._queued_pods()
        changed = self._report_kai(pods)
        self._queue_status_seen = tuple(self._kind_rv.get(k, 0) for k in inputs)
        return changed

    def _queued_pods(self) -> list[Obj]:
        """The unfinished pods a KAI queue may count: labelled with a queue, or bound in a project namespace
        (``runai-<project>``); the others are not even parsed."""
        index = get_resource(PODS).field_index
        node_at, phase_at = index["spec.nodeName"], index["status.phase"]
        out = []
        with self._lock:
            for key, (data, _rv, labels, fields) in self._stores[PODS].entries.items():
                if fields[phase_at] in ("Succeeded", "Failed"):
                    continue
                if (key[0].startswith("runai-") and fields[node_at]) or any(k == KAI_QUEUE_LABEL for k, _v in labels):
                    out.append(orjson.loads(data))
        return out

    def _requests_or_report(self, pod: Obj, component: str) -> dict[str, Decimal] | None:
        try:
            return pod_requests(pod)
        except QuantityError as exc:
            unreadable(self, pod, exc, component)
            return None

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
        queues = self.list("queues.scheduling.run.ai")
        if not queues:
            return 0
        names = {q["metadata"]["name"] for q in queues}
        pool_of = {n["metadata"]["name"]: ((n["metadata"].get("labels") or {}).get(self.flavor_label) or "")
                   for n in self.list(NODES)}
        sums: dict[str, dict[str, dict[str, Decimal]]] = defaultdict(
            lambda: {k: defaultdict(Decimal) for k in ("allocated", "allocatedNonPreemptible", "requested")})
        for pod in pods:
            md = pod.get("metadata") or {}
            queue = (md.get("labels") or {}).get(KAI_QUEUE_LABEL)
            if not queue:
                # Like Run:ai's pod grouper: a bound pod of project namespace runai-<project> belongs to
                # the project's queue of its node's pool.
                namespace, node = md.get("namespace") or "", (pod.get("spec") or {}).get("nodeName")
                if namespace.startswith("runai-") and node:
                    queue = f"{namespace[len('runai-'):]}.{pool_of.get(node, '')}"
            if queue not in names:
                continue
            asks = self._requests_or_report(pod, "kai-scheduler")
            if asks is None:
                continue
            kai = {"nvidia.com/gpu": asks[GPU], "cpu": asks["cpu"], "memory": (asks["memory"] / 10**6)}
            bound = bool((pod.get("spec") or {}).get("nodeName"))
            non_preemptible = int((pod.get("spec") or {}).get("priority") or 0) >= NON_PREEMPTIBLE_FROM
            for name, value in kai.items():
                sums[queue]["requested"][name] += value
                if bound:
                    sums[queue]["allocated"][name] += value
                    if non_preemptible:
                        sums[queue]["allocatedNonPreemptible"][name] += value
        parents = {q["metadata"]["name"]: (q.get("spec") or {}).get("parentQueue") for q in queues}
        totals: dict[str, dict[str, dict[str, Decimal]]] = defaultdict(
            lambda: {k: defaultdict(Decimal) for k in ("allocated", "allocatedNonPreemptible", "requested")})
        for queue, figures in list(sums.items()):
            seen = set()
            while queue and queue not in seen:  # a queue and every ancestor
                seen.add(queue)
                for field, values in figures.items():
                    for name, value in values.items():
                        totals[queue][field][name] += value
                queue = parents.get(queue)
        changed = 0
        for q in queues:
            figures = totals.get(q["metadata"]["name"])
            status = {field: {name: plain_quantity((figures or {}).get(field, {}).get(name, Decimal(0)).quantize(Decimal("0.001")))
                              for name in ("nvidia.com/gpu", "cpu", "memory")}
                      for field in ("allocated", "allocatedNonPreemptible", "requested")}
            status["childQueues"] = sorted(n for n, parent in parents.items() if parent == q["metadata"]["name"])
            changed += self._set_status("queues.scheduling.run.ai", q, status)
        return changed
