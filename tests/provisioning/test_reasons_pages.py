"""Each "not getting a node" reason and each piece of best-practice advice, as a user sees them on the pool
page and over the API. The cluster is the emulator (over HTTP), mirrored by the real sync; the pure rules
are in test_explain.py and test_advice.py."""
from __future__ import annotations

import pytest
from django.core.cache import cache
from django.urls import reverse

from kubesim import make_node
from nodepools import services as pool_services
from nodepools.models import Node, Pod
from projects import services as project_services
from provisioning.models import KarpenterNodePool
from tests.conftest import make_user
from tests.provisioning.karpenter_objects import GPU_TAINT, gpu_pod, nodepool, req

NODEPOOLS = "nodepools.karpenter.sh"
H100 = req("karpenter.k8s.aws/instance-gpu-name", "In", "h100")
T4 = req("karpenter.k8s.aws/instance-gpu-name", "In", "t4")
SPOT = req("karpenter.sh/capacity-type", "In", "spot")
NO_ROOM = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1h", "budgets": [{"nodes": "0"}]}


@pytest.fixture
def sysadmin(db):
    from access.rules import Role

    user = make_user("sysadmin")
    project_services.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=user)
    return user


def backed_pool(lab, name):
    return pool_services.pool_create(actor=None, cluster=lab.cluster, name=name, label_key="karpenter.sh/nodepool",
                                     label_value=name)


def at_limit(emu, name, gpus="8"):
    emu.update(NODEPOOLS, name, lambda o: {**o, "status": {"resources": {"nvidia.com/gpu": gpus, "nodes": "1"},
                                                            "nodes": 1}}, subresource="status")


@pytest.fixture
def reasons_lab(lab):
    """h100-prod (weight 100) at its GPU limit with a disruption budget of 0 nodes, and t4-spot (spot T4s),
    each backing a console pool; in rnd-a, `wants-h100` (8 GPUs, node selector on the H100) and `no-spot`
    (1 GPU, required affinity: not spot) wait."""
    emu = lab.emu
    emu.create(NODEPOOLS, nodepool("h100-prod", requirements=[H100], taints=[GPU_TAINT], limits={"nvidia.com/gpu": "8"},
                                   weight=100, disruption=NO_ROOM))
    at_limit(emu, "h100-prod")
    emu.create(NODEPOOLS, nodepool("t4-spot", requirements=[T4, SPOT], taints=[GPU_TAINT], weight=50))
    emu.add_node(make_node("h100-node-1", gpus=8, gpu_product="NVIDIA-H100-80GB-HBM3", capacity_type="on-demand",
                           labels={"karpenter.sh/nodepool": "h100-prod"}, taints=[GPU_TAINT]))
    emu.add_namespace("runai-rnd-a")
    emu.add_pod(gpu_pod("busy", "runai-rnd-a", gpus=8, node="h100-node-1", phase="Running", priority=125))
    emu.add_pod(gpu_pod("wants-h100", "runai-rnd-a", gpus=8,
                        selector={"karpenter.k8s.aws/instance-gpu-name": "h100"}))
    emu.add_pod(gpu_pod("no-spot", "runai-rnd-a", gpus=1,
                        affinity=[[req("karpenter.sh/capacity-type", "NotIn", "spot")]]))
    lab.h100 = backed_pool(lab, "h100-prod")
    lab.t4 = backed_pool(lab, "t4-spot")
    lab.start().synced()
    lab.until(lambda: KarpenterNodePool.objects.count() == 2 and Pod.objects.filter(
        name__in=["wants-h100", "no-spot"]).count() == 2)
    cache.clear()
    return lab


def pod_row(page, pod):
    row = page[page.index(f'data-pod="runai-rnd-a/{pod}"'):]
    return row[:row.index("</tr>")]


def verdicts(client, lab, pod):
    body = client.get(f"/api/v1/clusters/{lab.cluster.pk}/pods/runai-rnd-a/{pod}/provisioning/").json()
    return body, {v["name"]: v for v in body["nodepools"]}


SELECTOR_EXCLUDED = ("Its requirements exclude the pod: the pod asks karpenter.k8s.aws/instance-gpu-name In [h100], "
                     "the pool allows karpenter.k8s.aws/instance-gpu-name In [t4].")
AFFINITY_EXCLUDED = ("Its requirements exclude the pod: the pod asks karpenter.sh/capacity-type NotIn [spot], "
                     "the pool allows karpenter.sh/capacity-type In [spot].")


