"""The sync mirrors `batch/v1` Jobs into Workload rows, and what the schedulers decided about them: KAI
Scheduler's PodGroups (`scheduling.run.ai/v2alpha2`), Kueue's Workloads (`kueue.x-k8s.io/v1beta2`) and
KAI's eviction Events (the Events about PodGroups with reason `Evict`, which name who evicted). One
`Resource` registration each (the generic informers, mirror and writer of nodepools.sync do the rest); the
custom resources are optional (a cluster without KAI's or Kueue's CRDs lists them as nothing and stays
connected). Registered by WorkloadsConfig.ready()."""
from __future__ import annotations

import uuid
from decimal import Decimal
from kube import wellknown
from typing import Any

from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from common.parsing import is_digits
from kube import owners
from kube.gpu import RESERVATION_NAMESPACE
from kube.quantity import parse_quantity
from nodepools import kube
from nodepools.sync.resources import PODS, REGISTRY, Resource, json_list, json_object, register, when
from nodepools.sync.writer import TableWriter
from workloads import render
from workloads.models import (JOB_KIND, KueueWorkload, PodGroup, SchedulerEvent, Workload, WorkloadEvent,
                              WorkloadEventKind)

JOBS = "jobs"
JOB_VALUE_FIELDS = (
    "uid", "pools_tried", "platform", "priority_class", "priority", "pods", "gpus", "phase", "status_message",
    "queue", "submitted_by", "created_in_cluster", "resource_version", "scheduler_name",
    "started_at", "finished_at", "active_deadline_seconds", "gpu_request", "gone_at", "kind", "owner", "by_console",
)
# The reference priority classes (docs/concepts.md#workloads), for Jobs whose pod template names a class but no value.
PRIORITY_VALUES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def job_phase(obj: dict[str, Any]) -> tuple[str, str]:
    """(phase, message) of a Job from its spec and status: Succeeded / Failed (conditions Complete /
    Failed), Suspended (spec.suspend: waiting for its queue to admit it), else Pending (the table says
    Running when its pods run)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    for kind, phase in (("Complete", "Succeeded"), ("SuccessCriteriaMet", "Succeeded"), ("Failed", "Failed"),
                        ("FailureTarget", "Failed")):
        condition = _condition(status, kind)
        if condition is not None:
            text = condition.get("message") or condition.get("reason") or ""
            return phase, str(text) if phase == "Failed" else ""
    if spec.get("suspend") is True:
        condition = _condition(status, "Suspended")
        return "Suspended", str((condition or {}).get("message") or "")
    return "Pending", ""


def job_times(obj: dict[str, Any]) -> tuple[str | None, str | None, int | None]:
    """(startTime, the time it finished, activeDeadlineSeconds) of a Job: finished is `completionTime`, else
    the lastTransitionTime of its Complete or Failed condition (a failed Job has no completionTime)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    finished = status.get("completionTime") or None
    if finished is None:
        for kind in ("Complete", "Failed"):
            condition = _condition(status, kind)
            if condition is not None and condition.get("lastTransitionTime"):
                finished = condition["lastTransitionTime"]
                break
    deadline = spec.get("activeDeadlineSeconds")
    if not isinstance(deadline, int) or isinstance(deadline, bool) or not 0 < deadline < 2**31:
        deadline = None
    return status.get("startTime") or None, finished, deadline


