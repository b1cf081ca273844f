"""The emulator's KAI Scheduler (kubesim.scheduling.kai), held to what KAI's documentation promises, with the
objects the console writes: its Queues, SchedulingShards and PriorityClasses (enforcers.desired) and its Jobs
(workloads.render), created over HTTP with the official Kubernetes client; the controller loop ticks on a
manual clock (Job controller, schedulers, kubelets); what a user reads back is what KAI writes.

The fair-share division itself is also checked on its own, with Hypothesis, against the documented algorithm.
"""
from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client

from enforcers import desired
from kubesim import KubeEmulator, make_node
from kubesim.scheduling import kai_share as ks
from workloads import render

POOL = "console.gpu-capacity.io/node-pool"
NS = "runai-work"
KAI = ("scheduling.run.ai", "v2alpha2", "podgroups")


@pytest.fixture
def api(manual_api) -> client.ApiClient:
    return manual_api


def quota(gpus: int, *, limit: int | None = None, weight: int = 2, rank: int = 3) -> desired.QuotaState:
    return desired.QuotaState(gpu_deserved=Decimal(gpus), gpu_limit=None if limit is None else Decimal(limit),
                              over_quota_weight=weight, rank=rank)


def apply_org(api: client.ApiClient, *, pools: dict[str, str], department: dict[str, desired.QuotaState],
              projects: dict[str, dict[str, desired.QuotaState]], allow_over_quota: bool = True) -> None:
    """What the console's KAI enforcer writes for one department and its projects (pool -> GPU placement)."""
    state = desired.OrgState(
        cluster="lab",
        pools=tuple(desired.PoolState(name=name, gpu_placement=placement) for name, placement in pools.items()),
        departments=(desired.DepartmentState(name="rnd", quotas=department),),
        projects=tuple(desired.ProjectState(name=name, department="rnd", namespaces=(NS,), quotas=quotas,
                                            allow_over_quota=allow_over_quota) for name, quotas in projects.items()))
    custom = client.CustomObjectsApi(api)
    for obj in desired.kai_objects(state):
        if obj["kind"] == "PriorityClass":
            client.SchedulingV1Api(api).create_priority_class(obj)
        else:
            group, version = obj["apiVersion"].split("/")
            plural = {"Queue": "queues", "SchedulingShard": "schedulingshards"}[obj["kind"]]
            custom.create_cluster_custom_object(group, version, plural, obj)


def nodes(manual_sim: KubeEmulator, pool: str, count: int, gpus: int = 8) -> None:
    """Nodes as the console leaves them: its pool label stamped on each."""
    for i in range(count):
        manual_sim.add_node(make_node(f"{pool}-{i}", gpus=gpus, labels={POOL: pool}))


def submit(api: client.ApiClient, name: str, project: str, pool: str, *, pods: int, gpus: int = 1,
           priority_class: str = "train", gang: bool = True, run_seconds: int | None = None) -> client.V1Job:
    """The Job the console submits for a project in a pool with KAI enforcement (its pods a gang when there
    are several); ``gang=False``: the same Job without the console's min-member annotation, a plain Job as
    KAI's docs/batch/batch-job.yaml, whose pods KAI schedules one by one."""
    job = render.job(render.JobSpec(
        name=name, namespace=NS, project=project, image="busybox", pods=pods, gpus=gpus,
        priority_class=priority_class, pools=(render.PoolTarget(name=pool),), enforcer="kai",
        queue=desired.kai_project_queue(project, pool)))
    if not gang:
        job["metadata"]["annotations"].pop(render.KAI_MIN_MEMBER_ANNOTATION, None)
    if run_seconds is not None:
        job["spec"]["template"]["metadata"]["annotations"] = {"emulator.gpu-capacity.io/run-seconds": str(run_seconds)}
    return client.BatchV1Api(api).create_namespaced_job(NS, job)


def pods_of(api: client.ApiClient, job: str) -> list[client.V1Pod]:
    return client.CoreV1Api(api).list_namespaced_pod(NS, label_selector=f"batch.kubernetes.io/job-name={job}").items


def running(api: client.ApiClient, job: str) -> list[client.V1Pod]:
    return [p for p in pods_of(api, job) if p.spec.node_name and not p.metadata.deletion_timestamp]


def pending(api: client.ApiClient, job: str) -> list[client.V1Pod]:
    return [p for p in pods_of(api, job) if not p.spec.node_name]


def condition(pod: client.V1Pod, kind: str = "PodScheduled") -> client.V1PodCondition | None:
    return next((c for c in pod.status.conditions or [] if c.type == kind), None)


def pod_group(api: client.ApiClient, name: str) -> dict:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(*KAI[:2], NS, KAI[2], name)


def events(api: client.ApiClient, reason: str, name: str | None = None) -> list[client.CoreV1Event]:
    selector = f"reason={reason}" + (f",involvedObject.name={name}" if name else "")
    return client.CoreV1Api(api).list_namespaced_event(NS, field_selector=selector).items


def queue_status(api: client.ApiClient, name: str) -> dict:
    return client.CustomObjectsApi(api).get_cluster_custom_object("scheduling.run.ai", "v2", "queues", name)["status"]


def settle(manual_sim: KubeEmulator, ticks: int = 3) -> None:
    for _ in range(ticks):
        manual_sim.tick()
        manual_sim.clock.advance(1)


