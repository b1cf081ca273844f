"""In a real browser (Chromium through Playwright, against Daphne; fixtures of test_browser.py), the previews
say every consequence before anything is saved: an administrator previews a new pool that takes a platform's
last nodes and reads that the platform is left with 0 nodes (and that a workload lands over quota); another
previews a project's quota 0 → 8 and reads that its fair share stays put for want of demand."""
from __future__ import annotations

from django.urls import reverse

from tests import test_browser
from tests.test_browser import _hints_reach_the_in_process_server, chromium, live_asgi, log_in, page, shoot  # noqa: F401

pytestmark = test_browser.pytestmark

V100 = "Tesla-V100-SXM2-16GB"


def test_an_admin_previews_a_pool_taking_a_platforms_last_nodes_and_reads_the_warning(page, org, users):
    from playwright.sync_api import expect

    from nodepools.models import NodePool
    from workloads import services as workload_services

    workload_services.platform_create(actor=None, pool=org.default, name="v100-train",
                                      node_selector={"nvidia.com/gpu.product": V100})
    org.run("train-1", org.rnd_a, "v100-1", gpus=2, labels={"batch.kubernetes.io/job-name": "train"})
    log_in(page, "sysadmin", "pw-sysadmin")
    page.goto(reverse("pool-list"))
    page.get_by_role("link", name="Add node pool").click()
    expect(page.locator("h1")).to_have_text("Add a node pool")
    page.get_by_label("Name").fill("v100")
    page.get_by_label("Label key").fill("nvidia.com/gpu.product")
    page.get_by_label("Label value").fill(V100)
    page.get_by_role("button", name="Create node pool").click()

    preview = page.locator("#capacity-preview")
    expect(preview.locator("h2")).to_have_text("Before you save: what moves")
    expect(preview.locator(".platform-left-empty")).to_have_text(
        "Platform v100-train of pool default is left with 0 nodes (it has 2 now): "
        "workloads submitted to it will wait.")
    expect(preview.locator(".over-quota-move")).to_have_text(
        "Workload train of project rnd-a (2 GPUs) moves to pool v100, where its project has no quota (0 GPUs): "
        "project rnd-a is then over quota by 2 GPUs there (2 allocated).")
    shoot(page, "pool-preview-platform-left-empty")
    assert not NodePool.objects.filter(name="v100").exists()  # nothing saved before the confirmation
    page.get_by_role("button", name="Confirm and create node pool").click()
    expect(page.locator("h1")).to_contain_text("v100")
    assert NodePool.objects.filter(name="v100").exists()


def test_an_admin_previews_a_quota_0_to_8_and_reads_it_is_limited_by_demand(page, org, users):
    from playwright.sync_api import expect

    from projects import services

    department = org.quota(org.rnd, org.a100)
    services.quota_update(actor=None, quota=department, expected_version=department.version, gpu_deserved=8)
    quota = org.quota(org.rnd_a, org.a100)
    log_in(page, "sysadmin", "pw-sysadmin")
    page.goto(reverse("quota-grid", args=[org.cluster.pk]))
    cell = page.locator(f"#quota-{quota.pk}")
    cell.get_by_title("Edit the quota of rnd-a in a100").click()
    editor = cell.locator(".quota-editor")
    editor.get_by_label("Deserved GPUs").fill("8")
    editor.get_by_role("button", name="Show fair shares before and after").click()
    row = editor.locator(f"#what-if-{quota.pk} tr.edited td")
    expect(row).to_have_text(["rnd-a (this row)", "0", "0", "0 (limited by demand)"])
    expect(editor.locator(".demand-limited")).to_have_text(
        "rnd-a: fair share unchanged: the project asks for 0 GPUs in this pool now; it would rise up to 8 "
        "with demand.")
    shoot(page, "quota-what-if-limited-by-demand")
    quota.refresh_from_db()
    assert quota.gpu_deserved == 0  # a preview saves nothing