def job_values(obj: dict[str, Any]) -> tuple[list, None]:
    """The stored values of a Job (JOB_VALUE_FIELDS order); raises on a malformed object."""
    metadata = obj["metadata"]
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    if not isinstance(annotations, dict) or not isinstance(labels, dict):
        raise TypeError("labels and annotations must be objects")
    spec = obj.get("spec") or {}
    template = (spec.get("template") or {}).get("spec") or {}
    pods = spec.get("parallelism")
    pods = int(pods) if isinstance(pods, int) and pods >= 0 else 1
    # GPU-equivalents (kube.gpu): MIG slices their share, a KAI fraction (the template's annotation) its value.
    template_metadata = (spec.get("template") or {}).get("metadata") or {}
    requests, gpu_request = kube.pod_resources_and_request(
        {"metadata": template_metadata if isinstance(template_metadata, dict) else {}, "spec": template})
    priority_class = str(template.get("priorityClassName") or "")
    priority = template.get("priority")
    if not isinstance(priority, int):
        priority = PRIORITY_VALUES.get(priority_class)
    pools = [p for p in str(annotations.get(render.POOLS_ANNOTATION) or "").split(",") if p]
    phase, message = job_phase(obj)
    queue = labels.get(render.KUEUE_QUEUE_LABEL) or labels.get(render.KAI_QUEUE_LABEL) or ""
    return [
        metadata.get("uid") or "", pools, str(annotations.get(render.PLATFORM_ANNOTATION) or ""), priority_class,
        priority, pods, Decimal(requests.gpus) * pods, phase, message[:2000], str(queue),
        str(annotations.get(render.SUBMITTED_BY_ANNOTATION) or "")[:150], metadata.get("creationTimestamp"),
        str(metadata.get("resourceVersion") or ""), str(template.get("schedulerName") or "")[:253],
        *job_times(obj), gpu_request,
        None,  # gone_at: a Job listed is in the cluster (a Job of the same name again revives its row)
        JOB_KIND, _owner_text(metadata),
        bool(annotations.get(render.POOLS_ANNOTATION) or annotations.get(render.SUBMITTED_BY_ANNOTATION)),
    ], None


def _owner_text(metadata: dict[str, Any]) -> str:
    kind, name = owners.controller_of(metadata)
    return f"{kind}/{name}" if kind else ""


def register_jobs() -> Resource:
    return register(Resource(
        name=JOBS, kind="Job", group="batch", version="v1", plural="jobs", namespaced=True, model=Workload,
        fields=JOB_VALUE_FIELDS, values=job_values, json_fields=("pools_tried", "gpu_request"),
        datetime_fields=("created_in_cluster", "started_at", "finished_at", "gone_at"),
        # Its rows are the Jobs' (the rows of pods no Job owns are the pods' steps': `unmanaged_noted`).
        retire=jobs_retire, live={"gone_at__isnull": True, "kind": JOB_KIND}, written=jobs_noted,
    ))


# ---------------------------------------------------------------------------------------------------
# The pods no Job owns (bare pods, pods of other controllers): GPU users too, each group a Workload row

UNMANAGED_FIELDS = ("kind", "owner", "by_console", "pods", "gpus", "gpu_request", "phase", "status_message",
                    "queue", "priority", "priority_class", "scheduler_name", "created_in_cluster", "started_at",
                    "finished_at", "gone_at", "uid", "submitted_by", "pools_tried", "platform")


def register_unmanaged() -> Resource:
    """After the sync writes or deletes pods: the rows of the pods no Job owns in their namespaces
    (`unmanaged_noted`). The pods' own registration (nodepools) with these two steps added."""
    from dataclasses import replace

    return register(replace(REGISTRY[PODS], written=unmanaged_noted, deleted=unmanaged_noted))


def _group_values(pods: list[dict[str, Any]]) -> dict[str, Any]:
    """A row's values from its pods (oldest first): what they ask and hold together, how far they got."""
    first = pods[0]
    phases = [p["phase"] for p in pods]
    active = [p for p in pods if p["phase"] not in ("Succeeded", "Failed")]
    if "Running" in phases:
        phase = "Running"
    elif active:
        phase = "Pending"
    else:
        phase = "Failed" if "Failed" in phases else "Succeeded"
    waiting = next((p["scheduling_message"] for p in pods if p["phase"] == "Pending" and p["scheduling_message"]), "")
    started = [p["started_in_cluster"] for p in pods if p["started_in_cluster"]]
    finished = [p["finished_in_cluster"] for p in pods if p["finished_in_cluster"]]
    kind = first["owner_kind"] or owners.BARE_POD
    return {
        "kind": kind, "owner": f"{first['owner_kind']}/{first['owner_name']}" if first["owner_kind"] else "",
        "by_console": False, "pods": len(active) or len(pods),
        "gpus": sum((Decimal(p["gpus"] or 0) for p in (active or pods)), Decimal(0)),
        "gpu_request": first["gpu_request"] or {}, "phase": phase, "status_message": waiting[:2000],
        "queue": str((first["labels"] or {}).get(wellknown.KAI_QUEUE_LABEL) or "")[:253],
        "priority": first["priority"], "priority_class": first["priority_class"],
        "scheduler_name": first["scheduler_name"] or wellknown.DEFAULT_SCHEDULER_NAME,
        "created_in_cluster": first["created_in_cluster"], "started_at": min(started) if started else None,
        "finished_at": max(finished) if finished and not active else None, "gone_at": None,
        "uid": first["uid"] if kind == owners.BARE_POD else "", "submitted_by": "", "pools_tried": [], "platform": "",
    }


