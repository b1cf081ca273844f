"""Kueue in the emulator, on the store's side: the Job integration, the workload controller, and what the
scheduler (:mod:`kubesim.scheduling.kueue`, a pure function) decides written back to the objects.

One :meth:`KueueMixin.kueue_step` does what Kueue's controllers do between two looks at the cluster, from
Kueue's documentation (site/content/en/docs/concepts/workload.md, workload_priority_class.md,
resource_flavor.md, preemption.md, cluster_queue.md, local_queue.md, and
docs/tasks/manage/monitor_pending_workloads/pending_workloads_on_demand.md for the visibility API) and,
for the exact names and words, its job framework (pkg/controller/jobframework/reconciler.go,
workload_names.go, pkg/controller/jobs/job/job_controller.go, pkg/podset/podset.go):

- every ``batch/v1`` Job with the label ``kueue.x-k8s.io/queue-name`` gets a Workload
  ``job-<job name>-<5 hex of sha1(Kind, group, name, uid)>`` in its namespace, controlled by the Job
  (ownerReference), labelled ``kueue.x-k8s.io/job-uid``, with the Job's annotations, ``spec.queueName``,
  one pod set ``main`` (the Job's template, ``count`` = min(parallelism, completions)), ``active: true``
  and the priority: the WorkloadPriorityClass named by the Job's label ``kueue.x-k8s.io/priority-class``
  (missing: no Workload, and a ``WorkloadPriorityClassNotFound`` warning on the Job), else the pod
  template's PriorityClass (missing: no Workload — Kueue's reconcile fails and retries), else the global
  default PriorityClass, else 0; a ``CreatedWorkload`` event on the Job;
- a Job running without an admitted Workload is suspended ("Not admitted by cluster queue"); a suspended
  Job whose Workload is admitted is started: ``spec.suspend: false``, the assigned flavors' ``nodeLabels``
  merged into the template's ``nodeSelector``, their ``spec.tolerations`` added (a flavor's
  ``nodeTaints`` only decide whether the pods may use it: Kueue adds no toleration for them), the label
  ``kueue.x-k8s.io/podset: main``; a ``Started`` event;
- an evicted Workload's Job is suspended again with its template as the Workload recorded it (the Job
  controller then deletes its pods; ``Stopped`` event); once the Job has no active pod the quota is
  released: ``Requeued=True``, ``QuotaReserved=False`` (``PendingEvaluation``), no ``status.admission``,
  ``Admitted=False`` (``NoReservation``) — and the Workload queues again;
- a Job that completed or failed finishes its Workload (``Finished``, ``Succeeded``/``Failed``); a
  deleted Job's Workload goes (owner references);
- the scheduler's decisions: ``status.admission`` (clusterQueue, podSetAssignments with flavors,
  resourceUsage, count) with ``QuotaReserved`` then ``Admitted`` (``QuotaReserved`` and ``Admitted``
  events), evictions (``Evicted``/``Preempted`` conditions and events, ``PreemptedWorkload`` on the
  preemptor), and the reason and message of every Workload that waits (a warning event when it changes);
- ClusterQueue status (``pendingWorkloads``, ``reservingWorkloads``, ``admittedWorkloads``,
  ``flavorsReservation``, ``flavorsUsage`` with ``borrowed``, condition ``Active``) and LocalQueue status;
- the visibility API's pending workloads (:meth:`KueueMixin.kueue_pending_workloads`, served by the HTTP
  server under ``/apis/visibility.kueue.x-k8s.io/{v1beta1,v1beta2}/``).

Not modelled: finalizers, admission checks, ``spec.active: false``, waitForPodsReady, HoldAndDrain
evictions, partial admission, re-creating a Workload whose Job's template changed while suspended.
"""
from __future__ import annotations

import copy
import hashlib
from collections import Counter
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import orjson

from kube.quantity import QuantityError, parse_quantity
from kube.requests import pod_requests
from kubesim.clock import rfc3339
from kubesim.errors import ApiError
from kubesim.resources import resolve_resource
from kubesim.scheduling import kueue as core
from kubesim.util import Obj

JOBS = "jobs.batch"
WORKLOADS = "workloads.kueue.x-k8s.io"
CLUSTER_QUEUES = "clusterqueues.kueue.x-k8s.io"
LOCAL_QUEUES = "localqueues.kueue.x-k8s.io"
COHORTS = "cohorts.kueue.x-k8s.io"
FLAVORS = "resourceflavors.kueue.x-k8s.io"
WORKLOAD_PRIORITY_CLASSES = "workloadpriorityclasses.kueue.x-k8s.io"
PRIORITY_CLASSES = "priorityclasses.scheduling.k8s.io"
EVENTS = "events"

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PODSET_LABEL = "kueue.x-k8s.io/podset"
DEFAULT_POD_SET = "main"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# Labels the Job controller manages: Kueue leaves them out of the Workload's template (but the job name).
MANAGED_JOB_LABELS = ("job-name", "controller-uid", "batch.kubernetes.io/controller-uid")
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSIONS = ("v1beta1", "v1beta2")
DEFAULT_PENDING_LIMIT, MAX_PENDING_LIMIT = 1000, 100_000
ADMISSION = "kueue-admission"
JOB_CONTROLLER = "batch/job-kueue-controller"
WORKLOAD_CONTROLLER = "kueue-workload-controller"


