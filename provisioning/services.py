"""Every write of provisioning: Karpenter NodePools created, changed and deleted in a cluster, the console
pools backed by them, and a pool's GPU limit kept equal to its NodePool's GPU limit (`kube.requests.GPU`).

Cluster writes go through the official client (kube.client.CustomObjects, provisioning/kubeapi.py) as `gpu-capacity-console`; a
change is conditional on the resourceVersion the form was read at, so someone else's change meanwhile
is reported (ConcurrentUpdate), never overwritten. The mirror rows themselves are the sync's: the watch
brings every write back. Every write is audited.
"""
from __future__ import annotations

import copy
import logging
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from access.rules import require_system_admin
from audit.models import AuditEvent
from audit.services import audit_record
from common import caches
from common.exceptions import ConcurrentUpdate
from kube.gpu import gpu_devices
from kube.client import ApiRefusal
from nodepools import services as pool_services
from nodepools.models import Cluster, NodePool
from provisioning import karpenter, validation
from provisioning.kubeapi import NodePools
from provisioning.models import KarpenterNodePool, backing_name

logger = logging.getLogger(__name__)

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-capacity-console"}


def _check(name: str, spec: dict[str, Any], old_spec: dict[str, Any] | None = None) -> None:
    errors: dict[str, list[str]] = {}
    for message in validation.name_errors(name):
        errors.setdefault("metadata.name", []).append(message)
    for path, message in validation.spec_errors(spec, old_spec):
        errors.setdefault(path, []).append(message)
    if errors:
        raise ValidationError(errors)


def _refused(exc: ApiRefusal, name: str) -> Exception:
    if exc.status == 409:
        return ConcurrentUpdate(f"NodePool {name} was changed in the cluster since you opened it: nothing was "
                                "written. Reload to see the current version, then make your change again.")
    if exc.status == 422 or exc.status == 400:
        # The field the API server names (a path such as spec.template.spec.requirements[0].values).
        return ValidationError({exc.field or "__all__": [f"The API server refused the NodePool {name}: {exc.message}"]})
    return ValidationError({"__all__": [f"The cluster refused the NodePool {name}: {exc}"]})


def _audit_object(cluster: Cluster, name: str, obj: dict | None) -> tuple[KarpenterNodePool, dict | None]:
    row = KarpenterNodePool(cluster=cluster, name=name)
    if obj is None:
        return row, None
    return row, {"name": name, "spec": obj.get("spec") or {},
                 "resourceVersion": str((obj.get("metadata") or {}).get("resourceVersion") or "")}


def _gpu_limit(spec: dict[str, Any]) -> int | None:
    return gpu_devices(spec.get("limits") or {})


def _set_pool_limit(*, actor: Any, cluster: Cluster, name: str, gpu_limit: int | None) -> None:
    """The console pools backed by this NodePool take its GPU limit (one value, docs/concepts.md#karpenter)."""
    for pool in NodePool.objects.filter(cluster=cluster, label_key=karpenter.NODEPOOL_LABEL, label_value=name):
        if pool.gpu_limit != gpu_limit:
            with _writing_cluster_already():
                pool_services.pool_update(actor=actor, pool=pool, gpu_limit=gpu_limit)


# While a service has written the cluster itself, the pool-update receiver has nothing to send.
_LOCAL = __import__("threading").local()


class _writing_cluster_already:
    def __enter__(self):
        _LOCAL.depth = getattr(_LOCAL, "depth", 0) + 1

    def __exit__(self, *exc):
        _LOCAL.depth -= 1


def writing_cluster_already() -> bool:
    return getattr(_LOCAL, "depth", 0) > 0


def karpenter_nodepool_create(*, actor: Any, cluster: Cluster, name: str, spec: dict[str, Any],
                              api: NodePools | None = None) -> dict:
    """Create a NodePool in the cluster (refused with the field named when the spec breaks the CRD's rules).
    The spec is checked before the transaction opens."""
    require_system_admin(actor, "create Karpenter NodePools")
    _check(name, spec)
    return _karpenter_nodepool_create(actor=actor, cluster=cluster, name=name, spec=spec, api=api)


