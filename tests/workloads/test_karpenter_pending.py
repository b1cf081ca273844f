"""A pending workload submitted through the console says what Karpenter can do for its pending pod: the same
explanation the pod gets on the pool page (each NodePool's first reason, the NodeClaim launched for it), in
the workloads table, its CSV and the API. The cluster is the emulator (over HTTP), mirrored by the real sync."""
from __future__ import annotations

import pytest
from django.core.cache import cache
from django.urls import reverse

from kubesim import make_node, make_pod
from nodepools import services as pool_services
from nodepools.models import Node, Pod
from nodepools.sync import ClusterSync, SyncOptions
from provisioning.models import KarpenterNodePool, NodeClaim
from tests.pages import csv_of
from tests.provisioning.karpenter_objects import GPU_TAINT, gpu_pod, nodepool, req
from workloads import render
from workloads.models import Workload

pytestmark = pytest.mark.django_db(transaction=True)

NODEPOOLS = "nodepools.karpenter.sh"
FAST = dict(backoff_base=0.05, backoff_max=0.3, read_timeout=5, unreachable_after=0.4, batch_delay=0.02,
            tick=0.05, lock_poll=0.3, watch_timeout_min=30, watch_timeout_max=40, hint_interval=0.05)
SCHEDULER_SAYS = "0/5 nodes are available: 5 Insufficient nvidia.com/gpu."
LIMIT = "h100-prod: Its limit is reached: nvidia.com/gpu 8 of 8 provisioned; the pod needs 8 more."
# a100-standard backs no pool the workload asked for: its verdict is not told in the workload's reason (it is in
# the pod's own explanation, `provisioning`, as on the pool page).
# The console's own reading comes after the scheduler's words: h100-node-1 runs no NVIDIA operand pod here, so
# the console counts no Ready node in the pool.
WHY = ("Why is it waiting? Never fits: no node of h100-prod has 8 GPUs (the largest Ready node has 0); this asks 8 on "
       "one node.")


@pytest.fixture
def karpenter(lab, sim):
    """The lab's cluster with two Karpenter NodePools: h100-prod at its GPU limit (8 of 8, its one node fully
    used) backing the console pool h100-prod, and a100-standard; the sync running."""
    sim.create(NODEPOOLS, nodepool("h100-prod", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "h100")],
                                   taints=[GPU_TAINT], limits={"nvidia.com/gpu": "8"}, weight=100))
    sim.create(NODEPOOLS, nodepool("a100-standard", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "a100")],
                                   taints=[GPU_TAINT], weight=10))
    sim.add_node(make_node("h100-node-1", gpus=8, gpu_product="NVIDIA-H100-80GB-HBM3", capacity_type="on-demand",
                           labels={"karpenter.sh/nodepool": "h100-prod"}, taints=[GPU_TAINT]))
    sim.add_pod(gpu_pod("busy", "runai-rnd-b", gpus=8, node="h100-node-1", phase="Running", priority=125))
    sim.update(NODEPOOLS, "h100-prod", lambda o: {**o, "status": {"resources": {"nvidia.com/gpu": "8", "nodes": "1"},
                                                                   "nodes": 1}}, subresource="status")
    lab.h100 = pool_services.pool_create(actor=None, cluster=lab.cluster, name="h100-prod",
                                         label_key="karpenter.sh/nodepool", label_value="h100-prod")
    sync = ClusterSync(lab.cluster, SyncOptions(**FAST))
    sync.start()
    lab.sync = sync
    assert sync.run_until(lambda: KarpenterNodePool.objects.count() == 2 and Node.objects.filter(
        name="h100-node-1", pool=lab.h100).exists())
    yield lab
    sync.stop()


def start_pods_of(sim, job, *names):
    """What the Job controller does: a pod per name from the Job's template; the scheduler finds no node."""
    template = job["spec"]["template"]
    container = template["spec"]["containers"][0]
    for name in names:
        pod = make_pod(name, job["metadata"]["namespace"], phase="Pending", priority=50, priority_class="train",
                       scheduling_message=SCHEDULER_SAYS,
                       labels={**template["metadata"]["labels"], render.JOB_NAME_LABEL: job["metadata"]["name"],
                               "job-name": job["metadata"]["name"]},
                       containers=[{"name": container["name"], "requests": container["resources"]["requests"]}])
        pod["spec"]["affinity"] = template["spec"]["affinity"]
        pod["spec"]["tolerations"] = template["spec"].get("tolerations") or []
        sim.add_pod(pod)


def submit_pending(karpenter, sim, api, researcher, *pods):
    body = {"project": karpenter.rnd_a.pk, "pools": ["h100-prod"], "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": "python train.py", "gpus": 8, "cpu": "8", "memory": "64Gi", "priority_class": "train",
            "pods": len(pods), "name": "train-1"}
    response = api(researcher).post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 201, response.content
    [job] = sim.list("jobs.batch", "runai-rnd-a")
    # The pool's nodes carry the GPU taint: the console's Job tolerates it and asks for h100-prod.
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in job["spec"][
        "template"]["spec"]["tolerations"]
    start_pods_of(sim, job, *pods)
    assert karpenter.sync.run_until(lambda: Workload.objects.filter(name="train-1").exists() and Pod.objects.filter(
        name__in=pods, scheduling_message=SCHEDULER_SAYS).count() == len(pods))
    cache.clear()  # the live reads of the pending pods are cached for a few seconds


def workload_row(api, user):
    [row] = [r for r in api(user).get("/api/v1/workloads/").json()["results"] if r["name"] == "train-1"]
    return row


