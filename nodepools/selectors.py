"""Reads of clusters, pools, nodes and pods; each takes the user and returns only what it may see."""
from __future__ import annotations

from typing import Any

from nodepools.models import Cluster, Node, NodePool, NodeQuerySet, NodePoolQuerySet, Pod, PodQuerySet


def cluster_list(*, user: Any):
    return Cluster.objects.restrict(user, "view")


def pool_list(*, user: Any, cluster: Cluster | None = None) -> NodePoolQuerySet:
    """Pools with capacity and allocation annotations (nodes, GPUs total / ready / allocated, ...)."""
    pools = NodePool.objects.restrict(user, "view").select_related("cluster").with_capacity()
    return pools.filter(cluster=cluster) if cluster is not None else pools


def node_list(*, user: Any, cluster: Cluster | None = None) -> NodeQuerySet:
    nodes = Node.objects.restrict(user, "view").select_related("cluster", "pool")
    return nodes.filter(cluster=cluster) if cluster is not None else nodes


def pod_list(*, user: Any, node: Node | None = None) -> PodQuerySet:
    pods = Pod.objects.restrict(user, "view").select_related("project")
    return pods.filter(node=node) if node is not None else pods
