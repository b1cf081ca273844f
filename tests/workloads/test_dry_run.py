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
    assert not Workload.objects.filter(kind="Job").exists()  # a dry run creates nothing (no Job)
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
    assert not Workload.objects.filter(kind="Job").exists()


def test_a_maximum_run_time_becomes_the_jobs_active_deadline(kai, users, api):
    body = {"project": kai.rnd_a.pk, "pools": ["a100"], "image": "img:1", "gpus": 1, "dry_run": True,
            "active_deadline_seconds": 3600}
    answer = api(users["researcher"]).post("/api/v1/workloads/", body, format="json").json()
    assert answer["job"]["spec"]["activeDeadlineSeconds"] == 3600
    refused = api(users["researcher"]).post("/api/v1/workloads/", {**body, "active_deadline_seconds": 5}, format="json")
    assert refused.status_code == 400 and "active_deadline_seconds" in refused.json()["errors"]


# ---------------------------------------------------------------------------------------------------
# MIG profiles and KAI fractions (issue 30, point 6): nodes judged in the shape's own units

A100_80 = "NVIDIA-A100-SXM4-80GB"


def slices_pod(name, project, node, profile, count, **extra):
    from kubesim import make_pod

    return make_pod(name, f"runai-{project.name}", node=node, containers=[
        {"name": "main", "requests": {"cpu": "1", "memory": "1Gi", f"nvidia.com/mig-{profile}": count}}], **extra)


@pytest.fixture
def mig(kai):
    """kai with pool a100-mig: mig-1 and mig-2 (2 A100 80GB each, all-3g.40gb: 4 slices of 3g.40gb each), mig-3
    (1 A100 80GB, all-1g.10gb: 7 slices). rnd-b (in its deserved quota: nothing is reclaimed) runs job b-big,
    3 slices of 3g.40gb on mig-1, started 10 minutes ago with a 20-minute deadline, and holds 1 slice on mig-2:
    4 slices of 3g.40gb free, at most 3 on one node."""
    import datetime as dt

    from django.utils import timezone

    from kubesim import make_node
    from nodepools import services as pool_services
    from nodepools.demo_cluster import operand_pods
    from workloads.sync import jobs_mirror

    kai.mig = pool_services.pool_create(actor=None, cluster=kai.cluster, name="a100-mig", label_key="gpu-type",
                                        label_value="A100-MIG")
    nodes = [make_node("mig-1", gpus=2, gpu_product=A100_80, mig_config="all-3g.40gb", labels={"gpu-type": "A100-MIG"}),
             make_node("mig-2", gpus=2, gpu_product=A100_80, mig_config="all-3g.40gb", labels={"gpu-type": "A100-MIG"}),
             make_node("mig-3", gpus=1, gpu_product=A100_80, mig_config="all-1g.10gb", labels={"gpu-type": "A100-MIG"})]
    started = timezone.now() - dt.timedelta(minutes=10)
    stamp = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    big = slices_pod("b-big-x", kai.rnd_b, "mig-1", "3g.40gb", 3, labels={"job-name": "b-big"})
    big["status"]["startTime"] = stamp
    for condition in big["status"].get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            condition["lastTransitionTime"] = stamp
    kai.nodes += nodes
    kai.pods += operand_pods(nodes) + [big, slices_pod("b-one", kai.rnd_b, "mig-2", "3g.40gb", 1)]
    kai.load()
    jobs_mirror(cluster=kai.cluster, jobs=[{
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "b-big", "namespace": "runai-rnd-b", "creationTimestamp": stamp},
        "spec": {"parallelism": 1, "activeDeadlineSeconds": 20 * 60, "template": {"spec": {
            "priorityClassName": "train", "containers": [{"name": "main", "image": "img", "resources": {
                "limits": {"nvidia.com/mig-3g.40gb": "3"}}}]}}},
        "status": {"startTime": stamp}}])
    quota(kai, kai.rnd, kai.mig, gpu_deserved=Decimal(4))
    quota(kai, kai.rnd_b, kai.mig, gpu_deserved=Decimal(4))
    return kai


