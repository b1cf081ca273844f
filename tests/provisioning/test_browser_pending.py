"""In a real browser: a system administrator opens a Karpenter-backed pool, reads why a pending GPU pod gets
no node from it and which other NodePool can provision one, and sees the NodeClaim Karpenter launches for
the pod appear without reloading. The cluster is the project's emulator (with its Karpenter stand-in),
mirrored by the real sync; Daphne serves the console."""
from __future__ import annotations

import pytest

from tests.provisioning.karpenter_objects import GPU_TAINT, gpu_pod, karpenter_emulator, nodepool, req
from tests.test_browser import (  # noqa: F401  (fixtures shared with the other browser tests)
    _hints_reach_the_in_process_server, chromium, live_asgi, log_in, page, pytestmark, shoot,
)


@pytest.fixture
def karpenter_cluster(org, tmp_path, emulators):
    with karpenter_emulator(emulators, org, tmp_path, nodepools=[
        nodepool("h100-prod", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "h100")],
                 taints=[GPU_TAINT], limits={"nvidia.com/gpu": "0"}, weight=100),
        nodepool("a100-standard", requirements=[req("karpenter.k8s.aws/instance-gpu-name", "In", "a100")],
                 taints=[GPU_TAINT], weight=10),
    ], pods=[gpu_pod("train-8", "runai-rnd-a", gpus=8)]) as lab:
        yield lab


def test_why_a_pending_pod_gets_no_node_and_the_nodeclaim_launched_for_it(page, users, karpenter_cluster):
    from playwright.sync_api import expect

    from provisioning.models import NodeClaim

    emu, sync, pool = karpenter_cluster
    log_in(page, "sysadmin", "pw-sysadmin")
    page.goto("/pools/")
    page.get_by_role("link", name="h100-prod", exact=True).first.click()
    expect(page.get_by_role("heading", name="Pending GPU pods and what Karpenter can do")).to_be_visible()
    row = page.locator("#karpenter-pending-pods tr[data-pod='runai-rnd-a/train-8']")
    expect(row).to_contain_text("Cannot: Its limit is reached: nvidia.com/gpu 0 of 0 provisioned; the pod needs 8 more.")
    expect(row.locator("td").nth(4)).to_have_text("none")
    expect(row.locator("td").nth(5)).to_have_text("a100-standard")
    expect(page.locator("#pool-advice")).to_contain_text("The cluster has no PriorityClasses")
    shoot(page, "pool-karpenter-pending")

    # Karpenter launches a node of a100-standard for it; the page follows without a reload.
    emu.karpenter_step()
    # The cache is not cleared here: on Redis (the cache and the live updates share it) that would empty
    # the live updates' groups too, and the page would wait for a hint that can no longer reach it.
    assert sync.run_until(lambda: NodeClaim.objects.filter(nodepool="a100-standard").exists())
    claim = NodeClaim.objects.get(nodepool="a100-standard")
    expect(row.locator("td").nth(4)).to_contain_text(f"{claim.name} (Launching, NodePool a100-standard)",
                                                      timeout=5000)
