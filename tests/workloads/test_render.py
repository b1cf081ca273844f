"""The Job a two-pool submission renders (the dry run): pool affinity, weights by list order,
tolerations for the pools' taints, priority class, topology spread, and the queue labels of KAI and
Kueue when an enforcer is on."""
from __future__ import annotations

import pytest
import yaml

from enforcers import services as enforcement
from kubesim import make_node
from nodepools import services as pool_services
from nodepools.kube import CONSOLE_POOL_LABEL
from workloads import render
from workloads.submission import Request, pools_from_names, workload_preview

pytestmark = pytest.mark.django_db

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
def spread_org(org):
    """a100 places GPUs with `spread`, and both its nodes carry a NoSchedule taint."""
    pool_services.pool_update(actor=None, pool=org.a100, gpu_placement="spread")
    for i in (2, 3):
        org.nodes[i] = make_node(f"a100-{i - 1}", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960,
                                 labels={"gpu-type": "A100"},
                                 taints=[TAINT, {"key": "soft", "value": "x", "effect": "PreferNoSchedule"}])
    org.load()
    org.a100.refresh_from_db()
    return org


def preview(org, user, **extra):
    values = {"image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"], "gpus": 2,
              "cpu": "4", "memory": "16Gi", "priority_class": "train", "pods": 2, "name": "train-1"}
    values.update(extra)
    request = Request(project=org.rnd_a, pools=pools_from_names(project=org.rnd_a, names=["a100", "default"]),
                      **values)
    result = workload_preview(actor=user, request=request)
    # What the page shows is the same object, as YAML.
    assert yaml.safe_load(result.yaml) == result.job
    return result


def test_two_pool_submission_without_an_enforcer(spread_org, users):
    result = preview(spread_org, users["researcher"])
    job = result.job
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["metadata"]["namespace"] == "runai-rnd-a" and job["metadata"]["name"] == "train-1"
    assert job["metadata"]["annotations"][render.POOLS_ANNOTATION] == "a100,default"
    assert job["spec"]["parallelism"] == 2 and job["spec"]["completions"] == 2
    assert "suspend" not in job["spec"]
    pod = job["spec"]["template"]["spec"]
    affinity = pod["affinity"]["nodeAffinity"]
    # Without an enforcer the nodes carry only the pools' own labels: a100 by gpu-type=A100, default
    # as "none of the other pools' labels".
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["A100"]}]},
        {"matchExpressions": [{"key": "gpu-type", "operator": "NotIn", "values": ["A100"]}]},
    ]
    preferred = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [p["weight"] for p in preferred] == [100, 1]
    assert preferred[0]["preference"]["matchExpressions"][0]["values"] == ["A100"]
    # The pool's NoSchedule taint is tolerated; PreferNoSchedule needs nothing.
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule", "operator": "Equal",
                                   "value": "present"}]
    assert pod["priorityClassName"] == "train"
    assert pod["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"batch.kubernetes.io/job-name": "train-1"}}}]
    assert "schedulerName" not in pod
    container = pod["containers"][0]
    assert container["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert container["command"] == ["python", "train.py"]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["requests"]["cpu"] == "4"
    assert container["resources"]["requests"]["memory"] == "16Gi"
    labels = job["metadata"]["labels"]
    assert render.KAI_QUEUE_LABEL not in labels and render.KUEUE_QUEUE_LABEL not in labels
    # A failing workload fails (backoffLimit 0), but a pod a scheduler or a drain disrupts is replaced.
    assert job["spec"]["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    assert job["spec"]["podFailurePolicy"] == {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}
    assert render.KAI_MIN_MEMBER_ANNOTATION not in job["metadata"]["annotations"]
    assert result.queued_in == "" and result.scheduling == [
        "A pod the scheduler evicts (preemption, reclaim) or a node drain removes is replaced; it is not counted as "
        "a failure of the workload (podFailurePolicy: Ignore on DisruptionTarget)."]


def test_with_kai_the_pools_are_selected_by_the_console_label_and_the_queue_is_named(spread_org, users):
    enforcement.enforcement_set(actor=None, cluster=spread_org.cluster, enforcer="kai")
    result = preview(spread_org, users["researcher"], priority_class="inference")
    job = result.job
    pod = job["spec"]["template"]["spec"]
    affinity = pod["affinity"]["nodeAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": CONSOLE_POOL_LABEL, "operator": "In", "values": ["a100", "default"]}]}]
    assert [(p["weight"], p["preference"]["matchExpressions"][0]["values"])
            for p in affinity["preferredDuringSchedulingIgnoredDuringExecution"]] == [(100, ["a100"]), (1, ["default"])]
    assert pod["schedulerName"] == "kai-scheduler"
    assert pod["priorityClassName"] == "inference"
    # The project's queue in the first pool, as the enforcer names it.
    assert job["metadata"]["labels"]["kai.scheduler/queue"] == "rnd-a.a100"
    assert job["spec"]["template"]["metadata"]["labels"]["kai.scheduler/queue"] == "rnd-a.a100"
    # KAI's shard of the queue's pool schedules only PodGroups with its partition label (from the Job's).
    assert job["metadata"]["labels"][CONSOLE_POOL_LABEL] == "a100"
    assert "suspend" not in job["spec"]
    # Its two pods are one gang: KAI's pod grouper reads the Job's min-member annotation (docs/batch/README.md).
    assert job["metadata"]["annotations"]["kai.scheduler/batch-min-member"] == "2"
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"] == "DisruptionTarget"
    # The preview says where KAI queues it (KAI has no node-pool priority list) and that the pods go together.
    assert result.queued_in == "a100"
    assert result.scheduling[:2] == [
        "KAI Scheduler queues it in pool a100 (queue rnd-a.a100). KAI has no node-pool priority list: a workload "
        "waits in its queue's pool, so default will not be tried.",
        "Its 2 pods are scheduled together or not at all: KAI makes the Job one PodGroup with minMember 2 "
        "(kai.scheduler/batch-min-member)."]
    # A single pod needs no annotation (minMember 1 is KAI's default).
    single = preview(spread_org, users["researcher"], pods=1)
    assert render.KAI_MIN_MEMBER_ANNOTATION not in single.job["metadata"]["annotations"]
    assert not any("together" in note for note in single.scheduling)