# ---------------------------------------------------------------------------------------------------
# The pod grouper and gangs


def test_a_plain_jobs_pods_share_one_podgroup_and_are_scheduled_one_by_one(manual_sim, api):
    """KAI's grouper makes one PodGroup per batch/v1 Job, pg-<job>-<job uid> (since v0.15), minMember 1 by
    default ("native k8s batch jobs usually do not require gang scheduling"), with the Job's labels (queue
    and pool) and its priority class."""
    nodes(manual_sim, "a100", 1)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(8)}, projects={"vision": {"a100": quota(8)}})
    job = submit(api, "train", "vision", "a100", pods=3, gpus=3, gang=False)
    settle(manual_sim)
    # 8 GPUs: two of the three 3-GPU pods run, the third waits (minMember 1: no gang).
    assert len(running(api, "train")) == 2 and len(pending(api, "train")) == 1
    name = f"pg-train-{job.metadata.uid}"
    assert {p.metadata.annotations["pod-group-name"] for p in pods_of(api, "train")} == {name}
    group = pod_group(api, name)
    assert group["spec"] == {"minMember": 1, "queue": "vision.a100", "priorityClassName": "train"}
    assert group["metadata"]["labels"][POOL] == "a100"
    assert group["metadata"]["ownerReferences"][0]["kind"] == "Job"
    waiting = pending(api, "train")[0]
    message = ("no nodes with enough resources were found: 1 node(s) didn't have enough resources: GPUs.")
    assert condition(waiting).reason == "Unschedulable" and condition(waiting).message == message
    assert events(api, "Unschedulable", waiting.metadata.name)[0].type == "Warning"
    [event] = events(api, "Unschedulable", name)
    assert event.involved_object.kind == "PodGroup" and event.message == (
        f"PodSchedulingErrors: Resources were not found for pod {NS}/{waiting.metadata.name} due to: {message}.")
    # The Job goes: its PodGroup goes with it (its owner reference).
    client.BatchV1Api(api).delete_namespaced_job("train", NS, propagation_policy="Foreground")
    settle(manual_sim, 4)
    assert client.CustomObjectsApi(api).list_namespaced_custom_object(*KAI[:2], NS, KAI[2])["items"] == []


def test_the_consoles_multi_pod_workload_is_one_gang_that_runs_all_together_or_not_at_all(manual_sim, api):
    """The console marks a KAI Job of several pods as KAI documents for a batch Job (docs/batch/README.md,
    "Min Member Override"): its PodGroup's minMember is its number of pods."""
    nodes(manual_sim, "a100", 3, gpus=2)  # room for 3 pods of 2 GPUs
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(8)}, projects={"vision": {"a100": quota(8)}})
    job = submit(api, "ddp", "vision", "a100", pods=4, gpus=2)
    assert job.metadata.annotations["kai.scheduler/batch-min-member"] == "4"
    settle(manual_sim)
    group = pod_group(api, f"pg-ddp-{job.metadata.uid}")
    assert group["spec"]["minMember"] == 4
    # Three would fit, the gang needs four: all four wait, with KAI's reason on the PodGroup and the pods.
    assert running(api, "ddp") == [] and len(pending(api, "ddp")) == 4
    message = ("PodSchedulingErrors: Resources were found for 3 pods while 4 are required for gang scheduling. "
               "Additional pods cannot be scheduled due to: no nodes with enough resources were found: "
               "3 node(s) didn't have enough resources: GPUs..")
    [scheduling] = group["status"]["schedulingConditions"]
    assert (scheduling["type"], scheduling["nodePool"], scheduling["message"]) == (
        "UnschedulableOnNodePool", "a100", message)
    assert {condition(p).reason for p in pending(api, "ddp")} == {"Unschedulable"}
    assert queue_status(api, "vision.a100")["allocated"]["nvidia.com/gpu"] == "0"
    # Room for the fourth pod: the whole gang starts in one cycle.
    manual_sim.add_node(make_node("a100-3", gpus=2, labels={POOL: "a100"}))
    manual_sim.tick()
    assert len(running(api, "ddp")) == 4
    assert queue_status(api, "vision.a100")["allocated"]["nvidia.com/gpu"] == "8"


def test_a_job_that_skips_the_pod_grouper_joins_the_podgroup_made_for_it(manual_sim, api):
    """docs/batch/README.md "External PodGroups": the PodGroup created explicitly, the pods naming it in
    pod-group-name, the Job annotated kai.scheduler/skip-podgrouper so that the grouper leaves them be."""
    nodes(manual_sim, "a100", 1, gpus=4)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(8)}, projects={"vision": {"a100": quota(8)}})
    client.CustomObjectsApi(api).create_namespaced_custom_object(*KAI[:2], NS, KAI[2], {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": "sweep", "labels": {POOL: "a100"}},
        "spec": {"minMember": 3, "queue": "vision.a100", "priorityClassName": "train"}})
    job = render.job(render.JobSpec(name="sweep", namespace=NS, project="vision", image="busybox", pods=3, gpus=2,
                                    pools=(render.PoolTarget(name="a100"),), enforcer="kai", queue="vision.a100"))
    job["metadata"]["annotations"]["kai.scheduler/skip-podgrouper"] = "true"
    job["spec"]["template"]["metadata"]["annotations"] = {"pod-group-name": "sweep"}
    client.BatchV1Api(api).create_namespaced_job(NS, job)
    settle(manual_sim)
    groups = client.CustomObjectsApi(api).list_namespaced_custom_object(*KAI[:2], NS, KAI[2])["items"]
    assert [g["metadata"]["name"] for g in groups] == ["sweep"]  # no pg-sweep-<uid>: the grouper stayed away
    assert running(api, "sweep") == []  # 3 x 2 GPUs on 4: the gang of 3 waits
    assert pod_group(api, "sweep")["status"]["schedulingConditions"][0]["message"].startswith(
        "PodSchedulingErrors: Resources were found for 2 pods while 3 are required for gang scheduling.")


