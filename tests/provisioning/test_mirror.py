"""Karpenter NodePools and NodeClaims mirrored by the sync (list, watch, sweep) from the emulator over HTTP."""
from __future__ import annotations

from nodepools.models import Cluster, ConnectionState
from provisioning.models import KarpenterNodePool, NodeClaim
from tests.nodepools.test_sync import gpu_node

from .conftest import NODECLAIMS, NODEPOOLS, add_nodeclaim, add_nodepool, condition, nodepool_status


def rows(model):
    return dict(model.objects.values_list("name", "resource_version"))


def test_nodepools_and_nodeclaims_are_mirrored_with_their_facts(lab):
    add_nodepool(lab.emu, "a100-standard", status=nodepool_status(gpus="16", cpu="192", nodes=2))
    add_nodepool(lab.emu, "t4-best-effort", "t4-best-effort")
    add_nodeclaim(lab.emu, "a100-standard-x7k2p", "a100-standard",
                  conditions=["Launched", "Registered", "Initialized", "Ready"], node_name="ip-10-0-1-7",
                  provider_id="aws:///us-east-1a/i-0abc")
    add_nodeclaim(lab.emu, "t4-best-effort-q9", "t4-best-effort", conditions=[], instance_type="g4dn.xlarge",
                  capacity_type="spot", zone="us-east-1b", gpus="1")
    lab.start().synced()

    a100 = KarpenterNodePool.objects.get(name="a100-standard")
    assert (a100.weight, a100.gpu_limit, a100.gpus_provisioned, a100.node_count, a100.ready) == (50, 40, 16, 2, "True")
    assert a100.limits == {"cpu": "960", "memory": "8Ti", "nvidia.com/gpu": "40"}
    assert a100.consolidation_policy == "WhenEmptyOrUnderutilized" and a100.node_class == "default"
    assert a100.spec["template"]["spec"]["requirements"][0]["key"] == "karpenter.k8s.aws/instance-family"
    assert [c["type"] for c in a100.conditions] == ["ValidationSucceeded", "NodeClassReady", "Ready"]
    t4 = KarpenterNodePool.objects.get(name="t4-best-effort")
    assert (t4.gpu_limit, t4.ready, t4.gpus_provisioned) == (32, "", 0)

    running = NodeClaim.objects.get(name="a100-standard-x7k2p")
    assert (running.nodepool, running.phase, running.node_name, running.provider_id) == (
        "a100-standard", "Initialized", "ip-10-0-1-7", "aws:///us-east-1a/i-0abc")
    assert (running.instance_type, running.capacity_type, running.zone, running.gpus) == (
        "p4d.24xlarge", "on-demand", "us-east-1a", 8)
    launching = NodeClaim.objects.get(name="t4-best-effort-q9")
    assert (launching.phase, launching.capacity_type, launching.zone, launching.gpus) == (
        "Launching", "spot", "us-east-1b", 1)
    assert lab.state().connection_state == ConnectionState.CONNECTED


def test_changes_and_deletions_in_the_cluster_reach_the_rows(lab):
    add_nodepool(lab.emu, "h100-prod", "h100-prod")
    add_nodeclaim(lab.emu, "h100-prod-a1", "h100-prod", conditions=[])
    lab.start().synced()
    assert NodeClaim.objects.get(name="h100-prod-a1").phase == "Launching"

    # Karpenter's lifecycle: launched, registered, initialized, then drifted.
    for kinds, phase in [(["Launched"], "Launched"), (["Launched", "Registered"], "Registered"),
                         (["Launched", "Registered", "Initialized"], "Initialized"),
                         (["Launched", "Registered", "Initialized", "Drifted"], "Drifted")]:
        lab.emu.update(NODECLAIMS, "h100-prod-a1",
                       lambda o, kinds=kinds: {**o, "status": {"conditions": [condition(k) for k in kinds]}},
                       subresource="status")
        lab.until(lambda phase=phase: NodeClaim.objects.get(name="h100-prod-a1").phase == phase)

    lab.emu.update(NODEPOOLS, "h100-prod", {"spec": {"limits": {"nvidia.com/gpu": "96"}, "weight": 80}},
                   patch_type="merge")
    lab.until(lambda: KarpenterNodePool.objects.get(name="h100-prod").gpu_limit == 96)
    assert KarpenterNodePool.objects.get(name="h100-prod").weight == 80

    lab.emu.delete(NODECLAIMS, "h100-prod-a1")
    lab.until(lambda: not NodeClaim.objects.filter(name="h100-prod-a1").exists())
    lab.emu.delete(NODEPOOLS, "h100-prod")
    lab.until(lambda: not KarpenterNodePool.objects.exists())


def test_what_was_deleted_while_the_sync_was_down_is_swept_at_the_next_start(lab):
    add_nodepool(lab.emu, "spot-only", "spot-only")
    add_nodepool(lab.emu, "a100-standard")
    lab.start().synced()
    assert set(rows(KarpenterNodePool)) == {"spot-only", "a100-standard"}
    lab.stop()
    lab.emu.delete(NODEPOOLS, "spot-only")
    Cluster.objects.filter(pk=lab.cluster.pk).update(last_full_sync=None)
    lab.start().synced()
    lab.until(lambda: set(rows(KarpenterNodePool)) == {"a100-standard"})


def test_a_cluster_without_karpenter_stays_connected_and_mirrors_its_nodes(lab):
    # The API answers 404 for karpenter.sh, as a cluster without Karpenter's CRDs does.
    lab.emu.fail_next(n=10_000, status=404, path_prefix="/apis/karpenter.sh")
    lab.emu.add_node(gpu_node("a100-1", labels={"gpu-type": "A100"}))
    lab.start().synced()
    state = lab.state()
    assert state.connection_state == ConnectionState.CONNECTED and not state.last_error
    assert lab.node("a100-1") is not None
    assert not KarpenterNodePool.objects.exists() and not NodeClaim.objects.exists()
