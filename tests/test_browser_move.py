"""In a real browser: a system administrator moves a node to another pool, reads the warnings and
what moves, confirms, and sees the node in its new pool once the sync has brought the change back.
The Kubernetes API is the project's emulator, mirrored by the real sync; Daphne serves the console."""
from __future__ import annotations

import pytest

from tests.test_browser import (  # noqa: F401  (fixtures shared with the other browser tests)
    _hints_reach_the_in_process_server, chromium, live_asgi, log_in, page, pytestmark, shoot,
)


@pytest.fixture
def emulated(org, tmp_path, emulators):
    """conftest's `org` served by a KubeEmulator (plus v100-20, labelled gpu-type=v100) and synced."""
    from nodepools import services
    from nodepools.demo_cluster import operand_pods
    from kubesim import make_node
    from nodepools.models import Node, NodeStatus
    from nodepools.sync import ClusterSync, SyncOptions

    node = make_node("v100-20", gpus=4, gpu_product="Tesla-V100-SXM2-16GB", gpu_memory_mib=16384,
                     labels={"gpu-type": "v100"})
    emu = emulators()
    sync = None
    try:
        emu.load(nodes=org.nodes + [node], pods=org.pods + operand_pods([node]))
        services.cluster_update(actor=None, cluster=org.cluster, kube_context="emulator",
                                kubeconfig_path=str(emu.write_kubeconfig(tmp_path / "kubeconfig")))
        sync = ClusterSync(org.cluster, SyncOptions(backoff_base=0.05, backoff_max=0.3, batch_delay=0.02,
                                                    tick=0.05, hint_interval=0.05, unreachable_after=2))
        sync.start()
        # Stored and derived (on PostgreSQL a first list derives node state once its last page is in).
        assert sync.run_until(lambda: Node.objects.filter(cluster=org.cluster, name="v100-20",
                                                          status=NodeStatus.READY).exists())
        yield emu, sync
    finally:
        if sync is not None:
            sync.stop()


def test_an_admin_moves_a_node_after_the_warnings_and_the_preview(page, org, users, emulated):
    from playwright.sync_api import expect

    from nodepools.models import Node

    emu, sync = emulated
    node = Node.objects.get(cluster=org.cluster, name="v100-20")
    log_in(page, "sysadmin", "pw-sysadmin")
    page.goto(f"/nodes/{node.pk}/")
    expect(page.locator("h1")).to_have_text("Node v100-20")
    page.select_option("#node-move select[name=pool]", label="a100")
    page.click("text=Review the move")

    expect(page.locator("h1")).to_have_text("Move node v100-20 to pool a100?")
    expect(page.locator("#gpu-type-warning")).to_contain_text(
        "This node's GPU type is Tesla-V100-SXM2-16GB, but the other nodes of pool a100 have NVIDIA-A100-SXM4-40GB")
    expect(page.locator(".label-overwrite")).to_contain_text("overwrites label gpu-type: v100 → A100")
    # From pool, to pool, nodes, GPUs, allocated GPUs, running workloads.
    expect(page.locator("#preview-moves tbody td")).to_have_text(
        ["default", "a100", "1: v100-20", "4 (4 ready)", "0", "0"])
    shoot(page, "node-move-preview")
    # Nothing happened yet.
    assert emu.get_node("v100-20")["metadata"]["labels"]["gpu-type"] == "v100"

    page.click("text=Move node v100-20 to a100")
    expect(page.locator(".msg-success")).to_contain_text("Node 'v100-20' is being moved to pool 'a100'")
    assert emu.get_node("v100-20")["metadata"]["labels"]["gpu-type"] == "A100"
    assert sync.run_until(lambda: Node.objects.get(pk=node.pk).pool_id == org.a100.pk)
    page.reload()
    expect(page.locator("dl.facts dt:text-is('Node pool') + dd")).to_have_text("a100")
    shoot(page, "node-moved")