def test_a_min_member_annotation_that_is_no_number_is_a_pod_grouper_warning(manual_sim, api):
    nodes(manual_sim, "a100", 1)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(8)}, projects={"vision": {"a100": quota(8)}})
    job = render.job(render.JobSpec(name="typo", namespace=NS, project="vision", image="busybox", pods=2, gpus=1,
                                    pools=(render.PoolTarget(name="a100"),), enforcer="kai", queue="vision.a100"))
    job["metadata"]["annotations"]["kai.scheduler/batch-min-member"] = "two"
    client.BatchV1Api(api).create_namespaced_job(NS, job)
    settle(manual_sim)
    assert running(api, "typo") == []
    assert client.CustomObjectsApi(api).list_namespaced_custom_object(*KAI[:2], NS, KAI[2])["items"] == []
    warnings = events(api, "PodGrouperWarning")
    assert len(warnings) == 2 and {(e.type, e.source.component, e.message) for e in warnings} == {(
        "Warning", "pod-grouper",
        'invalid min-member annotation value: strconv.ParseInt: parsing "two": invalid syntax')}


def test_the_pod_grouper_keeps_a_legacy_per_pod_podgroup_and_reads_the_annotation_as_go_does():
    from kubesim.scheduling import kai
    from kubesim.scheduling.fit import pod_info

    pod = pod_info({"metadata": {"name": "train-abcde", "namespace": NS, "uid": "p1", "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j1", "controller": True}]},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main"}]}})
    owner = kai.Owner("batch/v1", "Job", "train", "j1", {}, {kai.MIN_MEMBER_ANNOTATION: "+4"})
    made = kai.pod_group_for(pod, owner, priority_classes={}, node_pool_key=POOL)
    assert (made["metadata"]["name"], made["spec"]["minMember"]) == ("pg-train-j1", 4)
    # Upgraded from v0.14, where each pod had its own PodGroup: that one is kept, with minMember 1.
    kept = kai.pod_group_for(pod, owner, priority_classes={}, node_pool_key=POOL, existing={"pg-train-abcde-j1"})
    assert (kept["metadata"]["name"], kept["spec"]["minMember"]) == ("pg-train-abcde-j1", 1)
    for text, error in (("4.0", "invalid syntax"), ("", "invalid syntax"), ("3000000000", "value out of range")):
        with pytest.raises(kai.GrouperError) as refused:
            kai.pod_group_for(pod, kai.Owner("batch/v1", "Job", "train", "j1", {}, {kai.MIN_MEMBER_ANNOTATION: text}),
                              priority_classes={}, node_pool_key=POOL)
        assert str(refused.value) == f'invalid min-member annotation value: strconv.ParseInt: parsing "{text}": {error}'


def gang(api: client.ApiClient, name: str, *, members: int, min_member: int, gpus: int, queue: str) -> None:
    """A PodGroup made by hand (KAI's way to gang-schedule plain pods) and its pods, naming it."""
    client.CustomObjectsApi(api).create_namespaced_custom_object(*KAI[:2], NS, KAI[2], {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": name, "labels": {POOL: "a100"}},
        "spec": {"minMember": min_member, "queue": queue, "priorityClassName": "train"}})
    for i in range(members):
        client.CoreV1Api(api).create_namespaced_pod(NS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{i}", "annotations": {"pod-group-name": name},
                         "labels": {"kai.scheduler/queue": queue, POOL: "a100"}},
            "spec": {"schedulerName": "kai-scheduler", "restartPolicy": "Never", "containers": [{
                "name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}})


def test_a_gang_runs_all_of_min_member_or_none(manual_sim, api):
    nodes(manual_sim, "a100", 2, gpus=4)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(8)}, projects={"vision": {"a100": quota(8)}})
    gang(api, "mpi", members=3, min_member=3, gpus=3, queue="vision.a100")
    settle(manual_sim)
    core = client.CoreV1Api(api)
    gang_pods = [core.read_namespaced_pod(f"mpi-{i}", NS) for i in range(3)]
    # 3 x 3 GPUs on two 4-GPU nodes: two would fit, the gang needs three, so none runs.
    assert [p.spec.node_name for p in gang_pods] == [None, None, None]
    message = ("PodSchedulingErrors: Resources were found for 2 pods while 3 are required for gang scheduling. "
               "Additional pods cannot be scheduled due to: no nodes with enough resources were found: "
               "2 node(s) didn't have enough resources: GPUs..")
    [scheduling] = pod_group(api, "mpi")["status"]["schedulingConditions"]
    assert scheduling["message"] == message
    [event] = events(api, "Unschedulable", "mpi")
    assert (event.involved_object.kind, event.message, event.source.component) == (
        "PodGroup", message, "kai-scheduler")
    # A third node: the whole gang starts in one cycle.
    manual_sim.add_node(make_node("a100-2", gpus=4, labels={POOL: "a100"}))
    manual_sim.tick()
    assert all(core.read_namespaced_pod(f"mpi-{i}", NS).spec.node_name for i in range(3))
    assert queue_status(api, "vision.a100")["allocated"]["nvidia.com/gpu"] == "9"


def test_a_gang_with_fewer_pods_than_min_member_is_not_ready(manual_sim, api):
    nodes(manual_sim, "a100", 2)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(8)}, projects={"vision": {"a100": quota(8)}})
    gang(api, "half", members=2, min_member=3, gpus=1, queue="vision.a100")
    settle(manual_sim)
    assert all(not client.CoreV1Api(api).read_namespaced_pod(f"half-{i}", NS).spec.node_name for i in range(2))
    assert events(api, "NotReady", "half")[0].message == (
        "Job is not ready for scheduling. Waiting for 3 pods, currently 2 exist, 0 are gated")