def test_requirements_that_exclude_the_pods_node_selector(reasons_lab, client, sysadmin):
    client.force_login(sysadmin)
    body, by_pool = verdicts(client, reasons_lab, "wants-h100")
    assert by_pool["t4-spot"]["reason"] == "requirements" and not by_pool["t4-spot"]["can_provision"]
    assert by_pool["t4-spot"]["explanation"] == SELECTOR_EXCLUDED
    # The pool page of t4-spot: its verdict for the pod.
    page = client.get(reverse("pool-detail", args=[reasons_lab.t4.pk])).content.decode()
    row = pod_row(page, "wants-h100")
    assert 'data-reason="requirements"' in row and SELECTOR_EXCLUDED in row
    # "Why is it waiting?" on the project page names it too.
    page = client.get(reverse("project-detail", args=[reasons_lab.rnd_a.pk])).content.decode()
    assert f"t4-spot: {SELECTOR_EXCLUDED}" in page


def test_requirements_that_exclude_the_pods_required_node_affinity(reasons_lab, client, sysadmin):
    client.force_login(sysadmin)
    body, by_pool = verdicts(client, reasons_lab, "no-spot")
    assert by_pool["t4-spot"]["reason"] == "requirements"
    assert by_pool["t4-spot"]["explanation"] == AFFINITY_EXCLUDED
    page = client.get(reverse("pool-detail", args=[reasons_lab.t4.pk])).content.decode()
    row = pod_row(page, "no-spot")
    assert 'data-reason="requirements"' in row and AFFINITY_EXCLUDED in row
    # The same pool over the pool's API.
    listed = client.get(f"/api/v1/node-pools/{reasons_lab.t4.pk}/pending-gpu-pods/").json()["pending"]
    mine = next(p for p in listed if p["name"] == "no-spot")
    assert next(v for v in mine["nodepools"] if v["name"] == "t4-spot")["reason"] == "requirements"


def test_a_disruption_budget_that_lets_no_node_make_room(reasons_lab, client, sysadmin):
    client.force_login(sysadmin)
    body, by_pool = verdicts(client, reasons_lab, "wants-h100")
    verdict = by_pool["h100-prod"]
    assert verdict["reason"] == "budget" and not verdict["can_provision"]
    assert verdict["limit"] == {"resource": "nvidia.com/gpu", "provisioned": "8", "limit": "8"}
    assert ("Its limit is reached (nvidia.com/gpu 8 of 8; the pod needs 8 more) and its disruption budget nodes: 0 "
            "lets no node be consolidated now to make room.") == verdict["explanation"]
    assert body["can_provision"] == [] and body["summary"] == "No NodePool can provision a node for it."
    page = client.get(reverse("pool-detail", args=[reasons_lab.h100.pk])).content.decode()
    row = pod_row(page, "wants-h100")
    assert 'data-reason="budget"' in row and "disruption budget nodes: 0" in row

    # Consolidation turned off in the cluster: the budget reason says so.
    reasons_lab.emu.update(NODEPOOLS, "h100-prod", lambda o: {**o, "spec": {**o["spec"], "disruption": {
        "consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never", "budgets": [{"nodes": "10%"}]}}})
    reasons_lab.until(lambda: KarpenterNodePool.objects.get(name="h100-prod").spec["disruption"][
        "consolidateAfter"] == "Never")
    cache.clear()
    _, by_pool = verdicts(client, reasons_lab, "wants-h100")
    assert by_pool["h100-prod"]["reason"] == "budget"
    assert "consolidation is off (consolidateAfter: Never)" in by_pool["h100-prod"]["explanation"]

    # A budget that lets one node go: Karpenter may make room, so it is the limit alone.
    reasons_lab.emu.update(NODEPOOLS, "h100-prod", lambda o: {**o, "spec": {**o["spec"], "disruption": {
        "consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1h", "budgets": [{"nodes": "1"}]}}})
    reasons_lab.until(lambda: KarpenterNodePool.objects.get(name="h100-prod").spec["disruption"][
        "consolidateAfter"] == "1h")
    cache.clear()
    _, by_pool = verdicts(client, reasons_lab, "wants-h100")
    assert by_pool["h100-prod"]["reason"] == "limit"


# ------------------------------------------------------------------------------------------------- advice

FEATURE_LABELS = ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory")


def advice_of(client, pool):
    body = client.get(f"/api/v1/node-pools/{pool.pk}/advice/").json()
    assert body["error"] == ""
    return {a["code"]: a for a in body["advice"]}


