"""The `batch/v1` Job a submission becomes (pure: facts in, a Kubernetes object out).

Scheduling primitives (docs/administration/schedulers.md#what-a-submitted-job-carries) on the pod template:
- required node affinity to the pools of the list: with an enforcer on, the console stamps its own pool
  label on every node (docs/concepts.md#acting), so one term `console.gpu-capacity.io/node-pool In [pools]` selects
  them; without one, nodes carry only the pools' own labels, so each pool is one term on its label
  (the `default` pool: none of the other pools' labels, which is how the console computes it);
- preferred node affinity weighted by list order (first pool 100, then less), so the scheduler tries
  the pools in the order the researcher gave;
- tolerations for the taints of the pools and the platform (what the nodes carry);
- `priorityClassName` (train, build-preemptible, build, inference);
- topology spread over nodes when a pool of the list places GPUs with `spread`;
- KAI: `schedulerName: kai-scheduler`, the label `kai.scheduler/queue` and the console's pool label (the
  pool of the queue: KAI's shard of that pool schedules it), and for more than one pod the annotation
  `kai.scheduler/batch-min-member` = the number of pods: KAI's pod grouper then makes the Job's one
  PodGroup with that `minMember`, so its pods are scheduled all together or not at all (KAI
  docs/batch/README.md, "Min Member Override"; KAI >= v0.15). KAI has no node-pool priority list: a
  PodGroup belongs to the one shard its node-pool label names, so the pools after the first are not tried;
  Kueue: the label `kueue.x-k8s.io/queue-name` and `suspend: true` (Kueue admits it by unsuspending).

Every Job keeps `backoffLimit: 0` (a failing workload fails) with a `podFailurePolicy` that ignores pods
carrying the `DisruptionTarget` condition: a pod a scheduler evicts (preemption, KAI's reclaim), drains or
evicts through the Eviction API is replaced, not counted as the Job's failure (Kubernetes "Jobs", Pod
failure policy; the task "Handling retriable and non-retriable pod failures with Pod failure policy").
The policy needs `restartPolicy: Never`; a template asking `OnFailure` keeps it and gets no policy.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from kube import gpu as kube_gpu
from kube import wellknown
from typing import Any

import yaml

from kube.taints import SCHEDULING_EFFECTS
from nodepools.kube import CONSOLE_POOL_LABEL

API_VERSION = "batch/v1"
KAI_SCHEDULER = wellknown.KAI_SCHEDULER_NAME
KAI_QUEUE_LABEL = wellknown.KAI_QUEUE_LABEL
KUEUE_QUEUE_LABEL = wellknown.KUEUE_QUEUE_LABEL
KAI_MIN_MEMBER_ANNOTATION = wellknown.KAI_MIN_MEMBER_ANNOTATION
# Pods a scheduler or the Eviction API disrupts carry this condition (kubernetes.io: Pod disruption conditions).
DISRUPTIONS_IGNORED = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"

# The console's own annotations on the Job (read back by the sync into the workloads table).
PREFIX = "console.gpu-capacity.io/"
POOLS_ANNOTATION = PREFIX + "pools"  # comma-separated, in the order tried
PLATFORM_ANNOTATION = PREFIX + "platform"
SUBMITTED_BY_ANNOTATION = PREFIX + "submitted-by"
PROJECT_LABEL = PREFIX + "project"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-capacity-console"
WORKLOAD_LABEL = PREFIX + "workload"

GPU_RESOURCE = kube_gpu.GPU_RESOURCE


@dataclass(frozen=True)
class PoolTarget:
    """One pool of the list: its name, own label (empty for `default`), its nodes' common taints, and
    its GPU placement strategy."""

    name: str
    label_key: str = ""
    label_value: str = ""
    taints: tuple[dict[str, Any], ...] = ()
    gpu_placement: str = "binpack"
    is_default: bool = False
    # The platform's node selector in this pool (its nodes are the pool's nodes carrying these labels).
    node_selector: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class JobSpec:
    name: str
    namespace: str
    project: str
    image: str
    command: tuple[str, ...] = ()
    pods: int = 1
    priority_class: str = "train"
    pools: tuple[PoolTarget, ...] = ()
    # Every pool of the cluster with its own label: what `default` excludes without the console's label.
    other_pool_labels: tuple[tuple[str, str], ...] = ()
    platform: str = ""
    platform_tolerations: tuple[dict[str, Any], ...] = ()
    # The merged, substituted pod templates (a Pod spec fragment and its metadata), and the resources.
    pod_spec: dict[str, Any] = field(default_factory=dict)
    pod_metadata: dict[str, Any] = field(default_factory=dict)
    cpu: str = "1"
    memory: str = "1Gi"
    gpus: int = 0
    # A MIG profile (e.g. 1g.10gb): `gpus` slices of it per pod (nvidia.com/mig-<profile>); or a KAI GPU
    # fraction per pod (the pod annotation gpu-fraction, no nvidia.com/gpu). kube.gpu names both.
    gpu_profile: str = ""
    gpu_fraction: str = ""
    storage: str = ""
    enforcer: str = "none"  # none / kai / kueue
    queue: str = ""  # KAI queue or Kueue LocalQueue name
    submitted_by: str = ""
    active_deadline_seconds: int | None = None  # the Job's spec.activeDeadlineSeconds (None: no limit)
    # Extra pod annotations, set only by the demo's driver (workloads.demo): e.g. how long the emulator's
    # kubelet runs the pods. Neither the form nor the API offers them.
    pod_annotations: tuple[tuple[str, str], ...] = ()


def _toleration(taint: dict[str, Any]) -> dict[str, Any]:
    tol: dict[str, Any] = {"key": taint.get("key", ""), "effect": taint.get("effect", "")}
    if taint.get("value") not in (None, ""):
        tol.update(operator="Equal", value=str(taint["value"]))
    else:
        tol["operator"] = "Exists"
    return tol


def tolerations_for(taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One toleration per distinct NoSchedule/NoExecute taint, in first-seen order."""
    seen: list[dict[str, Any]] = []
    for taint in taints:
        if not isinstance(taint, dict) or taint.get("effect") not in SCHEDULING_EFFECTS:
            continue
        tol = _toleration(taint)
        if tol not in seen:
            seen.append(tol)
    return seen


