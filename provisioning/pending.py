"""Reads behind "Pending GPU pods and what Karpenter can do" and the pool's best-practice advice.

Which pods: the pending GPU pods of the cluster the user may see in the mirror (restrict). Their node
selector is mirrored, their tolerations and affinity are not, so the pods are read from the cluster (one
LIST of the unbound pods, one of the ``Nominated`` events), as the node page reads a Node live. The
Karpenter NodePools and NodeClaims come from the mirror (provisioning.models). PriorityClasses, which the
console does not mirror, are read from the cluster too. Live reads are cached for a few seconds per
cluster and a failure is reported in words, never raised. The judging itself is pure: provisioning.explain
and provisioning.advice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from django.core.cache import cache
from django.db.models import Q
from kubernetes import client

from kube.client import api_error_message
from nodepools.memo import fleet_memoised
from nodepools.models import ConnectionState, Node, Pod
from nodepools.selectors import node_access_key
from nodepools.sync import api_client_for
from provisioning import advice as advice_rules
from provisioning.explain import Explanation, PoolVerdict, explain, is_pending
from provisioning.models import KarpenterNodePool, NodeClaim

LIVE_CACHE_SECONDS = 10
TIMEOUT = (3, 10)
MAX_PODS = 200


@dataclass
class LiveRead:
    items: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


def _live(cluster, what: str, read) -> LiveRead:
    key = f"provisioning:{what}:{cluster.pk}:{cluster.kubeconfig_path}:{cluster.kube_context}"
    cached = cache.get(key)
    if cached is not None:
        found = orjson.loads(cached)
        return LiveRead(found.get("items") or [], found.get("error") or "")

    if cluster.connection_state == ConnectionState.UNREACHABLE:
        return LiveRead([], f"the cluster is unreachable ({cluster.last_error or 'no answer'})")
    try:
        with api_client_for(cluster) as api_client:
            found = {"items": read(api_client)}
    except Exception as exc:  # noqa: BLE001 - any failure of a live read is shown, not raised
        found = {"error": api_error_message(exc)}
    # A failure is kept as long: pages of an unreachable cluster do not wait for it on every request.
    cache.set(key, orjson.dumps(found), LIVE_CACHE_SECONDS)
    return LiveRead(found.get("items") or [], found.get("error") or "")


def _items(response) -> list[dict[str, Any]]:
    return orjson.loads(response.data).get("items") or []


def unbound_pods(cluster) -> LiveRead:
    """The cluster's pods not bound to a node (raw JSON)."""
    def read(api_client):
        return _items(client.CoreV1Api(api_client).list_pod_for_all_namespaces(
            field_selector="spec.nodeName=", _preload_content=False, _request_timeout=TIMEOUT))

    return _live(cluster, "unbound-pods", read)


def nominated_events(cluster) -> LiveRead:
    """Karpenter's ``Nominated`` events (which NodeClaim a pod waits for)."""
    def read(api_client):
        return _items(client.CoreV1Api(api_client).list_event_for_all_namespaces(
            field_selector="reason=Nominated", _preload_content=False, _request_timeout=TIMEOUT))

    return _live(cluster, "nominated-events", read)


def priority_classes(cluster) -> LiveRead:
    def read(api_client):
        return _items(client.SchedulingV1Api(api_client).list_priority_class(
            _preload_content=False, _request_timeout=TIMEOUT))

    return _live(cluster, "priority-classes", read)


def nodepool_objects(cluster) -> list[dict[str, Any]]:
    """The cluster's mirrored Karpenter NodePools as the API has them (metadata, spec, status)."""
    return [{"metadata": {"name": p.name, "uid": p.uid}, "spec": p.spec or {}, "status": p.status or {}}
            for p in KarpenterNodePool.objects.filter(cluster=cluster).order_by("name")]