# ---------------------------------------------------------------------------------------------------
# Quotas: deserved first, the rest by weight and priority, limits, non-preemptible work within quota


def test_over_quota_gpus_are_divided_by_weight_after_the_deserved_quota(manual_sim, api):
    nodes(manual_sim, "a100", 2)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(16)},
              projects={"vision": {"a100": quota(2, weight=1)}, "nlp": {"a100": quota(2, weight=3)}})
    # Plain Jobs (pods scheduled one by one), to see the division pod by pod.
    submit(api, "vision-train", "vision", "a100", pods=16, gang=False)
    submit(api, "nlp-train", "nlp", "a100", pods=16, gang=False)
    settle(manual_sim)
    # 16 GPUs: 2 + 2 deserved, the 12 left 1:3.
    assert (len(running(api, "vision-train")), len(running(api, "nlp-train"))) == (5, 11)
    assert queue_status(api, "vision.a100")["allocated"]["nvidia.com/gpu"] == "5"
    assert queue_status(api, "vision.a100")["requested"]["nvidia.com/gpu"] == "16"
    assert queue_status(api, "department.rnd.a100")["allocated"]["nvidia.com/gpu"] == "16"


def test_higher_ranked_projects_get_the_over_quota_gpus_first(manual_sim, api):
    nodes(manual_sim, "a100", 2)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(16)},
              projects={"vision": {"a100": quota(2, rank=3)}, "nlp": {"a100": quota(2, rank=6)}})
    submit(api, "vision-train", "vision", "a100", pods=16, gang=False)
    submit(api, "nlp-train", "nlp", "a100", pods=10, gang=False)
    settle(manual_sim)
    # nlp (priority 130) is served to its request before vision (100) gets anything over its quota.
    assert (len(running(api, "vision-train")), len(running(api, "nlp-train"))) == (6, 10)


def test_a_queue_limit_caps_what_it_runs_even_on_an_idle_cluster(manual_sim, api):
    nodes(manual_sim, "a100", 2)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(16)},
              projects={"vision": {"a100": quota(0, limit=4)}, "nlp": {"a100": quota(0, limit=4)}})
    submit(api, "train", "vision", "a100", pods=8, gang=False)
    settle(manual_sim)
    assert len(running(api, "train")) == 4
    waiting = pending(api, "train")
    assert len(waiting) == 4
    message = ("OverLimit: vision in a100 quota has reached the allowable limit of GPUs. Limit is 4 GPUs, "
               "currently 4 GPUs allocated and workload requested 1 GPUs.")
    assert {condition(p).message for p in waiting} == {message}
    # The console's gang of 8 pods can never run under a limit of 4: none of its pods starts.
    submit(api, "ddp", "nlp", "a100", pods=8)
    settle(manual_sim)
    assert running(api, "ddp") == [] and len(pending(api, "ddp")) == 8
    [scheduling] = pod_group(api, pending(api, "ddp")[0].metadata.annotations["pod-group-name"])["status"][
        "schedulingConditions"]
    assert scheduling["message"] == (
        "OverLimit: nlp in a100 quota has reached the allowable limit of GPUs. Limit is 4 GPUs, currently 0 GPUs "
        "allocated and workload requested 8 GPUs.")
    [reason] = scheduling["reasons"]
    assert reason["reason"] == "OverLimit"
    details = reason["details"]["queueDetails"]
    assert details["name"] == "nlp.a100" and details["queueResourceLimits"]["nvidia.com/gpu"] == "4"


