"""Every write to clusters, node pools, nodes and pods (HackSoft style: `<entity>_<action>(*, ...)`).

`actor` is the user on whose behalf a write happens; `None` means the system itself (the sync, a
management command). Only system administrators create, change or delete clusters and pools.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
from datetime import datetime
from typing import Any, Iterable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from access.rules import require_system_admin
from audit.models import AuditEvent
from audit.services import audit_record, snapshot
from gpumetrics import Unavailable, figures_sum, node_gpu_metrics
from kube.client import api_error_message
from nodepools import hints, kube, selectors, signals, versions
from nodepools.models import Cluster, Node, NodeGpuFigures, NodePool, PlacementStrategy, Pod, PodLifetime
from nodepools.selectors import capacity_preview, node_live_object, pool_label_selectors, pool_labels_of
from nodepools.sync import NODES, PODS, Mirror, api_client_for

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------
# Clusters

@transaction.atomic
def cluster_create(
    *,
    actor: Any,
    name: str,
    description: str = "",
    kubeconfig_path: str = "",
    kube_context: str = "",
    in_cluster: bool = False,
    limit_projects_to_department_quota: bool = False,
    prometheus_url: str = "",
    prometheus_bearer_token_file: str = "",
    prometheus_basic_auth_file: str = "",
    prometheus_label_matchers: str = "",
) -> Cluster:
    """Create a cluster together with its undeletable `default` pool."""
    require_system_admin(actor, "add clusters")
    cluster = Cluster(
        name=name,
        description=description,
        kubeconfig_path=kubeconfig_path,
        kube_context=kube_context,
        in_cluster=in_cluster,
        limit_projects_to_department_quota=limit_projects_to_department_quota,
        prometheus_url=prometheus_url,
        prometheus_bearer_token_file=prometheus_bearer_token_file,
        prometheus_basic_auth_file=prometheus_basic_auth_file,
        prometheus_label_matchers=prometheus_label_matchers,
    )
    cluster.full_clean()
    cluster.save()
    default = NodePool(cluster=cluster, name=NodePool.DEFAULT_NAME, is_default=True,
                       description="Every node that matches no other pool.")
    default.full_clean()
    default.save()
    audit_record(actor=actor, action=AuditEvent.Action.CREATE, obj=cluster, after=snapshot(cluster))
    return cluster


PROMETHEUS_FIELDS = ("prometheus_url", "prometheus_bearer_token_file", "prometheus_basic_auth_file",
                     "prometheus_label_matchers")
CLUSTER_EDITABLE = {"description", "kubeconfig_path", "kube_context", "in_cluster", "limit_projects_to_department_quota",
                    *PROMETHEUS_FIELDS}


@transaction.atomic
def cluster_update(*, actor: Any, cluster: Cluster, **changes: Any) -> Cluster:
    require_system_admin(actor, "change clusters")
    unknown = set(changes) - CLUSTER_EDITABLE
    if unknown:
        raise ValidationError({field: "This field cannot be changed." for field in unknown})
    before = snapshot(cluster)
    prometheus_before = [getattr(cluster, field) for field in PROMETHEUS_FIELDS]
    for field, value in changes.items():
        setattr(cluster, field, value)
    cluster.full_clean()
    cluster.save()
    if prometheus_before != [getattr(cluster, field) for field in PROMETHEUS_FIELDS]:
        # The GPU figures the sync's leader stored came from the Prometheus named before: forgotten, the pages
        # ask the one named now until the leader's next round stores its figures.
        NodeGpuFigures.objects.filter(cluster=cluster).delete()
        NodePool.objects.filter(cluster=cluster).update(gpu_figures=None, gpu_figures_at=None, gpu_figures_reason="")
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=cluster, before=before, after=snapshot(cluster))
    return cluster


@transaction.atomic
def cluster_delete(*, actor: Any, cluster: Cluster) -> None:
    require_system_admin(actor, "delete clusters")
    versions.lock(cluster.pk)  # before its nodes' and pods' rows, which go with it
    # A cluster takes its whole organisation with it (the projects app removes its part).
    signals.cluster_deleting.send(sender=Cluster, cluster=cluster)
    before, pk = snapshot(cluster), cluster.pk
    cluster.delete()
    audit_record(actor=actor, action=AuditEvent.Action.DELETE, obj=cluster, before=before, object_id=pk)


# ---------------------------------------------------------------------------------------------------
# Node pools

def _pool_full_clean(pool: NodePool) -> None:
    """full_clean, with the rule in the Kubernetes API server's words only: the columns' own length
    checks ("Ensure this value has at most 63 characters") repeat what the label validators say."""
    try:
        pool.full_clean()
    except ValidationError as exc:
        errors = {}
        for field, field_errors in exc.error_dict.items():
            kept = [e for e in field_errors if e.code != "max_length"] or field_errors
            errors[field] = kept
        raise ValidationError(errors) from None


@transaction.atomic
def pool_create(
    *,
    actor: Any,
    cluster: Cluster,
    name: str,
    label_key: str,
    label_value: str,
    description: str = "",
    gpu_placement: str = PlacementStrategy.BINPACK,
    cpu_placement: str = PlacementStrategy.BINPACK,
    gpu_limit: int | None = None,
    topology_key: str = "",
) -> NodePool:
    """Create a pool; every department and project of the cluster gets a zero quota row in it."""
    require_system_admin(actor, "add node pools")
    pool = NodePool(
        cluster=cluster, name=name, label_key=label_key, label_value=label_value, description=description,
        gpu_placement=gpu_placement, cpu_placement=cpu_placement, gpu_limit=gpu_limit, topology_key=topology_key,
    )
    _pool_full_clean(pool)
    pool.save()
    # Every department and project of the cluster gets a zero quota row (the projects app's receiver).
    signals.pool_created.send(sender=NodePool, pool=pool)
    nodes_assign_pools(cluster=cluster)
    audit_record(actor=actor, action=AuditEvent.Action.CREATE, obj=pool, after=snapshot(pool))
    return pool


def pool_create_preview(
    *,
    actor: Any,
    cluster: Cluster,
    name: str,
    label_key: str,
    label_value: str,
    description: str = "",
    gpu_placement: str = PlacementStrategy.BINPACK,
    cpu_placement: str = PlacementStrategy.BINPACK,
    gpu_limit: int | None = None,
    topology_key: str = "",
):
    """What creating this pool would move (nodes, GPUs, workloads, pools left short of their deserved
    quota): the same checks as `pool_create`, nothing written. Returns a `selectors.CapacityPreview`."""
    require_system_admin(actor, "add node pools")

    pool = NodePool(
        cluster=cluster, name=name, label_key=label_key, label_value=label_value, description=description,
        gpu_placement=gpu_placement, cpu_placement=cpu_placement, gpu_limit=gpu_limit, topology_key=topology_key,
    )
    _pool_full_clean(pool)
    return capacity_preview(user=actor, cluster=cluster, add=pool)


def pool_update_preview(*, actor: Any, pool: NodePool, **changes: Any):
    """What this change of the pool would move, or None when it keeps the pool's label (nothing moves).
    The same checks as `pool_update`, nothing written."""
    require_system_admin(actor, "change node pools")

    _pool_changes_check(pool, changes)
    if not any(changes.get(f, getattr(pool, f)) != getattr(pool, f) for f in ("label_key", "label_value")):
        return None
    changed = copy.copy(pool)
    for field, value in changes.items():
        setattr(changed, field, value)
    _pool_full_clean(changed)
    return capacity_preview(user=actor, cluster=pool.cluster, replace=changed)


def _pool_changes_check(pool: NodePool, changes: dict[str, Any]) -> None:
    unknown = set(changes) - POOL_EDITABLE
    if pool.is_default:
        unknown |= {"name", "label_key", "label_value"} & set(changes)
    if unknown:
        raise ValidationError({field: "This field cannot be changed here." for field in sorted(unknown)})


POOL_EDITABLE = {"name", "label_key", "label_value", "description", "gpu_placement", "cpu_placement", "gpu_limit",
                 "topology_key"}


@transaction.atomic
def pool_update(*, actor: Any, pool: NodePool, **changes: Any) -> NodePool:
    require_system_admin(actor, "change node pools")
    _pool_changes_check(pool, changes)
    relabel = any(field in changes for field in ("label_key", "label_value"))
    before = snapshot(pool)
    for field, value in changes.items():
        setattr(pool, field, value)
    _pool_full_clean(pool)
    signals.pool_updating.send(sender=NodePool, pool=pool, changes=changes)
    # Only what was changed: the sync's leader writes the pool's GPU figures meanwhile.
    pool.save(update_fields=sorted(set(changes) | {"updated"}))
    if relabel:
        nodes_assign_pools(cluster=pool.cluster)
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=pool, before=before, after=snapshot(pool))
    return pool


@transaction.atomic
def pool_delete(*, actor: Any, pool: NodePool) -> None:
    """Delete a pool: its nodes return to the default pool; its quota rows go with it."""
    require_system_admin(actor, "delete node pools")
    if pool.is_default:
        raise ValidationError({"pool": "The default pool cannot be deleted: it holds every unmatched node."})
    cluster = pool.cluster
    before, pk = snapshot(pool), pool.pk
    versions.lock(cluster.pk)  # before its nodes' rows (their pool set to none by the delete)
    pool.delete()
    nodes_assign_pools(cluster=cluster)
    audit_record(actor=actor, action=AuditEvent.Action.DELETE, obj=pool, before=before, object_id=pk)


# ---------------------------------------------------------------------------------------------------
# A pool's GPU shape: its MIG layout and device plugin configuration, set on its GPU nodes

GPU_SHAPE_FIELDS = ("mig_config", "device_plugin_config")


@dataclasses.dataclass
class GpuShapeApplied:
    """What `pool_gpu_shape_apply` did: the preview it acted on, the nodes labelled, those the cluster refused."""

    preview: Any  # selectors.GpuShapePreview
    labelled: list[str]
    failed: dict[str, str]  # node -> the cluster's message


def _gpu_shape_check(pool: NodePool, mig_config: str, device_plugin_config: str) -> NodePool:
    changed = copy.copy(pool)
    changed.mig_config, changed.device_plugin_config = mig_config, device_plugin_config
    _pool_full_clean(changed)
    return changed


def pool_gpu_shape_preview(*, actor: Any, pool: NodePool, mig_config: str, device_plugin_config: str = ""):
    """What setting the pool's GPU shape would do (`selectors.pool_gpu_shape_preview`): the same checks as
    `pool_gpu_shape_apply`, nothing written."""
    require_system_admin(actor, "set the GPU shape of node pools")
    _gpu_shape_check(pool, mig_config, device_plugin_config)
    return selectors.pool_gpu_shape_preview(user=actor, pool=pool, mig_config=mig_config,
                                            device_plugin_config=device_plugin_config)


def pool_gpu_shape_apply(*, actor: Any, pool: NodePool, mig_config: str, device_plugin_config: str = "",
                         previewed: str | None = None) -> GpuShapeApplied:
    """Set the pool's GPU shape: keep it on the pool and write it to the pool's GPU nodes as the labels NVIDIA's
    GPU operator acts on (`nvidia.com/mig.config`: the MIG manager drains the node's GPU pods and cuts its GPUs
    anew; `nvidia.com/device-plugin.config`: the device plugin restarts with that configuration). One
    strategic merge patch of labels per node whose label changes; the database's nodes are not written here
    (the sync's watch brings the labels and the new slices back). `previewed`: the key of the preview the
    user confirmed; when what it would do changed since (another pod to evict, a node more), nothing is
    written and ValidationError says to review it again. An audit event names every node labelled."""
    require_system_admin(actor, "set the GPU shape of node pools")
    _gpu_shape_check(pool, mig_config, device_plugin_config)
    preview = selectors.pool_gpu_shape_preview(user=actor, pool=pool, mig_config=mig_config,
                                               device_plugin_config=device_plugin_config)
    if previewed is not None and previewed != preview.key:
        raise ValidationError({"mig_config": "What this change does has changed since it was shown (a node or a "
                                             "GPU pod more or less): review it again before confirming."})
    labelled, failed = [], {}
    if preview.written:
        try:
            connected = api_client_for(pool.cluster)
        except ValueError as exc:  # no kubeconfig and not in the cluster: nothing can be written
            raise ValidationError({"mig_config": f"The console cannot write to cluster '{pool.cluster}': {exc}. "
                                                 "Nothing was written."}) from exc
        with connected as api_client:
            core = client.CoreV1Api(api_client)
            for row in preview.written:
                labels = {label: asked for label, (_now, asked) in row.changes.items()}
                try:
                    core.patch_node(row.node.name, {"metadata": {"labels": labels}}, _request_timeout=(5, 15))
                except Exception as exc:
                    failed[row.node.name] = api_error_message(exc)
                else:
                    labelled.append(row.node.name)
    with transaction.atomic():
        before = snapshot(pool)
        pool.mig_config, pool.device_plugin_config = mig_config, device_plugin_config
        pool.save(update_fields=[*GPU_SHAPE_FIELDS, "updated"])
        after = snapshot(pool)
        before["node_labels"] = {row.node.name: {k: v[0] for k, v in row.changes.items()} for row in preview.written}
        after["node_labels"] = {row.node.name: {k: v[1] for k, v in row.changes.items()}
                                for row in preview.written if row.node.name in labelled}
        after["evicted_pods"] = [f"{p.namespace}/{p.name}" for p in preview.evicted if p.node in labelled]
        if failed:
            after["failed_nodes"] = failed
        audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=pool, before=before, after=after)
    return GpuShapeApplied(preview=preview, labelled=labelled, failed=failed)


# ---------------------------------------------------------------------------------------------------
# The GPU figures of nodes and pools (the DCGM exporter's, through the cluster's Prometheus)

def pool_gpu_figures_refresh(*, cluster: Cluster, timeout: float | None = None) -> int:
    """Read the figures of every GPU node of the cluster from its Prometheus (ONE query, whatever the
    number of nodes and pools) and store each node's figures (NodeGpuFigures, what the CSV of every node
    carries) and each pool's sum, or the reason there is none. What the sync's leader does every
    GPUMETRICS_POOLS_EVERY seconds: the idle count reads a window of every allocated GPU, and a whole
    fleet's figures take Prometheus seconds, too dear for a page view or a download. Returns the number
    of pools whose figures or reason changed."""
    pools = list(NodePool.objects.filter(cluster=cluster).only("pk", "gpu_figures", "gpu_figures_reason"))
    config = cluster.prometheus
    if config is None:  # the pages say "no Prometheus configured" from the cluster itself
        with transaction.atomic():
            NodeGpuFigures.objects.filter(cluster=cluster).delete()
            return NodePool.objects.filter(cluster=cluster, gpu_figures_at__isnull=False).update(
                gpu_figures=None, gpu_figures_at=None, gpu_figures_reason="")
    timeout = timeout if timeout is not None else float(getattr(settings, "GPUMETRICS_REFRESH_TIMEOUT", 10))
    result = node_gpu_metrics(config, None, timeout=timeout)  # outside the transaction: no lock held meanwhile
    members: dict[int, list[str]] = {}
    for pool_id, name in Node.objects.filter(cluster=cluster, gpu_capacity__gt=0).values_list("pool_id", "name"):
        members.setdefault(pool_id, []).append(name)
    now, changed = timezone.now(), 0
    with transaction.atomic():
        _node_gpu_figures_store(cluster=cluster, result=result, names={n for names in members.values() for n in names},
                                now=now)
        for pool in pools:
            if isinstance(result, Unavailable):
                figures, reason = None, result.reason
            elif not members.get(pool.pk):
                figures, reason = None, selectors.POOL_WITHOUT_GPU_NODES
            else:
                found = [f for f in map(result.get, members[pool.pk]) if f is not None]
                figures, reason = dataclasses.asdict(figures_sum(found)), ""
            changed += (figures, reason) != (pool.gpu_figures, pool.gpu_figures_reason)
            NodePool.objects.filter(pk=pool.pk).update(gpu_figures=figures, gpu_figures_at=now, gpu_figures_reason=reason)
        if changed:
            transaction.on_commit(lambda: _pools_changed_hint(cluster.pk))
    return changed


def _node_gpu_figures_store(*, cluster: Cluster, result: Any, names: set[str], now) -> None:
    """Keep the figures read now of the cluster's GPU nodes (an upsert in batches) and drop every other
    row of the cluster: nodes Prometheus no longer reports, or all of them when it answered no figures
    (the pools then hold the reason)."""
    rows = [] if isinstance(result, Unavailable) else [
        NodeGpuFigures(cluster=cluster, node_name=name, read_at=now,
                       **{f: getattr(figures, f) for f in NodeGpuFigures.FIGURES})
        for name, figures in result.by_node.items() if name in names]
    if rows:
        NodeGpuFigures.objects.bulk_create(rows, batch_size=500, update_conflicts=True,
                                           unique_fields=["cluster", "node_name"],
                                           update_fields=[*NodeGpuFigures.FIGURES, "read_at"])
    NodeGpuFigures.objects.filter(cluster=cluster).exclude(read_at=now).delete()


def _pools_changed_hint(cluster_id: int) -> None:
    hints.record(cluster_id)  # web processes without Redis poll this mark
    hints.publish(cluster_id, ["pools"])


def pool_gpu_figures_round(cluster: Cluster, api_client: Any) -> int | None:
    """The sync's leader task (registered in NodepoolsConfig.ready): refresh the pools' GPU figures of a
    cluster that names a Prometheus (or clear them once it no longer does)."""
    cluster = Cluster.objects.get(pk=cluster.pk)  # the Prometheus settings as they are now
    return pool_gpu_figures_refresh(cluster=cluster)


# ---------------------------------------------------------------------------------------------------
# Nodes and pods mirrored from a cluster

def nodes_assign_pools(*, cluster: Cluster, nodes: Iterable[Node] | None = None) -> int:
    """Recompute which pool each node belongs to (and label conflicts); writes only changed rows."""
    default, selectors = pool_label_selectors(cluster.pools.all())
    changed = []
    for node in nodes if nodes is not None else cluster.nodes.only("pk", "labels", "pool_id", "pool_conflicts"):
        pool, conflicts = kube.resolve_pool(node.labels, selectors)
        pool = pool or default
        conflict_names = [p.name for p in conflicts]
        if node.pool_id != pool.pk or node.pool_conflicts != conflict_names:
            node.pool_id, node.pool_conflicts = pool.pk, conflict_names
            changed.append(node)
    if changed and nodes is None:
        versions.lock(cluster.pk)
        Node.objects.bulk_update(changed, ["pool", "pool_conflicts"], batch_size=500)
    return len(changed)


def _when(value: str | None) -> datetime | None:
    return parse_datetime(value) if value else None

NODE_FIELDS = [
    "uid", "labels", "taints", "conditions", "unschedulable", "status", "status_reasons", "cpu_capacity_millis",
    "cpu_allocatable_millis", "memory_capacity_bytes", "memory_allocatable_bytes", "gpu_capacity",
    "gpu_allocatable", "gpu_product", "gpu_memory_mib", "gpu_family", "gpu_count_label", "mig_strategy",
    "is_gpu_node", "zone", "instance_type", "capacity_type", "created_in_cluster", "resource_version",
    "storage_capacity_bytes", "storage_allocatable_bytes",
]
POD_FIELDS = [
    "uid", "node_name", "phase", "priority", "priority_class", "labels", "node_selector", "ready", "cpu_millis",
    "memory_bytes", "gpus", "created_in_cluster", "resource_version", "storage_bytes", "scheduling_message",
]


@transaction.atomic
def cluster_objects_replace(*, cluster: Cluster, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, int]:
    """Make the mirror of a cluster equal to these Node and Pod objects (a full list).

    The same engine as the live sync (`nodepools.sync.Mirror`): malformed objects are logged by name and
    skipped, rows missing from the lists are removed, only changed rows are written, and pool
    membership and node status are derived for the nodes concerned. Returns counts of rows kept and
    objects skipped.
    """
    mirror = Mirror(cluster)
    seen_nodes: set = set()
    seen_pods: set = set()
    for obj in nodes:
        mirror.apply(NODES, obj, seen_nodes)
    for obj in pods:
        mirror.apply(PODS, obj, seen_pods)
    mirror.sweep(NODES, seen_nodes)
    mirror.sweep(PODS, seen_pods)
    mirror.flush()
    # A complete list: the pods' mirror (their lifetimes, the GPU-hours ledger's input) is current until now.
    Cluster.objects.filter(pk=cluster.pk).update(pods_current_at=timezone.now())
    return {"nodes": len(mirror.nodes), "pods": len(mirror.pods), "skipped": mirror.skipped}


def pods_link(*, cluster: Cluster) -> None:
    """Resolve each pod's node (by spec.nodeName) and project (by namespace) in two UPDATEs."""
    Pod.objects.filter(cluster=cluster).update(
        node=Subquery(Node.objects.filter(cluster=cluster, name=OuterRef("node_name")).values("pk")[:1]),
        # The namespaces the projects app declared for this cluster (its relation to Cluster).
        project=Subquery(cluster.project_namespaces.filter(name=OuterRef("namespace")).values("project")[:1]),
    )