def nodeclaim_objects(cluster) -> list[dict[str, Any]]:
    """The cluster's mirrored NodeClaims, rebuilt as the API has them (what provisioning.explain reads)."""
    out = []
    for c in NodeClaim.objects.filter(cluster=cluster).order_by("created_in_cluster", "name"):
        out.append({
            "metadata": {"name": c.name, "labels": c.labels or {},
                         "creationTimestamp": c.created_in_cluster.isoformat() if c.created_in_cluster else "",
                         **({"deletionTimestamp": "deleting"} if c.phase == "Terminating" else {})},
            "spec": {"requirements": c.requirements or [], "taints": c.taints or [],
                     "resources": {"requests": c.requests or {}}},
            "status": {"conditions": c.conditions or [], "capacity": c.capacity or {}},
        })
    return out


@dataclass
class PendingPod:
    namespace: str
    name: str
    project: str
    explanation: Explanation
    verdict: PoolVerdict | None = None  # the verdict of the pool of the page, if any

    @property
    def others(self) -> list[str]:
        """The other NodePools that can provision a node for it."""
        mine = self.verdict.nodepool if self.verdict else None
        return [name for name in self.explanation.candidates if name != mine]

    def as_dict(self) -> dict[str, Any]:
        return {**self.explanation.as_dict(), "project": self.project}

    def in_words(self) -> str:
        """The explanation as one text: the summary, then each NodePool that cannot provision with its reason."""
        lines = [self.explanation.summary]
        lines += [f"{v.nodepool}: {v.text}" for v in self.explanation.verdicts if not v.can_provision]
        return " ".join(lines)


@dataclass
class PendingReport:
    pods: list[PendingPod]
    nodepools: int
    error: str = ""
    hidden: int = 0  # visible pending GPU pods the cluster no longer reports as pending (already bound)


def pending_gpu_pods(*, user, cluster, nodepool: str = "") -> PendingReport:
    """The pending GPU pods the user may see in the cluster, each explained; `nodepool` picks the verdict
    of that Karpenter NodePool for each. No live read when the cluster has no Karpenter NodePool."""
    return _explained(user=user, cluster=cluster, nodepool=nodepool, where=Q(gpus__gt=0),
                      order=("created_in_cluster", "namespace", "name"))


def pods_explained(*, user, cluster, pods) -> PendingReport:
    """What Karpenter can do for these pods of the cluster ((namespace, name) pairs, e.g. the pods of a
    workload), those of them the user may see and that are pending: the same explanation the pool page and
    "Why is it waiting?" give. No live read when the cluster has no Karpenter NodePool."""
    wanted = Q(pk__in=[])
    for namespace, name in sorted(set(pods))[:MAX_PODS]:
        wanted |= Q(namespace=namespace, name=name)
    return _explained(user=user, cluster=cluster, where=wanted, order=("namespace", "name"))


def _explained(*, user, cluster, where, order, nodepool: str = "") -> PendingReport:
    """The mirrored Pods of the cluster matching `where` that the user may see and that are pending, each
    read live and explained."""
    nodepools = nodepool_objects(cluster)
    if not nodepools:
        return PendingReport([], 0)
    visible = {
        (ns, name): project or ""
        for ns, name, project in Pod.objects.restrict(user, "view")
        .filter(where, cluster=cluster, node__isnull=True, phase="Pending")
        .order_by(*order).values_list("namespace", "name", "project__name")[:MAX_PODS]
    }
    if not visible:
        return PendingReport([], len(nodepools))
    live = unbound_pods(cluster)
    if live.error:
        return PendingReport([], len(nodepools), f"Could not read the pending pods from cluster {cluster.name}: "
                                                 f"{live.error}")
    events = nominated_events(cluster)
    claims = nodeclaim_objects(cluster)
    by_key = {((p.get("metadata") or {}).get("namespace"), (p.get("metadata") or {}).get("name")): p
              for p in live.items if isinstance(p, dict)}
    out: list[PendingPod] = []
    for key, project in visible.items():
        pod = by_key.get(key)
        if pod is None or not is_pending(pod):
            continue
        explanation = explain(pod, nodepools, claims, events.items)
        verdict = next((v for v in explanation.verdicts if v.nodepool == nodepool), None) if nodepool else None
        out.append(PendingPod(key[0], key[1], project, explanation, verdict))
    return PendingReport(out, len(nodepools), events.error and f"Could not read Karpenter's events: {events.error}",
                         len(visible) - len(out))