def test_non_preemptible_work_is_refused_past_the_deserved_quota_while_training_may_go_over(manual_sim, api):
    nodes(manual_sim, "a100", 2)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(16)},
              projects={"vision": {"a100": quota(2)}})
    submit(api, "serve", "vision", "a100", pods=3, priority_class="inference", gang=False)
    settle(manual_sim)
    assert len(running(api, "serve")) == 2
    [waiting] = pending(api, "serve")
    assert condition(waiting).message == (
        "NonPreemptibleOverQuota: Non-preemptible workload is over quota. Workload requested 1 GPUs, but vision "
        "in a100 quota is 2 GPUs, while 2 GPUs are already allocated for non-preemptible pods. Use a preemptible "
        "workload to go over quota..")
    assert queue_status(api, "vision.a100")["allocatedNonPreemptible"]["nvidia.com/gpu"] == "2"
    # The same project's training (preemptible) uses the idle GPUs over its quota.
    submit(api, "train", "vision", "a100", pods=6)
    settle(manual_sim)
    assert len(running(api, "train")) == 6 and len(pending(api, "serve")) == 1


# ---------------------------------------------------------------------------------------------------
# Taking GPUs back: reclaim between queues, preemption inside one


def job_of(api: client.ApiClient, name: str) -> client.V1Job:
    return client.BatchV1Api(api).read_namespaced_job(name, NS)


def reclaim_scene(manual_sim: KubeEmulator, api: client.ApiClient, *, eviction_condition: bool = True) -> None:
    """vision (quota 2) runs two 2 x 4-GPU workloads on the idle 16-GPU pool, over its quota; then nlp (quota
    2, weight 3) asks 8 GPUs: fair shares are now 8 and 8, so nlp takes 8 back."""
    nodes(manual_sim, "a100", 2)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(16)},
              projects={"vision": {"a100": quota(2, weight=1)}, "nlp": {"a100": quota(2, weight=3)}})
    if not eviction_condition:  # the shard without the console's scheduler flag
        client.CustomObjectsApi(api).patch_cluster_custom_object("kai.scheduler", "v1", "schedulingshards", "a100",
                                                                 {"spec": {"args": None}})
    submit(api, "vision-a", "vision", "a100", pods=2, gpus=4, run_seconds=7200)
    manual_sim.clock.advance(5)
    submit(api, "vision-b", "vision", "a100", pods=2, gpus=4, run_seconds=1800)
    settle(manual_sim)
    assert len(running(api, "vision-a")) == len(running(api, "vision-b")) == 2
    submit(api, "nlp-train", "nlp", "a100", pods=2, gpus=4, run_seconds=600)
    manual_sim.tick()  # its pods are made and grouped, and KAI's cycle reclaims: vision's newest gang goes


def test_a_reclaimed_training_workload_goes_back_to_pending_and_runs_again_later_instead_of_failing(manual_sim, api):
    reclaim_scene(manual_sim, api)
    assert len(running(api, "nlp-train")) == 2 and len(running(api, "vision-a")) == 2
    evicted = pods_of(api, "vision-b")  # stopped, held by the Job's tracking finalizer until counted
    assert len(evicted) == 2 and {p.status.phase for p in evicted} == {"Failed"}
    for pod in evicted:
        disruption = condition(pod, "DisruptionTarget")
        assert (disruption.status, disruption.reason) == ("True", "PreemptionByScheduler")
        assert disruption.message.startswith(f"Pod {NS}/{pod.metadata.name} was preempted by workload {NS}/pg-nlp-train-")
    evict_events = events(api, "Evict")
    assert len(evict_events) == 2 and {e.metadata.annotations["evictor-action-type"] for e in evict_events} == {"reclaim"}
    assert "\nvision in a100 uses <GPU: " in evict_events[0].message
    # The Job's podFailurePolicy ignores the disrupted pods: not a failure (backoffLimit 0 is not reached).
    manual_sim.tick()
    job = job_of(api, "vision-b")
    assert job.status.failed is None and not job.status.conditions
    # Its replacements (after the Job controller's back-off) wait as a gang, with KAI's reason: vision is at its
    # fair share, so it reclaims nothing back.
    manual_sim.clock.advance(30)
    settle(manual_sim, 2)
    waiting = pending(api, "vision-b")
    assert len(waiting) == 2 and {condition(p).reason for p in waiting} == {"Unschedulable"}
    [scheduling] = pod_group(api, waiting[0].metadata.annotations["pod-group-name"])["status"]["schedulingConditions"]
    assert scheduling["message"].startswith("PodSchedulingErrors: Resources were found for 0 pods while 2 are "
                                            "required for gang scheduling.")
    assert queue_status(api, "vision.a100")["allocated"]["nvidia.com/gpu"] == "8"
    assert queue_status(api, "nlp.a100")["allocated"]["nvidia.com/gpu"] == "8"
    # nlp's work ends (600 s): the freed GPUs go to vision-b's gang, which runs again and completes.
    manual_sim.clock.advance(600)
    settle(manual_sim, 3)
    assert [p.status.phase for p in pods_of(api, "nlp-train")] == ["Succeeded", "Succeeded"]
    assert len(running(api, "vision-b")) == 2
    manual_sim.clock.advance(1800)
    settle(manual_sim, 3)
    job = job_of(api, "vision-b")
    assert job.status.succeeded == 2 and job.status.failed is None
    assert {c.type for c in job.status.conditions if c.status == "True"} == {"SuccessCriteriaMet", "Complete"}


