"""A pool's GPU shape in a real browser (Chromium through Playwright, against Daphne; fixtures of
test_browser.py): an administrator chooses a pool's MIG layout, reads which GPU pods it evicts, confirms,
watches the nodes go through NVIDIA's MIG manager (the emulator's, the sync in a thread) until they report
their new slices on the open page, then gives a project quota in that pool."""
from __future__ import annotations

import json
import time
import urllib.request

import pytest
from django.urls import reverse

from kube.gpu import GPU_RESOURCE, LABEL_MIG_CONFIG, LABEL_MIG_CONFIG_STATE
from tests import test_browser
from tests.test_browser_live import Syncing
from tests.test_browser import _hints_reach_the_in_process_server, chromium, live_asgi, log_in, page, shoot  # noqa: F401

pytestmark = test_browser.pytestmark


def control(sim, op: str, **body):
    request = urllib.request.Request(f"{sim.url}/_emulator/{op}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")["result"]


@pytest.fixture
def mig_lab(org, emulators, tmp_path):
    """The `org` of conftest in an emulator whose controllers run (the MIG manager applies a layout half a
    second after its label, once the node's GPU pods are gone), synced live; a GPU pod of rnd-a on a100-1."""
    from kubesim import make_pod
    from nodepools import services
    from nodepools.models import Node

    emu = emulators(controllers=True, controller_interval=0.05)
    org.pods.append(make_pod("train-a", "runai-rnd-a", node="a100-1", priority=50,
                             containers=[{"name": "main", "requests": {"cpu": "1", GPU_RESOURCE: "2"}}]))
    emu.load(nodes=org.nodes, pods=org.pods)
    assert control(emu, "set_mig_manager", seconds=[0.5, 0]) == {"seconds": [0.5, 0.0], "reboot": False}
    services.cluster_update(actor=None, cluster=org.cluster, kube_context="emulator",
                            kubeconfig_path=str(emu.write_kubeconfig(tmp_path / "kubeconfig")))
    sync = Syncing(org.cluster, unreachable_after=5)
    try:
        assert sync.run_until(lambda: Node.objects.filter(cluster=org.cluster, pods__name="train-a").exists())
        yield org, emu, sync
    finally:
        sync.stop()


def test_an_admin_sets_a_pools_mig_layout_watches_the_nodes_cut_their_gpus_then_gives_quota(page, mig_lab, users):
    from playwright.sync_api import expect

    from nodepools.models import Node

    org, emu, sync = mig_lab
    log_in(page, "sysadmin", "pw-sysadmin")
    page.goto(reverse("pool-detail", args=[org.a100.pk]))
    expect(page.locator("h1")).to_have_text("Node pool a100")
    expect(page.locator("#mig-nodes")).to_have_count(0)  # no layout asked of any node yet

    page.get_by_role("link", name="GPU shape…").click()
    expect(page.locator("h1")).to_have_text("GPU shape of node pool a100")
    page.get_by_label("MIG layout", exact=True).select_option("all-1g.10gb")
    page.get_by_role("button", name="Preview").click()

    # The preview: both nodes change, the GPU pod of rnd-a on a100-1 is evicted.
    expect(page.locator("#shape-nodes tbody tr")).to_have_count(2)
    expect(page.locator("#shape-evicted-summary")).to_contain_text("evicts 1 GPU pod holding 2 GPUs")
    expect(page.locator("#shape-evicted tr[data-pod=train-a] td")).to_have_text(
        ["runai-rnd-a/train-a", "rnd-a", "a100-1", "2"])
    assert LABEL_MIG_CONFIG not in emu.get_node("a100-1")["metadata"]["labels"]  # nothing written yet
    shoot(page, "pool-gpu-shape-preview")
    page.get_by_role("button", name="Confirm and set the GPU shape").click()

    # Back on the pool page, which follows the nodes live (no reload) to their new slices.
    expect(page.locator("h1")).to_have_text("Node pool a100")
    expect(page.locator(".messages, [role=status]").first).to_contain_text("GPU shape of pool 'a100' set on 2 nodes")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "on")
    assert sync.run_until(lambda: all(
        (n.labels or {}).get(LABEL_MIG_CONFIG_STATE) == "success"
        for n in Node.objects.filter(cluster=org.cluster, name__in=["a100-1", "a100-2"])))
    rows = page.locator("#mig-nodes-table tbody tr")
    expect(rows).to_have_count(2, timeout=5000)
    for name in ("a100-1", "a100-2"):
        row = page.locator(f"#mig-nodes-table tr[data-node={name}] td")
        expect(row).to_have_text([name, "all-1g.10gb", "success", "16 × 1g.10gb"], timeout=5000)
    expect(page.locator("#pool-gpu-shape")).to_have_text("MIG layout all-1g.10gb")
    expect(page.locator("#pool-slices tr[data-profile='1g.10gb'] td").nth(1)).to_have_text("32")
    expect(page.locator("#pool-gpus")).to_contain_text("8 GPU devices")
    shoot(page, "pool-gpu-shape-applied")

    # The nodes page says the same of each node.
    page.goto(reverse("node-detail", args=[Node.objects.get(cluster=org.cluster, name="a100-1").pk]))
    expect(page.locator("#node-mig-layout")).to_have_text(
        "asked all-1g.10gb: success; slices published now: 16 × 1g.10gb")

    # A project gets quota in the pool, now counted in GPU-equivalents of its slices.
    quota = org.quota(org.rnd_a, org.a100)
    page.goto(reverse("quota-grid", args=[org.cluster.pk]))
    cell = page.locator(f"#quota-{quota.pk}")
    cell.locator("a.cell-edit").click()
    editor = cell.locator(".quota-editor")
    editor.get_by_label("Deserved GPUs").fill("2")
    editor.get_by_role("button", name="Save").click()
    expect(editor.locator(".saved")).to_have_text("Saved: 2 deserved GPUs.")
    page.goto(reverse("pool-detail", args=[org.a100.pk]))
    expect(page.locator("#pool-quotas tr", has_text="rnd-a").locator("td").nth(1)).to_have_text("2")
