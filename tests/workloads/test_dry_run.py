"""A dry run before submitting (issue 23, point 2): `POST /api/v1/workloads/` with `dry_run` and the
submission page's Preview say, against the cluster as it is now (the mirror), the project's quota standing
and KAI Scheduler's rules, whether the workload starts now, waits for quota (whose over-quota use holds it),
waits for capacity (with the fragmentation answer), waits for a node Karpenter can launch, or never fits.
Each verdict on a scripted cluster (tests/conftest.py `Org`: a100 has two 4-GPU nodes, default two)."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from workloads.models import Workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def kai(org):
    from enforcers.services import enforcement_set

    enforcement_set(actor=None, cluster=org.cluster, enforcer="kai")
    return org


def quota(org, owner, pool, **values):
    from projects.services import quota_update

    row = org.quota(owner, pool)
    quota_update(actor=None, quota=row, expected_version=row.version, **values)


def dry_run(api, user, project, *, gpus, pods=1, pools=("a100",), priority_class="train", **extra):
    body = {"project": project.pk, "pools": list(pools), "image": "nvcr.io/nvidia/pytorch:24.05-py3", "gpus": gpus,
            "pods": pods, "priority_class": priority_class, "cpu": "1", "memory": "1Gi", "dry_run": True, **extra}
    answer = api(user).post("/api/v1/workloads/", body, format="json")
    assert answer.status_code == 200, answer.content
    assert not Workload.objects.exists()  # a dry run creates nothing
    return answer.json()["verdict"]


def test_starts_now_on_free_gpus(kai, users, api):
    verdict = dry_run(api, users["researcher"], kai.rnd_a, gpus=2, pods=2)
    assert verdict["verdict"] == "starts_now" and verdict["pods_that_start_now"] == 2
    # With KAI the Job's pods are one PodGroup of minMember 2: a gang.
    assert verdict["headline"] == "Starts now: 2 pods of 2 GPUs (all at once) fit on the free GPUs of a100."
    assert verdict["scheduler"] == "KAI Scheduler" and verdict["start_estimate"] is None


def test_starts_now_by_reclaiming_another_departments_over_quota_use(kai, users, api):
    quota(kai, kai.rnd, kai.a100, gpu_deserved=Decimal(8))
    quota(kai, kai.rnd_a, kai.a100, gpu_deserved=Decimal(4))
    kai.run("ops-1", kai.ops_a, "a100-1", gpus=4)
    kai.run("ops-2", kai.ops_a, "a100-2", gpus=4)
    verdict = dry_run(api, users["researcher"], kai.rnd_a, gpus=4)
    assert verdict["verdict"] == "starts_now" and verdict["cause"] == "reclaim"
    assert verdict["room"]["by_owner"] == [{"project": "ops-a", "department": "ops", "gpus": "4.000", "pods": 1}]
    # The researcher of rnd-a may not see ops-a's pods: their project only.
    assert verdict["room"]["victims"][0]["pod"] is None


def test_waits_for_quota_over_the_projects_limit(kai, users, api):
    quota(kai, kai.rnd_a, kai.a100, gpu_deserved=Decimal(2), gpu_limit=Decimal(2))
    verdict = dry_run(api, users["researcher"], kai.rnd_a, gpus=4)
    assert verdict["verdict"] == "waits_for_quota" and verdict["cause"] == "limit"
    assert "project rnd-a uses 0 of its 2-GPU limit" in verdict["headline"]


def test_waits_for_quota_non_preemptible_beyond_the_deserved_quota(kai, users, api):
    quota(kai, kai.rnd_a, kai.a100, gpu_deserved=Decimal(2))
    verdict = dry_run(api, users["researcher"], kai.rnd_a, gpus=4, priority_class="inference")
    assert verdict["verdict"] == "waits_for_quota" and verdict["cause"] == "non_preemptible"
    assert "runs within the deserved quota only" in verdict["headline"]


def test_waits_for_quota_held_by_others_over_quota_use_names_them_and_says_until_when(kai, users, api):
    # ops-a holds all 8 GPUs, over its own deserved 0 but within its department's 8; rnd (deserved 0) gets no
    # fair share of a full pool, so nothing is reclaimed for rnd-a: it waits for ops-a's over-quota use to end.
    quota(kai, kai.ops, kai.a100, gpu_deserved=Decimal(8))
    quota(kai, kai.ops_a, kai.a100, gpu_deserved=Decimal(0))
    kai.run("ops-1", kai.ops_a, "a100-1", gpus=4)
    kai.run("ops-2", kai.ops_a, "a100-2", gpus=4)
    verdict = dry_run(api, users["sysadmin"], kai.rnd_a, gpus=4)
    assert verdict["verdict"] == "waits_for_quota" and verdict["cause"] == "fair_share"
    assert verdict["borrowers"] == [{"owner": "project ops-a", "gpus_over_deserved": "8.000"}]
    assert "over-quota use of others holds 8 GPUs of a100" in verdict["headline"]
    # ops-a's pods have no deadline and no finished history: no estimate, and why.
    assert verdict["start_estimate"]["earliest_seconds"] is None
    assert "ops-a's" in verdict["start_estimate"]["basis"]


def test_waits_for_capacity_with_the_fragmentation_answer(kai, users, api):
    # 2 GPUs free on each node (in-quota work of rnd-b): 4 in total, but no node has 4.
    quota(kai, kai.rnd, kai.a100, gpu_deserved=Decimal(8))
    quota(kai, kai.rnd_b, kai.a100, gpu_deserved=Decimal(4))
    kai.run("b-1", kai.rnd_b, "a100-1", gpus=2)
    kai.run("b-2", kai.rnd_b, "a100-2", gpus=2)
    quota(kai, kai.rnd_a, kai.a100, gpu_deserved=Decimal(0))
    verdict = dry_run(api, users["researcher"], kai.rnd_a, gpus=4)
    assert verdict["verdict"] == "waits_for_capacity"
    assert ("4 GPUs are free on 2 Ready nodes; the most free on one node is 2, so 0 pods of 4 GPUs fit now — enough "
            "GPUs in total (4 asked), but scattered over nodes (fragmentation).") in verdict["headline"]
    sizes = {row["gpus_per_pod"]: row["pods"] for row in verdict["fragmentation"]["pods_that_fit"]}
    assert sizes[2] == 2 and sizes[4] == 0


def test_never_fits_when_no_node_has_that_many_gpus(kai, users, api):
    verdict = dry_run(api, users["researcher"], kai.rnd_a, gpus=8)
    assert verdict["verdict"] == "never_fits"
    assert verdict["headline"] == "Never fits: the largest node of a100 has 4 GPUs; this asks 8 on one node."
    assert verdict["start_estimate"]["earliest_seconds"] is None
    assert "it never fits" in verdict["start_estimate"]["text"]


def test_waits_for_a_node_karpenter_can_launch(org, users, api):
    from nodepools import services as pool_services
    from provisioning.models import KarpenterNodePool
    from tests.provisioning.karpenter_objects import nodepool, req

    pool = pool_services.pool_create(actor=None, cluster=org.cluster, name="h100-prod",
                                     label_key="karpenter.sh/nodepool", label_value="h100-prod")
    spec = nodepool("h100-prod", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "h100")])["spec"]
    KarpenterNodePool.objects.create(cluster=org.cluster, name="h100-prod", spec=spec, status={})
    verdict = dry_run(api, users["sysadmin"], org.rnd_a, gpus=8, pools=("h100-prod",))
    assert verdict["verdict"] == "waits_for_node"
    assert verdict["karpenter"] == {"can_launch": True, "nodepool": "h100-prod",
                                    "explanation": "Karpenter NodePool h100-prod can launch a node for it."}
    assert verdict["start_estimate"]["text"].startswith("in 1–5 min: a node Karpenter launches")
    assert pool.pk


def test_without_an_enforcer_the_pools_are_tried_in_order(org, users, api):
    org.run("v1", org.rnd_b, "v100-1", gpus=4)
    org.run("v2", org.rnd_b, "v100-2", gpus=4)
    verdict = dry_run(api, users["researcher"], org.rnd_a, gpus=4, pools=("default", "a100"))
    assert verdict["verdict"] == "starts_now" and verdict["pool"] == "a100"
    assert verdict["other_pools"] == [{"pool": "default", "verdict": "waits_for_capacity",
                                       "headline": verdict["other_pools"][0]["headline"]}]
    assert verdict["scheduler"] == "kube-scheduler"


def test_the_preview_page_says_whether_it_starts_and_until_when(kai, users, client):
    quota(kai, kai.rnd_a, kai.a100, gpu_deserved=Decimal(2), gpu_limit=Decimal(2))
    client.force_login(users["researcher"])
    page = client.post(reverse("workload-submit"), {
        "project": kai.rnd_a.pk, "pools_0": "a100", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "gpus": 4, "pods": 1,
        "priority_class": "train", "action": "preview", "pools_for": kai.rnd_a.pk}).content.decode()
    assert 'id="verdict-code">Waits for quota</span>' in page
    assert "Over its limit: project rnd-a uses 0 of its 2-GPU limit in this pool, and this asks 4 more." in page
    assert 'id="verdict-estimate"' in page
    assert not Workload.objects.exists()


def test_a_maximum_run_time_becomes_the_jobs_active_deadline(kai, users, api):
    body = {"project": kai.rnd_a.pk, "pools": ["a100"], "image": "img:1", "gpus": 1, "dry_run": True,
            "active_deadline_seconds": 3600}
    answer = api(users["researcher"]).post("/api/v1/workloads/", body, format="json").json()
    assert answer["job"]["spec"]["activeDeadlineSeconds"] == 3600
    refused = api(users["researcher"]).post("/api/v1/workloads/", {**body, "active_deadline_seconds": 5}, format="json")
    assert refused.status_code == 400 and "active_deadline_seconds" in refused.json()["errors"]