def test_without_kais_eviction_condition_a_reclaimed_pod_fails_the_consoles_job(manual_sim, api):
    """KAI sets DisruptionTarget on the pods it evicts only with --update-pod-eviction-condition, which the
    console puts in its SchedulingShards' args: without it a reclaim is a failure to the Job."""
    reclaim_scene(manual_sim, api, eviction_condition=False)
    assert len(running(api, "nlp-train")) == 2
    evicted = pods_of(api, "vision-b")
    assert len(evicted) == 2 and {p.status.phase for p in evicted} == {"Failed"}
    assert all(condition(p, "DisruptionTarget") is None for p in evicted)
    manual_sim.tick()
    job = job_of(api, "vision-b")
    assert job.status.failed == 2
    assert {(c.type, c.reason) for c in job.status.conditions} == {
        ("FailureTarget", "BackoffLimitExceeded"), ("Failed", "BackoffLimitExceeded")}


def test_non_preemptible_pods_are_never_reclaimed(manual_sim, api):
    nodes(manual_sim, "a100", 1)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(8)},
              projects={"vision": {"a100": quota(8)}, "nlp": {"a100": quota(0)}})
    submit(api, "nlp-train", "nlp", "a100", pods=8, gang=False)
    settle(manual_sim)
    assert len(running(api, "nlp-train")) == 8
    # vision (deserved 8) wants its GPUs back from nlp's over-quota training: reclaimed.
    submit(api, "vision-serve", "vision", "a100", pods=4, priority_class="inference")
    settle(manual_sim, 4)
    assert len(running(api, "vision-serve")) == 4 and len(running(api, "nlp-train")) == 4
    nlp_serve = submit(api, "nlp-serve", "nlp", "a100", pods=1, priority_class="build")
    settle(manual_sim)
    # nlp has no quota: its non-preemptible pod is refused, and reclaims nothing.
    assert nlp_serve and len(pending(api, "nlp-serve")) == 1
    assert condition(pending(api, "nlp-serve")[0]).message.startswith("NonPreemptibleOverQuota:")


def test_inside_a_queue_a_higher_priority_workload_preempts_a_lower_one(manual_sim, api):
    """KAI's docs/priority example: a queue limited to its quota, a train pod running, a build pod arrives."""
    nodes(manual_sim, "a100", 1)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(8)},
              projects={"vision": {"a100": quota(4)}}, allow_over_quota=False)
    submit(api, "train", "vision", "a100", pods=4, gang=False)
    settle(manual_sim)
    assert len(running(api, "train")) == 4
    submit(api, "build", "vision", "a100", pods=1, priority_class="build")
    settle(manual_sim, 4)
    assert len(running(api, "build")) == 1 and len(running(api, "train")) == 3
    [evicted] = events(api, "Evict")
    assert evicted.message.startswith(f"Pod {NS}/train-")
    assert evicted.message.endswith(f"was preempted by higher priority workload {NS}/"
                                    f"{running(api, 'build')[0].metadata.annotations['pod-group-name']}")
    assert evicted.metadata.annotations["evictor-action-type"] == "preempt"
    # The Job controller replaces the evicted pod after its back-off (10 s); the new pod waits: the queue is at
    # its limit.
    manual_sim.clock.advance(15)
    settle(manual_sim, 2)
    assert condition(pending(api, "train")[0]).message.startswith("OverLimit: vision in a100 quota has reached")


def zero_fair_share_scene(manual_sim: KubeEmulator, api: client.ApiClient) -> None:
    """8 GPUs on two nodes, one department (quota 8): big serves on 6 of them (its quota); p2 (quota 0, the
    lowest rank: no over-quota share while p3 asks) runs two 1-GPU build-preemptible pods on a100-1, over
    its fair share of 0; p3 (quota 1, weight 2) has a fair share of 2 as soon as it asks (its quota, then the
    GPUs left over, ahead of p2's lower queue priority)."""
    nodes(manual_sim, "a100", 2, gpus=4)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(8)},
              projects={"big": {"a100": quota(6)}, "p2": {"a100": quota(0, weight=1, rank=1)},
                        "p3": {"a100": quota(1, weight=2)}})
    submit(api, "big-serve", "big", "a100", pods=6, priority_class="inference", gang=False)
    settle(manual_sim)
    submit(api, "p2-build", "p2", "a100", pods=2, priority_class="build-preemptible", gang=False)
    settle(manual_sim)
    assert {p.spec.node_name for p in running(api, "p2-build")} == {"a100-1"}


def test_a_queue_below_its_fair_share_reclaims_from_a_queue_whose_fair_share_is_0(manual_sim, api):
    """docs/fairness/README.md, "Reclaim Strategies": workloads of a queue below its fair share evict those of
    queues over theirs — a fair share of 0 included."""
    zero_fair_share_scene(manual_sim, api)
    submit(api, "p3-build", "p3", "a100", pods=1, gpus=2, priority_class="build-preemptible")
    settle(manual_sim, 4)
    assert [p.spec.node_name for p in running(api, "p3-build")] == ["a100-1"]
    assert running(api, "p2-build") == [] and len(running(api, "big-serve")) == 6
    assert {e.metadata.annotations["evictor-action-type"] for e in events(api, "Evict")} == {"reclaim"}
    assert queue_status(api, "p3.a100")["allocated"]["nvidia.com/gpu"] == "2"