def unmanaged_noted(cluster_id: int, keys: list, now: Any) -> None:
    """The Workload rows of the GPU pods no Job owns in the namespaces of these pods, from the stored pods:
    one row per controller (or bare pod), written only when it changed; a row whose pods all left is gone
    (Stopped unless they had finished). A Job of the same name keeps its row. The KAI reservation pods are
    nobody's workload."""
    namespaces = sorted({key[0] for key in keys if key and key[0] != RESERVATION_NAMESPACE})
    for i in range(0, len(namespaces), 500):
        _unmanaged_in(cluster_id, namespaces[i:i + 500], now)


def _unmanaged_in(cluster_id: int, namespaces: list[str], now: Any) -> None:
    from nodepools.models import Pod  # (the sync's own floor; read where the rows are made)

    columns = ("namespace", "name", "workload_name", "uid", "owner_kind", "owner_name", "phase", "gpus",
               "gpu_request", "scheduling_message", "labels", "priority", "priority_class", "scheduler_name",
               "created_in_cluster", "started_in_cluster", "finished_in_cluster")
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in (Pod.objects.filter(cluster_id=cluster_id, namespace__in=namespaces, job_name__isnull=True,
                                   gpu_kind__isnull=False).exclude(owner_kind=JOB_KIND)
                .order_by("created_in_cluster", "name").values(*columns)):
        groups.setdefault((row["namespace"], row["workload_name"]), []).append(row)
    # Their rows, and the Jobs of the same names (a Job keeps its row): not every Job of the namespaces.
    # (Only the live rows and those of these names: the rows of pods long gone stay history, not read again.)
    named = {name for _, name in groups}
    existing = {(w.namespace, w.name): w for w in Workload.objects.filter(cluster_id=cluster_id,
                                                                          namespace__in=namespaces)
                .filter(Q(gone_at__isnull=True) | Q(name__in=named)).exclude(kind=JOB_KIND)}
    if named:
        jobs = Workload.objects.filter(cluster_id=cluster_id, namespace__in=namespaces, kind=JOB_KIND,
                                       name__in=named).only("pk", "namespace", "name", "kind")
        existing.update({(w.namespace, w.name): w for w in jobs if (w.namespace, w.name) in groups})
    made, changed, noted = [], [], []
    for key, pods in groups.items():
        values = _group_values(pods)
        row = existing.get(key)
        if row is None:
            made.append(Workload(cluster_id=cluster_id, namespace=key[0], name=key[1], **values))
        elif row.kind != JOB_KIND and any(getattr(row, f) != v for f, v in values.items()):
            for f, v in values.items():
                setattr(row, f, v)
            changed.append(row)
        else:
            continue
        noted.append(key)
    gone = [w for key, w in existing.items() if w.kind != JOB_KIND and w.gone_at is None and key not in groups]
    with transaction.atomic():
        if made:
            Workload.objects.bulk_create(made, ignore_conflicts=True)
        if changed:
            Workload.objects.bulk_update(changed, list(UNMANAGED_FIELDS))
        if gone:
            ids = [w.pk for w in gone]
            Workload.objects.filter(pk__in=ids).update(
                gone_at=now, updated=now,
                phase=Case(When(phase__in=("Succeeded", "Failed"), then=F("phase")), default=Value("Stopped")))
            _note([WorkloadEvent(cluster_id=cluster_id, namespace=w.namespace, name=w.name, job_uid=w.uid,
                                 kind=WorkloadEventKind.GONE, at=now,
                                 detail="" if w.phase in ("Succeeded", "Failed") else w.phase) for w in gone])
        if noted:
            jobs_noted(cluster_id, noted, now)