@transaction.atomic
def _karpenter_nodepool_create(*, actor: Any, cluster: Cluster, name: str, spec: dict[str, Any],
                               api: NodePools | None) -> dict:
    obj = {"apiVersion": karpenter.API_VERSION, "kind": "NodePool",
           "metadata": {"name": name, "labels": dict(MANAGED_BY)}, "spec": copy.deepcopy(spec)}
    own = api is None
    api = api or NodePools(cluster)
    try:
        created = api.create(obj)
    except ApiRefusal as exc:
        if exc.status == 409:
            raise ValidationError({"metadata.name": [f"A NodePool named {name} already exists in the cluster."]}) from exc
        raise _refused(exc, name) from exc
    finally:
        if own:
            api.close()
    row, after = _audit_object(cluster, name, created)
    audit_record(actor=actor, action=AuditEvent.Action.CREATE, obj=row, after=after, object_id=f"nodepool/{name}")
    _set_pool_limit(actor=actor, cluster=cluster, name=name, gpu_limit=_gpu_limit(spec))
    return created


def karpenter_nodepool_update(*, actor: Any, cluster: Cluster, name: str, spec: dict[str, Any],
                              resource_version: str, api: NodePools | None = None) -> dict:
    """Replace a NodePool's spec, conditional on the resourceVersion it was read at: a change made in the
    cluster meanwhile raises ConcurrentUpdate and nothing is written. The backed pools take its GPU limit.
    The spec is checked before the transaction opens."""
    require_system_admin(actor, "change Karpenter NodePools")
    _check(name, spec)
    return _karpenter_nodepool_update(actor=actor, cluster=cluster, name=name, spec=spec,
                                      resource_version=resource_version, api=api)


@transaction.atomic
def _karpenter_nodepool_update(*, actor: Any, cluster: Cluster, name: str, spec: dict[str, Any],
                               resource_version: str, api: NodePools | None) -> dict:
    if not resource_version:
        raise ValidationError({"resource_version": ["The version the NodePool was read at is missing: reload the form."]})
    own = api is None
    api = api or NodePools(cluster)
    try:
        current = api.get(name)
        if current is None:
            raise ValidationError({"__all__": [f"NodePool {name} no longer exists in the cluster."]})
        if str(current["metadata"].get("resourceVersion")) != str(resource_version):
            raise _refused(ApiRefusal(409, "", "changed"), name)
        _check(name, spec, old_spec=current.get("spec"))  # the CRD's transition rules (nodeClassRef kind, group)
        obj = copy.deepcopy(current)
        obj.pop("status", None)
        obj["spec"] = copy.deepcopy(spec)
        obj["metadata"]["resourceVersion"] = str(resource_version)
        obj["metadata"].pop("managedFields", None)
        try:
            updated = api.replace(obj)
        except ApiRefusal as exc:
            raise _refused(exc, name) from exc
    finally:
        if own:
            api.close()
    row, before = _audit_object(cluster, name, current)
    _, after = _audit_object(cluster, name, updated)
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=row, before=before, after=after,
                 object_id=f"nodepool/{name}")
    _set_pool_limit(actor=actor, cluster=cluster, name=name, gpu_limit=_gpu_limit(spec))
    return updated


def karpenter_nodepool_delete(*, actor: Any, cluster: Cluster, name: str, resource_version: str = "",
                              api: NodePools | None = None) -> None:
    """Delete a NodePool: Karpenter then drains and terminates every node it launched for it. With a
    resourceVersion, a change made in the cluster meanwhile raises ConcurrentUpdate and nothing is deleted."""
    require_system_admin(actor, "delete Karpenter NodePools")
    own = api is None
    api = api or NodePools(cluster)
    try:
        current = api.get(name)
        if current is None:
            return
        meta = current["metadata"]
        if resource_version and str(meta.get("resourceVersion")) != str(resource_version):
            raise _refused(ApiRefusal(409, "", "changed"), name)
        try:
            api.delete(name, uid=meta.get("uid") or "", resource_version=resource_version)
        except ApiRefusal as exc:
            raise _refused(exc, name) from exc
    finally:
        if own:
            api.close()
    row, before = _audit_object(cluster, name, current)
    audit_record(actor=actor, action=AuditEvent.Action.DELETE, obj=row, before=before, object_id=f"nodepool/{name}")


