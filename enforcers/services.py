"""Every write of enforcement: the enforcer setting, and bringing a cluster in step with the console.

`enforcement_reconcile` is what the sync's leader runs for its cluster every few seconds: it builds the
desired objects from the database, lists what the cluster holds with the console's managed-by label,
and creates, puts back or deletes the difference. Objects without the label are never touched. A
change someone else made to an owned object is put back and recorded in the audit trail, naming who
the cluster says made it; a write the API server refuses is kept (`RefusedWrite`) and shown.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

import orjson
from django.db import transaction
from django.utils import timezone
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from access.rules import require_system_admin
from audit.models import AuditEvent
from audit.services import audit_record, snapshot
from enforcers import desired as d
from enforcers.diff import Plan, _quantity, merged, owned_part, plan
from enforcers.models import AppliedObject, Enforcement, Enforcer, RefusedWrite, SchedulerQueue
from enforcers.selectors import org_state, pools_gpus
from kube import gpu as kube_gpu
from kube.client import FIELD_MANAGER, ApiRefusal, CustomObjects
from nodepools import hints
from nodepools.models import Cluster, Node, NodePool

log = logging.getLogger(__name__)

ALL_KINDS = tuple(dict.fromkeys(d.KAI_KINDS + d.KUEUE_KINDS))  # PriorityClasses are in both
_KIND_BY_NAME = {(f"{g}/{v}", k): (g, v, p, k) for g, v, p, k in ALL_KINDS}
OWNED_SELECTOR = f"{d.MANAGED_BY_LABEL}={d.MANAGED_BY}"


def enforcement_get(*, cluster: Cluster) -> Enforcement:
    return Enforcement.objects.filter(cluster=cluster).first() or Enforcement(cluster=cluster)


@transaction.atomic
def enforcement_set(*, actor: Any, cluster: Cluster, enforcer: str) -> Enforcement:
    """Choose the cluster's enforcer (none, KAI Scheduler, Kueue). The sync's leader then brings the
    cluster in step: it creates the new enforcer's objects and removes those of the old one."""
    require_system_admin(actor, "choose a cluster's enforcer")
    row = Enforcement.objects.select_for_update().filter(cluster=cluster).first()
    before = snapshot(row)
    if row is None:
        row = Enforcement(cluster=cluster)
    row.enforcer = enforcer
    row.full_clean()
    row.save()
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE if before else AuditEvent.Action.CREATE, obj=row,
                 before=before, after=snapshot(row))
    return row


def desired_for(cluster: Cluster, enforcer: str) -> list[dict]:
    return d.desired_objects(enforcer, org_state(cluster=cluster))


def owned_objects(objects: CustomObjects) -> list[dict]:
    """Every object of the kinds the console manages that carries its managed-by label (a kind the cluster
    does not serve, its CRD not installed, has none)."""
    found: list[dict] = []
    for kind in ALL_KINDS:
        try:
            found.extend(objects.list(kind, label_selector=OWNED_SELECTOR))
        except ApiRefusal as refusal:
            if refusal.status != 404:
                raise
    return found


def enforcement_preview(*, cluster: Cluster, enforcer: str, api_client: Any) -> Plan:
    """The dry-run diff of switching to `enforcer`: what would be created, changed and deleted."""
    return plan(desired_for(cluster, enforcer), owned_objects(CustomObjects(api_client)))


def _hash(obj: dict) -> str:
    return hashlib.sha256(orjson.dumps(owned_part(obj), option=orjson.OPT_SORT_KEYS)).hexdigest()


def _key(obj: dict) -> tuple[str, str, str, str]:
    return d.key_of(obj)


def _kind(obj: dict) -> tuple[str, str, str, str]:
    return _KIND_BY_NAME[(obj["apiVersion"], obj["kind"])]