def test_a_gang_that_would_pass_its_queues_fair_share_reclaims_nothing(manual_sim, api):
    """The loop-agreement case once reported as a missing reclaim: p3's workload is a gang of two 2-GPU pods
    (4 GPUs at once, minMember 2) for a fair share of 2. A queue may reclaim only if it stays within its fair
    share with the job, and its saturation after the transfer stays below its siblings' (docs/fairness/
    README.md, "Fair Share" and "Reclaim Strategies"); nor does it pass its quota (1), the other strategy. And
    freeing p2's two GPUs would make room for one of the two pods only. Nothing is reclaimed; the gang says
    why it waits."""
    zero_fair_share_scene(manual_sim, api)
    submit(api, "p3-ddp", "p3", "a100", pods=2, gpus=2, priority_class="build-preemptible")
    settle(manual_sim, 4)
    assert running(api, "p3-ddp") == [] and len(running(api, "p2-build")) == 2
    assert events(api, "Evict") == []
    waiting = pending(api, "p3-ddp")
    assert len(waiting) == 2 and all(condition(p).status == "False" for p in waiting)
    [scheduling] = pod_group(api, waiting[0].metadata.annotations["pod-group-name"])["status"]["schedulingConditions"]
    assert scheduling["message"].startswith("PodSchedulingErrors: Resources were found for 0 pods while 2 are "
                                            "required for gang scheduling.")


def test_a_job_allocated_then_taken_back_by_an_in_queue_preemption_still_says_why_it_waits(manual_sim, api):
    """The smallest case the loop-agreement test found: in one cycle Allocate gives the queue's last GPU under
    its limit to a new train job, then Preempt lets a build-preemptible job take it (and another train pod)
    back. The train job waits: its PodGroup and pod say why (OverLimit), in that cycle and in every later one."""
    nodes(manual_sim, "a100", 1)
    apply_org(api, pools={"a100": "binpack"}, department={"a100": quota(6)},
              projects={"vision": {"a100": quota(6)}}, allow_over_quota=False)  # limit = deserved = 6
    for name, gpus, klass in (("w1", 2, "train"), ("w4", 1, "train"), ("w5", 1, "train"), ("w6", 1, "inference")):
        submit(api, name, "vision", "a100", pods=1, gpus=gpus, priority_class=klass)
        manual_sim.clock.advance(1)
    settle(manual_sim)
    assert all(len(running(api, name)) == 1 for name in ("w1", "w4", "w5", "w6"))  # 5 of 6 GPUs
    for name, gpus, klass in (("w0", 1, "train"), ("w2", 2, "build-preemptible"), ("w3", 4, "train")):
        submit(api, name, "vision", "a100", pods=1, gpus=gpus, priority_class=klass)
        manual_sim.clock.advance(1)
    over_limit = "OverLimit: vision in a100 quota has reached the allowable limit of GPUs. Limit is 6 GPUs"
    for ticks in (1, 3, 15):  # the preempting cycle, the quiet ones after, the Job controller's replacement
        settle(manual_sim, ticks)
        assert len(running(api, "w2")) == 1
        [waiting] = pending(api, "w0")
        scheduled = condition(waiting)
        assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")
        assert scheduled.message.startswith(over_limit)
        [scheduling] = pod_group(api, waiting.metadata.annotations["pod-group-name"])["status"]["schedulingConditions"]
        assert scheduling["message"].startswith(over_limit) and scheduling["reasons"][0]["reason"] == "OverLimit"
        assert events(api, "Unschedulable", waiting.metadata.name)
    assert not [e for e in events(api, "Evict") if e.message.startswith(f"Pod {NS}/w0-")]


# ---------------------------------------------------------------------------------------------------
# Placement and shards


def test_binpack_and_spread_place_as_each_pools_shard_says_and_shards_keep_to_their_nodes(manual_sim, api):
    nodes(manual_sim, "a100", 4)
    nodes(manual_sim, "l4", 4)
    apply_org(api, pools={"a100": "binpack", "l4": "spread"}, department={"a100": quota(32), "l4": quota(32)},
              projects={"vision": {"a100": quota(32), "l4": quota(32)}})
    submit(api, "packed", "vision", "a100", pods=4)
    submit(api, "spread", "vision", "l4", pods=4)
    settle(manual_sim)
    assert len({p.spec.node_name for p in running(api, "packed")}) == 1
    assert {p.spec.node_name for p in running(api, "spread")} == {"l4-0", "l4-1", "l4-2", "l4-3"}
    scheduled = events(api, "Scheduled", running(api, "spread")[0].metadata.name)[0]
    assert scheduled.message.endswith("at node-pool l4") and scheduled.source.component == "kai-scheduler"
    # l4 is full: l4 work waits, though a100 has room (another shard, other nodes).
    submit(api, "more", "vision", "l4", pods=29, gang=False)
    settle(manual_sim)
    assert len(pending(api, "more")) == 1
    assert condition(pending(api, "more")[0]).message == (
        "no nodes with enough resources were found: 4 node(s) didn't have enough resources: GPUs.")


# ---------------------------------------------------------------------------------------------------
# The fair-share division, on its own


