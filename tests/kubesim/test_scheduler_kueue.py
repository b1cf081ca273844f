"""Kueue in the emulator, over HTTP with the official kubernetes client.

The queues are exactly what the console writes (enforcers.desired.kueue_objects), the Jobs exactly what it
submits (workloads.render.job); the emulator's Kueue (kubesim/scheduling/) is an independent reading of
Kueue's documentation, so these tests hold the console's objects against it.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client, config

from enforcers import desired as d
from kubesim import KubeEmulator
from kubesim.clock import ManualClock
from kubesim.scheduling import kueue as kq
from tests.kubesim.conftest import KUBECTL, REQUIRE_KUBECTL
from workloads import render

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
POOL_LABEL = d.POOL_LABEL
GIB = 2**30
H100_TAINT = {"key": "nvidia.com/gpu.product", "value": "h100", "effect": "NoSchedule"}
PLURALS = {"ResourceFlavor": "resourceflavors", "Cohort": "cohorts", "ClusterQueue": "clusterqueues",
           "LocalQueue": "localqueues", "WorkloadPriorityClass": "workloadpriorityclasses"}


def pools() -> tuple[d.PoolState, ...]:
    return (d.PoolState("a100", cpu_total_millis=256_000, memory_total_bytes=2048 * GIB, storage_total_bytes=4096 * GIB),
            d.PoolState("h100", cpu_total_millis=256_000, memory_total_bytes=2048 * GIB, storage_total_bytes=4096 * GIB,
                        taints=(H100_TAINT,)))


def quota(gpus: int, limit: int | None = None) -> d.QuotaState:
    return d.QuotaState(gpu_deserved=Decimal(gpus), gpu_limit=None if limit is None else Decimal(limit))


def project(name: str, quotas: dict[str, d.QuotaState], order: tuple[str, ...] = ("a100", "h100"),
            allow_over_quota: bool = True) -> d.ProjectState:
    return d.ProjectState(name, "rnd", (f"runai-{name}",), allow_over_quota=allow_over_quota, pool_order=order,
                          quotas=quotas)


def org(*projects: d.ProjectState) -> d.OrgState:
    """The console's organisation: department rnd, its projects, and the pools they name."""
    named = {pool for p in projects for pool in p.pool_order}
    return d.OrgState(cluster="lab", pools=tuple(p for p in pools() if p.name in named),
                      departments=(d.DepartmentState("rnd"),), projects=projects)


class Cluster:
    """The emulator seen through the kubernetes client, with the console's objects and Jobs."""

    def __init__(self, sim: KubeEmulator, api_client: client.ApiClient) -> None:
        self.sim = sim
        self.kubeconfig = ""
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.scheduling = client.SchedulingV1Api(api_client)

    # ------------------------------------------------------------------ writing

    def enforce(self, state: d.OrgState, *, preemption: dict[str, Any] | None = None, **cq_spec: Any) -> None:
        """Create what the console's Kueue enforcer writes (PriorityClasses included), optionally with
        another preemption policy or other ClusterQueue fields an administrator set."""
        for obj in d.kueue_objects(state):
            if obj["kind"] == "PriorityClass":
                self.scheduling.create_priority_class(obj)
                continue
            plural = PLURALS[obj["kind"]]
            if obj["kind"] == "ClusterQueue":
                if preemption is not None:
                    obj["spec"]["preemption"] = preemption
                obj["spec"].update(cq_spec)
            if obj["kind"] == "LocalQueue":
                self.custom.create_namespaced_custom_object(GROUP, VERSION, obj["metadata"]["namespace"], plural, obj)
            else:
                self.custom.create_cluster_custom_object(GROUP, VERSION, plural, obj)

    def submit(self, name: str, project_name: str, gpus: int, *, pools_: tuple[str, ...] = ("a100", "h100"),
               priority_class: str = "train", pods: int = 1, queue: str | None = None,
               labels: dict[str, str] | None = None, storage: str = "") -> str:
        """A Job as the console submits it (workloads.render) in the project's namespace; returns its uid."""
        targets = {p.name: p for p in pools()}
        spec = render.JobSpec(
            name=name, namespace=f"runai-{project_name}", project=project_name, image="trainer:1", pods=pods,
            priority_class=priority_class, gpus=gpus, storage=storage, enforcer="kueue", queue=queue or project_name,
            pools=tuple(render.PoolTarget(p, taints=targets[p].taints) for p in pools_))
        job = render.job(spec)
        job["metadata"]["labels"].update(labels or {})
        created = self.batch.create_namespaced_job(spec.namespace, job)
        return created.metadata.uid

    def step(self, seconds: float = 10.0) -> dict[str, int]:
        """Let Kueue run once, ``seconds`` after the previous step (the emulator's clock is a ManualClock)."""
        self.sim.advance_clock(seconds)
        return self.sim.kueue_step()

    # ------------------------------------------------------------------ reading

    def workload(self, job: str, project_name: str) -> dict[str, Any]:
        namespace = f"runai-{project_name}"
        uid = self.batch.read_namespaced_job(job, namespace).metadata.uid
        items = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, "workloads", label_selector=f"kueue.x-k8s.io/job-uid={uid}")["items"]
        assert len(items) == 1, items
        return items[0]

    def workloads(self, project_name: str) -> list[dict[str, Any]]:
        return self.custom.list_namespaced_custom_object(GROUP, VERSION, f"runai-{project_name}", "workloads")["items"]

    def conditions(self, job: str, project_name: str) -> dict[str, tuple[str, str, str]]:
        wl = self.workload(job, project_name)
        return {c["type"]: (c["status"], c["reason"], c["message"]) for c in wl.get("status", {}).get("conditions", [])}

    def job(self, name: str, project_name: str) -> client.V1Job:
        return self.batch.read_namespaced_job(name, f"runai-{project_name}")

    def cluster_queue(self, name: str) -> dict[str, Any]:
        return self.custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)

    def gpu_usage(self, cq: str) -> dict[str, tuple[str, str]]:
        """flavor -> (total, borrowed) of nvidia.com/gpu in a ClusterQueue's status.flavorsUsage."""
        out = {}
        for flavor in self.cluster_queue(cq)["status"]["flavorsUsage"]:
            res = next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")
            out[flavor["name"]] = (res["total"], res["borrowed"])
        return out

    def pending(self, path: str, **query: Any) -> dict[str, Any]:
        return self.api_client.call_api(f"/apis/visibility.kueue.x-k8s.io/{path}", "GET", query_params=list(query.items()),
                                        response_type="object", auth_settings=["BearerToken"],
                                        _return_http_data_only=True)

    def events(self, name: str, project_name: str) -> list[tuple[str, str, str]]:
        items = self.core.list_namespaced_event(f"runai-{project_name}", field_selector=f"involvedObject.name={name}").items
        return [(e.type, e.reason, e.message) for e in items]