def changed_by(obj: dict) -> str:
    """Who the cluster says last changed an object: the newest managedFields entry of a manager other
    than the console (entries of one second keep their order: the last one is the newest)."""
    entries = [(i, e) for i, e in enumerate((obj.get("metadata") or {}).get("managedFields") or [])
               if isinstance(e, dict) and e.get("manager") != FIELD_MANAGER]
    if not entries:
        return "unknown (the cluster recorded no other field manager)"
    _, newest = max(entries, key=lambda item: (item[1].get("time") or "", item[0]))
    return f"{newest.get('manager') or 'unknown'} ({newest.get('operation', 'Update')} at {newest.get('time', '?')})"


def _values(obj: dict, paths: list[str]) -> dict[str, Any]:
    out = {}
    for path in paths:
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out[path] = value
    return out


@dataclass
class ReconcileResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    nodes_labelled: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted or self.nodes_labelled)


def _label(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace') + '/' if meta.get('namespace') else ''}{meta.get('name')}"


def _refused(cluster: Cluster, obj: dict, refusal: ApiRefusal, pools: dict[str, int]) -> None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    pool_name = labels.get(d.POOL_LABEL) or (obj.get("spec") or {}).get("partitionLabelValue")
    RefusedWrite.objects.update_or_create(
        cluster=cluster, kind=obj.get("kind", ""), namespace=meta.get("namespace") or "", name=meta.get("name", ""),
        defaults={"status": refusal.status, "field": refusal.field[:255], "message": refusal.message,
                  "pool_id": pools.get(pool_name or ""), "owner": labels.get(d.OWNER_LABEL, "")},
    )


def _applied(cluster: Cluster, obj: dict, written: dict) -> None:
    api_version, kind, namespace, name = _key(obj)
    AppliedObject.objects.update_or_create(
        cluster=cluster, api_version=api_version, kind=kind, namespace=namespace, name=name,
        defaults={"owned_hash": _hash(obj),
                  "resource_version": str((written.get("metadata") or {}).get("resourceVersion") or "")},
    )
    RefusedWrite.objects.filter(cluster=cluster, kind=kind, namespace=namespace, name=name).delete()


def _record_drift(cluster: Cluster, record: AppliedObject | None, obj: dict, what: str,
                  before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
    if record is None:
        api_version, kind, namespace, name = _key(obj)
        record = AppliedObject(cluster=cluster, api_version=api_version, kind=kind, namespace=namespace, name=name)
    audit_record(actor=None, action=AuditEvent.Action.UPDATE, obj=record, object_id=record.pk or _label(obj),
                 before=before, after={**(after or {}), "drift": what})


def enforcement_reconcile(*, cluster: Cluster, api_client: Any) -> ReconcileResult:
    """One round of bringing the cluster in step with the console (run by the sync's leader)."""
    enforcement = enforcement_get(cluster=cluster)
    enforcer = enforcement.enforcer
    objects = CustomObjects(api_client)
    result = ReconcileResult()
    pools = dict(NodePool.objects.filter(cluster=cluster).values_list("name", "pk"))
    wanted = desired_for(cluster, enforcer)
    current = owned_objects(objects)
    todo = plan(wanted, current)
    result.conflicts = [_label(o) for o in todo.conflicts]
    records = {(r.api_version, r.kind, r.namespace, r.name): r for r in AppliedObject.objects.filter(cluster=cluster)}

    if enforcer != Enforcer.NONE:
        result.nodes_labelled = pool_labels_stamp(cluster=cluster, api_client=api_client)

    for obj in todo.create:
        record = records.get(_key(obj))
        try:
            written = objects.create(_kind(obj), obj)
        except ApiRefusal as refusal:  # every refusal is reported, none stops the round
            if refusal.status == 0:
                raise
            _refused(cluster, obj, refusal, pools)
            result.refused.append(f"{_label(obj)}: {refusal}")
            continue
        with transaction.atomic():
            if record is not None:
                # The console wrote it before and nobody asked it to go: someone deleted it.
                _record_drift(cluster, record, obj, f"{_label(obj)} was deleted in the cluster; created again",
                              None, {"object": _label(obj)})
                result.drift.append(_label(obj))
            _applied(cluster, obj, written)
        result.created.append(_label(obj))

    for obj, actual, fields in todo.update:
        record = records.get(_key(obj))
        drifted = record is not None and record.owned_hash == _hash(obj)
        try:
            written = objects.replace(_kind(obj), merged(actual, obj))
        except ApiRefusal as refusal:
            if refusal.status == 0:
                raise
            if refusal.status != 409:  # a conflict is retried next round with a fresh copy
                _refused(cluster, obj, refusal, pools)
                result.refused.append(f"{_label(obj)}: {refusal}")
            continue
        with transaction.atomic():
            if drifted:
                _record_drift(cluster, record, obj,
                              f"{_label(obj)} was changed in the cluster by {changed_by(actual)}; put back",
                              {"changed_by": changed_by(actual), **_values(actual, fields)}, _values(obj, fields))
                result.drift.append(_label(obj))
            _applied(cluster, obj, written)
        result.updated.append(_label(obj))

    for obj in todo.delete:
        try:
            meta = obj.get("metadata") or {}
            objects.delete(_kind(obj), meta["name"], meta.get("namespace") or None, uid=meta.get("uid") or "")
        except ApiRefusal as refusal:
            if refusal.status == 0:
                raise
            _refused(cluster, obj, refusal, pools)
            result.refused.append(f"{_label(obj)}: {refusal}")
            continue
        api_version, kind, namespace, name = _key(obj)
        AppliedObject.objects.filter(cluster=cluster, api_version=api_version, kind=kind, namespace=namespace,
                                     name=name).delete()
        RefusedWrite.objects.filter(cluster=cluster, kind=kind, namespace=namespace, name=name).delete()
        result.deleted.append(_label(obj))

    # What the scheduler reports about the queues as listed (written ones report at the next round).
    queue_status_mirror(cluster=cluster, objects=[o for o in current if o not in todo.delete])
    if enforcement.pk:
        Enforcement.objects.filter(pk=enforcement.pk).update(
            last_reconciled=timezone.now(), last_error="; ".join(result.refused)[:2000])
    return result


def pool_labels_stamp(*, cluster: Cluster, api_client: Any) -> int:
    """Stamp the console's pool label on every node whose label does not name its pool (the default
    pool included). The node's own labels stay as they are. Returns how many nodes were patched."""
    core = client.CoreV1Api(api_client)
    patched = 0
    for name, labels, pool in Node.objects.filter(cluster=cluster).values_list("name", "labels", "pool__name"):
        want = pool or NodePool.DEFAULT_NAME
        if (labels or {}).get(d.POOL_LABEL) == want:
            continue
        try:
            core.patch_node(name, {"metadata": {"labels": {d.POOL_LABEL: want}}}, _request_timeout=(5, 15))
        except ApiException as exc:
            if exc.status == 404:  # deleted meanwhile: the watch removes it from the mirror
                continue
            raise
        patched += 1
    return patched


# ---------------------------------------------------------------------------------------------------
# The leader's round, and what the scheduler reports back

def enforcement_round(cluster: Cluster, api_client: Any) -> ReconcileResult | None:
    """What the sync's leader runs every few seconds: nothing for a cluster that never had an enforcer;
    else a reconcile round (which also mirrors the queues' status)."""
    if not Enforcement.objects.filter(cluster_id=cluster.pk).exists():
        return None
    cluster = Cluster.objects.get(pk=cluster.pk)
    result = enforcement_reconcile(cluster=cluster, api_client=api_client)
    if result.changed or result.drift or result.refused:
        hints.record(cluster.pk)  # the mark live pages compare (and, without Redis, poll)
        hints.publish(cluster.pk, ["quotas", "pools"])
    return result


def _gpu(resources: Any) -> Decimal | None:
    if not isinstance(resources, dict) or d.GPU_RESOURCE not in resources:
        return None

    return _quantity(resources[d.GPU_RESOURCE])


def _in_equivalents(amount: Decimal | None, per_unit: Fraction) -> Decimal | None:
    if amount is None or per_unit == 1:
        return amount
    return kube_gpu.to_decimal(Fraction(amount) * per_unit)


def _queue_status_values(cluster: Cluster, objects: list[dict]) -> dict[tuple[str, str], dict[str, Any]]:
    """The SchedulerQueue values of the owned KAI Queues and Kueue ClusterQueues listed from the cluster, GPUs
    back in GPU-equivalents: a MIG pool's KAI figures are slices (`desired.kai_pool_gpu`), a Kueue flavor's MIG
    resources slices of their profile (`desired.kueue_gpu_quotas`)."""
    pools = dict(NodePool.objects.filter(cluster=cluster).values_list("name", "pk"))
    gpus = pools_gpus(cluster=cluster) if objects else {}
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in objects:
        kind, meta, status = obj.get("kind"), obj.get("metadata") or {}, obj.get("status") or {}
        labels = meta.get("labels") or {}
        if kind == "Queue":
            pool = gpus.get(labels.get(d.POOL_LABEL, ""), kube_gpu.PoolGpus())
            per_unit = 1 / pool.kai_per_equivalent()
            values = {"pool_id": pools.get(labels.get(d.POOL_LABEL, "")), "owner": labels.get(d.OWNER_LABEL, ""),
                      "gpu_allocated": _in_equivalents(_gpu(status.get("allocated")), per_unit),
                      "gpu_allocated_non_preemptible": _in_equivalents(_gpu(status.get("allocatedNonPreemptible")),
                                                                       per_unit),
                      "gpu_requested": _in_equivalents(_gpu(status.get("requested")), per_unit), "gpu_borrowed": None,
                      "pending_workloads": None}
        elif kind == "ClusterQueue":
            total = borrowed = None
            for flavor in status.get("flavorsUsage") or []:
                pool = gpus.get(flavor.get("name", ""), kube_gpu.PoolGpus())
                for res in flavor.get("resources") or []:
                    name = res.get("name")
                    if name == d.GPU_RESOURCE or kube_gpu.is_mig_resource(str(name)):
                        per_unit = pool.worth(name) if pool.mig else Fraction(1)
                        used = _in_equivalents(_gpu({d.GPU_RESOURCE: res.get("total", 0)}), per_unit)
                        lent = _in_equivalents(_gpu({d.GPU_RESOURCE: res.get("borrowed", 0)}), per_unit)
                        total = (total or 0) + (used or 0)
                        borrowed = (borrowed or 0) + (lent or 0)
            values = {"pool_id": None, "owner": labels.get(d.OWNER_LABEL, ""), "gpu_allocated": total,
                      "gpu_allocated_non_preemptible": None, "gpu_requested": None, "gpu_borrowed": borrowed,
                      "pending_workloads": status.get("pendingWorkloads")}
        else:
            continue
        if not status:
            continue  # the scheduler has not reported yet
        values["status"] = status
        rows[(kind, meta.get("name", ""))] = values
    return rows


@transaction.atomic
def queue_status_mirror(*, cluster: Cluster, objects: list[dict]) -> int:
    """Keep SchedulerQueue in step with what the scheduler reports; only changed rows are written."""
    rows = _queue_status_values(cluster, objects)
    stored = {(q.kind, q.name): q for q in SchedulerQueue.objects.filter(cluster=cluster)}
    written = 0
    for key, values in rows.items():
        row = stored.pop(key, None)
        if row is None:
            SchedulerQueue.objects.create(cluster=cluster, kind=key[0], name=key[1], **values)
            written += 1
        elif any(getattr(row, f) != v for f, v in values.items()):
            SchedulerQueue.objects.filter(pk=row.pk).update(**values, updated=timezone.now())
            written += 1
    if stored:
        SchedulerQueue.objects.filter(pk__in=[q.pk for q in stored.values()]).delete()
        written += len(stored)
    return written
