"""The emulator's Job controller and kubelet, as batch/v1 behaves (kubesim.jobs, kubesim.kubelet, kubesim.gc).

Over HTTP with the official client (BatchV1Api, CoreV1Api) on a manual clock: the test moves the clock and
ticks the controllers itself, so every step and timestamp is exact. Pods are bound to a node by a tiny
stand-in for a scheduler (the ``pods/binding`` subresource, as kube-scheduler binds), since the emulator's
schedulers come separately. The last tests drive the real kubectl against an emulator whose controllers tick
in their thread on the real clock.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3
from kubernetes import client
from kubernetes import config as k8s_config

from kubesim import ApiError, KubeEmulator, ManualClock, make_node
from kubesim.jobs import COMPLETION_INDEX, TRACKING_FINALIZER
from kubesim.kubelet import EXIT_CODE_ANNOTATION, RUN_SECONDS_ANNOTATION
from tests.kubesim.test_kubectl import rows

START = "2025-03-01T12:00:00Z"
NS = "ml"


class Lab:
    """An emulator on a manual clock with controllers on, one node, and typed clients over HTTP."""

    def __init__(self, emulators, tmp_path: Path) -> None:
        self.clock = ManualClock(START)
        # No scheduler: these tests bind the pods themselves, when they choose.
        self.emu = emulators(clock=self.clock, controllers=True, bookmark_interval=0.2, schedulers=False)
        self.emu.add_node(make_node("gpu-1", gpus=8))
        self.emu.add_namespace(NS)
        self.api = k8s_config.new_client_from_config(config_file=str(self.emu.write_kubeconfig(tmp_path / "kc")))
        self.batch = client.BatchV1Api(self.api)
        self.core = client.CoreV1Api(self.api)

    def close(self) -> None:
        self.api.close()

    def tick(self, seconds: float = 0.0) -> list[str]:
        """Move the clock, then run every controller once."""
        if seconds:
            self.clock.advance(seconds)
        return self.emu.tick()

    def job(self, name: str) -> client.V1Job:
        return self.batch.read_namespaced_job(name, NS)

    def pods(self, job: str) -> list[client.V1Pod]:
        return sorted(self.core.list_namespaced_pod(NS, label_selector=f"job-name={job}").items,
                      key=lambda p: p.metadata.name)

    def bind_pending(self, node: str = "gpu-1") -> list[str]:
        """The tiny scheduler: every unbound pod of the namespace bound to ``node`` through pods/binding."""
        bound = []
        for pod in self.core.list_namespaced_pod(NS, field_selector="spec.nodeName=").items:
            if pod.metadata.deletion_timestamp:
                continue
            body = client.V1Binding(metadata=client.V1ObjectMeta(name=pod.metadata.name),
                                    target=client.V1ObjectReference(kind="Node", name=node))
            # The client cannot read the Status the API answers as a Binding: read the raw answer.
            r = self.core.create_namespaced_pod_binding(pod.metadata.name, NS, body, _preload_content=False)
            assert r.status == 201
            bound.append(pod.metadata.name)
        return bound

    def run_pending(self, seconds: float) -> None:
        """Bind the pending pods, start them (1 s later), let them run ``seconds``, let the Job count them."""
        self.bind_pending()
        self.tick(1)
        self.tick(seconds)
        self.tick()

    def events(self, job: str) -> list[tuple[str, str, str]]:
        items = self.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={job}").items
        return [(e.type, e.reason, e.message) for e in sorted(items, key=lambda e: e.metadata.name)]


@pytest.fixture
def lab(emulators, tmp_path: Path) -> Iterator[Lab]:
    lab = Lab(emulators, tmp_path)
    yield lab
    lab.close()


def job_manifest(name: str, *, completions: int | None = 1, parallelism: int | None = None, run: float | None = 30,
                 exit_code: int = 0, restart: str = "Never", **spec: object) -> dict:
    annotations = {}
    if run is not None:
        annotations[RUN_SECONDS_ANNOTATION] = str(run)
    if exit_code:
        annotations[EXIT_CODE_ANNOTATION] = str(exit_code)
    camel = {re.sub(r"_(\w)", lambda m: m.group(1).upper(), k): v for k, v in spec.items()}
    body: dict = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {
        "template": {"metadata": {"annotations": annotations}, "spec": {
            "restartPolicy": restart, "containers": [{"name": "main", "image": "trainer:1"}]}},
        **camel}}
    if completions is not None:
        body["spec"]["completions"] = completions
    if parallelism is not None:
        body["spec"]["parallelism"] = parallelism
    return body


def conditions(job: client.V1Job) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in job.status.conditions or []}


# ---------------------------------------------------------------------------------------------- running


def test_a_job_runs_its_completions_parallelism_at_a_time_then_completes(lab: Lab) -> None:
    created = lab.batch.create_namespaced_job(NS, job_manifest("train", completions=3, parallelism=2))
    uid = created.metadata.uid
    # The API server's defaults and the selector it generates.
    assert created.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert created.spec.template.metadata.labels == {"batch.kubernetes.io/job-name": "train", "job-name": "train",
                                                     "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid}
    assert (created.spec.backoff_limit, created.spec.completion_mode, created.spec.suspend) == (6, "NonIndexed", False)
    assert created.status is None or created.status.active is None

    lab.tick()
    pods = lab.pods("train")
    assert len(pods) == 2 and all(re.fullmatch(r"train-[bcdfghjklmnpqrstvwxz2456789]{5}", p.metadata.name)
                                  for p in pods)
    pod = pods[0]
    assert pod.metadata.labels["batch.kubernetes.io/controller-uid"] == uid
    assert [(r.kind, r.name, r.uid, r.controller, r.block_owner_deletion) for r in pod.metadata.owner_references] == [
        ("Job", "train", uid, True, True)]
    assert pod.metadata.finalizers == [TRACKING_FINALIZER]
    assert pod.status.phase == "Pending" and pod.spec.node_name is None  # nobody has bound it yet
    job = lab.job("train")
    assert (job.status.active, job.status.ready, job.status.succeeded) == (2, 0, None)
    assert job.status.start_time.isoformat() == "2025-03-01T12:00:00+00:00"
    assert conditions(job) == {}

    assert len(lab.bind_pending()) == 2
    lab.tick(1)
    assert [p.status.phase for p in lab.pods("train")] == ["Running", "Running"]
    assert all(p.status.start_time.isoformat() == "2025-03-01T12:00:01+00:00" for p in lab.pods("train"))
    lab.tick()
    assert lab.job("train").status.ready == 2

    lab.tick(30)  # 30 s of running: both succeed
    assert [p.status.phase for p in lab.pods("train")] == ["Succeeded", "Succeeded"]
    done = lab.pods("train")[0].status.container_statuses[0].state.terminated
    assert (done.exit_code, done.reason) == (0, "Completed")
    lab.tick()  # counted; one more pod for the last completion, never more than the completions left
    job = lab.job("train")
    assert (job.status.succeeded, job.status.active) == (2, 1)
    assert [p.metadata.finalizers for p in lab.pods("train") if p.status.phase == "Succeeded"] == [None, None]
    lab.run_pending(30)
    job = lab.job("train")
    assert job.status.succeeded == 3 and job.status.active is None and job.status.failed is None
    assert conditions(job) == {"SuccessCriteriaMet": ("True", "CompletionsReached"),
                               "Complete": ("True", "CompletionsReached")}
    assert job.status.completion_time.isoformat() == "2025-03-01T12:01:02+00:00"
    assert job.status.uncounted_terminated_pods.succeeded is None
    assert [e[1] for e in lab.events("train")].count("SuccessfulCreate") == 3
    assert ("Normal", "Completed", "Job completed") in lab.events("train")
    # A finished Job is left alone: no pod is started again.
    lab.tick(600)
    assert len(lab.pods("train")) == 3


def test_a_work_queue_job_is_done_when_one_pod_succeeded_and_the_others_ended(lab: Lab) -> None:
    body = job_manifest("queue", completions=None, parallelism=3)
    lab.batch.create_namespaced_job(NS, body)
    assert lab.job("queue").spec.completions is None and lab.job("queue").spec.parallelism == 3
    lab.tick()
    lab.bind_pending()
    lab.tick()
    first = lab.pods("queue")[0].metadata.name
    # One worker finishes early (a worker of a work queue decides when the queue is empty).
    lab.emu.set_pod_phase(NS, first, "Succeeded")
    lab.tick()
    job = lab.job("queue")
    assert (job.status.succeeded, job.status.active) == (1, 2) and conditions(job) == {}
    assert len(lab.pods("queue")) == 3  # no new pod once one succeeded
    lab.tick(30)
    lab.tick()
    job = lab.job("queue")
    assert job.status.succeeded == 3 and conditions(job)["Complete"] == ("True", "CompletionsReached")


def test_indexed_pods_are_named_labelled_and_completed_by_index(lab: Lab) -> None:
    lab.batch.create_namespaced_job(NS, job_manifest("shard", completions=5, parallelism=2,
                                                     completion_mode="Indexed"))
    lab.tick()
    pods = lab.pods("shard")
    assert sorted(p.metadata.annotations[COMPLETION_INDEX] for p in pods) == ["0", "1"]
    for pod in pods:
        index = pod.metadata.annotations[COMPLETION_INDEX]
        assert re.fullmatch(rf"shard-{index}-[bcdfghjklmnpqrstvwxz2456789]{{5}}", pod.metadata.name)
        assert pod.metadata.labels[COMPLETION_INDEX] == index
        assert pod.spec.hostname == f"shard-{index}"
        env = {e.name: e.value_from.field_ref.field_path for e in pod.spec.containers[0].env}
        assert env == {"JOB_COMPLETION_INDEX": f"metadata.labels['{COMPLETION_INDEX}']"}
    lab.run_pending(30)
    job = lab.job("shard")
    assert job.status.completed_indexes == "0,1" and job.status.succeeded == 2
    assert sorted(p.metadata.annotations[COMPLETION_INDEX] for p in lab.pods("shard")
                  if p.status.phase == "Pending") == ["2", "3"]
    # Index 3's pod fails: it is replaced by a pod of the same index (after the backoff delay).
    lab.bind_pending()
    lab.tick(1)
    three = next(p for p in lab.pods("shard") if p.metadata.annotations[COMPLETION_INDEX] == "3")
    lab.emu.set_pod_phase(NS, three.metadata.name, "Failed")
    lab.tick(30)
    lab.tick()
    job = lab.job("shard")
    assert (job.status.completed_indexes, job.status.failed) == ("0-2", 1)
    lab.tick(10)  # the delay after a failure: 10 s
    pending = sorted(p.metadata.annotations[COMPLETION_INDEX] for p in lab.pods("shard") if p.status.phase == "Pending")
    assert pending == ["3", "4"]
    lab.run_pending(30)
    job = lab.job("shard")
    assert job.status.completed_indexes == "0-4" and job.status.succeeded == 5
    assert conditions(job)["Complete"][0] == "True"


# ---------------------------------------------------------------------------------------------- suspend


def test_suspend_deletes_the_active_pods_and_resume_starts_again_resetting_the_start_time(lab: Lab) -> None:
    lab.batch.create_namespaced_job(NS, job_manifest("queued", completions=2, parallelism=2, run=600,
                                                     suspend=True))
    lab.tick()
    job = lab.job("queued")
    assert lab.pods("queued") == [] and job.status.start_time is None  # as Kueue creates it: nothing runs
    assert conditions(job) == {"Suspended": ("True", "JobSuspended")}
    assert ("Normal", "Suspended", "Job suspended") in lab.events("queued")

    lab.tick(60)
    lab.batch.patch_namespaced_job("queued", NS, {"spec": {"suspend": False}})  # admitted
    lab.tick()
    job = lab.job("queued")
    assert conditions(job) == {"Suspended": ("False", "JobResumed")}
    assert job.status.start_time.isoformat() == "2025-03-01T12:01:00+00:00"
    assert job.status.active == 2 and len(lab.pods("queued")) == 2
    lab.bind_pending()
    lab.tick(1)

    lab.tick(100)
    lab.batch.patch_namespaced_job("queued", NS, {"spec": {"suspend": True}})  # preempted
    lab.tick()  # the Job controller deletes its running pods, their kubelet stops them in the same tick
    job = lab.job("queued")
    assert conditions(job) == {"Suspended": ("True", "JobSuspended")}
    assert job.status.active is None and job.status.terminating == 2
    assert lab.pods("queued") == []
    lab.tick()
    job = lab.job("queued")
    assert job.status.terminating == 0 and job.status.failed is None  # suspension is not a failure

    lab.tick(60)
    lab.batch.patch_namespaced_job("queued", NS, {"spec": {"suspend": False}})
    lab.tick()
    job = lab.job("queued")
    assert job.status.start_time.isoformat() == "2025-03-01T12:03:41+00:00"  # reset: the deadline restarts
    assert job.status.active == 2
    reasons = [e[1] for e in lab.events("queued")]
    assert reasons.count("Suspended") == 2 and reasons.count("Resumed") == 2
    assert reasons.count("SuccessfulDelete") == 2


# ---------------------------------------------------------------------------------------------- failures


def test_failed_pods_are_replaced_after_a_delay_until_the_backoff_limit_fails_the_job(lab: Lab) -> None:
    lab.batch.create_namespaced_job(NS, job_manifest("flaky", run=5, exit_code=1, backoff_limit=1))
    lab.tick()
    lab.bind_pending()
    lab.tick(1)
    lab.tick(5)
    [pod] = lab.pods("flaky")
    assert pod.status.phase == "Failed"
    state = pod.status.container_statuses[0].state.terminated
    assert (state.exit_code, state.reason) == (1, "Error")
    lab.tick()
    job = lab.job("flaky")
    assert job.status.failed == 1 and job.status.active is None and conditions(job) == {}
    lab.tick(9)
    assert len(lab.pods("flaky")) == 1  # upstream's backoff: the replacement waits 10 s
    lab.tick(1)
    assert len(lab.pods("flaky")) == 2
    lab.bind_pending()
    lab.tick(1)
    lab.tick(5)
    lab.tick()
    job = lab.job("flaky")
    assert job.status.failed == 2
    assert conditions(job) == {"FailureTarget": ("True", "BackoffLimitExceeded"),
                               "Failed": ("True", "BackoffLimitExceeded")}
    failed = next(c for c in job.status.conditions if c.type == "Failed")
    assert failed.message == "Job has reached the specified backoff limit"
    assert job.status.completion_time is None
    assert ("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit") in lab.events("flaky")
    lab.tick(600)
    assert len(lab.pods("flaky")) == 2  # a failed Job starts nothing


def test_with_restart_policy_on_failure_container_restarts_count_against_the_backoff_limit(lab: Lab) -> None:
    lab.batch.create_namespaced_job(NS, job_manifest("crashy", run=5, exit_code=3, restart="OnFailure",
                                                     backoff_limit=2))
    lab.tick()
    lab.bind_pending()
    lab.tick(1)
    lab.tick(5)  # the container exits 3 and is restarted in place
    [pod] = lab.pods("crashy")
    status = pod.status.container_statuses[0]
    assert pod.status.phase == "Running" and status.restart_count == 1
    assert status.last_state.terminated.exit_code == 3
    lab.tick(5)
    assert lab.pods("crashy")[0].status.container_statuses[0].restart_count == 2
    lab.tick()  # two restarts reach the limit of 2: the Job fails and its pod is stopped
    job = lab.job("crashy")
    assert conditions(job)["FailureTarget"] == ("True", "BackoffLimitExceeded")
    assert job.status.terminating == 1
    lab.tick()
    lab.tick()
    assert conditions(lab.job("crashy"))["Failed"] == ("True", "BackoffLimitExceeded")
    assert lab.pods("crashy") == []


def test_the_active_deadline_fails_the_job_and_stops_its_running_pods(lab: Lab) -> None:
    lab.batch.create_namespaced_job(NS, job_manifest("slow", parallelism=1, run=3600, active_deadline_seconds=60,
                                                     backoff_limit=6))
    lab.tick()
    lab.bind_pending()
    lab.tick(1)
    lab.tick(58)
    assert conditions(lab.job("slow")) == {}
    lab.tick(1)  # 60 s after startTime
    job = lab.job("slow")
    assert conditions(job) == {"FailureTarget": ("True", "DeadlineExceeded")}
    assert job.status.active is None and job.status.terminating == 1 and job.status.failed == 1
    assert lab.pods("slow") == []  # deleted by the Job controller, stopped (SIGTERM) by its kubelet
    lab.tick()  # no pod terminating any more: the terminal condition
    job = lab.job("slow")
    assert conditions(job) == {"FailureTarget": ("True", "DeadlineExceeded"), "Failed": ("True", "DeadlineExceeded")}
    assert next(c for c in job.status.conditions if c.type == "Failed").message == \
        "Job was active longer than specified deadline"
    assert job.status.terminating == 0


def test_a_deleted_pod_is_counted_failed_and_replaced(lab: Lab) -> None:
    lab.batch.create_namespaced_job(NS, job_manifest("evicted", run=600))
    lab.tick()
    lab.bind_pending()
    lab.tick(1)
    [pod] = lab.pods("evicted")
    lab.core.delete_namespaced_pod(pod.metadata.name, NS)
    being_deleted = lab.core.read_namespaced_pod(pod.metadata.name, NS)  # the kubelet has yet to stop it
    assert being_deleted.metadata.deletion_timestamp is not None and being_deleted.status.phase == "Running"
    lab.tick()
    job = lab.job("evicted")
    assert job.status.failed == 1  # counted as soon as it is being deleted (podReplacementPolicy default)
    assert lab.pods("evicted") == []  # stopped by its kubelet; the replacement waits for the backoff delay
    lab.tick(10)  # after the backoff delay, its replacement
    job = lab.job("evicted")
    assert job.status.failed == 1 and job.status.active == 1
    assert [p.status.phase for p in lab.pods("evicted")] == ["Pending"]


# ---------------------------------------------------------------------------------------------- pod failure policy
# https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy and the task page
# "Handling retriable and non-retriable pod failures with Pod failure policy".

EXIT_42_FAILS_THE_JOB = {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In",
                                                             "values": [42]}}
DISRUPTIONS_ARE_IGNORED = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}


def test_a_fail_job_rule_fails_the_job_at_the_first_matching_exit_code_whatever_the_backoff_limit(lab: Lab) -> None:
    lab.batch.create_namespaced_job(NS, job_manifest(
        "bug", completions=4, parallelism=2, run=5, exit_code=42, backoff_limit=6,
        pod_failure_policy={"rules": [EXIT_42_FAILS_THE_JOB, DISRUPTIONS_ARE_IGNORED]}))
    job = lab.job("bug")
    # The API server's defaults: the condition pattern's status True, pods replaced once Failed only.
    assert job.spec.pod_failure_policy.rules[1].on_pod_conditions[0].status == "True"
    assert job.spec.pod_replacement_policy == "Failed"
    lab.tick()
    lab.bind_pending()
    lab.tick(1)
    first, second = (p.metadata.name for p in lab.pods("bug"))
    lab.core.patch_namespaced_pod(second, NS, {"metadata": {"annotations": {RUN_SECONDS_ANNOTATION: "600"}}})
    lab.tick(5)  # the first exits 42
    lab.tick()
    job = lab.job("bug")
    message = f"Container main for pod {NS}/{first} failed with exit code 42 matching FailJob rule at index 0"
    assert conditions(job) == {"FailureTarget": ("True", "PodFailurePolicy")}
    assert next(c for c in job.status.conditions if c.type == "FailureTarget").message == message
    # The other pod is stopped; once it is gone the Job is Failed with the same reason and message.
    lab.tick()
    job = lab.job("bug")
    assert conditions(job) == {"FailureTarget": ("True", "PodFailurePolicy"), "Failed": ("True", "PodFailurePolicy")}
    assert next(c for c in job.status.conditions if c.type == "Failed").message == message
    assert job.status.failed == 2 and job.status.active is None
    assert ("Warning", "PodFailurePolicy", message) in lab.events("bug")
    lab.tick(600)
    assert len(lab.pods("bug")) == 1  # no replacement: the failed pod stays, nothing new starts


def test_an_ignore_rule_on_disruption_target_replaces_an_evicted_pod_without_counting_it(lab: Lab) -> None:
    """What a scheduler's eviction (preemption, reclaim) does to a Job with backoffLimit 0: with the rule, the
    pod is replaced and the Job runs on; it is not a failure."""
    lab.batch.create_namespaced_job(NS, job_manifest("train", run=600, backoff_limit=0,
                                                     pod_failure_policy={"rules": [DISRUPTIONS_ARE_IGNORED]}))
    lab.tick()
    lab.bind_pending()
    lab.tick(1)
    [pod] = lab.pods("train")
    # A scheduler evicting the pod: the DisruptionTarget condition first, then the deletion.
    lab.core.patch_namespaced_pod_status(pod.metadata.name, NS, {"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
        "message": "evicted by the scheduler"}]}})
    lab.core.delete_namespaced_pod(pod.metadata.name, NS)
    lab.tick()  # terminating: with podReplacementPolicy Failed no replacement yet; the kubelet stops it
    job = lab.job("train")
    assert job.status.terminating == 1 and job.status.active is None
    stopped = lab.core.read_namespaced_pod(pod.metadata.name, NS)  # held by the Job's tracking finalizer
    assert stopped.status.phase == "Failed"
    assert {c.type: c.reason for c in stopped.status.conditions}["DisruptionTarget"] == "PreemptionByScheduler"
    lab.tick()
    job = lab.job("train")
    assert job.status.failed is None and conditions(job) == {}  # not counted: backoffLimit 0 is not exceeded
    assert lab.pods("train") == []
    lab.tick(10)  # the replacement after the back-off (an ignored failure still delays it)
    job = lab.job("train")
    assert job.status.active == 1 and [p.status.phase for p in lab.pods("train")] == ["Pending"]
    # The same eviction without the rule fails a Job with backoffLimit 0 at once.
    lab.batch.create_namespaced_job(NS, job_manifest("plain", run=600, backoff_limit=0))
    lab.tick()
    lab.bind_pending()
    lab.tick(1)
    [plain] = lab.pods("plain")
    lab.core.delete_namespaced_pod(plain.metadata.name, NS)
    lab.tick()
    assert conditions(lab.job("plain"))["FailureTarget"] == ("True", "BackoffLimitExceeded")


def test_rules_are_tried_in_order_the_first_match_decides_and_count_is_the_default_handling(lab: Lab) -> None:
    rules = [
        {"action": "Ignore", "onExitCodes": {"containerName": "sidecar", "operator": "In", "values": [5]}},
        {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}},
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [5]}},
    ]
    manifest = job_manifest("ordered", run=5, exit_code=5, backoff_limit=1, pod_failure_policy={"rules": rules})
    manifest["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "proxy:1"})
    lab.batch.create_namespaced_job(NS, manifest)
    lab.tick()
    lab.run_pending(5)
    # Both containers end with 5: rule 0 (the sidecar's exit code) matches first, so the failure is ignored,
    # though the FailJob rule would match too.
    job = lab.job("ordered")
    assert job.status.failed is None and conditions(job) == {}
    # Without the sidecar rule, NotIn [1, 2] comes before FailJob In [5]: counted, the backoff limit decides.
    manifest = job_manifest("counted", run=5, exit_code=5, backoff_limit=1, pod_failure_policy={"rules": rules[1:]})
    lab.batch.create_namespaced_job(NS, manifest)
    lab.tick()
    lab.run_pending(5)
    job = lab.job("counted")
    assert job.status.failed == 1 and conditions(job) == {}
    lab.tick(10)
    lab.run_pending(5)
    job = lab.job("counted")
    assert job.status.failed == 2
    assert conditions(job) == {"FailureTarget": ("True", "BackoffLimitExceeded"), "Failed": ("True", "BackoffLimitExceeded")}


def index_pod(lab: Lab, job: str, index: int, phase: str = "Pending") -> client.V1Pod:
    return next(p for p in lab.pods(job) if p.metadata.annotations[COMPLETION_INDEX] == str(index)
                and p.status.phase == phase)


def test_fail_index_and_the_backoff_limit_per_index_fail_indexes_not_the_whole_job(lab: Lab) -> None:
    rules = [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [42]}}]
    lab.batch.create_namespaced_job(NS, job_manifest(
        "sweep", completions=3, parallelism=3, run=5, exit_code=1, completion_mode="Indexed",
        backoff_limit_per_index=1, pod_failure_policy={"rules": rules}))
    assert lab.job("sweep").spec.backoff_limit == 2147483647  # defaulted out of the way
    lab.tick()
    # Index 0 succeeds, index 1 exits 42 (FailIndex), index 2 exits 1 (counted against its own limit of 1).
    for index, code in ((0, "0"), (1, "42")):
        lab.core.patch_namespaced_pod(index_pod(lab, "sweep", index).metadata.name, NS,
                                      {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: code}}})
    lab.run_pending(5)
    job = lab.job("sweep")
    assert (job.status.completed_indexes, job.status.failed_indexes) == ("0", "1")
    assert conditions(job) == {}  # index 2 has one more try
    lab.tick(9)
    assert not [p for p in lab.pods("sweep") if p.status.phase == "Pending"]  # its own back-off: 10 s
    lab.tick(1)
    replacement = index_pod(lab, "sweep", 2)
    assert replacement.metadata.annotations["batch.kubernetes.io/job-index-failure-count"] == "1"
    assert not [p for p in lab.pods("sweep") if p.status.phase == "Pending" and p is not replacement
                and p.metadata.annotations[COMPLETION_INDEX] == "1"]  # a failed index is not started again
    lab.run_pending(5)
    job = lab.job("sweep")
    assert (job.status.completed_indexes, job.status.failed_indexes, job.status.failed) == ("0", "1,2", 3)
    assert conditions(job) == {"FailureTarget": ("True", "FailedIndexes"), "Failed": ("True", "FailedIndexes")}
    assert next(c for c in job.status.conditions if c.type == "Failed").message == "Job has failed indexes"
    # maxFailedIndexes: past it, the Job fails at once.
    lab.batch.create_namespaced_job(NS, job_manifest(
        "capped", completions=4, parallelism=1, run=5, exit_code=42, completion_mode="Indexed",
        backoff_limit_per_index=0, max_failed_indexes=0, pod_failure_policy={"rules": rules}))
    lab.tick()
    lab.run_pending(5)
    job = lab.job("capped")
    assert conditions(job)["Failed"] == ("True", "MaxFailedIndexesExceeded")
    assert next(c for c in job.status.conditions if c.type == "Failed").message == \
        "Job has exceeded the specified maximal number of failed indexes"


def refusal(lab: Lab, manifest: dict) -> list[tuple[str, str]]:
    with pytest.raises(client.ApiException) as refused:
        lab.batch.create_namespaced_job(NS, manifest)
    assert refused.value.status == 422
    return [(c["field"], c["message"]) for c in json.loads(refused.value.body)["details"]["causes"]]


def test_the_api_server_refuses_a_pod_failure_policy_it_cannot_apply(lab: Lab) -> None:
    assert refusal(lab, job_manifest("on-failure", restart="OnFailure",
                                     pod_failure_policy={"rules": [DISRUPTIONS_ARE_IGNORED]})) == [
        ("spec.template.spec.restartPolicy",
         'Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified')]
    assert refusal(lab, job_manifest("bad-rules", pod_failure_policy={"rules": [
        {"action": "FailIndex", "onExitCodes": {"containerName": "nope", "operator": "In", "values": [3, 0, 3]}},
        {"action": "Retry", "onPodConditions": [{"type": "DisruptionTarget", "status": "Maybe"}]},
        {"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [1]},
         "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "Count"},
    ]})) == [
        ("spec.podFailurePolicy.rules[0].action", 'Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set'),
        ("spec.podFailurePolicy.rules[0].onExitCodes.containerName",
         'Invalid value: "nope": must be one of the container or initContainer names in the pod template'),
        ("spec.podFailurePolicy.rules[0].onExitCodes.values[1]", "Invalid value: 0: must not be 0 for the In operator"),
        ("spec.podFailurePolicy.rules[0].onExitCodes.values[2]", "Duplicate value: 3"),
        ("spec.podFailurePolicy.rules[0].onExitCodes.values", "Invalid value: []int32{3, 0, 3}: must be ordered"),
        ("spec.podFailurePolicy.rules[1].action",
         'Unsupported value: "Retry": supported values: "Count", "FailIndex", "FailJob", "Ignore"'),
        ("spec.podFailurePolicy.rules[1].onPodConditions[0].status",
         'Unsupported value: "Maybe": supported values: "False", "True", "Unknown"'),
        ("spec.podFailurePolicy.rules[2]",
         "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported"),
        ("spec.podFailurePolicy.rules[3]", "Invalid value: specifying one of OnExitCodes and OnPodConditions is required"),
    ]
    assert refusal(lab, job_manifest("not-indexed", backoff_limit_per_index=1, max_failed_indexes=1)) == [
        ("spec.backoffLimitPerIndex", "Invalid value: 1: requires indexed completion mode"),
        ("spec.maxFailedIndexes", "Invalid value: 1: requires indexed completion mode")]
    assert refusal(lab, job_manifest("replacing", pod_replacement_policy="TerminatingOrFailed",
                                     pod_failure_policy={"rules": [DISRUPTIONS_ARE_IGNORED]})) == [
        ("spec.podReplacementPolicy", 'Unsupported value: "TerminatingOrFailed": supported values: "Failed"')]


# ---------------------------------------------------------------------------------------------- deletion


def run_job(lab: Lab, name: str, pods: int = 2) -> list[str]:
    lab.batch.create_namespaced_job(NS, job_manifest(name, completions=pods, parallelism=pods, run=3600))
    lab.tick()
    lab.bind_pending()
    lab.tick(1)
    return [p.metadata.name for p in lab.pods(name)]


def test_background_deletion_deletes_the_pods_once_the_job_is_gone(lab: Lab) -> None:
    names = run_job(lab, "bg")
    lab.batch.delete_namespaced_job("bg", NS, propagation_policy="Background")
    with pytest.raises(client.ApiException) as gone:
        lab.job("bg")
    assert gone.value.status == 404
    stopping = [lab.core.read_namespaced_pod(n, NS) for n in names]
    assert all(p.metadata.deletion_timestamp for p in stopping)
    lab.tick()  # the kubelet stops them; their Job is gone, so the tracking finalizer goes too
    lab.tick()
    assert lab.core.list_namespaced_pod(NS).items == []


def test_foreground_deletion_keeps_the_job_until_its_pods_are_gone(lab: Lab) -> None:
    run_job(lab, "fg")
    lab.batch.delete_namespaced_job("fg", NS, body=client.V1DeleteOptions(propagation_policy="Foreground"))
    job = lab.job("fg")  # still there, deletion in progress
    assert job.metadata.deletion_timestamp is not None and job.metadata.finalizers == ["foregroundDeletion"]
    assert all(p.metadata.deletion_timestamp for p in lab.pods("fg"))
    assert rows_of(lab, "jobs")[1][1] == "Terminating"
    lab.tick()
    lab.tick()
    assert lab.pods("fg") == []
    with pytest.raises(client.ApiException) as gone:
        lab.job("fg")
    assert gone.value.status == 404


def test_orphan_deletion_leaves_the_pods_running_without_their_owner(lab: Lab) -> None:
    names = run_job(lab, "orphans")
    lab.batch.delete_namespaced_job("orphans", NS, propagation_policy="Orphan")
    lab.tick()
    lab.tick(60)
    pods = [lab.core.read_namespaced_pod(n, NS) for n in names]
    assert all(p.status.phase == "Running" and p.metadata.deletion_timestamp is None for p in pods)
    assert all(p.metadata.owner_references is None and p.metadata.finalizers is None for p in pods)


def test_a_jobs_default_propagation_orphans_its_pods_as_batch_v1_does(lab: Lab) -> None:
    names = run_job(lab, "default", pods=1)
    lab.batch.delete_namespaced_job("default", NS)  # no DeleteOptions: batch/v1 keeps its pods
    lab.tick()
    assert lab.core.read_namespaced_pod(names[0], NS).metadata.owner_references is None


def test_finalizers_hold_an_object_until_the_last_is_removed(lab: Lab) -> None:
    lab.core.create_namespaced_config_map(NS, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="held", finalizers=["example.com/keep"])))
    lab.core.delete_namespaced_config_map("held", NS)
    held = lab.core.read_namespaced_config_map("held", NS)
    assert held.metadata.deletion_timestamp.isoformat() == "2025-03-01T12:00:00+00:00"
    with pytest.raises(client.ApiException) as refused:
        lab.core.patch_namespaced_config_map("held", NS, {"metadata": {"finalizers": ["example.com/keep", "more"]}})
    assert refused.value.status == 422 and "no new finalizers" in refused.value.body
    lab.core.patch_namespaced_config_map("held", NS, {"metadata": {"finalizers": None}})
    with pytest.raises(client.ApiException) as gone:
        lab.core.read_namespaced_config_map("held", NS)
    assert gone.value.status == 404


def test_a_dependent_with_another_live_owner_survives_its_deleted_owner(lab: Lab) -> None:
    one = lab.core.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="one")))
    two = lab.core.create_namespaced_config_map(NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="two")))
    refs = [client.V1OwnerReference(api_version="v1", kind="ConfigMap", name=o.metadata.name, uid=o.metadata.uid)
            for o in (one, two)]
    lab.core.create_namespaced_config_map(NS, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="shared", owner_references=refs)))
    lab.core.create_namespaced_config_map(NS, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="only-one", owner_references=refs[:1])))
    lab.core.delete_namespaced_config_map("one", NS, propagation_policy="Background")
    names = {c.metadata.name for c in lab.core.list_namespaced_config_map(NS).items}
    assert names == {"two", "shared"}
    assert [r.name for r in lab.core.read_namespaced_config_map("shared", NS).metadata.owner_references] == ["two"]


# ---------------------------------------------------------------------------------------------- the API's answers


def test_the_api_server_refuses_a_job_it_cannot_run(lab: Lab) -> None:
    bad = job_manifest("always", restart="Always")
    with pytest.raises(client.ApiException) as refused:
        lab.batch.create_namespaced_job(NS, bad)
    status = json.loads(refused.value.body)
    assert refused.value.status == 422
    assert status["details"]["causes"] == [{"reason": "FieldValueNotSupported", "field": "spec.template.spec.restartPolicy",
                                            "message": 'Unsupported value: "Always": supported values: "OnFailure", "Never"'}]
    with pytest.raises(client.ApiException) as refused:
        lab.batch.create_namespaced_job(NS, job_manifest("indexed", completions=None, parallelism=2,
                                                         completion_mode="Indexed"))
    assert "spec.completions: Required value: when completion mode is Indexed" in refused.value.body


def test_ticks_and_the_manual_clock_through_the_control_surface(lab: Lab) -> None:
    lab.batch.create_namespaced_job(NS, job_manifest("remote"))
    http = urllib3.PoolManager()

    def call(op: str, **args: object) -> object:
        r = http.request("POST", f"{lab.emu.url}/_emulator/{op}", body=json.dumps(args),
                         headers={"Content-Type": "application/json"})
        assert r.status == 200, r.data
        return json.loads(r.data)["result"]

    assert any("created remote-" in line for line in call("tick"))
    assert call("advance_clock", seconds=90) == "2025-03-01T12:01:30Z"
    assert call("set_clock", time="2025-03-01T13:00:00Z") == "2025-03-01T13:00:00Z"
    r = http.request("POST", f"{lab.emu.url}/_emulator/karpenter_step", body=json.dumps({"now": 5}),
                     headers={"Content-Type": "application/json"})
    assert r.status == 400 and b"reads the emulator's clock" in r.data
    real = KubeEmulator()
    with pytest.raises(ApiError, match="real clock"):
        real.advance_clock(1)


def rows_of(lab: Lab, *args: str) -> list[list[str]]:
    """What `kubectl get` prints, from the Table the emulator serves (its cells, as kubectl lays them out)."""
    r = urllib3.PoolManager().request(
        "GET", f"{lab.emu.url}/apis/batch/v1/namespaces/{NS}/{args[0]}",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    table = json.loads(r.data)
    head = [c["name"].upper() for c in table["columnDefinitions"] if not c["priority"]]
    return [head] + [[str(c) for c in row["cells"][:len(head)]] for row in table["rows"]]


def test_the_table_shows_status_completions_and_duration_on_the_emulators_clock(lab: Lab) -> None:
    lab.batch.create_namespaced_job(NS, job_manifest("a", completions=2, parallelism=1, run=90))
    lab.batch.create_namespaced_job(NS, job_manifest("b", completions=None, parallelism=3, suspend=True))
    lab.tick()
    lab.bind_pending()
    lab.tick(5)
    table = rows_of(lab, "jobs")
    assert table[0] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert table[1] == ["a", "Running", "0/2", "5s", "5s"]
    assert table[2] == ["b", "Suspended", "0/1 of 3", "", "5s"]
    lab.tick(90)
    lab.tick()
    lab.bind_pending()
    lab.tick(1)
    lab.tick(90)
    lab.tick()
    assert rows_of(lab, "jobs")[1] == ["a", "Complete", "2/2", "3m6s", "3m6s"]
    lab.tick(600)
    assert rows_of(lab, "jobs")[1] == ["a", "Complete", "2/2", "3m6s", "13m"]


# ---------------------------------------------------------------------------------------------- the real kubectl


@pytest.fixture
def sim(emulators) -> KubeEmulator:
    """For kubectl (the conftest's fixture uses this one): controllers ticking in their thread on the real
    clock, and the tiny scheduler registered in their loop, binding every pod to the one node."""
    emulator = emulators(bookmark_interval=0.2, controllers=True, controller_interval=0.05)

    def bind_all(emu: KubeEmulator) -> list[str]:
        bound = []
        for pod in emu.list("pods"):
            if not pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                emu.bind_pod(pod["metadata"]["namespace"], pod["metadata"]["name"], "gpu-1")
                bound.append(pod["metadata"]["name"])
        return bound

    emulator.add_node(make_node("gpu-1", gpus=8))
    emulator.register_scheduler(bind_all)
    return emulator


def wait_for(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


JOB_YAML = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: quick
spec:
  completions: 2
  parallelism: 2
  template:
    metadata:
      annotations:
        emulator.gpu-capacity.io/run-seconds: "1"
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
"""


def test_kubectl_creates_jobs_prints_them_as_1_32_does_and_deletes_them_cascading(sim: KubeEmulator, kubectl) -> None:
    kubectl("create", "namespace", NS)
    kubectl("create", "job", "serve", "--image=busybox", "-n", NS, "--", "sleep", "infinity")  # runs until deleted
    kubectl("create", "-n", NS, "-f", "-", input=JOB_YAML)
    wait_for(lambda: (sim.get("jobs.batch", "quick", NS).get("status") or {}).get("succeeded") == 2)
    wait_for(lambda: (sim.get("jobs.batch", "serve", NS).get("status") or {}).get("ready") == 1)
    table = rows(kubectl("get", "jobs", "-n", NS).stdout)
    assert table[0] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    by_name = {r[0]: r for r in table[1:]}
    assert by_name["quick"][1:3] == ["Complete", "2/2"]
    assert by_name["serve"][1:3] == ["Running", "0/1"]
    wide = rows(kubectl("get", "jobs", "-n", NS, "-o", "wide").stdout)
    assert wide[0][-3:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    [pod] = rows(kubectl("get", "pods", "-n", NS, "-l", "job-name=serve").stdout)[1:]
    assert pod[0].startswith("serve-") and pod[1:3] == ["1/1", "Running"]
    done = rows(kubectl("get", "pods", "-n", NS, "-l", "job-name=quick").stdout)[1:]
    assert [p[1:3] for p in done] == [["0/1", "Completed"], ["0/1", "Completed"]]

    # kubectl deletes in the background by default and waits for the Job to be gone; its pod follows.
    kubectl("delete", "job", "serve", "-n", NS)
    assert sim.get("jobs.batch", "serve", NS) is None
    wait_for(lambda: not [p for p in sim.list("pods", NS) if p["metadata"]["name"].startswith("serve-")])
    # --cascade=orphan: the Job goes, its pods stay (without their owner).
    kubectl("delete", "job", "quick", "-n", NS, "--cascade=orphan")
    assert sim.get("jobs.batch", "quick", NS) is None
    pods = sim.list("pods", NS)
    assert len(pods) == 2 and all(not p["metadata"].get("ownerReferences") for p in pods)
    # --cascade=foreground: kubectl returns once the Job is gone, after its pods.
    kubectl("create", "job", "fg", "--image=busybox", "-n", NS, "--", "sleep", "infinity")
    wait_for(lambda: (sim.get("jobs.batch", "fg", NS).get("status") or {}).get("ready") == 1)
    kubectl("delete", "job", "fg", "-n", NS, "--cascade=foreground")
    assert sim.get("jobs.batch", "fg", NS) is None
    assert not [p for p in sim.list("pods", NS) if p["metadata"]["name"].startswith("fg-")]