def test_a_pending_workload_says_what_karpenter_can_do_for_its_pod(karpenter, sim, users, api, client):
    submit_pending(karpenter, sim, api, users["researcher"], "train-1-x7k2p")

    row = workload_row(api, users["researcher"])
    assert row["phase"] == "Pending"
    assert row["pending_reason"] == (
        f"{SCHEDULER_SAYS} {WHY} What Karpenter can do for its pod train-1-x7k2p: No NodePool can provision a node for it. "
        f"{LIMIT}")
    assert "a100-standard" not in row["pending_reason"]
    explained = row["provisioning"]
    assert (explained["namespace"], explained["name"], explained["gpus"], explained["pending_pods"]) == (
        "runai-rnd-a", "train-1-x7k2p", "8", 1)
    assert [(v["name"], v["reason"]) for v in explained["nodepools"]] == [
        ("h100-prod", "limit"), ("a100-standard", "requirements")]
    assert explained["nodepools"][0]["limit"] == {"resource": "nvidia.com/gpu", "provisioned": "8", "limit": "8"}
    assert explained["can_provision"] == [] and explained["nodeclaim"] is None
    # The pod's own explanation (the pool page's API) says the same.
    pod = api(users["researcher"]).get(
        f"/api/v1/clusters/{karpenter.cluster.pk}/pods/runai-rnd-a/train-1-x7k2p/provisioning/").json()
    assert pod["summary"] == explained["summary"] and pod["nodepools"] == explained["nodepools"]
    # One workload read by id says the same.
    one = api(users["researcher"]).get(f"/api/v1/workloads/{row['id']}/").json()
    assert one["pending_reason"] == row["pending_reason"]

    # The workloads table: the scheduler's words in one line, then (its story, opened in the row) what Karpenter
    # can do on its own line, for the pool it asked for only; the CSV too.
    client.force_login(users["researcher"])
    page = client.get(reverse("workload-list")).content.decode()
    row_html = page.split('data-workload="train-1"', 1)[1].split("</tr>", 1)[0]
    assert SCHEDULER_SAYS in row_html and '<span class="karpenter">' in row_html
    assert "No NodePool can provision a node for it." in row_html
    assert '<details class="reason-story"' in row_html
    assert "nvidia.com/gpu 8 of 8 provisioned" in row_html and "a100-standard" not in row_html
    rows = csv_of(client.get(reverse("workload-list"), {"format": "csv"}))
    assert rows[1][rows[0].index("Pending reason")] == row["pending_reason"]


def test_the_explanation_follows_the_limit_and_names_the_nodeclaim_launched(karpenter, sim, users, api, client):
    submit_pending(karpenter, sim, api, users["researcher"], "train-1-x7k2p")
    # The administrator raises h100-prod's GPU limit in the cluster: it can provision a node now.
    sim.update(NODEPOOLS, "h100-prod", lambda o: {**o, "spec": {**o["spec"], "limits": {"nvidia.com/gpu": "16"}}})
    assert karpenter.sync.run_until(lambda: KarpenterNodePool.objects.get(name="h100-prod").spec["limits"] == {
        "nvidia.com/gpu": "16"})
    cache.clear()
    row = workload_row(api, users["researcher"])
    assert row["pending_reason"] == (
        f"{SCHEDULER_SAYS} {WHY} What Karpenter can do for its pod train-1-x7k2p: Karpenter can provision a node for it "
        f"from h100-prod.")
    assert row["provisioning"]["can_provision"] == ["h100-prod"]

    # Karpenter (the emulator's stand-in) launches a NodeClaim of h100-prod for it.
    sim.karpenter_step()
    assert karpenter.sync.run_until(lambda: NodeClaim.objects.filter(nodepool="h100-prod").exists())
    claim = NodeClaim.objects.get(nodepool="h100-prod")
    cache.clear()
    row = workload_row(api, users["researcher"])
    assert row["provisioning"]["nodeclaim"] == {"name": claim.name, "phase": "Launching", "nodepool": "h100-prod"}
    assert (f"What Karpenter can do for its pod train-1-x7k2p: NodeClaim {claim.name} (Launching) of NodePool "
            f"h100-prod is being launched for it.") in row["pending_reason"]
    client.force_login(users["researcher"])
    page = client.get(reverse("workload-list")).content.decode()
    row_html = page.split('data-workload="train-1"', 1)[1].split("</tr>", 1)[0]
    assert f"NodeClaim {claim.name} (Launching) of NodePool h100-prod is being launched for it." in row_html


def test_every_pending_pod_of_the_workload_is_counted_and_a_running_workload_says_nothing(karpenter, sim, users,
                                                                                            api):
    submit_pending(karpenter, sim, api, users["researcher"], "train-1-aaaaa", "train-1-bbbbb")
    row = workload_row(api, users["researcher"])
    assert "What Karpenter can do for its pod train-1-aaaaa (and 1 more pending pod): No NodePool" in row[
        "pending_reason"]
    assert row["provisioning"]["pending_pods"] == 2
    # Both pods run (on nodes Karpenter launched): nothing is pending, no explanation is left.
    for name in ("train-1-aaaaa", "train-1-bbbbb"):
        def run(pod):
            pod["spec"]["nodeName"] = "h100-node-1"
            pod["status"].update(phase="Running", conditions=[{"type": "PodScheduled", "status": "True"}])

        sim.update_pod("runai-rnd-a", name, run)
    assert karpenter.sync.run_until(lambda: Pod.objects.filter(name__startswith="train-1-", phase="Running").count() == 2)
    cache.clear()
    row = workload_row(api, users["researcher"])
    assert (row["phase"], row["pending_reason"], row["provisioning"]) == ("Running", "", None)
