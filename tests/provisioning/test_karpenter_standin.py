"""The emulator's Karpenter stand-in, over HTTP with the official client: a pending pod no node fits gets a
NodeClaim of a NodePool that admits it, which is Launched, Registered (the Node appears) and Initialized,
within the pool's limits; the sync mirrors the new node into the console's Karpenter-backed pool."""
from __future__ import annotations

import json
import time

import pytest
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from kubesim import KubeEmulator, ManualClock, make_node
from tests.provisioning.karpenter_objects import GPU_TAINT, gpu_pod, nodepool, req

KARPENTER = ("karpenter.sh", "v1")


START = 1_750_000_000.0  # the manual clock's "0"


@pytest.fixture
def emu(emulators):
    """The emulator on a manual clock: each step of the stand-in is taken at the time the test says."""
    return emulators(clock=ManualClock(START))


@pytest.fixture
def api(emu, tmp_path):
    path = emu.write_kubeconfig(tmp_path / "kubeconfig")
    api_client = k8s_config.new_client_from_config(config_file=str(path))
    yield api_client
    api_client.close()


def step(emu, now):
    """The stand-in's step at a given time (seconds after START), through the emulator's control surface:
    the manual clock set, then the step."""
    http = urllib3.PoolManager()
    for op, args in (("set_clock", {"time": START + now}), ("karpenter_step", {})):
        r = http.request("POST", f"{emu.url}/_emulator/{op}", body=json.dumps(args),
                         headers={"Content-Type": "application/json"})
        assert r.status == 200, r.data
    return json.loads(r.data)["result"]


def objects(api, plural):
    return {o["metadata"]["name"]: o for o in
            k8s.CustomObjectsApi(api).list_cluster_custom_object(*KARPENTER, plural)["items"]}


def conditions(obj):
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


H100_PROD = nodepool("h100-prod", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "h100"),
                                                req("karpenter.sh/capacity-type", "In", "on-demand")],
                     taints=[GPU_TAINT], startup_taints=[{"key": "example.com/agent-not-ready", "effect": "NoSchedule"}],
                     labels={"team": "ml"}, limits={"nvidia.com/gpu": "16"}, weight=50)


def create_pending(api, pod):
    pod = {k: v for k, v in pod.items() if k != "status"}
    k8s.CoreV1Api(api).create_namespaced_pod(pod["metadata"]["namespace"], pod)