def provisioned_pool_create(*, actor: Any, cluster: Cluster, name: str, spec: dict[str, Any], description: str = "",
                            gpu_placement: str = "binpack", cpu_placement: str = "binpack") -> NodePool:
    """A console pool backed by a new Karpenter NodePool of the same name (label karpenter.sh/nodepool=<name>):
    the pool is saved, then the NodePool created; a refusal by the cluster undoes the pool. The spec is
    checked before the transaction opens."""
    require_system_admin(actor, "add node pools")
    _check(name, spec)
    with transaction.atomic():
        return _provisioned_pool_create(actor=actor, cluster=cluster, name=name, spec=spec, description=description,
                                        gpu_placement=gpu_placement, cpu_placement=cpu_placement)


def _provisioned_pool_create(*, actor: Any, cluster: Cluster, name: str, spec: dict[str, Any], description: str,
                             gpu_placement: str, cpu_placement: str) -> NodePool:
    pool = pool_services.pool_create(
        actor=actor, cluster=cluster, name=name, label_key=karpenter.NODEPOOL_LABEL, label_value=name,
        description=description, gpu_placement=gpu_placement, cpu_placement=cpu_placement,
        gpu_limit=_gpu_limit(spec))
    _karpenter_nodepool_create(actor=actor, cluster=cluster, name=name, spec=spec, api=None)
    return pool


@transaction.atomic
def provisioned_pool_delete(*, actor: Any, pool: NodePool, delete_nodepool: bool, resource_version: str = "") -> None:
    """Delete a console pool; with `delete_nodepool`, its Karpenter NodePool too (its nodes are drained and
    terminated by Karpenter). The pool is deleted first, so a refusal by the cluster keeps both."""
    require_system_admin(actor, "delete node pools")
    name, cluster = backing_name(pool), pool.cluster
    pool_services.pool_delete(actor=actor, pool=pool)
    if delete_nodepool and name:
        karpenter_nodepool_delete(actor=actor, cluster=cluster, name=name, resource_version=resource_version)


def pool_gpu_limit_write_through(*, pool: NodePool, gpu_limit: int | None) -> None:
    """A backed pool's GPU limit changed in the console (the pool form): the NodePool's
    GPU limit (`kube.requests.GPU`) follows, conditional on the version read (a race is a ValidationError on
    the field, and the pool keeps its value)."""
    name = backing_name(pool)
    if not name or writing_cluster_already():
        return
    try:
        with NodePools(pool.cluster) as api:
            current = api.get(name)
            if current is None:
                return  # no NodePool (yet): nothing to keep in step
            limits = dict((current.get("spec") or {}).get("limits") or {})
            if gpu_devices(limits) == gpu_limit:
                return
            if gpu_limit is None:
                limits.pop(karpenter.GPU, None)
            else:
                limits[karpenter.GPU] = str(gpu_limit)
            obj = copy.deepcopy(current)
            obj.pop("status", None)
            obj["metadata"].pop("managedFields", None)
            obj.setdefault("spec", {})["limits"] = limits
            api.replace(obj)
    except ApiRefusal as exc:
        if exc.status == 409:
            raise ValidationError({"gpu_limit": [f"Karpenter NodePool {name} changed in the cluster meanwhile: "
                                                 "nothing was written; reload and try again."]}) from exc
        raise ValidationError({"gpu_limit": [f"The cluster refused the NodePool {name}'s GPU limit: {exc}"]}) from exc
    row = KarpenterNodePool(cluster=pool.cluster, name=name)
    audit_record(actor=None, action=AuditEvent.Action.UPDATE, obj=row, object_id=f"nodepool/{name}",
                 before={"limits": (current.get("spec") or {}).get("limits") or {}}, after={"limits": limits})


def pool_limits_from_cluster(cluster: Cluster, api_client: Any = None) -> int:
    """The sync's leader: each backed pool takes its NodePool's GPU limit when it changed in the cluster
    (the mirror row moved to a resourceVersion not seen yet). Returns how many pools changed."""
    seen = _SEEN_VERSIONS.setdefault(cluster.pk, {})
    changed = 0
    rows = {r.name: r for r in KarpenterNodePool.objects.filter(cluster=cluster)}
    for pool in NodePool.objects.filter(cluster=cluster, label_key=karpenter.NODEPOOL_LABEL):
        row = rows.get(pool.label_value)
        if row is None or seen.get(row.name) == row.resource_version:
            continue
        seen[row.name] = row.resource_version
        if pool.gpu_limit != row.gpu_limit:
            with _writing_cluster_already():
                pool_services.pool_update(actor=None, pool=pool, gpu_limit=row.gpu_limit)
            changed += 1
    return changed


_SEEN_VERSIONS: dict[int, dict[str, str]] = caches.register({})
