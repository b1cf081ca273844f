"""What Karpenter can do for a pending GPU pod, on the pool page, the project's "Why is it waiting?" and the
API; and the pool's best-practice advice. The cluster is the emulator (over HTTP), mirrored by the real sync."""
from __future__ import annotations

import pytest
from django.core.cache import cache
from django.urls import reverse

from kubesim import make_node
from nodepools import services as pool_services
from nodepools.models import Node, Pod
from projects import services as project_services
from provisioning.models import KarpenterNodePool, NodeClaim
from tests.conftest import make_user
from tests.provisioning.karpenter_objects import GPU_TAINT, gpu_pod, nodepool, req

NODEPOOLS = "nodepools.karpenter.sh"


@pytest.fixture
def karpenter_lab(lab):
    """Lab's cluster with three NodePools: h100-prod at its GPU limit, inference-only (tainted) and
    a100-standard; the console pool h100-prod is backed by the first; rnd-a's pod train-1 waits for 8 GPUs."""
    emu = lab.emu
    emu.create(NODEPOOLS, nodepool("h100-prod", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "h100")],
                                   taints=[GPU_TAINT], limits={"nvidia.com/gpu": "8"}, weight=100))
    emu.update(NODEPOOLS, "h100-prod", lambda o: {**o, "status": {"resources": {"nvidia.com/gpu": "8", "nodes": "1"},
                                                                   "nodes": 1}}, subresource="status")
    emu.create(NODEPOOLS, nodepool("inference-only", taints=[{"key": "workload", "value": "inference",
                                                              "effect": "NoSchedule"}], weight=50))
    emu.create(NODEPOOLS, nodepool("a100-standard", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "a100"),
                                                                  req("karpenter.sh/capacity-type", "In", "on-demand")],
                                   taints=[GPU_TAINT], weight=10))
    # The h100-prod node Karpenter launched earlier, without the GPU taint (advice) and fully used.
    emu.add_node(make_node("h100-node-1", gpus=8, gpu_product="NVIDIA-H100-80GB-HBM3", capacity_type="on-demand",
                           labels={"karpenter.sh/nodepool": "h100-prod"}))
    emu.add_namespace("runai-rnd-a")
    emu.add_pod(gpu_pod("busy", "runai-rnd-a", gpus=8, node="h100-node-1", phase="Running", priority=125))
    emu.add_pod(gpu_pod("train-1", "runai-rnd-a", gpus=8))
    lab.pool = pool_services.pool_create(actor=None, cluster=lab.cluster, name="h100-prod",
                                         label_key="karpenter.sh/nodepool", label_value="h100-prod")
    lab.start().synced()
    lab.until(lambda: KarpenterNodePool.objects.count() == 3 and Pod.objects.filter(name="train-1").exists())
    cache.clear()
    return lab


@pytest.fixture
def sysadmin(db):
    from access.rules import Role

    user = make_user("sysadmin")
    project_services.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=user)
    return user


def test_the_pool_page_says_what_karpenter_can_do_for_each_pending_pod(karpenter_lab, client, sysadmin):
    client.force_login(sysadmin)
    page = client.get(reverse("pool-detail", args=[karpenter_lab.pool.pk])).content.decode()
    assert "Pending GPU pods and what Karpenter can do" in page
    row = page[page.index('data-pod="runai-rnd-a/train-1"'):]
    row = row[:row.index("</tr>")]
    assert 'data-reason="limit"' in row
    assert "nvidia.com/gpu 8 of 8" in row
    assert "a100-standard" in row  # the other NodePool that can provision
    assert "inference-only" not in row  # it cannot: the pod does not tolerate its taint
    # Best practice: the GPU node has no NoSchedule GPU taint; the cluster has no PriorityClasses.
    assert 'data-advice="untainted_gpu_nodes"' in page and "h100-node-1" in page
    assert 'data-advice="no_priority_classes"' in page