def test_a_pending_pod_gets_a_nodeclaim_that_becomes_a_node(emu, api):
    k8s.CustomObjectsApi(api).create_cluster_custom_object(*KARPENTER, "nodepools", H100_PROD)
    emu.add_namespace("ml")
    create_pending(api, gpu_pod("train-1", gpus=8))
    assert any("created for pod ml/train-1" in line for line in step(emu, 0))
    [claim] = objects(api, "nodeclaims").values()
    labels = claim["metadata"]["labels"]
    assert labels["karpenter.sh/nodepool"] == "h100-prod" and labels["karpenter.sh/capacity-type"] == "on-demand"
    assert labels["node.kubernetes.io/instance-type"] == "p5.48xlarge" and labels["team"] == "ml"
    assert conditions(claim)["Launched"] == "Unknown"
    # Karpenter's Nominated event on the pod names the claim.
    events = k8s.CoreV1Api(api).list_namespaced_event("ml").items
    assert [e.message for e in events if e.reason == "Nominated"] == [
        f"Pod should schedule on: nodeclaim/{claim['metadata']['name']}"]

    step(emu, 1)
    claim = objects(api, "nodeclaims")[claim["metadata"]["name"]]
    assert conditions(claim)["Launched"] == "True" and claim["status"]["providerID"].startswith("aws:///us-east-1")
    assert claim["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert k8s.CoreV1Api(api).list_node().items == []

    step(emu, 3)
    claim = objects(api, "nodeclaims")[claim["metadata"]["name"]]
    assert conditions(claim)["Registered"] == "True"
    node = k8s.CoreV1Api(api).read_node(claim["status"]["nodeName"])
    assert node.metadata.labels["karpenter.sh/nodepool"] == "h100-prod"
    assert node.metadata.labels["karpenter.sh/capacity-type"] == "on-demand"
    assert node.metadata.labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert node.metadata.labels["topology.kubernetes.io/zone"].startswith("us-east-1")
    assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node.metadata.labels["karpenter.k8s.aws/instance-gpu-name"] == "h100"
    assert node.spec.provider_id == claim["status"]["providerID"]
    assert {t.key for t in node.spec.taints} == {"nvidia.com/gpu", "example.com/agent-not-ready"}

    step(emu, 5)
    claim = objects(api, "nodeclaims")[claim["metadata"]["name"]]
    assert conditions(claim)["Initialized"] == "True" and conditions(claim)["Ready"] == "True"
    node = k8s.CoreV1Api(api).read_node(claim["status"]["nodeName"])
    assert {t.key for t in node.spec.taints} == {"nvidia.com/gpu"}  # the startup taint is gone
    pod = k8s.CoreV1Api(api).read_namespaced_pod("train-1", "ml")
    assert pod.spec.node_name == node.metadata.name and pod.status.phase == "Running"
    pool = objects(api, "nodepools")["h100-prod"]
    assert pool["status"]["resources"]["nvidia.com/gpu"] == "8" and pool["status"]["nodes"] == 1
    assert conditions(pool)["Ready"] == "True"


def test_limits_requirements_and_taints_are_respected(emu, api):
    k8s.CustomObjectsApi(api).create_cluster_custom_object(*KARPENTER, "nodepools", H100_PROD)
    emu.add_namespace("ml")
    for i in (1, 2, 3):
        create_pending(api, gpu_pod(f"train-{i}", gpus=8))
    step(emu, 0)
    # 16 GPUs of limit: two 8-GPU nodes, the third pod waits.
    assert len(objects(api, "nodeclaims")) == 2
    assert objects(api, "nodepools")["h100-prod"]["status"]["resources"]["nvidia.com/gpu"] == "16"
    # A pod the pool's requirements exclude, and one that does not tolerate the GPU taint: no claim.
    create_pending(api, gpu_pod("t4", gpus=1, selector={"karpenter.k8s.aws/instance-gpu-name": "t4"}))
    create_pending(api, gpu_pod("intolerant", gpus=1, tolerate_gpu=False))
    step(emu, 0.5)
    assert len(objects(api, "nodeclaims")) == 2
    # Another pool for T4s takes the t4 pod (spot, its cheapest offering).
    t4 = nodepool("t4-best-effort", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "t4"),
                                                  req("karpenter.sh/capacity-type", "In", "spot", "on-demand")])
    k8s.CustomObjectsApi(api).create_cluster_custom_object(*KARPENTER, "nodepools", t4)
    step(emu, 0.6)
    claims = objects(api, "nodeclaims")
    t4_claims = [c for c in claims.values() if c["metadata"]["labels"]["karpenter.sh/nodepool"] == "t4-best-effort"]
    # The intolerant pod lands in the untainted T4 pool too, on the same instance if it fits: one or two claims.
    assert t4_claims and all(c["metadata"]["labels"]["karpenter.sh/capacity-type"] == "spot" for c in t4_claims)
    assert all(c["metadata"]["labels"]["node.kubernetes.io/instance-type"].startswith("g4dn") for c in t4_claims)


def test_an_empty_node_is_consolidated_and_a_pod_fitting_a_node_gets_no_claim(emu, api):
    emu.karpenter_empty_seconds = 10
    k8s.CustomObjectsApi(api).create_cluster_custom_object(*KARPENTER, "nodepools", H100_PROD)
    emu.add_namespace("ml")
    emu.add_node(make_node("existing-h100", gpus=8, taints=[GPU_TAINT]))
    create_pending(api, gpu_pod("fits", gpus=4))
    step(emu, 0)
    assert objects(api, "nodeclaims") == {}  # kube-scheduler will place it on existing-h100
    k8s.CoreV1Api(api).delete_namespaced_pod("fits", "ml")
    create_pending(api, gpu_pod("big", gpus=8, selector={"karpenter.sh/nodepool": "h100-prod"}))
    for t in (0, 1, 3, 5):
        step(emu, t)
    [name] = objects(api, "nodeclaims")
    node = objects(api, "nodeclaims")[name]["status"]["nodeName"]
    k8s.CoreV1Api(api).delete_namespaced_pod("big", "ml")
    step(emu, 6)
    assert name in objects(api, "nodeclaims")  # empty, but not for long enough
    assert any("consolidated" in line for line in step(emu, 17))
    assert objects(api, "nodeclaims") == {}
    assert node not in {n.metadata.name for n in k8s.CoreV1Api(api).list_node().items}
    assert objects(api, "nodepools")["h100-prod"]["status"]["resources"]["nvidia.com/gpu"] == "0"


