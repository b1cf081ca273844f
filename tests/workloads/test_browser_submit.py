"""Submitting a workload in a real browser (Chromium through Playwright, against Daphne; fixtures of
tests/test_browser.py): a researcher fills the form, previews the Job, submits it, and sees it appear
in the workloads table once the sync mirrors it from the emulator."""
from __future__ import annotations

from tests import test_browser
from tests.test_browser import _hints_reach_the_in_process_server, chromium, live_asgi, log_in, page, shoot  # noqa: F401

pytestmark = test_browser.pytestmark


def test_a_researcher_previews_then_submits_a_workload_and_sees_it_listed(page, org, users, tmp_path):
    from playwright.sync_api import expect

    from kubesim import KubeEmulator
    from nodepools import services as pool_services
    from nodepools.sync import ClusterSync, SyncOptions
    from workloads.models import Workload

    emu = KubeEmulator(bookmark_interval=0.1)
    emu.start()
    sync = None
    try:
        path = emu.write_kubeconfig(tmp_path / "kubeconfig")
        pool_services.cluster_update(actor=None, cluster=org.cluster, kubeconfig_path=str(path), kube_context="emulator")
        emu.load(org.nodes, org.pods)
        emu.add_namespace("runai-rnd-a")
        org.cluster.refresh_from_db()
        sync = ClusterSync(org.cluster, SyncOptions(backoff_base=0.05, backoff_max=0.3, batch_delay=0.02, tick=0.05,
                                                    hint_interval=0.05, unreachable_after=2))
        sync.start()
        assert sync.run_until(lambda: org.cluster.nodes.count() == 4)

        log_in(page, "researcher", "pw-researcher")
        page.goto("/workloads/")
        expect(page.locator("h1")).to_have_text("Workloads")
        page.get_by_role("link", name="Submit a workload").click()
        expect(page.locator("h1")).to_have_text("Submit a workload")
        page.get_by_label("Project").select_option(label="rnd-a")
        page.get_by_label("Node pools").fill("a100, default")
        page.get_by_label("Image").fill("nvcr.io/nvidia/pytorch:24.05-py3")
        page.get_by_label("Command").fill("python train.py --epochs 3")
        page.get_by_label("GPUs").fill("2")
        page.get_by_label("Priority class").select_option("train")
        page.get_by_label("Name", exact=True).fill("browser-train")
        # No Submit before a preview.
        expect(page.get_by_role("button", name="Submit")).to_have_count(0)
        page.get_by_role("button", name="Preview").click()
        expect(page.locator("#preview-title")).to_have_text("Preview: Job browser-train in runai-rnd-a")
        yaml_text = page.locator("#job-yaml")
        expect(yaml_text).to_contain_text("priorityClassName: train")
        expect(yaml_text).to_contain_text("nvidia.com/gpu: '2'")
        expect(yaml_text).to_contain_text("console.gpu-capacity.io/pools: a100,default")
        expect(yaml_text).to_contain_text("type: DisruptionTarget")
        expect(page.locator("#scheduling-notes")).to_contain_text("it is not counted as a failure of the workload")
        assert emu.list("jobs.batch") == []  # a preview creates nothing
        shoot(page, "workload-submit-preview")

        page.get_by_role("button", name="Submit").click()
        expect(page.locator("h1")).to_have_text("Workloads")
        expect(page.locator("ul.messages li").first).to_contain_text(
            "Workload browser-train submitted to runai-rnd-a")
        assert [j["metadata"]["name"] for j in emu.list("jobs.batch", "runai-rnd-a")] == ["browser-train"]
        # The sync mirrors the Job; the live table shows the new row without a reload.
        assert sync.run_until(lambda: Workload.objects.filter(name="browser-train").exists())
        row = page.locator("#workloads-table tr[data-workload='browser-train']")
        expect(row).to_be_visible(timeout=15000)  # the hint, then the table's refetch, on a busy machine
        expect(row).to_contain_text("rnd-a")
        expect(row).to_contain_text("a100 → default")
        expect(row).to_contain_text("Pending")
        shoot(page, "workload-list-submitted")
    finally:
        if sync is not None:
            sync.stop()
        emu.stop()