def kubectl(cluster: Cluster, tmp_path: Path, *args: str) -> str:
    """The real kubectl against the cluster's emulator (skipped without it, failed under CONSOLE_REQUIRE_KUBECTL)."""
    if not os.path.exists(KUBECTL):
        if REQUIRE_KUBECTL:
            pytest.fail(f"CONSOLE_REQUIRE_KUBECTL=1 but kubectl is missing ({KUBECTL})")
        pytest.skip("kubectl is not installed (set CONSOLE_REQUIRE_KUBECTL=1 to make this a failure)")
    env = {**os.environ, "KUBECONFIG": cluster.kubeconfig, "HOME": str(tmp_path), "KUBECACHEDIR": str(tmp_path / "cache")}
    proc = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def cluster(emulators, tmp_path: Path) -> Iterator[Cluster]:
    """An emulator on a manual clock (steps ten seconds apart: admission times differ) and its client."""
    sim = emulators(clock=ManualClock(), bookmark_interval=1.0)  # KubeEmulator's own, which it always had
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    with config.new_client_from_config(config_file=kubeconfig, context="emulator") as api_client:
        cluster = Cluster(sim, api_client)
        cluster.kubeconfig = kubeconfig
        yield cluster


# ---------------------------------------------------------------------------------------------------
# Workloads for the console's Jobs


def test_a_queued_job_gets_the_workload_kueues_job_integration_makes(cluster: Cluster) -> None:
    cluster.enforce(org(project("vision", {"a100": quota(4)})))
    uid = cluster.submit("resnet", "vision", 1, pods=2)
    assert cluster.step()["created"] == 1
    wl = cluster.workload("resnet", "vision")
    md, spec = wl["metadata"], wl["spec"]
    # jobframework GetWorkloadNameForOwnerWithGVK: job-<name>-<5 hex of sha1(Kind, group, name, uid)>.
    assert md["name"] == "job-resnet-" + hashlib.sha1(f"Job\nbatch\nresnet\n{uid}".encode()).hexdigest()[:5]
    assert md["labels"]["kueue.x-k8s.io/job-uid"] == uid
    assert md["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "resnet", "uid": uid,
                                      "controller": True, "blockOwnerDeletion": True}]
    assert spec["queueName"] == "vision" and spec["active"] is True
    assert [(ps["name"], ps["count"]) for ps in spec["podSets"]] == [("main", 2)]
    container = spec["podSets"][0]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    # The pods' PriorityClass gives the Workload's priority.
    assert spec["priorityClassRef"] == {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "train"}
    assert spec["priority"] == 50
    assert ("Normal", "CreatedWorkload", f"Created Workload: runai-vision/{md['name']}") in cluster.events("resnet", "vision")


def test_the_consoles_kueue_objects_give_its_jobs_a_workload_with_their_priority(cluster: Cluster) -> None:
    """The console's Jobs name the PriorityClass of their pods (``train``): in Kueue mode the console writes
    those PriorityClasses too, so Kueue resolves the priority and makes the Workload."""
    cluster.enforce(org(project("vision", {"a100": quota(4)})))
    assert {pc.metadata.name: pc.value for pc in cluster.scheduling.list_priority_class().items} == {
        "train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
    cluster.submit("resnet", "vision", 1)
    cluster.step()
    assert cluster.workload("resnet", "vision")["spec"]["priority"] == 50
    assert cluster.job("resnet", "vision").spec.suspend is False
    # A WorkloadPriorityClass named on the Job, as Kueue documents, wins; an unknown one makes no Workload.
    cluster.submit("bert", "vision", 1, labels={"kueue.x-k8s.io/priority-class": "inference"})
    cluster.submit("gpt", "vision", 1, labels={"kueue.x-k8s.io/priority-class": "no-such-class"})
    cluster.step()
    spec = cluster.workload("bert", "vision")["spec"]
    assert spec["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "inference"}
    assert spec["priority"] == 125
    assert ("Warning", "WorkloadPriorityClassNotFound", 'WorkloadPriorityClass "no-such-class" not found') in (
        cluster.events("gpt", "vision"))
    assert len(cluster.workloads("vision")) == 2


def test_a_missing_local_queue_or_cluster_queue_leaves_the_workload_pending_in_kueues_words(cluster: Cluster) -> None:
    cluster.enforce(org(project("vision", {"a100": quota(4)})))
    cluster.submit("resnet", "vision", 1, queue="elsewhere")
    cluster.step()
    assert cluster.conditions("resnet", "vision")["QuotaReserved"] == (
        "False", "Misconfigured", "LocalQueue elsewhere doesn't exist")
    assert cluster.conditions("resnet", "vision")["Admitted"] == ("False", "NoReservation", "The workload has no reservation")
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "runai-vision", "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": "elsewhere"},
        "spec": {"clusterQueue": "gone"}})
    cluster.step()
    assert cluster.conditions("resnet", "vision")["QuotaReserved"] == (
        "False", "Misconfigured", "ClusterQueue gone doesn't exist")
    lq = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, "runai-vision", "localqueues", "elsewhere")
    active = next(c for c in lq["status"]["conditions"] if c["type"] == "Active")
    assert (active["status"], active["reason"]) == ("False", "ClusterQueueDoesNotExist")
    assert cluster.job("resnet", "vision").spec.suspend is True


