"""Karpenter's objects (`karpenter.sh/v1`) mirrored from each cluster: NodePools and NodeClaims.

Only the sync writes these rows (provisioning/mirror.py registers them with nodepools.sync). A console
pool is "backed by" a Karpenter NodePool when its label is `karpenter.sh/nodepool=<name>` (the label
Karpenter puts on every node it launches); `KarpenterNodePool.for_pool` finds it.
"""
from __future__ import annotations

from django.db import models

from access.rules import RestrictedQuerySet
from nodepools.models import Cluster, NodePool
from provisioning.karpenter import NODEPOOL_LABEL



class MirrorQuerySet(RestrictedQuerySet):
    # Cluster-wide objects: readable by anyone with a role inside the cluster, like pools and nodes.
    access_level = "cluster"
    access_paths = {"cluster": ["cluster_id"]}


class KarpenterNodePool(models.Model):
    """A `karpenter.sh/v1` NodePool of a cluster: the blueprint of the machines Karpenter may launch."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="karpenter_nodepools")
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    spec = models.JSONField(default=dict, blank=True)
    status = models.JSONField(default=dict, blank=True)
    weight = models.IntegerField(null=True, blank=True)
    # spec.limits as the cluster has them (quantities as strings), and the GPU limit (kube.requests.GPU) as a number.
    limits = models.JSONField(default=dict, blank=True)
    gpu_limit = models.IntegerField("GPU limit", null=True, blank=True)
    # status.resources: what is provisioned now (cpu, memory, GPUs, nodes, ...).
    resources = models.JSONField(default=dict, blank=True)
    gpus_provisioned = models.IntegerField(default=0)
    node_count = models.IntegerField(default=0)
    conditions = models.JSONField(default=list, blank=True)
    ready = models.CharField(max_length=8, blank=True)  # the Ready condition's status: True, False, Unknown
    consolidation_policy = models.CharField(max_length=32, blank=True)
    node_class = models.CharField(max_length=253, blank=True)
    created_in_cluster = models.DateTimeField(null=True, blank=True)
    resource_version = models.CharField(max_length=32, blank=True)
    updated = models.DateTimeField(auto_now=True)

    objects = MirrorQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "name"]
        verbose_name = "Karpenter NodePool"
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="karpenternodepool_unique_name")]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def for_pool(cls, pool: NodePool) -> "KarpenterNodePool | None":
        name = backing_name(pool)
        return cls.objects.filter(cluster_id=pool.cluster_id, name=name).first() if name else None


def backing_name(pool: NodePool) -> str:
    """The name of the Karpenter NodePool a console pool is backed by ('' when it is not)."""
    return pool.label_value if pool.label_key == NODEPOOL_LABEL and pool.label_value else ""


class NodeClaimPhase(models.TextChoices):
    LAUNCHING = "Launching", "Launching"
    LAUNCH_FAILED = "LaunchFailed", "Launch failed"
    LAUNCHED = "Launched", "Launched"
    REGISTERED = "Registered", "Registered"
    INITIALIZED = "Initialized", "Initialized"
    CONSOLIDATABLE = "Consolidatable", "Consolidatable"
    EMPTY = "Empty", "Empty"
    DRIFTED = "Drifted", "Drifted"
    TERMINATING = "Terminating", "Terminating"


class NodeClaim(models.Model):
    """A `karpenter.sh/v1` NodeClaim: a machine Karpenter is launching (or has launched) for a NodePool."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="karpenter_nodeclaims")
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    nodepool = models.CharField("NodePool", max_length=253, blank=True)  # label karpenter.sh/nodepool
    phase = models.CharField(max_length=16, choices=NodeClaimPhase, default=NodeClaimPhase.LAUNCHING)
    node_name = models.CharField(max_length=253, blank=True)
    provider_id = models.CharField(max_length=512, blank=True)
    instance_type = models.CharField(max_length=128, blank=True)
    capacity_type = models.CharField(max_length=32, blank=True)
    zone = models.CharField(max_length=128, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    requirements = models.JSONField(default=list, blank=True)
    taints = models.JSONField(default=list, blank=True)
    # spec.resources.requests (what it was launched for) and status.capacity / allocatable.
    requests = models.JSONField(default=dict, blank=True)
    capacity = models.JSONField(default=dict, blank=True)
    allocatable = models.JSONField(default=dict, blank=True)
    gpus = models.IntegerField(default=0)
    conditions = models.JSONField(default=list, blank=True)
    created_in_cluster = models.DateTimeField(null=True, blank=True)
    resource_version = models.CharField(max_length=32, blank=True)
    updated = models.DateTimeField(auto_now=True)

    objects = MirrorQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "nodepool", "name"]
        verbose_name = "Karpenter NodeClaim"
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="nodeclaim_unique_name")]
        indexes = [models.Index(fields=["cluster", "nodepool"])]

    def __str__(self) -> str:
        return self.name
