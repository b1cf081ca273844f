"""Will it fit, and when? for workloads (reads; the arithmetic is `projects.fit`, pure):

- `submission_verdict(user, request, preview)`: the dry run of a submission against the cluster as it is
  now — its pool's nodes that the Job's pods may use (node affinity, node selector, taints), the project's
  quota standing with this workload added (fair shares computed with its request), the preemptible pods the
  scheduler may take, and what Karpenter can launch (`provisioning.explain`, on the Job's pod): starts now,
  waits for quota, waits for capacity, waits for a node Karpenter can launch, or never fits. With KAI
  Scheduler the Job is scheduled by the shard of its first pool (the pool of its queue), so that pool
  decides; otherwise the pools are tried in order and the first that starts it wins.
- `workloads_attach_estimates(workloads, user=...)`: for every pending workload among these, when it may
  start (`fit.Estimate`): its pool's running workloads and when each ends (`activeDeadlineSeconds` from the
  Job's start, else the median and 90th percentile run time of the finished workloads of the same project
  and priority class — of the same workload submitted again, "-<n>" after its name, when it finished at least
  twice), the workloads ahead of it in the queue (the scheduler's order: higher priority, then
  older), and the quota rules. A fixed number of queries per pool involved, whatever the rows.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from django.db.models import F, Min, Q, TextField
from django.db.models.functions import Cast
from django.db.models.fields.json import KeyTextTransform
from django.utils import timezone

from common.parsing import is_digits
from kube import gpu as kube_gpu
from kube.labels import pod_matches_node
from kube.taints import untolerated_taints
from nodepools import kube
from nodepools.memo import memoised
from nodepools.models import Node, NodePool, Pod
from projects import fit
from projects import selectors as project_selectors
from projects.models import Project, ProjectNamespace
from provisioning.explain import explain
from provisioning.karpenter import NODEPOOL_LABEL
from provisioning.pending import nodeclaim_objects, nodepool_objects
from workloads import render, selectors
from workloads.models import Workload

KAI, KUEUE = "kai", "kueue"
PRIORITY_VALUES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
# Taints the node lifecycle controller puts on nodes that are not Ready or cordoned: a node's state, which
# `NodeRoom.ready` carries, not a property of its kind (a not-ready node may hold the workload later).
STATUS_TAINT_PREFIX = "node.kubernetes.io/"


def job_shape(job: dict[str, Any], *, gang: bool | None = None) -> fit.Shape:
    """The Shape of a rendered Job: its pods (parallelism), what one pod asks (kube's effective requests),
    its priority (the class's value). A Job's pods form a gang when KAI's pod grouper gives its PodGroup a
    `minMember` of all of them (the Job's `kai.scheduler/batch-min-member` annotation, which the console sets
    with KAI Scheduler), else each pod is scheduled on its own."""
    spec = job.get("spec") or {}
    template = spec.get("template") or {}
    requests, request = kube.pod_resources_and_request({"metadata": template.get("metadata") or {},
                                                        "spec": template.get("spec") or {}})
    pods = spec.get("parallelism") if isinstance(spec.get("parallelism"), int) else 1
    klass = (template.get("spec") or {}).get("priorityClassName") or "train"
    if gang is None:
        members = str(((job.get("metadata") or {}).get("annotations") or {}).get(render.KAI_MIN_MEMBER_ANNOTATION) or "")
        gang = pods > 1 and is_digits(members) and int(members) >= pods
    return fit.Shape(pods=max(pods, 1), cpu=requests.cpu_millis, memory=requests.memory_bytes,
                     priority=PRIORITY_VALUES.get(klass, 50), gang=gang, **gpu_shape(requests.gpus, request))


def gpu_shape(gpus: Decimal, request: dict[str, Any] | None) -> dict[str, Any]:
    """A pod's GPUs as `fit.Shape` fields: `gpus` its GPU-equivalents (kube.gpu; whole GPUs stay an int),
    and from its GPU request record (`kube.gpu.request_record`) the MIG profile and slices it asks, or its
    KAI fraction of one GPU — what the nodes are judged by."""
    gpus = Decimal(gpus or 0)
    out: dict[str, Any] = {"gpus": int(gpus) if gpus == gpus.to_integral_value() else gpus.normalize()}
    demand = kube_gpu.request_from_record(request or {})
    if demand.mig and len(demand.mig) == 1 and not demand.devices:
        (profile, slices), = demand.mig.items()
        out.update(profile=profile, slices=int(slices))
    elif demand.kind == "fraction" and demand.fraction is not None and demand.fraction_devices == 1:
        out["fraction"] = kube_gpu.to_decimal(demand.fraction)
    return out


def job_pod(job: dict[str, Any]) -> dict[str, Any]:
    """One pod of the Job, as the Job controller makes it (what node affinity and Karpenter read)."""
    template = (job.get("spec") or {}).get("template") or {}
    metadata = template.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{(job.get('metadata') or {}).get('name', 'workload')}-pod",
                         "namespace": (job.get("metadata") or {}).get("namespace", ""),
                         "labels": dict(metadata.get("labels") or {}),
                         "annotations": dict(metadata.get("annotations") or {})},
            "spec": template.get("spec") or {}, "status": {"phase": "Pending"}}


def _label_keys(pod: dict[str, Any]) -> set[str]:
    """The node label keys the pod's node selector and required node affinity read."""
    spec = pod.get("spec") or {}
    keys = set((spec.get("nodeSelector") or {}).keys())
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for expr in (term or {}).get("matchExpressions") or []:
            if isinstance(expr, dict) and expr.get("key"):
                keys.add(str(expr["key"]))
    return keys


def pool_nodes_for(pool: NodePool, pod: dict[str, Any] | None) -> list[fit.NodeRoom]:
    """The pool's nodes (`fit.NodeRoom`) a pod of this kind may use: its node selector and required node
    affinity admit the node's labels, and it tolerates the node's NoSchedule/NoExecute taints (apart from
    the not-ready and cordon taints: `ready` says that). Only the label keys the pod reads are read (one
    column each), and taints only of the nodes that have some."""
    rooms = project_selectors.pools_node_room([pool])[pool.pk]
    if pod is None:
        return rooms
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    keys = sorted(_label_keys(pod) - {kube.CONSOLE_POOL_LABEL})
    nodes = Node.objects.filter(pool=pool).order_by()
    columns = {f"label_{i}": KeyTextTransform(key, "labels") for i, key in enumerate(keys)}
    rows = project_selectors._rows(nodes.annotate(**columns).values_list("name", "taints", *columns))
    refused = set()
    judged: dict[tuple, bool] = {}  # nodes of one kind (same labels read, same taints) are judged once
    for name, taints, *values in rows:
        kind = (tuple(values), taints if isinstance(taints, str) else json.dumps(taints, sort_keys=True))
        if kind not in judged:
            # The console stamps its pool label on every node from the membership it computes (enforcers): a
            # node of the pool carries it, or will by the leader's next round.
            labels = {key: value for key, value in zip(keys, values) if value is not None}
            labels[kube.CONSOLE_POOL_LABEL] = pool.name
            if isinstance(taints, str):
                taints = json.loads(taints or "[]")
            kinds = [t for t in taints or [] if isinstance(t, dict)
                     and not str(t.get("key") or "").startswith(STATUS_TAINT_PREFIX)]
            node = {"metadata": {"name": name, "labels": labels}, "spec": {"taints": kinds}}
            judged[kind] = pod_matches_node(pod, node) and not untolerated_taints(kinds, tolerations)
        if not judged[kind]:
            refused.add(name)
    return [room for room in rooms if room.name not in refused]


def karpenter_for(pool: NodePool, pod: dict[str, Any]) -> fit.Karpenter | None:
    """What Karpenter can do for the pod in this pool: for a Karpenter-backed pool, whether its NodePool can
    launch a node for the pod (`provisioning.explain`: requirements, taints, limits, budgets), in its words.
    None for a pool not backed by a NodePool."""
    if pool.label_key != NODEPOOL_LABEL:
        return None
    nodepools = [p for p in nodepool_objects(pool.cluster) if p["metadata"]["name"] == pool.label_value]
    if not nodepools:
        return fit.Karpenter(False, f"Karpenter NodePool {pool.label_value} backing {pool.name} is not in the "
                             "cluster.", pool.label_value)
    explanation = explain(pod, nodepools, nodeclaim_objects(pool.cluster))
    verdict = explanation.verdicts[0] if explanation.verdicts else None
    if explanation.problem:
        return fit.Karpenter(False, explanation.problem, pool.label_value)
    if verdict is not None and verdict.can_provision:
        return fit.Karpenter(True, f"Karpenter NodePool {verdict.nodepool} can launch a node for it.", verdict.nodepool)
    return fit.Karpenter(False, f"Karpenter NodePool {pool.label_value} cannot launch one: "
                         f"{verdict.text if verdict else 'it is gone'}", pool.label_value)


@dataclass
class DryRun:
    """The dry run's answer: the verdict of the pool that decides, and those of the other pools tried."""

    verdict: fit.Verdict
    scheduler: str  # "KAI Scheduler", "Kueue", "kube-scheduler"
    others: list[fit.Verdict] = field(default_factory=list)
    estimate: fit.Estimate | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**self.verdict.as_dict(), "scheduler": self.scheduler,
                "start_estimate": self.estimate.as_dict() if self.estimate is not None else None,
                "other_pools": [{"pool": v.pool, "verdict": v.code, "headline": v.headline} for v in self.others]}


SCHEDULER_WORDS = {KAI: "KAI Scheduler", KUEUE: "Kueue", "none": "kube-scheduler"}


def submission_verdict(*, user: Any, request: Any, preview: Any) -> DryRun:
    """The dry run of a submission (`workloads.submission.Request` and its `Preview`): see the module."""
    project = request.project
    enforcer = selectors.enforcer_of(project.cluster)
    shape = job_shape(preview.job)
    pod = job_pod(preview.job)
    pools = [p for p in request.pools if p.cluster_id == project.cluster_id]
    if enforcer == KAI:
        pools = pools[:1]  # the shard of its queue's pool schedules it
    verdicts = []
    for pool in pools:
        verdicts.append(pool_verdict(user=user, pool=pool, project=project, shape=shape, pod=pod, enforcer=enforcer))
        if verdicts[-1].code == fit.STARTS_NOW:
            break
    order = [fit.STARTS_NOW, fit.WAITS_FOR_NODE, fit.WAITS_FOR_QUOTA, fit.WAITS_FOR_CAPACITY, fit.NEVER_FITS]
    chosen = verdicts[-1] if verdicts and verdicts[-1].code == fit.STARTS_NOW else min(
        verdicts, key=lambda v: (order.index(v.code), verdicts.index(v)))
    result = DryRun(chosen, SCHEDULER_WORDS.get(enforcer, enforcer), [v for v in verdicts if v is not chosen])
    if chosen.code != fit.STARTS_NOW:
        pool = next(p for p in pools if p.name == chosen.pool)
        result.estimate = estimate_for_shape(user=user, pool=pool, project=project, shape=shape, verdict_now=chosen,
                                             klass=(preview.job["spec"]["template"]["spec"].get("priorityClassName") or ""),
                                             enforcer=enforcer)
    return result


def pool_verdict(*, user: Any, pool: NodePool, project: Any, shape: fit.Shape, pod: dict[str, Any] | None,
                 enforcer: str) -> fit.Verdict:
    """The verdict for one pool: its usable nodes, the standings with this workload's request added."""
    owners = project_selectors.pool_standings(pool, extra=(project, shape.total_gpus))
    mine = owners.get(("project", project.name)) or fit.Standing("project", project.name)
    department = owners.get(("department", project.department.name))
    # The pods the scheduler may take: those of owners above their deserved quota (or of a department above
    # its own), and lower-priority pods of the project itself; named once chosen.
    over = {name for (kind, name), owner in owners.items() if owner.over_quota > 0}
    givers = set(Project.objects.filter(cluster_id=project.cluster_id).filter(
        Q(name__in=over) | Q(department__name__in=over) | Q(pk=project.pk)).values_list("pk", flat=True))
    verdict = fit.verdict(
        shape=shape, pool=pool.name, nodes=pool_nodes_for(pool, pod),
        running=project_selectors.pool_running(pool, user=user, projects=givers, names=False), owners=owners,
        project=mine, department=department, enforced=enforcer in (KAI, KUEUE),
        karpenter=karpenter_for(pool, pod) if pod is not None else None, domain_key=pool.topology_label,
        non_preemptible_rule=enforcer == KAI)
    if verdict.room is not None and verdict.room.victims:
        named = project_selectors.running_name_workloads([v.pod for v in verdict.room.victims])
        verdict.room = replace(verdict.room, victims=tuple(replace(v, pod=p) for v, p in zip(verdict.room.victims,
                                                                                            named)))
    return verdict


# ---------------------------------------------------------------------------------------------------
# Start estimates

_SUFFIX = re.compile(r"-\d+$")


def lineage(name: str) -> str:
    """A workload's name without a trailing "-<number>": the same workload submitted again."""
    return _SUFFIX.sub("", name)


def _first_pod_starts(cluster_id: int, namespaces: set[str]) -> dict[tuple[str, str], datetime]:
    """When each Job's first pod (still mirrored) started, by (namespace, job name): one grouped query, read
    once per request (`nodepools.memo`: every pool's outlook of a page asks it of the same namespaces)."""
    return memoised(("first_pod_starts", cluster_id, frozenset(namespaces)),
                    lambda: _read_first_pod_starts(cluster_id, namespaces))


def _read_first_pod_starts(cluster_id: int, namespaces: set[str]) -> dict[tuple[str, str], datetime]:
    # `job_name IS NOT NULL` (not `NOT (… IS NULL)`): the pods of Jobs through their index (cluster, namespace,
    # job name), not every pod of the namespaces.
    rows = (Pod.objects.filter(cluster_id=cluster_id, namespace__in=namespaces, job_name__isnull=False,
                               started_in_cluster__isnull=False)
            .order_by()
            .annotate(job=F("job_name"))
            .values("namespace", "job").annotate(first=Min("started_in_cluster"))
            .values_list("namespace", "job", "first"))
    return {(namespace, job): first for namespace, job, first in rows}


class OutlookRow(NamedTuple):
    """The fields of a workload the estimates read (a row, not a model object: a pool's outlook reads every
    waiting and finished workload of its cluster)."""

    pk: int
    namespace: str
    name: str
    phase: str
    priority_class: str
    priority: int | None
    pods: int
    gpus: Decimal
    created_in_cluster: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    active_deadline_seconds: int | None
    gpu_request: dict
    pools_tried: list


@dataclass
class PoolOutlook:
    """What the estimates of one pool read once: its nodes, owners, running workloads (as `fit.Ending`s),
    its waiting workloads in queue order, and the usual run lengths per (project, priority class)."""

    pool: NodePool
    nodes: list[fit.NodeRoom]
    owners: dict[tuple[str, str], fit.Standing]
    running: list[fit.Running]
    endings: list[fit.Ending]
    waiting: list[tuple[OutlookRow, fit.Waiting]]
    usual: dict[tuple[str, str], tuple[float, float] | None]
    # The dry run now of each kind of waiting workload (shape, project, department, enforcer): the same for
    # every workload of that kind, computed once per outlook (`outlook_estimate`).
    verdicts: dict[tuple, fit.Verdict] = field(default_factory=dict)
    # What the estimates of this pool share (`fit.estimate`'s memo: the pool in each target's units), the
    # place of each waiting workload in the queue (by pk) and the reclaim delay per project, each worked out once.
    memo: dict = field(default_factory=dict)
    verdict_memo: dict = field(default_factory=dict)  # `fit.verdict`'s: its nodes and preemptible pods
    index: dict[int, int] = field(default_factory=dict)
    delays: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, (w, _) in enumerate(self.waiting):
            self.index.setdefault(w.pk, i)

    def reclaim_delay(self, project: str) -> float:
        """How long in-quota work of the pool's other owners usually runs (the longest 90th percentile of
        their finished workloads' run times): how much later a borrowing workload may start."""
        if project not in self.delays:
            owners = {name for (kind, name), o in self.owners.items() if kind == "project" and o.deserved > 0
                      and name != project}
            self.delays[project] = max((late for (who, _), length in self.usual.items()
                                        if who in owners and length is not None for _, late in (length,)),
                                       default=0.0)
        return self.delays[project]

    def victims(self) -> list[fit.Running]:
        """The pool's running pods the scheduler may take (the preemptible ones)."""
        if "victims" not in self.memo:
            self.memo["victims"] = [p for p in self.running if p.preemptible]
        return self.memo["victims"]


def _project_names(cluster_id: int) -> tuple[dict[str, tuple[str, str]], dict[str, Any]]:
    """{namespace: (project, department)} and {project name: Project} of a cluster."""
    namespaces = {ns: (p, d) for ns, p, d in ProjectNamespace.objects.filter(cluster_id=cluster_id).values_list(
        "name", "project__name", "project__department__name")}
    projects = {p.name: p for p in Project.objects.filter(cluster_id=cluster_id).select_related("department")}
    return namespaces, projects


def _waiting_and_finished(cluster_id: int) -> list[OutlookRow]:
    """The cluster's waiting (pending, suspended) and finished workloads, oldest first: one query, read once
    per request (`nodepools.memo`: every pool's outlook of a page reads them)."""
    return memoised(("outlook_workloads", cluster_id), lambda: _read_waiting_and_finished(cluster_id))


def _read_waiting_and_finished(cluster_id: int) -> list[OutlookRow]:
    # The JSON columns as text, each distinct text decoded once (as JSONField decodes it): the rows ask a few.
    columns = OutlookRow._fields[:-2]  # all but gpu_request and pools_tried, read below as text
    rows = (Workload.objects.filter(cluster_id=cluster_id)
            .filter(Q(phase__in=("Pending", "Suspended")) | Q(finished_at__isnull=False))
            .annotate(request_text=Cast("gpu_request", TextField()), pools_text=Cast("pools_tried", TextField()))
            .order_by("created_in_cluster", "name").values_list(*columns, "request_text", "pools_text"))
    decoded: dict[str, Any] = {}

    def json_of(text: str | None) -> Any:
        if text is None:
            return None
        if text not in decoded:
            try:
                decoded[text] = json.loads(text)
            except json.JSONDecodeError:
                decoded[text] = text
        return decoded[text]

    return [OutlookRow(*values, json_of(request), json_of(pools)) for *values, request, pools in rows]


def _run_lengths(cluster_id: int, workloads: list[OutlookRow], starts: dict[tuple[str, str], datetime],
                 namespaces: dict[str, tuple[str, str]]) -> tuple[dict, dict]:
    """How long the cluster's finished workloads ran (from their first pod's start, else the Job's): per
    (project, priority class) the usual length (`fit.usual_length`), and the runs of each (project, class,
    lineage). The finished workloads are the same for every pool of the cluster (`_waiting_and_finished`):
    worked out once per request."""
    def compute() -> tuple[dict, dict]:
        runs: dict[tuple[str, str], list[float]] = {}
        # The same workload submitted again ("nightly-train-3" after "-1" and "-2"): its own runs, when it has
        # finished at least twice, say more than its project's and class's.
        again: dict[tuple[str, str, str], list[float]] = {}
        for w in workloads:
            if w.finished_at is None or w.phase not in ("Succeeded", "Failed"):
                continue
            start = starts.get((w.namespace, w.name)) or w.started_at
            project = namespaces.get(w.namespace, ("", ""))[0]
            if start is not None and project and w.finished_at >= start:
                length = (w.finished_at - start).total_seconds()
                runs.setdefault((project, w.priority_class), []).append(length)
                again.setdefault((project, w.priority_class, lineage(w.name)), []).append(length)
        return {key: fit.usual_length(values) for key, values in runs.items()}, again
    return memoised(("outlook_run_lengths", cluster_id), compute)


def pool_outlook(*, user: Any, pool: NodePool, now: datetime | None = None) -> PoolOutlook:
    """Read the facts of the pool's estimates (see PoolOutlook)."""
    now = now or timezone.now()
    namespaces, _ = _project_names(pool.cluster_id)
    nodes = project_selectors.pools_node_room([pool])[pool.pk]
    owners = project_selectors.pool_standings(pool)
    running = project_selectors.pool_running(pool, user=user, preemptible_only=False)
    # The pool's workloads: running ones (their pods are on its nodes) and waiting ones (it is their first pool).
    jobs = {(r.namespace, r.workload) for r in running if r.workload}
    # The waiting and finished ones are the same for every pool of the cluster: read once per request.
    workloads = list(_waiting_and_finished(pool.cluster_id))
    if jobs:
        seen = {w.pk for w in workloads}
        workloads += [OutlookRow(*row) for row in Workload.objects.filter(cluster_id=pool.cluster_id).filter(
            namespace__in={ns for ns, _ in jobs}, name__in={job for _, job in jobs})
            .order_by("created_in_cluster", "name").values_list(*OutlookRow._fields) if row[0] not in seen]
    starts = _first_pod_starts(pool.cluster_id, {w.namespace for w in workloads})
    by_key = {(w.namespace, w.name): w for w in workloads}
    usual, again = _run_lengths(pool.cluster_id, workloads, starts, namespaces)

    lengths: dict[tuple[str, str, str], tuple[float, float] | None] = {}

    def length_of(project: str, klass: str, name: str) -> tuple[float, float] | None:
        key = (project, klass, lineage(name))
        if key not in lengths:  # worked out once per lineage
            own = again.get(key) or []
            lengths[key] = fit.usual_length(own) if len(own) >= 2 else usual.get((project, klass))
        return lengths[key]

    groups: dict[tuple[str, str], list[fit.Running]] = {}
    for pod in running:
        groups.setdefault((pod.namespace, pod.workload or pod.name), []).append(pod)
    endings = []
    for (namespace, job), pods in groups.items():
        w = by_key.get((namespace, job))
        project, department = namespaces.get(namespace, (pods[0].project, pods[0].department))
        klass = w.priority_class if w is not None else ""
        start = starts.get((namespace, job)) or (w.started_at if w is not None else None)
        running_for = (now - start).total_seconds() if start is not None else 0.0
        deadline = None
        if w is not None and w.active_deadline_seconds and w.started_at is not None:
            deadline = w.active_deadline_seconds - (now - w.started_at).total_seconds() + running_for
        soon, late, basis = fit.expected_end(running_for=running_for, deadline=deadline,
                                             usual=length_of(project, klass, job) if w is not None else None)
        endings.append(fit.Ending(f"{namespace}/{job}", project, department, klass, tuple(pods), soon, late, basis))
    waiting = []
    shapes: dict[tuple[str, str], dict[str, Any]] = {}
    for w in workloads:
        if w.phase not in ("Pending", "Suspended") or (w.pools_tried or [pool.name])[0] != pool.name:
            continue
        if (w.namespace, w.name) in groups:  # partly running: its running pods are counted above
            continue
        project, department = namespaces.get(w.namespace, ("", ""))
        pods = max(w.pods or 1, 1)
        # In the units its nodes are judged by: whole GPUs, a MIG profile's slices, a KAI fraction of one GPU.
        each = Decimal(w.gpus or 0) / pods
        if w.gpu_request:
            # The waiting workloads ask a few kinds of GPU request: each kind read once.
            kind = (str(each), repr(w.gpu_request))
            if kind not in shapes:
                shapes[kind] = gpu_shape(each, w.gpu_request)
            gpu = dict(shapes[kind])
        else:
            gpu = {"gpus": int(each)}
        if "profile" not in gpu and "fraction" not in gpu:
            gpu["gpus"] = int(each)
        shape = fit.Shape(pods, priority=w.priority if w.priority is not None else 50, **gpu)
        length = length_of(project, w.priority_class, w.name)
        deadline = float(w.active_deadline_seconds) if w.active_deadline_seconds else None
        soon, late = (length if length is not None else (None, None))
        if deadline is not None:
            soon, late = (min(soon, deadline) if soon is not None else 0.0), min(late, deadline) if late is not None else deadline
        waiting.append((w, fit.Waiting(f"{w.namespace}/{w.name}", project, department, shape, soon, late,
                                       w.priority_class)))
    # The scheduler's order: higher priority first, then older (KAI's order inside a queue).
    waiting.sort(key=lambda item: (-item[1].shape.priority, item[0].created_in_cluster or now, item[0].name))
    return PoolOutlook(pool, nodes, owners, running, endings, waiting, usual)


def outlook_estimate(outlook: PoolOutlook, workload: Workload, *, user: Any, enforcer: str) -> fit.Estimate:
    """The estimate of one waiting workload of the pool."""
    index = outlook.index.get(workload.pk)
    if index is None:
        return fit.Estimate(None, None, "it is not waiting for this pool's nodes")
    _, target = outlook.waiting[index]
    ahead = [waiting for _, waiting in outlook.waiting[:index]]
    project = outlook.owners.get(("project", target.project)) or fit.Standing("project", target.project)
    department = outlook.owners.get(("department", target.department))
    kind = (target.shape, target.project, target.department, enforcer)
    if kind not in outlook.verdicts:
        outlook.verdicts[kind] = fit.verdict(
            shape=target.shape, pool=outlook.pool.name, nodes=outlook.nodes, running=outlook.victims(),
            owners=outlook.owners,
            project=project, department=department, enforced=enforcer in (KAI, KUEUE),
            non_preemptible_rule=enforcer == KAI, domain_key=outlook.pool.topology_label,
            memo=outlook.verdict_memo)
    verdict_now = outlook.verdicts[kind]
    if verdict_now.code == fit.STARTS_NOW and ahead:
        verdict_now = None  # it would fit, but those ahead are served first: simulate
    return fit.estimate(target, nodes=outlook.nodes, endings=outlook.endings, ahead=ahead, owners=outlook.owners,
                        verdict_now=verdict_now, enforced=enforcer in (KAI, KUEUE),
                        non_preemptible_rule=enforcer == KAI, reclaim_delay=outlook.reclaim_delay(target.project),
                        memo=outlook.memo)


def estimate_for_shape(*, user: Any, pool: NodePool, project: Any, shape: fit.Shape, verdict_now: fit.Verdict,
                       klass: str, enforcer: str) -> fit.Estimate:
    """The estimate of a workload not submitted yet (the dry run's "until when"): behind every workload
    waiting for the pool at its priority or higher."""
    outlook = pool_outlook(user=user, pool=pool)
    ahead = [w for _, w in outlook.waiting if w.shape.priority >= shape.priority]
    target = fit.Waiting("(this workload)", project.name, project.department.name, shape, klass=klass)
    owners = project_selectors.pool_standings(pool, extra=(project, shape.total_gpus))
    return fit.estimate(target, nodes=outlook.nodes, endings=outlook.endings, ahead=ahead, owners=owners,
                        verdict_now=verdict_now, enforced=enforcer in (KAI, KUEUE),
                        non_preemptible_rule=enforcer == KAI, reclaim_delay=outlook.reclaim_delay(project.name))

def workloads_attach_estimates(workloads: list[Workload], *, user: Any, now: datetime | None = None) -> list[Workload]:
    """Set `start_estimate` (a `fit.Estimate`, or None when it does not wait) on each of these workloads: the
    pending ones get an estimate from their first pool's outlook (read once per pool)."""
    outlooks: dict[int, PoolOutlook | None] = {}
    enforcers: dict[int, str] = {}
    pools: dict[tuple[int, str], NodePool | None] = {}
    for workload in workloads:
        workload.start_estimate = None
        if not selectors.is_waiting(workload):
            continue
        name = (workload.pools_tried or ["default"])[0]
        key = (workload.cluster_id, name)
        if key not in pools:
            pools[key] = NodePool.objects.filter(cluster_id=workload.cluster_id, name=name).select_related(
                "cluster").first()
        pool = pools[key]
        if pool is None:
            workload.start_estimate = fit.Estimate(None, None, f"its pool {name} is not in the cluster")
            continue
        if pool.pk not in outlooks:
            outlooks[pool.pk] = pool_outlook(user=user, pool=pool, now=now)
        if workload.cluster_id not in enforcers:
            enforcers[workload.cluster_id] = selectors.enforcer_of(pool.cluster)
        workload.start_estimate = outlook_estimate(outlooks[pool.pk], workload, user=user,
                                                   enforcer=enforcers[workload.cluster_id])
    return workloads


selectors.SLOW_ENRICHERS.append(workloads_attach_estimates)
