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


def test_with_kai_the_pools_are_selected_by_the_console_label_and_the_queue_is_named(spread_org, users):
    enforcement.enforcement_set(actor=None, cluster=spread_org.cluster, enforcer="kai")
    job = preview(spread_org, users["researcher"], priority_class="inference").job
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


def test_with_kueue_the_job_names_its_local_queue_and_starts_suspended(spread_org, users):
    enforcement.enforcement_set(actor=None, cluster=spread_org.cluster, enforcer="kueue")
    job = preview(spread_org, users["researcher"], priority_class="build").job
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