def mig_dry_run(api, user, project, **fields):
    """`dry_run` where the cluster already runs workloads (b-big): the dry run adds none."""
    before = set(Workload.objects.values_list("namespace", "name"))
    body = {"project": project.pk, "image": "nvcr.io/nvidia/pytorch:24.05-py3", "pods": 1, "priority_class": "train",
            "cpu": "1", "memory": "1Gi", "dry_run": True, **fields}
    body["pools"] = list(body.get("pools") or ())
    answer = api(user).post("/api/v1/workloads/", body, format="json")
    assert answer.status_code == 200, answer.content
    assert set(Workload.objects.values_list("namespace", "name")) == before
    # b-big's Job, and b-one, a bare pod (a workload the console did not submit)
    assert before == {("runai-rnd-b", "b-big"), ("runai-rnd-b", "b-one")}
    return answer.json()["verdict"]


def test_a_mig_workload_starts_now_on_free_slices_of_its_profile(mig, users, api):
    # Four one-slice pods (a gang with KAI): 1 free on mig-1 and 3 on mig-2.
    verdict = mig_dry_run(api, users["researcher"], mig.rnd_a, gpus=1, pods=4, pools=("a100-mig",), gpu_profile="3g.40gb")
    assert verdict["verdict"] == "starts_now" and verdict["pods_that_start_now"] == 4
    assert verdict["headline"] == ("Starts now: 4 pods of 1 3g.40gb slice (0.429 GPUs each) (all at once) fit on "
                                   "the free 3g.40gb slices of a100-mig.")
    assert verdict["reasons"] == ["4 3g.40gb slices are free on 2 Ready nodes that publish them; the most free on one "
                                  "node is 3, so 4 pods of 1 slice fit now."]
    slices = {m["profile"]: m["slices_free"] for m in verdict["fragmentation"]["mig_slices"]}
    assert slices == {"1g.10gb": 7, "3g.40gb": 4}


def test_a_mig_workload_waits_when_its_slices_are_scattered_and_says_until_when(mig, users, api):
    # One pod of 4 slices: 4 are free, but at most 3 on one node; mig-1 has 4 once b-big ends (its deadline).
    verdict = mig_dry_run(api, users["researcher"], mig.rnd_a, gpus=4, pools=("a100-mig",), gpu_profile="3g.40gb")
    assert verdict["verdict"] == "waits_for_capacity" and verdict["cause"] == "capacity"
    assert ("4 3g.40gb slices are free on 2 Ready nodes that publish them; the most free on one node is 3, so 0 pods "
            "of 4 slices fit now — enough slices in total (4 asked), but scattered over nodes (fragmentation).") \
        in verdict["headline"]
    estimate = verdict["start_estimate"]
    assert estimate["earliest_seconds"] == 0 and 9 * 60 <= estimate["latest_seconds"] <= 10 * 60
    assert estimate["text"] == "in 0–10 min: 3 3g.40gb slices free when rnd-b's train job ends by their deadline"
    # Five one-slice pods at once: only 4 slices of 3g.40gb are free (mig-3's free 1g.10gb slices, a GPU's worth
    # in GPU-equivalents, are no 3g.40gb slices).
    gang = mig_dry_run(api, users["researcher"], mig.rnd_a, gpus=1, pods=5, pools=("a100-mig",), gpu_profile="3g.40gb")
    assert gang["verdict"] == "waits_for_capacity"
    assert "so 4 pods of 1 slice fit now." in gang["headline"]


def test_a_waiting_mig_workloads_estimate_counts_its_slices(mig, users, api):
    from workloads import render
    from workloads.sync import jobs_mirror

    jobs_mirror(cluster=mig.cluster, jobs=[{
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "a-slices", "namespace": "runai-rnd-a", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {render.POOLS_ANNOTATION: "a100-mig"}},
        "spec": {"parallelism": 1, "template": {"spec": {"priorityClassName": "train", "containers": [
            {"name": "main", "image": "img", "resources": {"limits": {"nvidia.com/mig-3g.40gb": "4"}}}]}}},
        "status": {}}])
    row = Workload.objects.get(name="a-slices")
    assert row.gpu_request == {"kind": "mig", "resources": {"nvidia.com/mig-3g.40gb": 4}}
    rows = api(users["sysadmin"]).get("/api/v1/workloads/", {"page_size": 100}).json()["results"]
    estimate = {r["name"]: r["start_estimate"] for r in rows}["a-slices"]
    assert estimate["text"] == "in 0–10 min: 3 3g.40gb slices free when rnd-b's train job ends by their deadline"