def test_a_job_asking_for_storage_fits_the_consoles_queues(cluster: Cluster) -> None:
    """A Job with ``storage`` also asks for ephemeral-storage: the console's ClusterQueues cover it (the pool's
    allocatable storage), so Kueue admits it like any other."""
    cluster.enforce(org(project("vision", {"a100": quota(4)}, order=("a100",))))
    cluster.submit("scratch", "vision", 1, storage="50Gi")
    cluster.step()
    assert cluster.conditions("scratch", "vision")["Admitted"] == ("True", "Admitted", "The workload is admitted")
    usage = cluster.workload("scratch", "vision")["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
    assert usage["ephemeral-storage"] == "50Gi"


# ---------------------------------------------------------------------------------------------------
# Admission


def test_admission_within_nominal_quota_starts_the_job_on_its_flavors_nodes(cluster: Cluster) -> None:
    cluster.enforce(org(project("vision", {"a100": quota(4)})))
    cluster.submit("resnet", "vision", 2, pods=2)
    counts = cluster.step()
    assert (counts["admitted"], counts["started"]) == (1, 1)
    wl = cluster.workload("resnet", "vision")
    assert wl["status"]["admission"] == {"clusterQueue": "vision", "podSetAssignments": [{
        "name": "main", "count": 2, "flavors": {"cpu": "a100", "memory": "a100", "nvidia.com/gpu": "a100"},
        "resourceUsage": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "4"}}]}
    conditions = cluster.conditions("resnet", "vision")
    assert conditions["QuotaReserved"] == ("True", "QuotaReserved", "Quota reserved in ClusterQueue vision")
    assert conditions["Admitted"] == ("True", "Admitted", "The workload is admitted")
    reasons = [reason for _, reason, _ in cluster.events(wl["metadata"]["name"], "vision")]
    assert "QuotaReserved" in reasons and "Admitted" in reasons
    # The Job runs, and only on the nodes of the flavor Kueue chose.
    job = cluster.job("resnet", "vision")
    assert job.spec.suspend is False
    assert job.spec.template.spec.node_selector == {POOL_LABEL: "a100"}
    assert job.spec.template.metadata.labels["kueue.x-k8s.io/podset"] == "main"
    assert ("Normal", "Started", "Admitted by clusterQueue vision") in cluster.events("resnet", "vision")
    status = cluster.cluster_queue("vision")["status"]
    assert (status["pendingWorkloads"], status["reservingWorkloads"], status["admittedWorkloads"]) == (0, 1, 1)
    assert cluster.gpu_usage("vision") == {"a100": ("4", "0"), "h100": ("0", "0")}
    assert next(c for c in status["conditions"] if c["type"] == "Active")["reason"] == "Ready"
    lq = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, "runai-vision", "localqueues", "vision")["status"]
    assert (lq["pendingWorkloads"], lq["admittedWorkloads"]) == (0, 1)
    assert {"name": "nvidia.com/gpu", "total": "4"} in lq["flavorsUsage"][0]["resources"]


def test_flavors_are_tried_in_the_projects_pool_order(cluster: Cluster) -> None:
    # vision prefers h100 (tainted: its Jobs tolerate the pool's taints), then a100.
    cluster.enforce(org(project("vision", {"a100": quota(8), "h100": quota(2)}, order=("h100", "a100"),
                                allow_over_quota=False)))
    cluster.submit("first", "vision", 2)
    cluster.submit("second", "vision", 2)
    cluster.submit("a100-only", "vision", 1, pools_=("a100",))
    cluster.step()
    flavors = {job: cluster.workload(job, "vision")["status"]["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"]
               for job in ("first", "second", "a100-only")}
    assert flavors == {"first": "h100", "second": "a100", "a100-only": "a100"}
    assert cluster.job("first", "vision").spec.template.spec.node_selector == {POOL_LABEL: "h100"}
    assert cluster.job("second", "vision").spec.template.spec.node_selector == {POOL_LABEL: "a100"}
    # A Job for a100 only does not tolerate the h100 flavor's taint: Kueue never gives it that flavor.
    cluster.submit("untolerant", "vision", 8, pools_=("a100",))
    assert cluster.job("untolerant", "vision").spec.template.spec.tolerations is None
    cluster.step()
    assert cluster.conditions("untolerant", "vision")["QuotaReserved"] == (
        "False", "WaitingForQuota", "couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor a100, 3 more needed, untolerated taint {nvidia.com/gpu.product h100 NoSchedule <nil>} "
        "in flavor h100")


