"""A stand-in for the schedulers' status updaters: what KAI Scheduler and Kueue report about their queues.

No scheduling happens here (pods are bound by whoever creates them, as everywhere in the emulator);
only the status a real scheduler would write back is computed from the pods, so that a console reading
it has something true to read:

- KAI ``scheduling.run.ai/v2`` Queue ``status.allocated`` / ``allocatedNonPreemptible`` / ``requested``
  (GPU in devices, CPU in millicpus, memory in megabytes, as ResourceList quantities), for leaf queues
  from the pods labelled ``kai.scheduler/queue``, for parent queues the sum of their children.
- Kueue ``kueue.x-k8s.io/v1beta2`` ClusterQueue ``status.pendingWorkloads`` / ``admittedWorkloads`` /
  ``flavorsUsage[].resources[].{total, borrowed}``, from the pods labelled
  ``kueue.x-k8s.io/queue-name`` (a LocalQueue of their namespace); a bound pod's flavor is its node's
  ``flavor_label`` value.

A pod's requests are Kubernetes' (``kube.requests``: init containers, sidecars, overhead); a pod or quota
whose quantity is none is left out and reported (``kubesim.reports``), never counted as 0.
"""
from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from kube import requests as kube_requests
from kube.quantity import QuantityError, parse_quantity, plain_quantity
from kubesim.reports import unreadable
from kubesim.resources import NODES, PODS
from kubesim.util import Obj

KAI_QUEUE_LABEL = "kai.scheduler/queue"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
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

    #: The node label whose value names a pod's Kueue flavor (the console's pool label).
    flavor_label = "console.gpu-capacity.io/node-pool"

    def report_queue_status(self) -> int:
        """Write the status KAI and Kueue would report for their queues; returns how many changed."""
        pods = [p for p in self.list(PODS) if kube_requests.pod_is_active(p)]
        return self._report_kai(pods) + self._report_kueue(pods)

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
            asks = self._requests_or_report(pod, "kueue")
            if asks is None:
                continue
            admitted[queue] += 1
            for name, value in asks.items():
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
                        try:
                            nominal[(flavor["name"], res["name"])] = parse_quantity(res.get("nominalQuota", 0))
                        except QuantityError as exc:  # counted as no quota, and said so
                            unreadable(self, {"kind": "ClusterQueue", "apiVersion": "kueue.x-k8s.io/v1beta2",
                                              **cq}, exc, "kueue")
            flavors_usage = []
            for flavor in flavors:
                used = usage[name].get(flavor, {})
                resources = []
                for res in (GPU, "cpu", "memory"):
                    total = used.get(res, Decimal(0))
                    if res == "cpu":
                        total = total / 1000
                    borrowed = max(total - nominal.get((flavor, res), Decimal(0)), Decimal(0))
                    resources.append({"name": res, "total": plain_quantity(total), "borrowed": plain_quantity(borrowed)})
                flavors_usage.append({"name": flavor, "resources": resources})
            status = {"pendingWorkloads": pending.get(name, 0), "reservingWorkloads": admitted.get(name, 0),
                      "admittedWorkloads": admitted.get(name, 0), "flavorsUsage": flavors_usage}
            changed += self._set_status("clusterqueues.kueue.x-k8s.io", cq, status)
        return changed