def test_a_mig_workload_never_fits_beyond_the_largest_nodes_slices(mig, users, api):
    verdict = mig_dry_run(api, users["researcher"], mig.rnd_a, gpus=8, pools=("a100-mig",), gpu_profile="3g.40gb")
    assert verdict["verdict"] == "never_fits"
    assert verdict["headline"] == "Never fits: the largest node of a100-mig has 4 3g.40gb slices; this asks 8 on one node."
    assert verdict["start_estimate"]["text"].endswith("it never fits")
    # Slices are no whole GPUs: a pod of one whole GPU has no node in a pool cut into slices.
    whole = mig_dry_run(api, users["researcher"], mig.rnd_a, gpus=1, pools=("a100-mig",))
    assert whole["verdict"] == "never_fits"
    assert whole["headline"] == ("Never fits: the largest node of a100-mig has 0 GPUs not cut into MIG slices; this asks "
                                 "1 on one node.")


def test_a_mig_workloads_quota_counts_its_gpu_equivalents(mig, users, api):
    # 3 slices of 3g.40gb are 9/7 of a GPU: over a 1-GPU limit, although 3 slices are free on mig-2.
    quota(mig, mig.rnd_a, mig.mig, gpu_deserved=Decimal(1), gpu_limit=Decimal(1))
    verdict = mig_dry_run(api, users["researcher"], mig.rnd_a, gpus=3, pools=("a100-mig",), gpu_profile="3g.40gb")
    assert verdict["verdict"] == "waits_for_quota" and verdict["cause"] == "limit"
    assert "project rnd-a uses 0 of its 1-GPU limit in this pool, and this asks 1.286 more." in verdict["headline"]
    within = mig_dry_run(api, users["researcher"], mig.rnd_a, gpus=2, pools=("a100-mig",), gpu_profile="3g.40gb")
    assert within["verdict"] == "starts_now"  # 6/7 of a GPU


def fraction_pod(name, project, node, share, group):
    from kubesim import make_pod

    return make_pod(name, f"runai-{project.name}", node=node, annotations={"gpu-fraction": share},
                    labels={"runai-gpu-group": group},
                    containers=[{"name": "main", "requests": {"cpu": "1", "memory": "1Gi"}}])


def test_a_fractional_workload_fits_on_a_gpu_with_that_much_share_free(kai, users, api):
    # a100-1 is full; a100-2 runs 2 whole GPUs and two halves, each on its own GPU: 1 GPU free in all, but no
    # GPU has more than half of it free.
    quota(kai, kai.rnd, kai.a100, gpu_deserved=Decimal(8))
    quota(kai, kai.rnd_b, kai.a100, gpu_deserved=Decimal(8))
    kai.run("b-full", kai.rnd_b, "a100-1", gpus=4)
    kai.run("b-two", kai.rnd_b, "a100-2", gpus=2)
    kai.pods += [fraction_pod("b-half-1", kai.rnd_b, "a100-2", "0.5", "g1"),
                 fraction_pod("b-half-2", kai.rnd_b, "a100-2", "0.5", "g2")]
    kai.load()
    half = dry_run(api, users["researcher"], kai.rnd_a, gpus=0, gpu_fraction="0.5")
    assert half["verdict"] == "starts_now"
    assert half["headline"] == ("Starts now: 1 pod of 0.5 GPUs (a share of one GPU) fits on a GPU of a100 with that "
                                "much share free.")
    assert half["reasons"] == ["A fraction of 0.5 GPUs runs on one GPU with that much share free (KAI Scheduler shares "
                               "a GPU between fractions; a whole free GPU takes 2): the 2 Ready nodes with whole GPUs "
                               "take 2 pods of it now."]
    # Three quarters of one GPU: 1 GPU-equivalent is free, but no GPU has 0.75 of it.
    more = dry_run(api, users["researcher"], kai.rnd_a, gpus=0, gpu_fraction="0.75")
    assert more["verdict"] == "waits_for_capacity"
    assert "the 2 Ready nodes with whole GPUs take 0 pods of it now" in more["headline"]