# ---------------------------------------------------------------------------------------------------
# What the schedulers decided

PODGROUPS, KUEUE_WORKLOADS, EVICTIONS = "kai_podgroups", "kueue_workloads", "kai_evictions"
KAI_GROUP, KAI_VERSION = wellknown.KAI_PODGROUP[:2]
KUEUE_GROUP, KUEUE_VERSION = wellknown.KUEUE_GROUP, wellknown.KUEUE_VERSION
# KAI's evictor writes an Event with reason Evict on the evicted pod's PodGroup (the only place saying who).
EVICTION_SELECTOR = "involvedObject.kind=PodGroup,reason=Evict"

PODGROUP_FIELDS = (
    "uid", "job_name", "job_uid", "queue", "priority_class", "min_member", "node_pool", "gpus_requested",
    "gpus_allocated", "waiting", "reason", "message", "condition_time", "conditions", "created_in_cluster",
    "resource_version",
)
KUEUE_WORKLOAD_FIELDS = (
    "uid", "job_name", "job_uid", "queue_name", "cluster_queue", "priority", "priority_class", "quota_reserved",
    "admitted", "finished", "pending_reason", "pending_message", "evicted_reason", "evicted_message",
    "evicted_now", "evicted_at", "conditions", "created_in_cluster", "resource_version",
)
EVENT_FIELDS = (
    "uid", "involved_kind", "involved_name", "reason", "message", "type", "component", "count", "annotations",
    "last_seen", "resource_version",
)
_RESOURCES_STATUS = ("requested", "allocated")


def _items(value: Any, what: str) -> list:
    """The objects of a list field (other items are skipped)."""
    return [item for item in json_list(value, what) if isinstance(item, dict)]


def _text(value: Any, limit: int = 4000) -> str:
    return "" if value is None else str(value)[:limit]


def _job_owner(metadata: dict) -> tuple[str, str]:
    """(name, uid) of the batch/v1 Job among the object's owners, else ("", "")."""
    for ref in _items(metadata.get("ownerReferences"), "metadata.ownerReferences"):
        if ref.get("kind") == "Job" and str(ref.get("apiVersion") or "").startswith("batch/"):
            return _text(ref.get("name"), 253), _text(ref.get("uid"), 64)
    return "", ""


def _amount(values: dict, name: str) -> Decimal:
    text = values.get(name)
    return Decimal(0) if text in (None, "") else parse_quantity(text)