@pytest.fixture
def advice_lab(lab):
    """Pool a100 (gpu-type=A100) holding two A100 nodes, an H100 node and a GPU node missing its feature
    discovery labels, all tainted; pool t4-spot backed by the spot NodePool t4-spot, whose spot node runs `serve` (priority 125,
    non-preemptible) and `train-b` (50)."""
    emu = lab.emu
    bare = make_node("a100-bare", gpus=8, gpu_product="NVIDIA-A100-SXM4-80GB", labels={"gpu-type": "A100"},
                     taints=[GPU_TAINT])
    for label in FEATURE_LABELS:
        bare["metadata"]["labels"].pop(label)
    emu.add_node(bare)
    emu.add_node(make_node("a100-odd", gpus=8, gpu_product="NVIDIA-H100-80GB-HBM3", labels={"gpu-type": "A100"},
                           taints=[GPU_TAINT]))
    emu.add_node(make_node("a100-1", gpus=8, gpu_product="NVIDIA-A100-SXM4-80GB", labels={"gpu-type": "A100"},
                           taints=[GPU_TAINT]))
    emu.add_node(make_node("a100-2", gpus=8, gpu_product="NVIDIA-A100-SXM4-80GB", labels={"gpu-type": "A100"},
                           taints=[GPU_TAINT]))
    emu.create(NODEPOOLS, nodepool("t4-spot", requirements=[T4, SPOT], taints=[GPU_TAINT], weight=50))
    emu.add_node(make_node("t4-spot-1", gpus=4, gpu_product="Tesla-T4", capacity_type="spot", taints=[GPU_TAINT],
                           labels={"karpenter.sh/nodepool": "t4-spot"}))
    emu.add_namespace("runai-rnd-a")
    emu.add_pod(gpu_pod("serve", "runai-rnd-a", gpus=1, node="t4-spot-1", phase="Running", priority=125))
    emu.add_pod(gpu_pod("train-b", "runai-rnd-a", gpus=1, node="t4-spot-1", phase="Running", priority=50))
    lab.t4 = backed_pool(lab, "t4-spot")
    lab.start().synced()
    lab.until(lambda: Node.objects.filter(pool=lab.a100).count() == 4 and Pod.objects.filter(
        name__in=["serve", "train-b"], node__pool=lab.t4).count() == 2)
    cache.clear()
    return lab


def test_a_pool_whose_nodes_mix_gpu_types(advice_lab, client, sysadmin):
    client.force_login(sysadmin)
    found = advice_of(client, advice_lab.a100)["mixed_gpu_types"]
    assert "NVIDIA-A100-SXM4-80GB (2 nodes)" in found["problem"] and "NVIDIA-H100-80GB-HBM3 (1 node)" in found["problem"]
    assert found["subjects"] == ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"]
    assert "one GPU type" in found["fix"]
    page = client.get(reverse("pool-detail", args=[advice_lab.a100.pk])).content.decode()
    assert 'data-advice="mixed_gpu_types"' in page and "The pool&#x27;s nodes mix GPU types" in page
    # The odd node leaves: one type, nothing to say about types.
    advice_lab.emu.delete_node("a100-odd")
    advice_lab.until(lambda: Node.objects.filter(pool=advice_lab.a100).count() == 3)
    assert "mixed_gpu_types" not in advice_of(client, advice_lab.a100)


def test_gpu_nodes_missing_the_feature_discovery_labels(advice_lab, client, sysadmin):
    client.force_login(sysadmin)
    found = advice_of(client, advice_lab.a100)["missing_feature_labels"]
    assert found["subjects"] == ["a100-bare"]
    assert "1 GPU node (a100-bare) lack GPU feature discovery labels" in found["problem"]
    assert "nvidia.com/gpu.product" in found["problem"] and "feature discovery" in found["fix"]
    page = client.get(reverse("pool-detail", args=[advice_lab.a100.pk])).content.decode()
    item = page[page.index('data-advice="missing_feature_labels"'):]
    assert "a100-bare" in item[:item.index("</li>")]
    # Feature discovery labels it: the advice goes.
    advice_lab.emu.update_node("a100-bare", lambda n: n["metadata"]["labels"].update({
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81920"}))
    advice_lab.until(lambda: "nvidia.com/gpu.product" in Node.objects.get(name="a100-bare").labels)
    assert "missing_feature_labels" not in advice_of(client, advice_lab.a100)


def test_a_spot_pool_serving_non_preemptible_workloads(advice_lab, client, sysadmin):
    client.force_login(sysadmin)
    found = advice_of(client, advice_lab.t4)["spot_non_preemptible"]
    assert found["subjects"] == ["runai-rnd-a/serve"]  # train-b (priority 50) is preemptible
    assert "A spot pool serves 1 non-preemptible workload" in found["problem"]
    assert "on-demand or reserved" in found["fix"]
    page = client.get(reverse("pool-detail", args=[advice_lab.t4.pk])).content.decode()
    item = page[page.index('data-advice="spot_non_preemptible"'):]
    assert "runai-rnd-a/serve" in item[:item.index("</li>")]
    # The on-demand pool a100 gets no such advice; once serve is gone, neither does t4-spot.
    assert "spot_non_preemptible" not in advice_of(client, advice_lab.a100)
    advice_lab.emu.delete_pod("runai-rnd-a", "serve")
    advice_lab.until(lambda: not Pod.objects.filter(name="serve").exists())
    assert "spot_non_preemptible" not in advice_of(client, advice_lab.t4)