def test_the_api_gives_each_nodepools_first_reason_and_the_nodeclaim_launched(karpenter_lab, client, sysadmin):
    client.force_login(sysadmin)
    body = client.get(f"/api/v1/node-pools/{karpenter_lab.pool.pk}/pending-gpu-pods/").json()
    assert body["nodepool"] == "h100-prod" and body["error"] == ""
    [pod] = body["pending"]
    assert (pod["namespace"], pod["name"], pod["project"], pod["gpus"]) == ("runai-rnd-a", "train-1", "rnd-a", "8")
    verdicts = {v["name"]: v for v in pod["nodepools"]}
    assert [v["name"] for v in pod["nodepools"]] == ["h100-prod", "inference-only", "a100-standard"]  # by weight
    assert verdicts["h100-prod"]["reason"] == "limit"
    assert verdicts["h100-prod"]["limit"] == {"resource": "nvidia.com/gpu", "provisioned": "8", "limit": "8"}
    assert verdicts["inference-only"]["reason"] == "taint" and "workload=inference:NoSchedule" in verdicts[
        "inference-only"]["explanation"]
    assert verdicts["a100-standard"]["can_provision"] and pod["can_provision"] == ["a100-standard"]
    assert pod["nodeclaim"] is None
    advice = client.get(f"/api/v1/node-pools/{karpenter_lab.pool.pk}/advice/").json()["advice"]
    assert {a["code"] for a in advice} == {"untainted_gpu_nodes", "no_priority_classes"}
    assert next(a for a in advice if a["code"] == "untainted_gpu_nodes")["subjects"] == ["h100-node-1"]

    # Karpenter (the emulator's stand-in) launches a NodeClaim of a100-standard for it.
    karpenter_lab.emu.karpenter_step()
    karpenter_lab.until(lambda: NodeClaim.objects.filter(nodepool="a100-standard").exists())
    claim = NodeClaim.objects.get(nodepool="a100-standard")
    cache.clear()
    url = f"/api/v1/clusters/{karpenter_lab.cluster.pk}/pods/runai-rnd-a/train-1/provisioning/"
    pod = client.get(url).json()
    assert pod["nodeclaim"] == {"name": claim.name, "phase": "Launching", "nodepool": "a100-standard"}
    assert pod["pending"] is True
    assert "is being launched for it" in pod["summary"]
    # Unknown or invisible pods are a 404.
    assert client.get(f"/api/v1/clusters/{karpenter_lab.cluster.pk}/pods/runai-rnd-a/nope/provisioning/").status_code == 404


def test_nobody_sees_pods_outside_their_scope(karpenter_lab, client):
    from access.rules import Role

    other = project_services.project_create(actor=None, department=karpenter_lab.rnd, name="rnd-b")
    researcher = make_user("researcher-b")
    project_services.role_assign(actor=None, role=Role.RESEARCHER, user=researcher, project=other)
    client.force_login(researcher)
    url = f"/api/v1/clusters/{karpenter_lab.cluster.pk}/pods/runai-rnd-a/train-1/provisioning/"
    assert client.get(url).status_code == 404
    body = client.get(f"/api/v1/node-pools/{karpenter_lab.pool.pk}/pending-gpu-pods/").json()
    assert body["pending"] == []


def test_why_is_it_waiting_names_what_karpenter_can_do(karpenter_lab, client, sysadmin):
    client.force_login(sysadmin)
    page = client.get(reverse("project-detail", args=[karpenter_lab.rnd_a.pk])).content.decode()
    assert "What Karpenter can do" in page
    assert "Karpenter can provision a node for it from a100-standard." in page
    assert "h100-prod: Its limit is reached: nvidia.com/gpu 8 of 8 provisioned" in page


def test_the_advice_follows_the_cluster(karpenter_lab, client, sysadmin):
    from kubernetes import client as k8s

    from nodepools.sync import api_client_for

    with api_client_for(karpenter_lab.cluster) as api:
        k8s.SchedulingV1Api(api).create_priority_class({"metadata": {"name": "inference"}, "value": 125})
    karpenter_lab.emu.update_node("h100-node-1", lambda n: n["spec"].update(taints=[GPU_TAINT]))
    karpenter_lab.until(lambda: Node.objects.get(name="h100-node-1").taints == [GPU_TAINT])
    cache.clear()
    client.force_login(sysadmin)
    body = client.get(f"/api/v1/node-pools/{karpenter_lab.pool.pk}/advice/").json()
    assert body["advice"] == [] and body["error"] == ""
    page = client.get(reverse("pool-detail", args=[karpenter_lab.pool.pk])).content.decode()
    assert "Nothing to advise" in page


def test_an_unreachable_cluster_is_said_in_words(karpenter_lab, client, sysadmin):
    karpenter_lab.stop()
    karpenter_lab.emu.stop()
    cache.clear()
    client.force_login(sysadmin)
    response = client.get(reverse("pool-detail", args=[karpenter_lab.pool.pk]))
    assert response.status_code == 200
    assert "Could not read the pending pods from cluster lab" in response.content.decode()


def test_the_live_refetch_of_the_pool_page_carries_the_explanation(karpenter_lab, client, sysadmin):
    client.force_login(sysadmin)
    fragment = client.get(reverse("pool-detail", args=[karpenter_lab.pool.pk]), HTTP_HX_REQUEST="true",
                          HTTP_HX_TARGET="table").content.decode()
    assert "<h1>" not in fragment  # the fragment, not the page
    assert 'data-pod="runai-rnd-a/train-1"' in fragment and 'data-advice="untainted_gpu_nodes"' in fragment


def test_a_cluster_the_sync_found_unreachable_is_not_waited_for(karpenter_lab, client, sysadmin):
    from nodepools.models import Cluster, ConnectionState

    karpenter_lab.stop()
    Cluster.objects.filter(pk=karpenter_lab.cluster.pk).update(connection_state=ConnectionState.UNREACHABLE,
                                                               last_error="connection refused")
    karpenter_lab.emu.stop()
    cache.clear()
    client.force_login(sysadmin)
    page = client.get(reverse("pool-detail", args=[karpenter_lab.pool.pk])).content.decode()
    assert "Could not read the pending pods from cluster lab: the cluster is unreachable (connection refused)" in page