def podgroup_values(obj: dict[str, Any]) -> tuple[list, None]:
    """The stored values of a KAI PodGroup (PODGROUP_FIELDS order); raises on a malformed object."""
    metadata = obj["metadata"]
    labels = json_object(metadata.get("labels"), "metadata.labels")
    spec = json_object(obj.get("spec"), "spec")
    status = json_object(obj.get("status"), "status")
    resources = json_object(status.get("resourcesStatus"), "status.resourcesStatus")
    figures = {part: json_object(resources.get(part), f"status.resourcesStatus.{part}") for part in _RESOURCES_STATUS}
    conditions = _items(status.get("schedulingConditions"), "status.schedulingConditions")

    def order(condition: dict) -> tuple:
        transition = str(condition.get("transitionID") or "0")
        return (int(transition) if is_digits(transition) else 0, str(condition.get("lastTransitionTime") or ""))

    latest = max(conditions, key=order) if conditions else {}
    reasons = _items(latest.get("reasons"), "schedulingConditions[].reasons")
    reason = _text((reasons[0] if reasons else latest).get("reason"), 64)
    if figures["requested"] or figures["allocated"]:
        waiting = any(_amount(figures["requested"], r) > _amount(figures["allocated"], r)
                      for r in figures["requested"])
    else:  # no status reported yet: waiting if KAI said why it could not place it
        waiting = bool(latest)
    kept = [{k: c.get(k) for k in ("type", "nodePool", "reason", "message", "lastTransitionTime", "transitionID")
             if c.get(k) is not None} | {"reasons": [{k: r.get(k) for k in ("reason", "message") if r.get(k)}
                                                     for r in _items(c.get("reasons"), "reasons")]}
            for c in conditions]
    job_name, job_uid = _job_owner(metadata)
    min_member = spec.get("minMember")
    return [
        metadata.get("uid") or "", job_name, job_uid, _text(spec.get("queue"), 253),
        _text(spec.get("priorityClassName"), 253),
        min_member if isinstance(min_member, int) and not isinstance(min_member, bool) and min_member >= 0 else 1,
        _text(labels.get(kube.CONSOLE_POOL_LABEL), 63), _amount(figures["requested"], kube.GPU_RESOURCE),
        _amount(figures["allocated"], kube.GPU_RESOURCE), waiting, reason, _text(latest.get("message")),
        latest.get("lastTransitionTime") or None, kept, metadata.get("creationTimestamp"),
        str(metadata.get("resourceVersion") or ""),
    ], None


def _conditions(status: dict) -> dict[str, dict]:
    return {str(c.get("type")): c for c in _items(status.get("conditions"), "status.conditions")}


PREVIOUSLY = "Previously: "


def kueue_workload_values(obj: dict[str, Any]) -> tuple[list, None]:
    """The stored values of a Kueue Workload (KUEUE_WORKLOAD_FIELDS order); raises on a malformed object."""
    metadata = obj["metadata"]
    labels = json_object(metadata.get("labels"), "metadata.labels")
    spec = json_object(obj.get("spec"), "spec")
    status = json_object(obj.get("status"), "status")
    admission = json_object(status.get("admission"), "status.admission")
    conditions = _conditions(status)

    def true(kind: str) -> bool:
        return (conditions.get(kind) or {}).get("status") == "True"

    reserved = conditions.get("QuotaReserved") or {}
    pending = reserved if reserved.get("status") == "False" else {}
    evicted = conditions.get("Evicted") or {}
    preempted = conditions.get("Preempted") or {}
    message = _text(evicted.get("message"))
    if message.startswith(PREVIOUSLY):  # re-admitted since: Kueue keeps the old message behind "Previously: "
        message = message[len(PREVIOUSLY):]
    evicted_reason = _text(preempted.get("reason") or evicted.get("reason"), 64) if evicted else ""
    if evicted and (preempted.get("reason") or "") in ("QuotaReserved", ""):
        evicted_reason = _text(evicted.get("reason"), 64)
    job_name, job_uid = _job_owner(metadata)
    priority = spec.get("priority")
    return [
        metadata.get("uid") or "", job_name, job_uid or _text(labels.get(wellknown.KUEUE_JOB_UID_LABEL), 64),
        _text(spec.get("queueName"), 253), _text(admission.get("clusterQueue"), 253),
        priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
        _text(spec.get("priorityClassName"), 253), true("QuotaReserved"), true("Admitted"), true("Finished"),
        _text(pending.get("reason"), 64), _text(pending.get("message")), evicted_reason if evicted else "",
        message if evicted else "", evicted.get("status") == "True", evicted.get("lastTransitionTime") or None,
        [{k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime") if c.get(k) is not None}
         for c in conditions.values()],
        metadata.get("creationTimestamp"), str(metadata.get("resourceVersion") or ""),
    ], None


def event_values(obj: dict[str, Any]) -> tuple[list, None]:
    """The stored values of an Event (EVENT_FIELDS order); raises on a malformed object."""
    metadata = obj["metadata"]
    involved = json_object(obj.get("involvedObject"), "involvedObject")
    source = json_object(obj.get("source"), "source")
    annotations = json_object(metadata.get("annotations"), "metadata.annotations")
    count = obj.get("count")
    return [
        metadata.get("uid") or "", _text(involved.get("kind"), 63), _text(involved.get("name"), 253),
        _text(obj.get("reason"), 128), _text(obj.get("message")), _text(obj.get("type"), 16),
        _text(source.get("component") or obj.get("reportingComponent"), 128),
        count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1,
        {str(k): _text(v, 253) for k, v in annotations.items()},
        obj.get("lastTimestamp") or obj.get("eventTime") or obj.get("firstTimestamp") or None,
        str(metadata.get("resourceVersion") or ""),
    ], None


def register_scheduler_resources() -> None:
    register(Resource(
        name=PODGROUPS, kind="PodGroup", group=KAI_GROUP, version=KAI_VERSION, plural="podgroups",
        namespaced=True, model=PodGroup, fields=PODGROUP_FIELDS, values=podgroup_values,
        json_fields=("conditions",), datetime_fields=("condition_time", "created_in_cluster"), optional=True,
    ))
    register(Resource(
        name=KUEUE_WORKLOADS, kind="Workload", group=KUEUE_GROUP, version=KUEUE_VERSION, plural="workloads",
        namespaced=True, model=KueueWorkload, fields=KUEUE_WORKLOAD_FIELDS, values=kueue_workload_values,
        json_fields=("conditions",), datetime_fields=("evicted_at", "created_in_cluster"), optional=True,
        written=kueue_noted,
    ))
    register(Resource(
        name=EVICTIONS, kind="Event", group="", version="v1", plural="events", namespaced=True,
        model=SchedulerEvent, fields=EVENT_FIELDS, values=event_values, json_fields=("annotations",),
        datetime_fields=("last_seen",), field_selector=EVICTION_SELECTOR, written=evictions_noted,
    ))


def jobs_mirror(*, cluster: Any, jobs: list[dict[str, Any]]) -> int:
    """Write these Job objects as the sync would (the demo without a cluster; the sync's own writer)."""
    resource = REGISTRY[JOBS]
    now = timezone.now()
    items = []
    for job in jobs:
        meta = job.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now.strftime("%Y-%m-%dT%H:%M:%SZ"))
        meta.setdefault("resourceVersion", "1")
        values, _ = resource.values(job)
        items.append((resource.key_of(job), values, ()))
    with transaction.atomic():
        written = TableWriter(resource, cluster.pk).upsert(items, now)
        jobs_noted(cluster.pk, [key for key, _, _ in items], now)
        return written