class NodeChanged(ValidationError):
    """The Node changed in the cluster after it was read: the move was refused (409), nothing changed."""


def node_move_to_pool(*, actor: Any, node: Node, pool: NodePool, resource_version: str | None = None) -> kube.LabelMovePlan:
    """Move a node to a pool by setting the pool's label on the Node in the cluster (docs/concepts.md#pools).

    Labels of the node's other pools are removed (moving to `default` removes every pool label). A value
    of the node's own that the move overwrites or removes is kept in the annotation
    `console.gpu-capacity.io/previous-labels` and restored when the node leaves the pool
    (`kube.plan_label_move`). One strategic merge patch of labels and annotation, conditional on the
    Node's resourceVersion: `resource_version` (the one a preview was read at), else the one read just
    before. A Node changed meanwhile raises NodeChanged (the API's 409) and changes nothing; any other
    refusal raises ValidationError naming the node and the API's message. The database is not written
    here: the sync's watch brings the change back.
    """
    require_system_admin(actor, "move nodes between pools")
    if pool.cluster_id != node.cluster_id:
        raise ValidationError({"pool": f"Pool '{pool.name}' belongs to another cluster than node '{node.name}'."})

    failed = f"Could not move node '{node.name}' to pool '{pool.name}'"
    try:
        live = node_live_object(node=node)
    except Exception as exc:
        raise ValidationError({"pool": f"{failed}: {api_error_message(exc)}"}) from None
    metadata = live.get("metadata") or {}
    labels = dict(metadata.get("labels") or {})
    target = None if pool.is_default else (pool.label_key, pool.label_value)
    plan = kube.plan_label_move(labels, metadata.get("annotations") or {}, target, pool_labels_of(node.cluster))
    version = resource_version or str(metadata.get("resourceVersion") or "")
    if plan.patch:
        try:
            with api_client_for(node.cluster) as api_client:
                client.CoreV1Api(api_client).patch_node(
                    node.name, {"metadata": {**plan.patch, "resourceVersion": version}}, _request_timeout=(5, 15)
                )
        except ApiException as exc:
            if exc.status == 409:
                raise NodeChanged({"pool": _changed_message(node, failed)}) from None
            raise ValidationError({"pool": f"{failed}: {api_error_message(exc)}"}) from None
        except Exception as exc:
            raise ValidationError({"pool": f"{failed}: {api_error_message(exc)}"}) from None
    audit_record(
        actor=actor, action=AuditEvent.Action.MOVE, obj=node,
        before={"pool": node.pool.name if node.pool_id else None, "labels": {c.key: c.old for c in plan.changes}},
        after={"pool": pool.name, "labels": {c.key: c.new for c in plan.changes},
               "kept_labels": plan.saved},
    )
    return plan


def _changed_message(node: Node, failed: str) -> str:
    return (f"{failed}: the node was changed in the cluster after it was read (409 Conflict); nothing was "
            "changed. Review the move again.")


def pod_lifetimes_expire(*, ended_before: datetime, batch: int = 5000, max_batches: int | None = None) -> int:
    """Forget the lifetimes of pods that ended before `ended_before` (retention: the GPU-hours ledger no
    longer corrects hours that old), a batch per transaction so that the sync's writes never wait long.
    Returns how many were deleted."""
    deleted = done = 0
    while max_batches is None or done < max_batches:
        ids = list(PodLifetime.objects.filter(ended__lt=ended_before).order_by().values_list("pk", flat=True)[:batch])
        if not ids:
            break
        with transaction.atomic():
            deleted += PodLifetime.objects.filter(pk__in=ids).delete()[0]
        done += 1
    return deleted