def test_each_pending_pod_sees_the_room_the_pods_placed_before_it_left():
    """Pending pods are placed oldest first, each taking its room: on the node it fits (where the scheduler
    will put it) or on the NodeClaim launched for it. Whatever order the pods come in the same second, the
    nodes launched are the same."""
    for order in ((0, 1, 2), (2, 1, 0), (1, 2, 0)):
        clock = ManualClock(START)
        emu = KubeEmulator(clock=clock)
        emu.create("nodepools.karpenter.sh", nodepool("h100-prod", requirements=[
            req("karpenter.k8s.aws/instance-gpu-name", "In", "h100")], taints=[GPU_TAINT],
            limits={"nvidia.com/gpu": "32"}))
        emu.add_node(make_node("existing-h100", gpus=8, taints=[GPU_TAINT]))
        emu.add_pod(gpu_pod("running", gpus=4, phase="Running", node="existing-h100"))
        names = ("half-a", "half-b", "whole")
        for i in order:  # created in the same second, in this order
            pod = gpu_pod(names[i], gpus=8 if names[i] == "whole" else 4)
            pod["metadata"]["creationTimestamp"] = START
            emu.add_pod(pod)
        done = emu.karpenter_step()
        # 4 GPUs are free on the node: the first 4-GPU pod created takes them; the other 4-GPU pod and the
        # 8-GPU pod each need a node of their own (an 8-GPU p5: the 8-GPU pod fills one, and the 4-GPU pod
        # leaves too little room on its own for the 8-GPU pod).
        claims = emu.list("nodeclaims.karpenter.sh")
        placed = {line.split("for pod ml/")[1].split()[0] for line in done if "created for pod" in line}
        first_half = next(names[i] for i in order if names[i] != "whole")
        assert first_half not in placed, (order, done)
        assert len(claims) == 2 and placed == set(names) - {first_half}, (order, done)


def test_the_emulator_rejects_a_nodepool_its_schema_rejects(api):
    bad = nodepool("bad", requirements=[req("karpenter.sh/capacity-type", "Sometimes", "spot")])
    with pytest.raises(k8s.exceptions.ApiException) as err:
        k8s.CustomObjectsApi(api).create_cluster_custom_object(*KARPENTER, "nodepools", bad)
    assert err.value.status == 422 and "operator" in err.value.body


@pytest.mark.django_db
def test_the_sync_mirrors_the_launched_node_into_the_karpenter_backed_pool(emu, tmp_path):
    from nodepools import services
    from nodepools.models import Node
    from nodepools.sync import ClusterSync, SyncOptions
    from tests.nodepools.test_sync import FAST

    kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig")
    cluster = services.cluster_create(actor=None, name="lab", kubeconfig_path=str(kubeconfig), kube_context="emulator")
    pool = services.pool_create(actor=None, cluster=cluster, name="h100-prod", label_key="karpenter.sh/nodepool",
                                label_value="h100-prod")
    emu.create("nodepools.karpenter.sh", H100_PROD)
    emu.add_namespace("ml")
    emu.add_pod(gpu_pod("train-1", gpus=8))
    sync = ClusterSync(cluster, SyncOptions(**FAST))
    sync.start()
    try:
        for t in (0, 1, 3, 5):
            emu.clock.set(START + t)
            emu.karpenter_step()
        [claim] = emu.list("nodeclaims.karpenter.sh")
        name = claim["status"]["nodeName"]
        assert sync.run_until(lambda: Node.objects.filter(name=name, pool=pool).exists(), 15), \
            "the launched node did not reach the Karpenter-backed pool"
        node = Node.objects.get(name=name)
        assert (node.gpu_allocatable, node.instance_type, node.capacity_type) == (8, "p5.48xlarge", "on-demand")
    finally:
        sync.stop()


def test_the_chaos_loop_drives_karpenter(sim, tmp_path):
    emu = sim
    api = k8s_config.new_client_from_config(config_file=str(emu.write_kubeconfig(tmp_path / "kubeconfig")))
    emu.karpenter_seconds = (0.1, 0.2, 0.3)
    emu.create("nodepools.karpenter.sh", H100_PROD)
    emu.add_namespace("ml")
    emu.add_pod(gpu_pod("train-1", gpus=8))
    emu.start_chaos(interval=0.05, seed=1)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            claims = list(objects(api, "nodeclaims").values())
            if claims and conditions(claims[0]).get("Initialized") == "True":
                break
            time.sleep(0.05)
        else:
            pytest.fail("the chaos loop did not bring a NodeClaim to Initialized")
    finally:
        emu.stop_chaos()
    assert k8s.CoreV1Api(api).read_namespaced_pod("train-1", "ml").spec.node_name == claims[0]["status"]["nodeName"]
    api.close()
