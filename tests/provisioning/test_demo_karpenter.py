"""The demo's two Karpenter-backed pools (one spot): NodePools in the emulator, a NodeClaim launching as the
demo starts and again now and then as chaos submits pending GPU pods for them."""
from __future__ import annotations

import random
from io import StringIO

import pytest
from django.core.management import call_command

from kubesim import KubeEmulator, ManualClock, make_pod
from nodepools.demo_cluster import demo_karpenter_nodepools, demo_karpenter_pods, demo_objects


def demo_emulator(clock: ManualClock | None = None) -> KubeEmulator:
    emu = KubeEmulator(clock=clock)
    nodes, pods = demo_objects()
    emu.load(nodes, pods + demo_karpenter_pods(), objects={"nodepools.karpenter.sh": demo_karpenter_nodepools()})
    return emu


def test_the_demo_launches_a_node_for_its_waiting_h100_pod_and_more_now_and_then():
    # One clock for the steps and every timestamp: the pods chaos creates are stamped with it, so which
    # pending pod Karpenter places first never depends on the wall clock's second boundaries.
    clock = ManualClock()
    start = clock.now()
    emu = demo_emulator(clock)
    pools = {p["metadata"]["name"]: p for p in emu.list("nodepools.karpenter.sh")}
    assert set(pools) == {"h100-prod", "t4-spot"}
    assert pools["t4-spot"]["spec"]["template"]["spec"]["requirements"][2]["values"] == ["spot"]
    for t in (0, 1, 3, 5):
        clock.set(start + t)
        emu.karpenter_step()
    [claim] = emu.list("nodeclaims.karpenter.sh")
    assert claim["metadata"]["labels"]["karpenter.sh/nodepool"] == "h100-prod"
    assert emu.get_pod("runai-serve-chat", "chat-h100-1")["spec"]["nodeName"] == claim["status"]["nodeName"]
    # R&D's pending 8-GPU training pod gets no node: why, in the words of provisioning.explain.
    from provisioning.explain import explain

    why = explain(emu.get_pod("runai-team-vision", "vision-train-pending"), emu.list("nodepools.karpenter.sh"))
    assert [(v.nodepool, v.reason) for v in why.verdicts] == [("h100-prod", "taint"), ("t4-spot", "requirements")]
    assert "workload-type=inference:NoSchedule" in why.verdicts[0].text and "at most 4 GPUs" in why.verdicts[1].text
    # Chaos submits pending pods for the NodePools now and then; Karpenter launches nodes for them. The
    # h100 node launched above is filled first: a pending pod that fits a node already there gets no new
    # one (Karpenter leaves it to the scheduler), so it would depend on the pods' sizes whether one comes.
    node = emu.get_node(claim["status"]["nodeName"])
    taken = sum(int(c.get("resources", {}).get("requests", {}).get("nvidia.com/gpu", 0))
                for p in emu.list("pods") if p["spec"].get("nodeName") == node["metadata"]["name"]
                for c in p["spec"]["containers"])
    free = int(node["status"]["allocatable"]["nvidia.com/gpu"]) - taken
    if free > 0:
        emu.add_pod(make_pod("h100-filler", "runai-serve-chat", node=node["metadata"]["name"], phase="Running",
                             containers=[{"name": "main", "requests": {"nvidia.com/gpu": str(free)}}]))
    rng, launched = random.Random(7), set()
    for i in range(1000):
        if launched == {"h100-prod", "t4-spot"}:
            break
        clock.set(start + 10.0 + i)
        emu.chaos_step(rng)
        emu.karpenter_step()
        launched |= {c["metadata"]["labels"]["karpenter.sh/nodepool"] for c in emu.list("nodeclaims.karpenter.sh")
                     if c["metadata"]["name"] != claim["metadata"]["name"]}
    assert launched == {"h100-prod", "t4-spot"}
    # Within their limits.
    for pool in emu.list("nodepools.karpenter.sh"):
        used = int(pool["status"]["resources"]["nvidia.com/gpu"])
        assert used <= int(pool["spec"]["limits"]["nvidia.com/gpu"])


@pytest.mark.django_db
def test_the_demo_command_creates_the_karpenter_backed_pools(tmp_path):
    emu = demo_emulator()
    emu.start()
    try:
        kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig")
        call_command("demo", kubeconfig=str(kubeconfig), stdout=StringIO())
    finally:
        emu.stop()
    from nodepools.models import NodePool

    backed = dict(NodePool.objects.filter(label_key="karpenter.sh/nodepool").values_list("name", "label_value"))
    assert backed == {"h100-prod": "h100-prod", "t4-spot": "t4-spot"}