def _pool_term(pool: PoolTarget, spec: JobSpec, stamped: bool) -> dict[str, Any]:
    """The node selector term that selects one pool's nodes (and, inside it, the platform's)."""
    if stamped:
        exprs = [{"key": CONSOLE_POOL_LABEL, "operator": "In", "values": [pool.name]}]
    elif not pool.is_default:
        exprs = [{"key": pool.label_key, "operator": "In", "values": [pool.label_value]}]
    else:
        # A node with none of the other pools' labels (NotIn also matches a node without the key).
        exprs = [{"key": k, "operator": "NotIn", "values": [v]} for k, v in spec.other_pool_labels]
    exprs += [{"key": k, "operator": "In", "values": [v]} for k, v in pool.node_selector]
    return {"matchExpressions": exprs or [{"key": "kubernetes.io/os", "operator": "Exists"}]}


def weights(count: int) -> list[int]:
    """Preferred-affinity weights by list order: 100 for the first pool, evenly less for each next one
    down to 1 for the last (Kubernetes weights are 1..100)."""
    if count <= 1:
        return [100] * count
    return [max(1, 100 - (index * 99) // (count - 1)) for index in range(count)]


def node_affinity(spec: JobSpec) -> dict[str, Any]:
    if not spec.pools:
        return {}
    stamped = spec.enforcer in ("kai", "kueue")
    names = [p.name for p in spec.pools]
    if stamped and not any(p.node_selector for p in spec.pools):
        required = [{"matchExpressions": [{"key": CONSOLE_POOL_LABEL, "operator": "In", "values": names}]}]
    else:
        required = [_pool_term(p, spec, stamped) for p in spec.pools]
    preferred = [{"weight": weight, "preference": _pool_term(pool, spec, stamped)}
                 for pool, weight in zip(spec.pools, weights(len(spec.pools)))]
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": required},
            "preferredDuringSchedulingIgnoredDuringExecution": preferred}


def _resources(spec: JobSpec) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": str(spec.cpu), "memory": str(spec.memory)}
    limits: dict[str, str] = {}
    if spec.storage:
        requests["ephemeral-storage"] = str(spec.storage)
    resource = kube_gpu.mig_resource(spec.gpu_profile) if spec.gpu_profile else GPU_RESOURCE
    if spec.gpus and not spec.gpu_fraction:
        requests[resource] = str(spec.gpus)
        limits[resource] = str(spec.gpus)
    out: dict[str, Any] = {"requests": requests}
    if limits:
        out["limits"] = limits
    return out


def _merge_container(base: dict[str, Any], main: dict[str, Any]) -> dict[str, Any]:
    """The user's container over the templates' one of the same name: the templates' settings stay,
    the user's image, command and resources win."""
    merged = copy.deepcopy(base)
    for key, value in main.items():
        if key == "resources" and isinstance(merged.get("resources"), dict):
            for part in ("requests", "limits"):
                if part in value:
                    merged["resources"].setdefault(part, {}).update(value[part])
        else:
            merged[key] = value
    return merged


def pod_spec(spec: JobSpec) -> dict[str, Any]:
    """The Job's pod template spec: templates first, then what the console sets."""
    pod = copy.deepcopy(spec.pod_spec) if isinstance(spec.pod_spec, dict) else {}
    main: dict[str, Any] = {"name": "main", "image": spec.image, "resources": _resources(spec)}
    if spec.command:
        main["command"] = list(spec.command)
    containers = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
    # The workload's container is the templates' first one (OSMO templates name it), else "main".
    if containers:
        main["name"] = containers[0].get("name") or "main"
        containers[0] = _merge_container(containers[0], main)
    else:
        containers = [main]
    pod["containers"] = containers
    pod["restartPolicy"] = pod.get("restartPolicy") if pod.get("restartPolicy") in ("Never", "OnFailure") else "Never"
    pod["priorityClassName"] = spec.priority_class
    affinity = node_affinity(spec)
    if affinity:
        pod.setdefault("affinity", {})["nodeAffinity"] = affinity
    taints: list[dict[str, Any]] = []
    for pool in spec.pools:
        taints.extend(pool.taints)
    tolerations = [t for t in pod.get("tolerations") or [] if isinstance(t, dict)]
    for tol in tolerations_for(taints) + [dict(t) for t in spec.platform_tolerations]:
        if tol not in tolerations:
            tolerations.append(tol)
    if tolerations:
        pod["tolerations"] = tolerations
    if any(p.gpu_placement == "spread" for p in spec.pools):
        pod["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {JOB_NAME_LABEL: spec.name}},
        }]
    if spec.enforcer == "kai":
        pod["schedulerName"] = KAI_SCHEDULER
    return pod