def test_with_kueue_the_job_names_its_local_queue_and_starts_suspended(spread_org, users):
    enforcement.enforcement_set(actor=None, cluster=spread_org.cluster, enforcer="kueue")
    result = preview(spread_org, users["researcher"], priority_class="build")
    job = result.job
    assert result.scheduling[0] == ("Kueue admits it from LocalQueue rnd-a, all 2 pods at once, in the first of "
                                    "its pools (a100, default) with quota, in the project's pool order.")
    assert render.KAI_MIN_MEMBER_ANNOTATION not in job["metadata"]["annotations"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "rnd-a"
    assert job["spec"]["suspend"] is True
    pod = job["spec"]["template"]["spec"]
    assert "schedulerName" not in pod
    assert pod["priorityClassName"] == "build"


def test_binpack_pools_get_no_spread_and_default_list_is_the_projects_then_default(org, users):
    from projects import services as project_services

    project_services.project_priority_set(actor=None, project=org.rnd_a, pools=[org.a100])
    pools = pools_from_names(project=org.rnd_a, names=[])
    assert [p.name for p in pools] == ["a100", "default"]
    request = Request(project=org.rnd_a, pools=pools, image="busybox")
    job = workload_preview(actor=users["researcher"], request=request).job
    assert "topologySpreadConstraints" not in job["spec"]["template"]["spec"]
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "train"


def test_weights_fall_evenly_with_list_order():
    assert render.weights(1) == [100]
    assert render.weights(2) == [100, 1]
    assert render.weights(3) == [100, 51, 1]


def test_a_template_restarting_on_failure_keeps_its_policy_and_gets_no_pod_failure_policy():
    """The API server refuses a podFailurePolicy unless restartPolicy is Never (pkg/apis/batch/validation)."""
    spec = render.JobSpec(name="retry", namespace="ns", project="p", image="busybox", pods=2,
                          pod_spec={"restartPolicy": "OnFailure"})
    job = render.job(spec)
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert "podFailurePolicy" not in job["spec"]


def test_the_preview_page_says_which_pool_kai_queues_it_in_and_that_its_pods_go_together(spread_org, users, client):
    from django.urls import reverse

    enforcement.enforcement_set(actor=None, cluster=spread_org.cluster, enforcer="kai")
    client.force_login(users["researcher"])
    page = client.post(reverse("workload-submit"), {
        "project": spread_org.rnd_a.pk, "pools": "a100, default", "image": "busybox", "gpus": 1,
        "priority_class": "train", "pods": 3, "name": "ddp", "action": "preview"}).content.decode()
    notes = page.split('id="scheduling-notes"', 1)[1].split("</ul>", 1)[0]
    assert "KAI Scheduler queues it in pool a100 (queue rnd-a.a100)." in notes
    assert "so default will not be tried." in notes
    assert "Its 3 pods are scheduled together or not at all" in notes
    assert "kai.scheduler/batch-min-member: &#x27;3&#x27;" in page  # and the YAML shows the annotation