# ---------------------------------------------------------------------------------------------------
# The workloads' timelines (WorkloadEvent): what the sync sees become of a Job, written after its rows.
# Each moment is written once (cluster, namespace, name, Job uid, kind, time are unique), so noting the
# same rows again writes nothing.

def _key_q(keys: list) -> Q:
    q = Q(pk__in=[])
    for namespace, name in keys:
        q |= Q(namespace=namespace, name=name)
    return q


def _note(events: list[WorkloadEvent]) -> None:
    if events:
        WorkloadEvent.objects.bulk_create(events, ignore_conflicts=True)


def jobs_noted(cluster_id: int, keys: list, now: Any) -> None:
    """Submitted (by the submitter the Job's annotation names), started, finished or failed."""
    events = []
    for i in range(0, len(keys), 500):
        for w in Workload.objects.filter(_key_q(keys[i:i + 500]), cluster_id=cluster_id, gone_at__isnull=True):
            base = {"cluster_id": cluster_id, "namespace": w.namespace, "name": w.name, "job_uid": w.uid}
            if w.created_in_cluster:
                events.append(WorkloadEvent(**base, kind=WorkloadEventKind.SUBMITTED, at=w.created_in_cluster,
                                            actor=w.submitted_by))
            if w.started_at:
                events.append(WorkloadEvent(**base, kind=WorkloadEventKind.STARTED, at=w.started_at))
            if w.finished_at and w.phase in ("Succeeded", "Failed"):
                kind = WorkloadEventKind.SUCCEEDED if w.phase == "Succeeded" else WorkloadEventKind.FAILED
                events.append(WorkloadEvent(**base, kind=kind, at=w.finished_at, detail=w.status_message[:2000]))
    _note(events)