def _pod_metadata(spec: JobSpec, labels: dict[str, str]) -> dict[str, Any]:
    """The templates' pod labels and annotations, with the console's labels over them."""
    meta = spec.pod_metadata if isinstance(spec.pod_metadata, dict) else {}
    out: dict[str, Any] = {"labels": {**{str(k): str(v) for k, v in (meta.get("labels") or {}).items()}, **labels}}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    annotations.update(dict(spec.pod_annotations))
    if spec.gpu_fraction:
        annotations[kube_gpu.ANNOTATION_GPU_FRACTION] = str(spec.gpu_fraction)
    if annotations:
        out["annotations"] = annotations
    return out


def job(spec: JobSpec) -> dict[str, Any]:
    """The whole Job object, as sent to the API server."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY, PROJECT_LABEL: spec.project, WORKLOAD_LABEL: spec.name}
    if spec.enforcer == "kai" and spec.queue:
        labels[KAI_QUEUE_LABEL] = spec.queue
    if spec.enforcer == "kai" and spec.pools:
        # KAI's pod grouper gives the PodGroup its top owner's labels, and a SchedulingShard schedules only
        # the PodGroups carrying its partition label (KAI docs/operator/scheduling-shards.md): the Job names
        # the pool of its queue, the first of the list.
        labels[CONSOLE_POOL_LABEL] = spec.pools[0].name
    if spec.enforcer == "kueue" and spec.queue:
        labels[KUEUE_QUEUE_LABEL] = spec.queue
    annotations = {POOLS_ANNOTATION: ",".join(p.name for p in spec.pools)}
    if spec.enforcer == "kai" and spec.pods > 1:
        # KAI's pod grouper gives a batch/v1 Job one PodGroup whose minMember is this annotation of the Job.
        annotations[KAI_MIN_MEMBER_ANNOTATION] = str(spec.pods)
    if spec.platform:
        annotations[PLATFORM_ANNOTATION] = spec.platform
    if spec.submitted_by:
        annotations[SUBMITTED_BY_ANNOTATION] = spec.submitted_by
    template_spec = pod_spec(spec)
    job_spec: dict[str, Any] = {
        "parallelism": spec.pods,
        "completions": spec.pods,
        "backoffLimit": 0,
        "template": {"metadata": _pod_metadata(spec, labels), "spec": template_spec},
    }
    if spec.active_deadline_seconds:
        job_spec["activeDeadlineSeconds"] = int(spec.active_deadline_seconds)
    if template_spec.get("restartPolicy") == "Never":
        job_spec["podFailurePolicy"] = {"rules": [copy.deepcopy(DISRUPTIONS_IGNORED)]}
    if spec.enforcer == "kueue":
        job_spec["suspend"] = True  # Kueue admits the Job by unsuspending it
    return {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels, "annotations": annotations},
        "spec": job_spec,
    }


def to_yaml(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)
