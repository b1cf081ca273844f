"""The sync mirrors `batch/v1` Jobs into Workload rows: one `Resource` registration (the generic
informers, mirror and writer of nodepools.sync do the rest). Registered by WorkloadsConfig.ready()."""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from nodepools import kube
from nodepools.sync.resources import Resource, register
from workloads import render

JOBS = "jobs"
JOB_VALUE_FIELDS = (
    "uid", "pools_tried", "platform", "priority_class", "priority", "pods", "gpus", "phase", "status_message",
    "queue", "submitted_by", "created_in_cluster", "resource_version",
    "started_at", "finished_at", "active_deadline_seconds",
)
# The reference priority classes (DOMAIN §5), for Jobs whose pod template names a class but no value.
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
    requests = kube.pod_resources({"spec": template})
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
        str(metadata.get("resourceVersion") or ""), *job_times(obj),
    ], None


def register_jobs() -> Resource:
    from workloads.models import Workload

    return register(Resource(
        name=JOBS, kind="Job", group="batch", version="v1", plural="jobs", namespaced=True, model=Workload,
        fields=JOB_VALUE_FIELDS, values=job_values, json_fields=("pools_tried",),
        datetime_fields=("created_in_cluster", "started_at", "finished_at"),
    ))


def jobs_mirror(*, cluster: Any, jobs: list[dict[str, Any]]) -> int:
    """Write these Job objects as the sync would (the demo without a cluster; the sync's own writer)."""
    import uuid

    from django.db import transaction
    from django.utils import timezone

    from nodepools.sync.resources import REGISTRY
    from nodepools.sync.writer import TableWriter

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
        return TableWriter(resource, cluster.pk).upsert(items, now)