def documented_division(total: float, queues: list[ks.Queue]) -> dict[str, float]:
    """KAI's docs/fairness/README.md without whole units: each queue min(deserved, requested); the rest to the
    priorities in decreasing order, within one in proportion to overQuotaWeight, never past a request or a
    limit (water-filling)."""
    fair, remaining = {}, total
    for q in queues:
        share = q.shares[ks.GPU]
        fair[q.name] = min(total if share.deserved == ks.UNLIMITED else share.deserved, share.requestable())
        remaining -= fair[q.name]
    for priority in sorted({q.priority for q in queues}, reverse=True):
        level = [q for q in queues if q.priority == priority and q.shares[ks.GPU].weight > 0]
        while remaining > 1e-9:
            wanting = [q for q in level if q.shares[ks.GPU].requestable() - fair[q.name] > 1e-9]
            if not wanting:
                break
            weights = sum(q.shares[ks.GPU].weight for q in wanting)
            step = min(min((q.shares[ks.GPU].requestable() - fair[q.name]) / q.shares[ks.GPU].weight
                           for q in wanting), remaining / weights)
            for q in wanting:
                fair[q.name] += step * q.shares[ks.GPU].weight
            remaining -= step * weights
    return fair


queue_specs = st.lists(st.tuples(
    st.sampled_from([80, 100, 100, 120]),  # priority
    st.one_of(st.just(-1), st.integers(0, 30)),  # quota (deserved), -1 unlimited
    st.one_of(st.just(-1), st.integers(0, 60)),  # limit, -1 none
    st.integers(0, 4),  # overQuotaWeight
    st.integers(0, 80),  # GPUs requested
), min_size=1, max_size=7)


@settings(max_examples=400, deadline=None)
@given(total=st.integers(0, 120), specs=queue_specs)
def test_fair_share_division_gives_deserved_first_respects_caps_and_follows_weights_and_priorities(total, specs):
    queues = []
    for i, (priority, deserved, limit, weight, request) in enumerate(specs):
        q = ks.Queue(name=f"q{i}", priority=priority, created=f"{i:03d}")
        q.shares[ks.GPU] = ks.Share(deserved=deserved, max_allowed=limit, weight=weight, request=request)
        queues.append(q)
    expected = documented_division(total, queues)
    base = {q.name: min(total if q.shares[ks.GPU].deserved == -1 else q.shares[ks.GPU].deserved,
                        q.shares[ks.GPU].requestable()) for q in queues}
    left = ks.set_resource_share(total, queues, ks.GPU)
    fair = {q.name: q.shares[ks.GPU].fair_share for q in queues}
    for q in queues:
        # Deserved first, and never past the request or the limit.
        assert fair[q.name] >= base[q.name]
        assert fair[q.name] <= q.shares[ks.GPU].requestable()
        # Weights and priorities as documented, within one whole unit per sibling queue (KAI hands out whole
        # GPUs per round, the remainders one at a time).
        assert abs(fair[q.name] - expected[q.name]) < len(queues)
    # Nothing is handed out twice, and nothing stays idle that a queue with a weight still wants.
    assert sum(fair.values()) == pytest.approx(max(sum(base.values()), total - left))
    wanting = any(q.shares[ks.GPU].weight > 0 and fair[q.name] < q.shares[ks.GPU].requestable() for q in queues)
    if wanting and sum(base.values()) <= total:
        assert sum(fair.values()) == pytest.approx(total) and left == 0


@settings(max_examples=150, deadline=None)
@given(total=st.integers(0, 64), departments=st.lists(st.tuples(
    st.integers(0, 20), st.integers(1, 4), st.lists(st.tuples(st.integers(0, 10), st.integers(0, 4), st.integers(0, 30)),
                                                    min_size=1, max_size=4)), min_size=1, max_size=4))
def test_fair_share_is_divided_level_by_level_of_the_queue_tree(total, departments):
    queues: dict[str, ks.Queue] = {}
    for d, (deserved, weight, projects) in enumerate(departments):
        parent = ks.Queue(name=f"d{d}", created=f"{d:03d}")
        parent.shares[ks.GPU] = ks.Share(deserved=deserved, max_allowed=-1, weight=weight)
        queues[parent.name] = parent
        for p, (p_deserved, p_weight, request) in enumerate(projects):
            child = ks.Queue(name=f"d{d}p{p}", parent=parent.name, created=f"{d:03d}{p:03d}")
            child.shares[ks.GPU] = ks.Share(deserved=p_deserved, max_allowed=-1, weight=p_weight)
            queues[child.name] = child
            ks.add_usage(queues, child.name, ks.quantities(gpu=request), allocated=False)
    ks.link(queues)
    ks.set_fair_shares(ks.quantities(gpu=total), queues)
    tops = [q for q in queues.values() if not q.parent]
    top_base = sum(min(q.shares[ks.GPU].deserved, q.shares[ks.GPU].requestable()) for q in tops)
    assert sum(q.shares[ks.GPU].fair_share for q in tops) <= max(total, top_base) + 1e-9
    for parent in tops:
        children = [queues[c] for c in parent.children]
        child_base = sum(min(c.shares[ks.GPU].deserved, c.shares[ks.GPU].requestable()) for c in children)
        # The children divide their parent's share (their deserved quotas come first even past it).
        assert sum(c.shares[ks.GPU].fair_share for c in children) <= max(parent.shares[ks.GPU].fair_share,
                                                                         child_base) + 1e-9
        for c in children:
            assert c.shares[ks.GPU].fair_share <= c.shares[ks.GPU].request