def pod_explanation(*, user, cluster, namespace: str, name: str) -> tuple[dict[str, Any] | None, str]:
    """One pod's explanation (as_dict) if the user may see it: (None, message) when it cannot be given."""
    if not Pod.objects.restrict(user, "view").filter(cluster=cluster, namespace=namespace, name=name).exists():
        return None, "not_found"

    try:
        with api_client_for(cluster) as api_client:
            pod = orjson.loads(client.CoreV1Api(api_client).read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=TIMEOUT).data)
    except Exception as exc:  # noqa: BLE001
        return None, f"Could not read pod {namespace}/{name} from cluster {cluster.name}: {api_error_message(exc)}"
    explanation = explain(pod, nodepool_objects(cluster), nodeclaim_objects(cluster), nominated_events(cluster).items)
    return {**explanation.as_dict(), "pending": is_pending(pod)}, ""


# ---------------------------------------------------------------------------------------------------
# Advice

@dataclass
class AdviceReport:
    advice: list[advice_rules.Advice]
    error: str = ""


def _advice_nodes(user, pool) -> tuple[list[tuple], list[advice_rules.NodeInfo]]:
    """The pool's nodes the user may see, as the advice reads them: only the columns it reads (not every node's
    conditions and the rest of its row), their labels and taints decoded once while the fleet holds still (the
    same for every user whose access to nodes reads the same)."""
    def read() -> tuple[list[tuple], list[advice_rules.NodeInfo]]:
        rows = list(Node.objects.restrict(user, "view").filter(pool=pool).order_by("name")
                    .values_list("pk", "name", "labels", "taints", "is_gpu_node", "gpu_product"))
        return rows, [advice_rules.NodeInfo(name, labels or {}, taints or [], is_gpu, product)
                      for _, name, labels, taints, is_gpu, product in rows]

    return fleet_memoised(("pool_advice_nodes", pool.pk, node_access_key(user)), read)


def pool_advice(*, user, pool) -> AdviceReport:
    """The best-practice advice of a pool, from its nodes and pods the user may see, its Karpenter NodePool
    (if it is backed by one) and the cluster's PriorityClasses (read live; unknown when unreadable)."""
    rows, nodes = _advice_nodes(user, pool)
    row = KarpenterNodePool.for_pool(pool)
    nodepool = {"metadata": {"name": row.name}, "spec": row.spec or {}, "status": row.status or {}} if row else None
    # The pods the advice reads (advice.spot_non_preemptible): the non-preemptible ones on the pool's spot
    # nodes, or on any of its nodes when its NodePool may launch spot ones; not every pod of the pool.
    pods = (Pod.objects.restrict(user, "view").active()
            .filter(node__pool=pool, priority__gte=advice_rules.NON_PREEMPTIBLE_FROM).order_by())
    every_node = nodepool is not None and "spot" in (advice_rules.capacity_types(nodepool) or ())
    if not every_node:
        spot = [pk for (pk, *_), node in zip(rows, nodes) if node.capacity_type == "spot"]
        pods = pods.filter(node_id__in=spot or [0])  # [0]: no node; the query runs all the same (a fixed count)
    pods = [advice_rules.PodInfo(ns, name, priority, node or "")
            for ns, name, priority, node in pods.values_list("namespace", "name", "priority", "node__name")]
    error = ""
    classes: list[dict[str, Any]] | None = None
    if pool.cluster.kubeconfig_path or pool.cluster.in_cluster:
        live = priority_classes(pool.cluster)
        classes = None if live.error else live.items
        if live.error:
            error = f"Could not read the PriorityClasses of cluster {pool.cluster.name}: {live.error}"
    return AdviceReport(advice_rules.pool_advice(nodes=nodes, pods=pods, nodepool=nodepool, priority_classes=classes),
                        error)