def jobs_retire(cluster_id: int, keys: list, now: Any) -> int:
    """Jobs gone from the cluster: their rows stay (their page, their timeline), marked gone now; a Job that
    had not finished is Stopped (whoever deleted it: the console's Stop notes who on the timeline)."""
    events = []
    count = 0
    for i in range(0, len(keys), 500):
        rows = Workload.objects.filter(_key_q(keys[i:i + 500]), cluster_id=cluster_id, gone_at__isnull=True)
        for w in rows:
            events.append(WorkloadEvent(cluster_id=cluster_id, namespace=w.namespace, name=w.name, job_uid=w.uid,
                                        kind=WorkloadEventKind.GONE, at=now,
                                        detail="" if w.phase in ("Succeeded", "Failed") else w.phase))
        count += rows.update(gone_at=now, phase=Case(When(phase__in=("Succeeded", "Failed"), then=F("phase")),
                                                      default=Value("Stopped")), updated=now)
    _note(events)
    return count


def _condition_time(conditions: Any, kind: str) -> Any:
    for condition in conditions or []:
        if isinstance(condition, dict) and condition.get("type") == kind and condition.get("status") == "True":
            return when(condition.get("lastTransitionTime"))
    return None


def kueue_noted(cluster_id: int, keys: list, now: Any) -> None:
    """Admitted by Kueue (its Admitted condition), preempted or evicted (its Evicted condition: by whom)."""
    from workloads.decisions import _KUEUE_PREEMPTOR

    events = []
    for i in range(0, len(keys), 500):
        for row in KueueWorkload.objects.filter(_key_q(keys[i:i + 500]), cluster_id=cluster_id).exclude(job_name=""):
            base = {"cluster_id": cluster_id, "namespace": row.namespace, "name": row.job_name, "job_uid": row.job_uid}
            admitted = _condition_time(row.conditions, "Admitted")
            if row.admitted and admitted:
                events.append(WorkloadEvent(**base, kind=WorkloadEventKind.ADMITTED, at=admitted,
                                            detail=f"ClusterQueue {row.cluster_queue}" if row.cluster_queue else ""))
            if row.evicted_message and row.evicted_at:
                by = ""
                match = _KUEUE_PREEMPTOR.search(row.evicted_message)
                if match:
                    found = Workload.objects.filter(cluster_id=cluster_id, uid=match.group(2).strip()).first()
                    by = f"{found.namespace}/{found.name}" if found else ""
                events.append(WorkloadEvent(**base, kind=WorkloadEventKind.PREEMPTED, at=row.evicted_at, actor=by,
                                            detail=row.evicted_message[:2000]))
    _note(events)


def evictions_noted(cluster_id: int, keys: list, now: Any) -> None:
    """Preempted or reclaimed by KAI: its Evict event on the Job's PodGroup names the evicting PodGroup."""
    events = []
    for i in range(0, len(keys), 500):
        for event in SchedulerEvent.objects.filter(_key_q(keys[i:i + 500]), cluster_id=cluster_id,
                                                   involved_kind="PodGroup", reason="Evict"):
            group = PodGroup.objects.filter(cluster_id=cluster_id, namespace=event.namespace,
                                            name=event.involved_name).exclude(job_name="").first()
            if group is None or event.last_seen is None:
                continue
            by = ""
            if event.evictor:
                namespace, _, name = event.evictor.partition("/")
                evictor = PodGroup.objects.filter(cluster_id=cluster_id, namespace=namespace, name=name).first()
                by = f"{namespace}/{evictor.job_name}" if evictor is not None and evictor.job_name else event.evictor
            events.append(WorkloadEvent(cluster_id=cluster_id, namespace=group.namespace, name=group.job_name,
                                        job_uid=group.job_uid, kind=WorkloadEventKind.PREEMPTED, at=event.last_seen,
                                        actor=by, detail=(event.evictor_action + ": " if event.evictor_action else "")
                                        + event.message[:2000]))
    _note(events)