_WATCHED = (JOBS, WORKLOADS, CLUSTER_QUEUES, LOCAL_QUEUES, COHORTS, FLAVORS, WORKLOAD_PRIORITY_CLASSES, PRIORITY_CLASSES)


def workload_name(job_name: str, job_uid: str) -> str:
    """jobframework GetWorkloadNameForOwnerWithGVK for a batch/v1 Job."""
    prefix = ("job-" + job_name)[: 253 - 1 - 5]
    digest = hashlib.sha1(f"Job\nbatch\n{job_name}\n{job_uid}".encode()).hexdigest()[:5]
    return f"{prefix}-{digest}"


def _condition(obj: Obj, ctype: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), None)


def _true(obj: Obj, ctype: str) -> bool:
    cond = _condition(obj, ctype)
    return cond is not None and cond.get("status") == "True"


def set_condition(obj: Obj, ctype: str, status: str, reason: str, message: str, when: str,
                  generation: int | None = None) -> bool:
    """apimeta.SetStatusCondition: the transition time moves only when the status changes."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    new = {"type": ctype, "status": status, "reason": reason or "Pending", "message": message[:32768],
           "lastTransitionTime": when}
    if generation is not None:
        new["observedGeneration"] = generation
    for i, cond in enumerate(conditions):
        if cond.get("type") != ctype:
            continue
        if cond.get("status") == status:
            new["lastTransitionTime"] = cond.get("lastTransitionTime") or when
        if cond == new:
            return False
        conditions[i] = new
        return True
    conditions.append(new)
    return True


def _quotas(groups: list[Obj]) -> tuple[tuple[core.ResourceGroup, ...], dict[core.FR, core.ResourceQuota]]:
    out_groups, quotas = [], {}
    for group in groups or []:
        flavors = []
        for flavor in group.get("flavors") or []:
            flavors.append(flavor.get("name", ""))
            for res in flavor.get("resources") or []:
                def q(field: str) -> Decimal | None:
                    return None if res.get(field) is None else parse_quantity(res[field])
                quotas[(flavor.get("name", ""), res.get("name", ""))] = core.ResourceQuota(
                    q("nominalQuota") or Decimal(0), q("borrowingLimit"), q("lendingLimit"))
        out_groups.append(core.ResourceGroup(tuple(group.get("coveredResources") or ()), tuple(flavors)))
    return tuple(out_groups), quotas


def _cluster_queue(obj: Obj) -> core.ClusterQueue:
    spec = obj.get("spec") or {}
    groups, quotas = _quotas(spec.get("resourceGroups") or [])
    pre = spec.get("preemption") or {}
    borrow = pre.get("borrowWithinCohort") or {}
    fung = spec.get("flavorFungibility") or {}
    legacy = {"Borrow": core.MAY_STOP_SEARCH, "Preempt": core.MAY_STOP_SEARCH}
    return core.ClusterQueue(
        name=obj["metadata"]["name"], cohort=spec.get("cohortName") or "", resource_groups=groups, quotas=quotas,
        namespace_selector=spec.get("namespaceSelector"),
        queueing_strategy=spec.get("queueingStrategy") or core.BEST_EFFORT_FIFO,
        preemption=core.PreemptionPolicy(
            pre.get("withinClusterQueue") or core.NEVER, pre.get("reclaimWithinCohort") or core.NEVER,
            borrow.get("policy") or core.NEVER, borrow.get("maxPriorityThreshold")),
        fungibility=core.FlavorFungibility(
            legacy.get(fung.get("whenCanBorrow"), fung.get("whenCanBorrow") or core.MAY_STOP_SEARCH),
            legacy.get(fung.get("whenCanPreempt"), fung.get("whenCanPreempt") or core.TRY_NEXT_FLAVOR),
            fung.get("preference") or ""),
        stop_policy=spec.get("stopPolicy") or "None")


def _pod_set(ps: Obj) -> core.PodSet:
    """A pod set as the scheduler reads it (QuantityError when a request is no quantity)."""
    spec = (ps.get("template") or {}).get("spec") or {}
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = affinity.get("nodeSelectorTerms")
    return core.PodSet(ps.get("name") or DEFAULT_POD_SET, int(ps.get("count", 1)), pod_requests({"spec": spec}),
                       dict(spec.get("nodeSelector") or {}), tuple(terms) if terms else None,
                       tuple(t for t in spec.get("tolerations") or [] if isinstance(t, dict)))


def _workload(obj: Obj) -> core.Workload:
    md, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    invalid = ""
    try:
        pod_sets = tuple(_pod_set(ps) for ps in spec.get("podSets") or [])
    except QuantityError as exc:
        pod_sets, invalid = (), str(exc)
    admission = None
    reserved = _condition(obj, core.QUOTA_RESERVED)
    if status.get("admission") and reserved and reserved.get("status") == "True":
        by_name = {ps.name: ps for ps in pod_sets}
        assignments = []
        for psa in status["admission"].get("podSetAssignments") or []:
            ps = by_name.get(psa.get("name") or DEFAULT_POD_SET)
            count = int(psa.get("count", ps.count if ps else 1))
            usage = {r: parse_quantity(v) for r, v in (psa.get("resourceUsage") or {}).items()}
            if not usage and ps is not None:
                usage = {r: core.amount(r, q) * count for r, q in ps.requests.items()}
            assignments.append(core.PodSetAssignment(psa.get("name") or DEFAULT_POD_SET,
                                                     dict(psa.get("flavors") or {}), usage, count))
        admission = core.Admission(status["admission"].get("clusterQueue", ""), tuple(assignments))
    return core.Workload(
        namespace=md.get("namespace", ""), name=md["name"], queue_name=spec.get("queueName") or "",
        pod_sets=pod_sets, priority=int(spec.get("priority") or 0), created=md.get("creationTimestamp", ""),
        uid=md.get("uid", ""), job_uid=(md.get("labels") or {}).get(JOB_UID_LABEL, ""), admission=admission,
        reserved_at=(reserved or {}).get("lastTransitionTime", "") if admission else "",
        evicted=_true(obj, core.EVICTED), finished=_true(obj, core.FINISHED), active=spec.get("active", True) is not False,
        invalid=invalid)


def _job_owner(wl: Obj) -> str:
    """The uid of the Job controlling a Workload ('' for none)."""
    for ref in wl["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1" and ref.get("controller"):
            return ref.get("uid", "")
    return ""


def _job_finished(job: Obj) -> tuple[str, str] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return ("Succeeded" if cond["type"] == "Complete" else "Failed"), cond.get("message") or ""
    return None


def _job_active(job: Obj) -> bool:
    return int((job.get("status") or {}).get("active") or 0) > 0


def _pod_set_count(job: Obj) -> int:
    spec = job.get("spec") or {}
    count = int(spec.get("parallelism", 1) if spec.get("parallelism") is not None else 1)
    if spec.get("completions") is not None:
        count = min(count, int(spec["completions"]))
    return count


class KueueMixin:
    """Part of :class:`kubesim.KubeEmulator`: Kueue's controllers and scheduler, one step at a time."""

    #: At most this many release → schedule rounds per step (each round settles the scheduler).
    kueue_max_rounds = 20

    def _init_kueue(self) -> None:
        """Put Kueue into the controller loop's schedulers' slot (:meth:`kubesim.controllers.ControllersMixin.tick`)."""
        # resource -> key -> (resourceVersion, object, what was derived from it): each object parsed once.
        self._kueue_cache: dict[str, dict[Any, tuple[int, Obj, dict[str, Any]]]] = {}
        self._kueue_seen: tuple[Any, ...] = ()  # what the store held when the last step ended
        self.register_scheduler(_kueue_loop_step)  # type: ignore[attr-defined]

    def _kueue_fingerprint(self) -> tuple[Any, ...]:
        """What Kueue watches, in brief: the newest resourceVersion of each kind it reads (any write, delete
        included, moves it) and the namespaces' labels. Lock held."""
        kinds = tuple(self._kind_rv.get(resolve_resource(r).key, 0) for r in _WATCHED)  # type: ignore[attr-defined]
        labels = tuple(sorted((ns, tuple(sorted(v.items()))) for ns, v in self._namespace_labels.items()))  # type: ignore[attr-defined]
        return kinds, len(self._namespace_meta), labels  # type: ignore[attr-defined]

    def _kueue_entries(self, resource: str) -> list[tuple[Obj, dict[str, Any]]]:
        """Every object of a resource with its memo, parsed once per resourceVersion, like an informer's
        cache. The objects are shared: read them, never change them (an update works on its own copy)."""
        kind = resolve_resource(resource).key
        cache = self._kueue_cache.setdefault(kind, {})
        out = []
        with self._lock:  # type: ignore[attr-defined]
            store = self._stores[kind]  # type: ignore[attr-defined]
            for key in store.keys:
                data, rv = store.entries[key][0], store.entries[key][1]
                hit = cache.get(key)
                if hit is None or hit[0] != rv:
                    hit = cache[key] = (rv, orjson.loads(data), {})
                out.append((hit[1], hit[2]))
            if len(cache) > len(store.keys):
                for key in set(cache) - set(store.keys):
                    del cache[key]
        return out

    def _kueue_list(self, resource: str) -> list[Obj]:
        return [obj for obj, _ in self._kueue_entries(resource)]

    # ------------------------------------------------------------------ the step

    def kueue_step(self) -> dict[str, int]:
        """Run Kueue's controllers and scheduler once over the store, now on the emulator's clock; returns
        what happened (counts of ``created``, ``admitted``, ``preempted``, ``released``, ``finished``,
        ``stopped``, ``started``). Reads next to nothing when nothing Kueue watches changed."""
        counts: Counter[str] = Counter()
        when = rfc3339(self.clock.now())  # type: ignore[attr-defined]
        with self._lock:  # type: ignore[attr-defined]
            if self._kueue_fingerprint() == self._kueue_seen:
                return dict(counts)  # nothing Kueue watches changed since the last step: it has nothing to do
            self._kueue_reconcile_jobs(when, counts)
            for _ in range(self.kueue_max_rounds):
                released = self._kueue_handle_evicted(when, counts)
                snap = self._kueue_snapshot(when)
                decisions = core.schedule(snap)
                self._kueue_apply(snap, decisions, when, counts)
                if not decisions.evicted and not released:
                    break
            self._kueue_start_admitted(when, counts)
            self._kueue_write_status(self._kueue_snapshot(when), when)
            self._kueue_seen = self._kueue_fingerprint()
        return dict(counts)

    def _kueue_jobs(self) -> list[Obj]:
        return [j for j in self._kueue_list(JOBS) if (j["metadata"].get("labels") or {}).get(QUEUE_LABEL)]

    def _kueue_workloads_by_job(self) -> dict[str, Obj]:
        return {_job_owner(w): w for w in self._kueue_list(WORKLOADS) if _job_owner(w)}

    # ------------------------------------------------------------------ the Job integration

    def _kueue_reconcile_jobs(self, when: str, counts: Counter[str]) -> None:
        jobs = self._kueue_jobs()
        by_job = self._kueue_workloads_by_job()
        job_uids = {j["metadata"].get("uid") for j in self._kueue_list(JOBS)}
        for uid, wl in by_job.items():
            if uid not in job_uids:  # the owner is gone: garbage collection
                self.delete(WORKLOADS, wl["metadata"]["name"], wl["metadata"]["namespace"])  # type: ignore[attr-defined]
        for job in jobs:
            md = job["metadata"]
            wl = by_job.get(md.get("uid", ""))
            if wl is None:
                if _job_finished(job) is None:
                    self._kueue_create_workload(job, when, counts)
                continue
            finished = _job_finished(job)
            if finished is not None:
                if not _true(wl, core.FINISHED):
                    self._kueue_finish(wl, job, finished, when)
                    counts["finished"] += 1
                continue
            queue = (md.get("labels") or {}).get(QUEUE_LABEL)
            if queue != (wl.get("spec") or {}).get("queueName") and not _true(wl, core.QUOTA_RESERVED):
                self.update(WORKLOADS, wl["metadata"]["name"], {"spec": {"queueName": queue}},  # type: ignore[attr-defined]
                            wl["metadata"]["namespace"], patch_type="merge")
            if not (job.get("spec") or {}).get("suspend") and not _true(wl, core.ADMITTED):
                self._kueue_stop_job(job, wl, "Not admitted by cluster queue", when)
                counts["stopped"] += 1

    def _kueue_priority(self, job: Obj, when: str) -> tuple[Obj | None, int] | None:
        """ExtractPriority: (priorityClassRef, priority), or None when the named class does not exist."""
        wpc_name = (job["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL)
        if wpc_name:
            wpc = self.get(WORKLOAD_PRIORITY_CLASSES, wpc_name)  # type: ignore[attr-defined]
            if wpc is None:
                self._kueue_event(job, "Job", "batch/v1", "Warning", "WorkloadPriorityClassNotFound",
                                  f'WorkloadPriorityClass "{wpc_name}" not found', when, JOB_CONTROLLER)
                return None
            return {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": wpc_name}, int(wpc.get("value", 0))
        pc_name = (((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("priorityClassName")
        if pc_name:
            pc = self.get(PRIORITY_CLASSES, pc_name)  # type: ignore[attr-defined]
            if pc is None:
                return None  # Kueue's reconcile of the Job fails (PriorityClass not found) and is retried
            return {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": pc_name}, int(pc.get("value", 0))
        defaults = sorted((int(pc.get("value", 0)), pc["metadata"]["name"]) for pc in self.list(PRIORITY_CLASSES)  # type: ignore[attr-defined]
                          if pc.get("globalDefault"))
        if defaults:
            value, name = defaults[0]
            return {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": name}, value
        return None, 0

    def _kueue_create_workload(self, job: Obj, when: str, counts: Counter[str]) -> None:
        md = job["metadata"]
        priority = self._kueue_priority(job, when)
        if priority is None:
            return
        ref, value = priority
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        labels = (template.get("metadata") or {}).get("labels")
        if labels:
            for key in MANAGED_JOB_LABELS:
                labels.pop(key, None)
        spec: Obj = {"active": True, "queueName": md["labels"][QUEUE_LABEL],
                     "podSets": [{"name": DEFAULT_POD_SET, "count": _pod_set_count(job), "template": template}],
                     "priority": value}
        if ref is not None:
            spec["priorityClassRef"] = ref
        meta: Obj = {"name": workload_name(md["name"], md.get("uid", "")), "namespace": md["namespace"],
                     "labels": {JOB_UID_LABEL: md.get("uid", "")},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": md["name"],
                                          "uid": md.get("uid", ""), "controller": True, "blockOwnerDeletion": True}]}
        if md.get("annotations"):
            meta["annotations"] = dict(md["annotations"])
        wl = self.create(WORKLOADS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",  # type: ignore[attr-defined]
                                     "metadata": meta, "spec": spec})
        counts["created"] += 1
        self._kueue_event(job, "Job", "batch/v1", "Normal", "CreatedWorkload",
                          f"Created Workload: {md['namespace']}/{wl['metadata']['name']}", when, JOB_CONTROLLER)

    def _kueue_finish(self, wl: Obj, job: Obj, finished: tuple[str, str], when: str) -> None:
        reason, message = finished

        def change(obj: Obj) -> None:
            set_condition(obj, core.FINISHED, "True", reason, message, when, obj["metadata"].get("generation"))

        md = wl["metadata"]
        self.update(WORKLOADS, md["name"], change, md["namespace"], subresource="status")  # type: ignore[attr-defined]
        self._kueue_event(job, "Job", "batch/v1", "Normal", "FinishedWorkload",
                          f"Workload '{md['namespace']}/{md['name']}' is declared finished", when, JOB_CONTROLLER)

    def _kueue_flavors(self) -> dict[str, Obj]:
        return {f["metadata"]["name"]: f for f in self._kueue_list(FLAVORS)}

    def _kueue_start_admitted(self, when: str, counts: Counter[str]) -> None:
        """startJob: a suspended Job whose Workload is admitted runs, on its flavors' nodes."""
        jobs = {j["metadata"].get("uid"): j for j in self._kueue_jobs()}
        flavors = None
        for uid, wl in self._kueue_workloads_by_job().items():
            job = jobs.get(uid)
            if job is None or not (job.get("spec") or {}).get("suspend") or not _true(wl, core.ADMITTED):
                continue
            if _true(wl, core.EVICTED) or _true(wl, core.FINISHED):
                continue
            flavors = flavors if flavors is not None else self._kueue_flavors()
            admission = (wl.get("status") or {}).get("admission") or {}
            assignment = next(iter(admission.get("podSetAssignments") or []), {})
            node_labels: dict[str, str] = {}
            tolerations: list[Obj] = []
            for flavor_name in dict.fromkeys((assignment.get("flavors") or {}).values()):
                fspec = (flavors.get(flavor_name) or {}).get("spec") or {}
                node_labels.update(fspec.get("nodeLabels") or {})
                tolerations.extend(fspec.get("tolerations") or [])
            template_spec = (((job.get("spec") or {}).get("template") or {}).get("spec") or {})
            selector = template_spec.get("nodeSelector") or {}
            if any(k in selector and selector[k] != v for k, v in node_labels.items()):
                continue  # podset.Merge refuses a conflicting nodeSelector: the Job stays suspended

            def start(j: Obj) -> None:
                spec = j.setdefault("spec", {})
                spec["suspend"] = False
                template = spec.setdefault("template", {})
                template.setdefault("metadata", {}).setdefault("labels", {})[PODSET_LABEL] = (
                    assignment.get("name") or DEFAULT_POD_SET)
                pod = template.setdefault("spec", {})
                if node_labels:
                    pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **node_labels}
                have = list(pod.get("tolerations") or [])
                for tol in tolerations:
                    if tol not in have:
                        have.append(tol)
                if have:
                    pod["tolerations"] = have

            md = job["metadata"]
            self.update(JOBS, md["name"], start, md["namespace"])  # type: ignore[attr-defined]
            counts["started"] += 1
            self._kueue_event(job, "Job", "batch/v1", "Normal", "Started",
                              f"Admitted by clusterQueue {admission.get('clusterQueue', '')}", when, JOB_CONTROLLER)

    def _kueue_stop_job(self, job: Obj, wl: Obj | None, message: str, when: str) -> None:
        """stopJob: suspend, and put the pod template back as the Workload recorded it."""
        original = None
        if wl is not None:
            original = next(iter((wl.get("spec") or {}).get("podSets") or []), {}).get("template")

        def stop(j: Obj) -> None:
            spec = j.setdefault("spec", {})
            spec["suspend"] = True
            if original is None:
                return
            template = spec.setdefault("template", {})
            meta = template.setdefault("metadata", {})
            labels = {k: v for k, v in (meta.get("labels") or {}).items() if k in MANAGED_JOB_LABELS + (JOB_NAME_LABEL,)}
            labels.update((original.get("metadata") or {}).get("labels") or {})
            if labels:
                meta["labels"] = labels
            else:
                meta.pop("labels", None)
            if (original.get("metadata") or {}).get("annotations"):
                meta["annotations"] = dict(original["metadata"]["annotations"])
            else:
                meta.pop("annotations", None)
            pod = template.setdefault("spec", {})
            for field in ("nodeSelector", "tolerations", "schedulingGates"):
                value = (original.get("spec") or {}).get(field)
                if value:
                    pod[field] = copy.deepcopy(value)
                else:
                    pod.pop(field, None)

        md = job["metadata"]
        self.update(JOBS, md["name"], stop, md["namespace"])  # type: ignore[attr-defined]
        self._kueue_event(job, "Job", "batch/v1", "Normal", "Stopped", message, when, JOB_CONTROLLER)

    def _kueue_handle_evicted(self, when: str, counts: Counter[str]) -> int:
        """An evicted Workload's Job is stopped; once it has no active pod, the quota is released."""
        jobs = {j["metadata"].get("uid"): j for j in self._kueue_jobs()}
        released = 0
        for uid, wl in self._kueue_workloads_by_job().items():
            evicted = _condition(wl, core.EVICTED)
            if not (evicted and evicted.get("status") == "True" and _true(wl, core.QUOTA_RESERVED)):
                continue
            job = jobs.get(uid)
            if job is not None and not (job.get("spec") or {}).get("suspend"):
                self._kueue_stop_job(job, wl, evicted.get("message", ""), when)
                counts["stopped"] += 1
                job = self.get(JOBS, job["metadata"]["name"], job["metadata"]["namespace"])  # type: ignore[attr-defined]
            if job is not None and _job_active(job):
                continue  # the Job controller has not deleted the pods yet

            def release(obj: Obj, ev: Obj = evicted) -> None:
                gen = obj["metadata"].get("generation")
                requeued = ev.get("reason") == core.PREEMPTED or ev.get("reason") == "NodeFailures"
                set_condition(obj, core.REQUEUED, "True" if requeued else "False", ev.get("reason", ""),
                              ev.get("message", ""), when, gen)
                set_condition(obj, core.QUOTA_RESERVED, "False", core.PENDING_EVALUATION, ev.get("message", ""),
                              when, gen)
                obj["status"].pop("admission", None)
                set_condition(obj, core.ADMITTED, "False", core.NO_RESERVATION, "The workload has no reservation",
                              when, gen)

            md = wl["metadata"]
            self.update(WORKLOADS, md["name"], release, md["namespace"], subresource="status")  # type: ignore[attr-defined]
            released += 1
            counts["released"] += 1
        return released

    # ------------------------------------------------------------------ the scheduler's view and decisions

    def _kueue_snapshot(self, when: str) -> core.Snapshot:
        flavors = {}
        for f in self._kueue_list(FLAVORS):
            spec = f.get("spec") or {}
            flavors[f["metadata"]["name"]] = core.Flavor(
                f["metadata"]["name"], dict(spec.get("nodeLabels") or {}),
                tuple(t for t in spec.get("nodeTaints") or [] if isinstance(t, dict)),
                tuple(t for t in spec.get("tolerations") or [] if isinstance(t, dict)))
        cohorts = {}
        for c in self._kueue_list(COHORTS):
            spec = c.get("spec") or {}
            cohorts[c["metadata"]["name"]] = core.Cohort(c["metadata"]["name"], spec.get("parentName") or "",
                                                         _quotas(spec.get("resourceGroups") or [])[1])
        local = {}
        for lq in self._kueue_list(LOCAL_QUEUES):
            md, spec = lq["metadata"], lq.get("spec") or {}
            local[(md["namespace"], md["name"])] = core.LocalQueue(md["namespace"], md["name"],
                                                                   spec.get("clusterQueue") or "",
                                                                   spec.get("stopPolicy") or "None")
        namespaces = {ns["metadata"]["name"]: ns["metadata"].get("labels") or {}
                      for ns in self._namespace_objects(None, None)}  # type: ignore[attr-defined]
        workloads = []
        for obj, memo in self._kueue_entries(WORKLOADS):
            if "workload" not in memo:
                memo["workload"] = _workload(obj)
            workloads.append(memo["workload"])
        return core.Snapshot(
            flavors=flavors, cluster_queues={cq["metadata"]["name"]: _cluster_queue(cq)
                                             for cq in self._kueue_list(CLUSTER_QUEUES)},
            cohorts=cohorts, local_queues=local, namespaces=namespaces, workloads=tuple(workloads), now=when)

    def _kueue_apply(self, snap: core.Snapshot, decisions: core.Decisions, when: str, counts: Counter[str]) -> None:
        by_key = {w.key: w for w in snap.workloads}
        objects = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in self._kueue_list(WORKLOADS)}
        for key, admission in decisions.admitted.items():
            self._kueue_admit(by_key[key], admission, when)
            counts["admitted"] += 1
        for key, eviction in decisions.evicted.items():
            admission = by_key[key].admission or decisions.admitted[key]  # admitted in an earlier cycle of this step
            self._kueue_evict(by_key[key], by_key[eviction.preemptor], eviction, admission.cluster_queue, when)
            counts["preempted"] += 1
        for key, (reason, message) in decisions.pending.items():
            if key not in decisions.admitted and key in objects:
                self._kueue_pending(by_key[key], reason, message, when, objects[key])

    def _kueue_admit(self, wl: core.Workload, admission: core.Admission, when: str) -> None:
        body = {"clusterQueue": admission.cluster_queue, "podSetAssignments": [
            {"name": ps.name, "flavors": dict(ps.flavors),
             "resourceUsage": {r: core.format_quantity(r, v) for r, v in sorted(ps.usage.items())},
             "count": ps.count} for ps in admission.pod_sets]}
        queued_since = wl.created
        previous: list[Obj] = []

        def change(obj: Obj) -> None:
            gen = obj["metadata"].get("generation")
            status = obj.setdefault("status", {})
            status["admission"] = body
            set_condition(obj, core.QUOTA_RESERVED, "True", "QuotaReserved",
                          f"Quota reserved in ClusterQueue {admission.cluster_queue}", when, gen)
            for ctype in (core.EVICTED, core.PREEMPTED):
                cond = _condition(obj, ctype)
                if cond and cond.get("status") == "True":
                    set_condition(obj, ctype, "False", "QuotaReserved", "Previously: " + cond.get("message", ""), when, gen)
            requeued = _condition(obj, core.REQUEUED)
            previous.append(requeued or {})
            set_condition(obj, core.ADMITTED, "True", "Admitted", "The workload is admitted", when, gen)

        self.update(WORKLOADS, wl.name, change, wl.namespace, subresource="status")  # type: ignore[attr-defined]
        if previous and previous[0].get("lastTransitionTime"):
            queued_since = previous[0]["lastTransitionTime"]
        wait = max(0, round(core._epoch(when) - core._epoch(queued_since)))
        obj = {"metadata": {"name": wl.name, "namespace": wl.namespace, "uid": wl.uid}}
        self._kueue_event(obj, "Workload", "kueue.x-k8s.io/v1beta2", "Normal", "QuotaReserved",
                          f"Quota reserved in ClusterQueue {admission.cluster_queue}, wait time since queued was {wait}s",
                          when, ADMISSION)
        self._kueue_event(obj, "Workload", "kueue.x-k8s.io/v1beta2", "Normal", "Admitted",
                          f"Admitted by ClusterQueue {admission.cluster_queue}, wait time since reservation was 0s",
                          when, ADMISSION)

    def _kueue_evict(self, wl: core.Workload, preemptor: core.Workload, eviction: core.Eviction, cq: str,
                     when: str) -> None:
        def change(obj: Obj) -> None:
            gen = obj["metadata"].get("generation")
            set_condition(obj, core.PREEMPTED, "True", eviction.reason, eviction.message, when)
            set_condition(obj, core.EVICTED, "True", core.PREEMPTED, eviction.message, when, gen)

        self.update(WORKLOADS, wl.name, change, wl.namespace, subresource="status")  # type: ignore[attr-defined]
        obj = {"metadata": {"name": wl.name, "namespace": wl.namespace, "uid": wl.uid}}
        prio = (f"; preemptor effective priority: {preemptor.priority} (base: {preemptor.priority}, boost: 0); "
                f"preemptee effective priority: {wl.priority} (base: {wl.priority}, boost: 0)")
        self._kueue_event(obj, "Workload", "kueue.x-k8s.io/v1beta2", "Normal", "Preempted", eviction.message + prio,
                          when, ADMISSION)
        self._kueue_event(obj, "Workload", "kueue.x-k8s.io/v1beta2", "Normal", "EvictedDueToPreempted",
                          eviction.message, when, ADMISSION)
        self._kueue_event({"metadata": {"name": preemptor.name, "namespace": preemptor.namespace, "uid": preemptor.uid}},
                          "Workload", "kueue.x-k8s.io/v1beta2", "Normal", "PreemptedWorkload",
                          f"Preempted workload {wl.namespace}/{wl.name} (UID: {wl.uid}) in ClusterQueue {cq}{prio}",
                          when, ADMISSION)
        job = next((j for j in self._kueue_jobs() if j["metadata"].get("uid") == wl.job_uid), None) if wl.job_uid else None
        if job is not None and not (job.get("spec") or {}).get("suspend"):
            self._kueue_stop_job(job, self.get(WORKLOADS, wl.name, wl.namespace), eviction.message, when)  # type: ignore[attr-defined]

    def _kueue_pending(self, wl: core.Workload, reason: str, message: str, when: str, current: Obj) -> None:
        changed: list[bool] = []
        requests = [{"name": ps.name, "resources": {r: core.format_quantity(r, core.amount(r, q) * ps.count)
                                                    for r, q in sorted(ps.requests.items())}} for ps in wl.pod_sets]
        status = current.get("status") or {}
        reserved, admitted = _condition(current, core.QUOTA_RESERVED) or {}, _condition(current, core.ADMITTED) or {}
        if ((reserved.get("status"), reserved.get("reason"), reserved.get("message")) == ("False", reason, message)
                and (admitted.get("status"), admitted.get("reason")) == ("False", core.NO_RESERVATION)
                and "admission" not in status and status.get("resourceRequests") == requests):
            return  # already says so

        def change(obj: Obj) -> None:
            gen = obj["metadata"].get("generation")
            did = set_condition(obj, core.QUOTA_RESERVED, "False", reason, message, when, gen)
            obj["status"].pop("admission", None)
            set_condition(obj, core.ADMITTED, "False", core.NO_RESERVATION, "The workload has no reservation", when, gen)
            obj["status"]["resourceRequests"] = requests
            changed.append(did)

        self.update(WORKLOADS, wl.name, change, wl.namespace, subresource="status")  # type: ignore[attr-defined]
        if changed and changed[0]:
            self._kueue_event({"metadata": {"name": wl.name, "namespace": wl.namespace, "uid": wl.uid}}, "Workload",
                              "kueue.x-k8s.io/v1beta2", "Warning", reason or "Pending", message, when, ADMISSION)

    # ------------------------------------------------------------------ status

    def _kueue_write_status(self, snap: core.Snapshot, when: str) -> None:
        cq_status, lq_status = core.statuses(snap)

        def usage(rows: list[tuple[str, list[core.ResourceUsage]]], borrowed: bool) -> list[Obj]:
            out = []
            for flavor, resources in rows:
                items = []
                for r in resources:
                    item = {"name": r.name, "total": core.format_quantity(r.name, r.total)}
                    if borrowed:
                        item["borrowed"] = core.format_quantity(r.name, r.borrowed)
                    items.append(item)
                out.append({"name": flavor, "resources": items})
            return out

        for name, st in cq_status.items():
            flavors = usage(st.flavors, True)
            self._kueue_set_status(CLUSTER_QUEUES, name, "", {
                "pendingWorkloads": st.pending, "reservingWorkloads": st.reserving, "admittedWorkloads": st.admitted,
                "flavorsReservation": flavors, "flavorsUsage": flavors}, st.active, when)
        for (namespace, name), st in lq_status.items():
            flavors = usage(st.flavors, False)
            self._kueue_set_status(LOCAL_QUEUES, name, namespace, {
                "pendingWorkloads": st.pending, "reservingWorkloads": st.reserving, "admittedWorkloads": st.admitted,
                "flavorsReservation": flavors, "flavorsUsage": flavors}, st.active, when)

    def _kueue_set_status(self, resource: str, name: str, namespace: str, fields: Obj,
                          active: tuple[str, str, str], when: str) -> None:
        def change(obj: Obj) -> None:
            obj.setdefault("status", {}).update(fields)
            set_condition(obj, "Active", active[0], active[1], active[2], when, obj["metadata"].get("generation"))

        current = self.get(resource, name, namespace)  # type: ignore[attr-defined]
        if current is None:
            return
        probe = copy.deepcopy(current)
        change(probe)
        if probe.get("status") != current.get("status"):
            self.update(resource, name, change, namespace, subresource="status")  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ events

    def _kueue_event(self, obj: Obj, kind: str, api_version: str, type_: str, reason: str, message: str, when: str,
                     component: str) -> None:
        md = obj["metadata"]
        digest = hashlib.sha1(f"{kind}/{md['name']}/{reason}/{message}".encode()).hexdigest()[:16]
        name = f"{md['name'][:200]}.{digest}"
        existing = self.get(EVENTS, name, md.get("namespace", "default"))  # type: ignore[attr-defined]
        count = int((existing or {}).get("count") or 0) + 1
        self.upsert(EVENTS, {  # type: ignore[attr-defined]
            "metadata": {"name": name, "namespace": md.get("namespace", "default")},
            "involvedObject": {"kind": kind, "apiVersion": api_version, "name": md["name"],
                               "namespace": md.get("namespace", "default"), "uid": md.get("uid", "")},
            "reason": reason, "message": message[:1024], "type": type_, "count": count,
            "source": {"component": component}, "reportingComponent": component,
            "firstTimestamp": (existing or {}).get("firstTimestamp") or when, "lastTimestamp": when,
        })

    # ------------------------------------------------------------------ the visibility API

    def kueue_pending_workloads(self, version: str, path: list[str], namespace: str | None,
                                query: Mapping[str, str]) -> Obj:
        """GET /apis/visibility.kueue.x-k8s.io/<version>/clusterqueues/<name>/pendingworkloads and
        .../namespaces/<ns>/localqueues/<name>/pendingworkloads: a PendingWorkloadsSummary (queue order,
        ``positionInClusterQueue``, ``positionInLocalQueue``, ``priority``, ``localQueueName``)."""
        kind = {"clusterqueues": "clusterqueue", "localqueues": "localqueue"}.get(path[0] if path else "")
        if (version not in VISIBILITY_VERSIONS or kind is None or len(path) != 3 or path[2] != "pendingworkloads"
                or (kind == "localqueue") != (namespace is not None)):
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        try:
            limit = int(query.get("limit") or DEFAULT_PENDING_LIMIT)
            offset = int(query.get("offset") or 0)
        except ValueError as exc:
            raise ApiError(400, f"invalid limit or offset: {exc}", "BadRequest") from None
        limit, offset = min(max(limit, 0), MAX_PENDING_LIMIT), max(offset, 0)
        name = path[1]
        with self._lock:  # type: ignore[attr-defined]
            snap = self._kueue_snapshot(rfc3339(self.clock.now()))  # type: ignore[attr-defined]
            objects = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in self._kueue_list(WORKLOADS)}
        not_found = ApiError(404, f'{kind}.{VISIBILITY_GROUP} "{name}" not found', "NotFound",
                             details={"name": name, "group": VISIBILITY_GROUP, "kind": kind})
        if kind == "clusterqueue":
            if name not in snap.cluster_queues:
                raise not_found
            cq_name = name
        else:
            lq = snap.local_queues.get((namespace or "", name))
            if lq is None:
                raise not_found
            cq_name = lq.cluster_queue
        pending = core.pending_workloads(snap).get(cq_name, [])
        items: list[Obj] = []
        in_lq: Counter[tuple[str, str]] = Counter()
        skipped = 0
        for position, wl in enumerate(pending):
            lq_key = (wl.namespace, wl.queue_name)
            lq_position = in_lq[lq_key]
            in_lq[lq_key] += 1
            if kind == "localqueue" and lq_key != (namespace, name):
                continue
            if kind == "clusterqueue" and position < offset:
                continue
            if kind == "localqueue" and skipped < offset:
                skipped += 1
                continue
            if len(items) >= limit:
                break
            refs = [{k: r[k] for k in ("apiVersion", "kind", "name", "uid") if k in r}
                    for r in objects[wl.key]["metadata"].get("ownerReferences") or []]
            items.append({"metadata": {"name": wl.name, "namespace": wl.namespace, "creationTimestamp": wl.created,
                                       "ownerReferences": refs},
                          "priority": wl.priority, "localQueueName": wl.queue_name,
                          "positionInClusterQueue": position, "positionInLocalQueue": lq_position})
        return {"kind": "PendingWorkloadsSummary", "apiVersion": f"{VISIBILITY_GROUP}/{version}",
                "metadata": {"creationTimestamp": None}, "items": items}


def _kueue_loop_step(emu: KueueMixin) -> list[str]:
    done = emu.kueue_step()
    return [f"kueue: {', '.join(f'{v} {k}' for k, v in done.items() if v)}"] if any(done.values()) else []