def test_borrowing_in_the_cohort_stops_at_the_borrowing_limit(cluster: Cluster) -> None:
    # vision deserves 4 GPUs and may use 6; nlp deserves 4 and uses none: vision borrows 2, not more.
    cluster.enforce(org(project("vision", {"a100": quota(4, limit=6)}, order=("a100",)),
                        project("nlp", {"a100": quota(4)}, order=("a100",))))
    queue = cluster.cluster_queue("vision")["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert queue == {"name": "nvidia.com/gpu", "nominalQuota": "4", "borrowingLimit": "2"}
    for name in ("a-one", "b-two", "c-three"):  # created within one second: queued by name
        cluster.submit(name, "vision", 2)
    cluster.submit("d-big", "vision", 8, pools_=("a100",))
    cluster.step()
    admitted = {w["metadata"]["ownerReferences"][0]["name"] for w in cluster.workloads("vision")
                if w["status"].get("admission")}
    assert admitted == {"a-one", "b-two", "c-three"}
    assert cluster.gpu_usage("vision")["a100"] == ("6", "2")
    # 8 GPUs > 6 = nominal + borrowingLimit: never, however idle the cohort.
    assert cluster.conditions("d-big", "vision")["QuotaReserved"] == (
        "False", "ExceedsMaxQuota", "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu "
        "in flavor a100, previously considered podsets requests (0) + current podset request (8) > maximum capacity (6)")
    cluster.submit("e-four", "vision", 2)
    cluster.step()
    assert cluster.conditions("e-four", "vision")["QuotaReserved"] == (
        "False", "WaitingForQuota",
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor a100, 2 more needed")
    assert cluster.cluster_queue("vision")["status"]["pendingWorkloads"] == 2


def test_over_quota_off_borrows_nothing_and_lending_limit_keeps_quota_home(cluster: Cluster) -> None:
    cluster.enforce(org(project("vision", {"a100": quota(2)}, order=("a100",), allow_over_quota=False),
                        project("nlp", {"a100": quota(4)}, order=("a100",)),
                        project("ops", {"a100": quota(0)}, order=("a100",))))
    cluster.submit("v", "vision", 4)
    cluster.step()
    assert cluster.conditions("v", "vision")["QuotaReserved"][1] == "ExceedsMaxQuota"
    # An administrator lets nlp lend at most 1 GPU of its 4: ops (nothing deserved) borrows that and vision's 2.
    cq = cluster.cluster_queue("nlp")
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] = "1"
    cluster.custom.replace_cluster_custom_object(GROUP, VERSION, "clusterqueues", "nlp", cq)
    cluster.submit("o", "ops", 4)
    cluster.submit("o3", "ops", 3)
    cluster.step()
    assert cluster.conditions("o3", "ops")["QuotaReserved"][0] == "True"
    assert cluster.conditions("o", "ops")["QuotaReserved"][1] == "ExceedsMaxQuota"
    assert cluster.gpu_usage("ops")["a100"] == ("3", "3")


# ---------------------------------------------------------------------------------------------------
# Preemption


def test_the_consoles_cluster_queues_reclaim_borrowed_quota(cluster: Cluster) -> None:
    """The console's ClusterQueues carry a preemption policy (reclaim within the cohort): the lender's own
    in-quota work takes its quota back from the borrower, as the console promises for over-quota work."""
    cluster.enforce(org(project("vision", {"a100": quota(4)}, order=("a100",)),
                        project("nlp", {"a100": quota(4)}, order=("a100",))))
    cluster.submit("hog", "vision", 8)
    cluster.step()
    assert cluster.gpu_usage("vision")["a100"] == ("8", "4")
    cluster.submit("own", "nlp", 4)
    cluster.step()
    assert cluster.conditions("hog", "vision")["Evicted"][:2] == ("True", "Preempted")
    cluster.step()
    assert cluster.conditions("own", "nlp")["Admitted"] == ("True", "Admitted", "The workload is admitted")


def test_reclaim_within_the_cohort_evicts_the_borrower_in_kueues_words(cluster: Cluster) -> None:
    cluster.enforce(org(project("vision", {"a100": quota(4)}, order=("a100",)),
                        project("nlp", {"a100": quota(4)}, order=("a100",))),
                    preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"})
    cluster.submit("v1", "vision", 4)
    cluster.step()
    cluster.submit("v2", "vision", 4)  # borrows nlp's idle quota
    cluster.step()
    assert cluster.gpu_usage("vision")["a100"] == ("8", "4")
    assert cluster.job("v2", "vision").spec.suspend is False
    nlp_uid = cluster.submit("own", "nlp", 4)
    counts = cluster.step()
    assert (counts["preempted"], counts["released"], counts["admitted"]) == (1, 1, 1)
    preemptor = cluster.workload("own", "nlp")
    message = (f"Preempted to accommodate a workload (UID: {preemptor['metadata']['uid']}, JobUID: {nlp_uid}) "
               "due to reclamation within the cohort; preemptor path: /rnd/nlp; preemptee path: /rnd/vision")
    evicted = cluster.conditions("v2", "vision")
    assert evicted["Evicted"] == ("True", "Preempted", message)
    assert evicted["Preempted"] == ("True", "InCohortReclamation", message)
    assert evicted["Requeued"] == ("True", "Preempted", message)
    assert evicted["QuotaReserved"][0] == "False"  # released, and queued again (the scheduler says why it waits)
    assert evicted["Admitted"] == ("False", "NoReservation", "The workload has no reservation")
    assert "admission" not in cluster.workload("v2", "vision")["status"]
    # The evicted Job is suspended again, its template as it was submitted (the Job controller deletes its pods).
    job = cluster.job("v2", "vision")
    assert job.spec.suspend is True and job.spec.template.spec.node_selector is None
    assert ("Normal", "Stopped", message) in cluster.events("v2", "vision")
    # The older v1 runs on, within vision's own quota; nlp gets its own back.
    assert cluster.conditions("v1", "vision")["Admitted"][0] == "True"
    assert cluster.conditions("own", "nlp")["Admitted"][0] == "True"
    assert cluster.gpu_usage("vision")["a100"] == cluster.gpu_usage("nlp")["a100"] == ("4", "0")
    assert cluster.cluster_queue("vision")["status"]["pendingWorkloads"] == 1
    assert any(reason == "PreemptedWorkload" for _, reason, _ in cluster.events(preemptor["metadata"]["name"], "nlp"))


def test_preemption_inside_a_cluster_queue_follows_priority(cluster: Cluster) -> None:
    cluster.enforce(org(project("vision", {"a100": quota(4)}, order=("a100",), allow_over_quota=False)),
                    preemption={"withinClusterQueue": "LowerPriority"})
    cluster.submit("training", "vision", 4, priority_class="train")
    cluster.step()
    cluster.submit("build", "vision", 4, priority_class="build-preemptible")
    cluster.submit("serving", "vision", 4, priority_class="inference")
    cluster.step()
    wl = cluster.workload("serving", "vision")
    assert cluster.conditions("training", "vision")["Preempted"] == (
        "True", "InClusterQueue",
        f"Preempted to accommodate a workload (UID: {wl['metadata']['uid']}, JobUID: "
        f"{wl['metadata']['labels']['kueue.x-k8s.io/job-uid']}) due to prioritization in the ClusterQueue; "
        "preemptor path: /rnd/vision; preemptee path: /rnd/vision")
    assert cluster.conditions("serving", "vision")["Admitted"][0] == "True"
    # The higher of the two waiting comes first; an equal priority never preempts under LowerPriority.
    assert [w["metadata"]["name"] for w in cluster.pending("v1beta2/clusterqueues/vision/pendingworkloads")["items"]] == [
        cluster.workload("build", "vision")["metadata"]["name"], cluster.workload("training", "vision")["metadata"]["name"]]


# ---------------------------------------------------------------------------------------------------
# Queueing strategies and the visibility API


def test_best_effort_fifo_lets_smaller_work_pass_and_strict_fifo_does_not(cluster: Cluster) -> None:
    cluster.enforce(org(project("vision", {"a100": quota(4)}, order=("a100",), allow_over_quota=False),
                        project("nlp", {"a100": quota(4)}, order=("a100",), allow_over_quota=False)))
    strict = cluster.cluster_queue("nlp")
    strict["spec"]["queueingStrategy"] = "StrictFIFO"
    cluster.custom.replace_cluster_custom_object(GROUP, VERSION, "clusterqueues", "nlp", strict)
    for project_name in ("vision", "nlp"):
        cluster.submit("a-running", project_name, 3)
        cluster.step()
        cluster.submit("b-big", project_name, 2)
        cluster.submit("c-small", project_name, 1)
    cluster.step()
    assert cluster.conditions("c-small", "vision")["Admitted"][0] == "True"
    assert cluster.conditions("b-big", "vision")["QuotaReserved"][1] == "WaitingForQuota"
    assert "admission" not in cluster.workload("c-small", "nlp").get("status", {})  # behind b-big, which cannot run
    assert cluster.cluster_queue("nlp")["status"]["pendingWorkloads"] == 2


def test_the_visibility_api_lists_pending_workloads_with_their_positions(cluster: Cluster, tmp_path: Path) -> None:
    # No preemption here (Kueue's default): the inference Job waits first in line instead of preempting.
    cluster.enforce(org(project("vision", {"a100": quota(1)}, order=("a100",), allow_over_quota=False)),
                    preemption={"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"})
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "runai-vision", "localqueues", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue", "metadata": {"name": "batch"},
        "spec": {"clusterQueue": "vision"}})
    cluster.submit("a-running", "vision", 1)
    cluster.step()
    cluster.submit("b-train", "vision", 1)
    cluster.submit("c-batch", "vision", 1, queue="batch")
    cluster.submit("d-serve", "vision", 1, priority_class="inference")
    cluster.step()
    summary = cluster.pending("v1beta2/clusterqueues/vision/pendingworkloads")
    assert (summary["kind"], summary["apiVersion"]) == ("PendingWorkloadsSummary", "visibility.kueue.x-k8s.io/v1beta2")
    rows = [(i["metadata"]["ownerReferences"][0]["name"], i["priority"], i["localQueueName"],
             i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in summary["items"]]
    assert rows == [("d-serve", 125, "vision", 0, 0), ("b-train", 50, "vision", 1, 1), ("c-batch", 50, "batch", 2, 0)]
    assert cluster.pending("v1beta2/clusterqueues/vision/pendingworkloads", limit=1, offset=1)["items"][0][
        "positionInClusterQueue"] == 1
    local = cluster.pending("v1beta1/namespaces/runai-vision/localqueues/batch/pendingworkloads")
    assert [(i["metadata"]["namespace"], i["positionInClusterQueue"], i["positionInLocalQueue"])
            for i in local["items"]] == [("runai-vision", 2, 0)]
    assert local["apiVersion"] == "visibility.kueue.x-k8s.io/v1beta1"
    # As Kueue's documentation shows it: kubectl get --raw.
    raw = kubectl(cluster, tmp_path, "get", "--raw", "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/vision/pendingworkloads")
    assert [i["positionInClusterQueue"] for i in orjson.loads(raw)["items"]] == [0, 1, 2]
    with pytest.raises(client.ApiException) as missing:
        cluster.pending("v1beta2/clusterqueues/nope/pendingworkloads")
    assert missing.value.status == 404
    assert orjson.loads(missing.value.body)["message"] == 'clusterqueue.visibility.kueue.x-k8s.io "nope" not found'


# ---------------------------------------------------------------------------------------------------
# The end of a workload


def test_a_finished_job_finishes_its_workload_and_frees_the_quota(cluster: Cluster) -> None:
    cluster.enforce(org(project("vision", {"a100": quota(4)}, order=("a100",), allow_over_quota=False)))
    cluster.submit("first", "vision", 4)
    cluster.submit("second", "vision", 4)
    cluster.step()
    assert cluster.conditions("second", "vision")["QuotaReserved"][0] == "False"
    cluster.batch.patch_namespaced_job_status("first", "runai-vision", {"status": {"conditions": [
        {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods"}]}})
    counts = cluster.step()
    assert (counts["finished"], counts["admitted"]) == (1, 1)
    assert cluster.conditions("first", "vision")["Finished"] == (
        "True", "Succeeded", "Reached expected number of succeeded pods")
    assert cluster.conditions("second", "vision")["Admitted"][0] == "True"
    # Deleting a Job as the console does (propagationPolicy Background) deletes its Workload (it owns it).
    cluster.batch.delete_namespaced_job("first", "runai-vision", body=client.V1DeleteOptions(propagation_policy="Background"))
    cluster.step()
    assert [w["metadata"]["ownerReferences"][0]["name"] for w in cluster.workloads("vision")] == ["second"]


def test_a_job_started_without_admission_is_suspended(cluster: Cluster) -> None:
    cluster.enforce(org(project("vision", {"a100": quota(1)}, order=("a100",), allow_over_quota=False)))
    cluster.submit("runner", "vision", 1)
    cluster.submit("sneaky", "vision", 1)
    cluster.step()
    cluster.batch.patch_namespaced_job("sneaky", "runai-vision", {"spec": {"suspend": False}})
    assert cluster.step()["stopped"] == 1
    assert cluster.job("sneaky", "vision").spec.suspend is True
    assert ("Normal", "Stopped", "Not admitted by cluster queue") in cluster.events("sneaky", "vision")


def test_kueue_step_over_the_control_surface_on_the_emulators_clock(cluster: Cluster) -> None:
    import urllib.error
    import urllib.request

    def post(op: str, body: bytes) -> dict[str, Any]:
        request = urllib.request.Request(f"{cluster.sim.url}/_emulator/{op}", data=body, method="POST")
        with urllib.request.urlopen(request) as response:
            return orjson.loads(response.read())["result"]

    cluster.enforce(org(project("vision", {"a100": quota(1)}, order=("a100",))))
    cluster.submit("one", "vision", 1)
    assert post("set_clock", b'{"time": "2026-03-01T12:00:00Z"}') == "2026-03-01T12:00:00Z"
    assert post("kueue_step", b"{}")["admitted"] == 1
    reserved = cluster.conditions("one", "vision")
    assert cluster.workload("one", "vision")["status"]["conditions"][0]["lastTransitionTime"] == "2026-03-01T12:00:00Z"
    assert reserved["QuotaReserved"][0] == "True"
    with pytest.raises(urllib.error.HTTPError) as refused:
        post("kueue_step", b'{"now": 2000000}')
    assert refused.value.code == 400


def test_with_the_job_controller_admitted_jobs_get_pods_on_their_flavor_and_preempted_ones_lose_them(
        emulators, tmp_path: Path) -> None:
    """Kueue in the controller loop, after the Job controller: admitted Jobs get pods that carry the flavor's
    node selector; a preempted Job's pods are deleted before its quota goes to the preemptor."""
    sim = emulators(clock=ManualClock(), controllers=True, bookmark_interval=1.0)  # KubeEmulator's own bookmarks
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    with config.new_client_from_config(config_file=kubeconfig, context="emulator") as api_client:
        cluster = Cluster(sim, api_client)
        cluster.enforce(org(project("vision", {"a100": quota(4)}, order=("a100",), allow_over_quota=False)),
                        preemption={"withinClusterQueue": "LowerPriority"})

        def pods(job: str) -> list[client.V1Pod]:
            return cluster.core.list_namespaced_pod(
                "runai-vision", label_selector=f"batch.kubernetes.io/job-name={job}").items

        cluster.submit("training", "vision", 2, pods=2)
        sim.tick()  # Kueue: Workload, admission, Job started
        assert pods("training") == []
        sim.tick()  # the Job controller: pods
        assert len(pods("training")) == 2
        assert {p.spec.node_selector[POOL_LABEL] for p in pods("training")} == {"a100"}
        assert {p.metadata.labels["kueue.x-k8s.io/podset"] for p in pods("training")} == {"main"}
        cluster.submit("serving", "vision", 4, priority_class="inference")
        sim.tick()  # Kueue: the training Workload evicted, its Job suspended
        assert cluster.conditions("training", "vision")["Evicted"][:2] == ("True", "Preempted")
        assert cluster.conditions("serving", "vision")["QuotaReserved"][1] == "WaitingForPreemptedWorkloads"
        sim.tick()  # the Job controller deletes the pods; Kueue releases the quota and admits serving
        assert pods("training") == []
        assert cluster.conditions("serving", "vision")["Admitted"][0] == "True"
        sim.tick()
        assert len(pods("serving")) == 1 and pods("serving")[0].spec.node_selector == {POOL_LABEL: "a100"}
        # Kueue stops a Job by suspending it: its pods go uncounted, the Job is not failed (no DisruptionTarget
        # needed), and it waits to be admitted again.
        training = cluster.job("training", "vision")
        assert training.status.active is None and training.status.failed is None
        assert {(c.type, c.status) for c in training.status.conditions} == {("Suspended", "True")}


# ---------------------------------------------------------------------------------------------------
# The admission core on its own (kubesim.scheduling.kueue.schedule over plain snapshots)


def gpu_queue(name: str, nominal: dict[str, int], cohort: str = "rnd", **kw: Any) -> kq.ClusterQueue:
    flavors = tuple(nominal)
    return kq.ClusterQueue(name, cohort=cohort, resource_groups=(kq.ResourceGroup(("nvidia.com/gpu",), flavors),),
                           quotas={(f, "nvidia.com/gpu"): kq.ResourceQuota(Decimal(n)) for f, n in nominal.items()},
                           namespace_selector={}, **kw)


def gpu_workload(name: str, queue: str, gpus: int, minute: int, priority: int = 0,
                 admitted_in: tuple[str, str] | None = None) -> kq.Workload:
    admission = None
    if admitted_in:
        admission = kq.Admission(admitted_in[0], (kq.PodSetAssignment(
            "main", {"nvidia.com/gpu": admitted_in[1]}, {"nvidia.com/gpu": Decimal(gpus)}, 1),))
    return kq.Workload("team", name, queue, (kq.PodSet("main", 1, {"nvidia.com/gpu": Decimal(gpus)}),),
                       priority=priority, created=f"2026-01-01T00:{minute:02d}:00Z", uid=f"uid-{name}",
                       admission=admission, reserved_at=f"2026-01-01T00:{minute:02d}:30Z" if admission else "")


def world(queues: list[kq.ClusterQueue], workloads: list[kq.Workload]) -> kq.Snapshot:
    flavors = {f for q in queues for f in q.flavors()}
    return kq.Snapshot(flavors={f: kq.Flavor(f) for f in flavors}, cluster_queues={q.name: q for q in queues},
                       local_queues={("team", q.name): kq.LocalQueue("team", q.name, q.name) for q in queues},
                       namespaces={"team": {}}, workloads=tuple(workloads), now="2026-01-01T01:00:00Z")


@pytest.mark.parametrize(("when_can_borrow", "flavor"), [(kq.MAY_STOP_SEARCH, "spot"), (kq.TRY_NEXT_FLAVOR, "on-demand")])
def test_flavor_fungibility_decides_between_borrowing_and_the_next_flavor(when_can_borrow: str, flavor: str) -> None:
    """Kueue's default (whenCanBorrow: MayStopSearch) borrows in the first flavor that can; TryNextFlavor
    looks further for a flavor where the workload fits without borrowing."""
    mine = gpu_queue("mine", {"spot": 2, "on-demand": 4},
                     fungibility=kq.FlavorFungibility(when_can_borrow=when_can_borrow))
    lender = gpu_queue("lender", {"spot": 4})
    decisions = kq.schedule(world([mine, lender], [gpu_workload("w", "mine", 3, 1)]))
    assert decisions.admitted[("team", "w")].pod_sets[0].flavors == {"nvidia.com/gpu": flavor}


def test_borrow_within_cohort_lets_a_borrower_reclaim_from_lower_priority_borrowers() -> None:
    def run(policy: str) -> kq.Decisions:
        preemption = kq.PreemptionPolicy(reclaim_within_cohort=kq.ANY, borrow_within_cohort=policy)
        a = gpu_queue("a", {"gpu": 2}, preemption=preemption)
        b = gpu_queue("b", {"gpu": 2})
        idle = gpu_queue("idle", {"gpu": 4})
        running = [gpu_workload("b-low", "b", 6, 1, priority=10, admitted_in=("b", "gpu"))]
        return kq.schedule(world([a, b, idle], running + [gpu_workload("a-high", "a", 4, 2, priority=100)]))

    assert run(kq.NEVER).evicted == {}  # a would still borrow after the preemption: not allowed
    eviction = run(kq.LOWER_PRIORITY).evicted[("team", "b-low")]
    assert eviction.reason == kq.IN_COHORT_RECLAIM_WHILE_BORROWING
    assert "due to reclamation within the cohort while borrowing; preemptor path: /rnd/a; preemptee path: /rnd/b" in (
        eviction.message)


@pytest.mark.parametrize(("policy", "preempts"), [(kq.LOWER_PRIORITY, False), (kq.LOWER_OR_NEWER_EQUAL, True)])
def test_lower_or_newer_equal_priority_lets_the_older_workload_preempt_a_newer_one(policy: str, preempts: bool) -> None:
    queue = gpu_queue("q", {"gpu": 4}, cohort="", preemption=kq.PreemptionPolicy(within_cluster_queue=policy))
    older = gpu_workload("b-older", "q", 3, 2)  # waited while c-newer, smaller, got in (BestEffortFIFO)
    newer = gpu_workload("c-newer", "q", 2, 3, admitted_in=("q", "gpu"))
    other = gpu_workload("a-other", "q", 1, 1, admitted_in=("q", "gpu"))
    decisions = kq.schedule(world([queue], [other, older, newer]))
    assert (("team", "c-newer") in decisions.evicted) is preempts
    assert ("team", "a-other") not in decisions.evicted  # older than the preemptor: never a candidate
    if preempts:
        assert decisions.pending[("team", "b-older")][0] == kq.WAITING_FOR_PREEMPTED


# ---------------------------------------------------------------------------------------------------
# Property: whatever is submitted, admitted usage stays within the quotas


FLAVOR_NAMES = ("f1", "f2")
RESOURCES = ("nvidia.com/gpu", "cpu")


@st.composite
def kueue_worlds(draw: st.DrawFn) -> tuple[kq.Snapshot, list[kq.Workload]]:
    """A cohort of ClusterQueues (quotas, borrowing and lending limits, policies) and a stream of workloads."""
    names = [f"cq{i}" for i in range(draw(st.integers(2, 4)))]
    queues = {}
    for name in names:
        quotas = {}
        for flavor in FLAVOR_NAMES:
            for res in RESOURCES:
                nominal = Decimal(draw(st.integers(0, 8)))
                borrowing = draw(st.none() | st.integers(0, 6))
                lending = draw(st.none() | st.integers(0, int(nominal)))
                quotas[(flavor, res)] = kq.ResourceQuota(
                    nominal, None if borrowing is None else Decimal(borrowing), None if lending is None else Decimal(lending))
        policy = st.sampled_from([kq.NEVER, kq.LOWER_PRIORITY, kq.ANY])
        queues[name] = kq.ClusterQueue(
            name, cohort=draw(st.sampled_from(["rnd", "rnd", "rnd", ""])),
            resource_groups=(kq.ResourceGroup(RESOURCES, tuple(draw(st.permutations(FLAVOR_NAMES)))),),
            quotas=quotas, namespace_selector={},
            queueing_strategy=draw(st.sampled_from([kq.BEST_EFFORT_FIFO, kq.STRICT_FIFO])),
            preemption=kq.PreemptionPolicy(
                draw(st.sampled_from([kq.NEVER, kq.LOWER_PRIORITY, kq.LOWER_OR_NEWER_EQUAL])), draw(policy),
                draw(st.sampled_from([kq.NEVER, kq.LOWER_PRIORITY])), draw(st.none() | st.sampled_from([0, 50, 100]))),
            fungibility=kq.FlavorFungibility(draw(st.sampled_from([kq.MAY_STOP_SEARCH, kq.TRY_NEXT_FLAVOR])),
                                             draw(st.sampled_from([kq.MAY_STOP_SEARCH, kq.TRY_NEXT_FLAVOR]))))
    cohort_quota = {(f, r): kq.ResourceQuota(Decimal(draw(st.integers(0, 2)))) for f in FLAVOR_NAMES for r in RESOURCES}
    workloads = []
    for i in range(draw(st.integers(1, 20))):
        cq = draw(st.sampled_from(names))
        requests = {"nvidia.com/gpu": Decimal(draw(st.integers(0, 5))), "cpu": Decimal(draw(st.sampled_from(["0.5", "1", "3"])))}
        workloads.append(kq.Workload(
            "team", f"w{i:02d}", cq, (kq.PodSet("main", draw(st.integers(1, 2)), requests),),
            priority=draw(st.sampled_from([0, 50, 100])), created=f"2026-01-01T00:{i:02d}:00Z", uid=f"uid-{i:02d}"))
    snap = kq.Snapshot(
        flavors={f: kq.Flavor(f) for f in FLAVOR_NAMES}, cluster_queues=queues,
        cohorts={"rnd": kq.Cohort("rnd", quotas=cohort_quota)},
        local_queues={("team", n): kq.LocalQueue("team", n, n) for n in names}, namespaces={"team": {}},
        now="2026-01-01T01:00:00Z")
    return snap, workloads


def assert_within_quotas(snap: kq.Snapshot, workloads: list[kq.Workload]) -> None:
    usage: dict[str, dict[kq.FR, Decimal]] = {name: {} for name in snap.cluster_queues}
    for wl in workloads:
        if wl.admission is None:
            continue
        cq = snap.cluster_queues[wl.admission.cluster_queue]
        for fr, value in wl.admission.usage().items():
            assert fr[0] in cq.flavors(), (wl, fr)
            usage[cq.name][fr] = usage[cq.name].get(fr, Decimal(0)) + value
    for flavor in FLAVOR_NAMES:
        for res in RESOURCES:
            fr = (flavor, res)
            lent, lendable = Decimal(0), snap.cohorts["rnd"].quotas[fr].nominal
            for name, cq in snap.cluster_queues.items():
                quota, used = cq.quotas[fr], usage[name].get(fr, Decimal(0))
                if not cq.cohort:
                    assert used <= quota.nominal, (name, fr, used)
                    continue
                if quota.borrowing_limit is not None:
                    assert used <= quota.nominal + quota.borrowing_limit, (name, fr, used)
                # What a queue keeps for itself (nominal - lendingLimit) is never lent; the rest is the cohort's.
                kept = quota.nominal - quota.lending_limit if quota.lending_limit is not None else Decimal(0)
                lent += max(Decimal(0), used - kept)
                lendable += quota.nominal - kept
            assert lent <= lendable, (fr, lent, lendable)

KUEUE_WAIT_REASONS = {kq.NO_MATCHING_FLAVOR, kq.WAITING_FOR_QUOTA, kq.EXCEEDS_MAX_QUOTA, kq.WAITING_FOR_PREEMPTED,
                      kq.MISCONFIGURED, kq.SUSPENDED}


# print_blob: a failure prints the `@reproduce_failure` that replays it (the world's own repr is empty).
@settings(max_examples=300, deadline=None, print_blob=True)
@given(kueue_worlds(), st.randoms(use_true_random=False))
def test_admitted_usage_never_exceeds_nominal_plus_borrowing_limits_nor_the_cohort(world: Any, rng: Any) -> None:
    snap, workloads = world
    submitted = []
    for step in range(60):
        # Now and then a new workload arrives, or one that runs finishes.
        if workloads and rng.random() < 0.7:
            submitted.append(workloads.pop(0))
        running = [w for w in submitted if w.admission is not None and not w.finished]
        if running and rng.random() < 0.2:
            done = rng.choice(running)
            submitted[submitted.index(done)] = replace(done, finished=True, admission=None)
        decisions = kq.schedule(replace(snap, workloads=tuple(submitted)))
        for reason, message in decisions.pending.values():
            assert reason in KUEUE_WAIT_REASONS and message, (reason, message)
        # Admissions first (a workload admitted in one cycle may be preempted in a later one), then evictions.
        for i, wl in enumerate(submitted):
            if wl.key in decisions.admitted:
                assert wl.admission is None and not wl.finished
                submitted[i] = replace(wl, admission=decisions.admitted[wl.key], reserved_at=snap.now, evicted=False)
        assert_within_quotas(snap, submitted)
        for i, wl in enumerate(submitted):
            if wl.key in decisions.evicted:
                assert wl.admission is not None
                # Evicted and, the Job's pods gone, released at once: its quota is free for the preemptor.
                submitted[i] = replace(wl, admission=None, evicted=True)
        if not workloads and not decisions.admitted and not decisions.evicted:
            break
