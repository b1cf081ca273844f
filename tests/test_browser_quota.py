"""Capacity against quota in a real browser (Chromium through Playwright, against Daphne; fixtures of
test_browser.py): an administrator gives a department more GPUs than its pool has ready, reads the
warning, sees the pool's over-subscription ratio marked, and the grid's head keeps it after the editor
closes."""
from __future__ import annotations

from django.urls import reverse

from tests import test_browser
from tests.test_browser import _hints_reach_the_in_process_server, chromium, live_asgi, log_in, page, shoot  # noqa: F401

pytestmark = test_browser.pytestmark


def test_oversubscribing_a_pool_shows_the_warning_and_the_ratio_after_the_editor_closes(page, org, users):
    from playwright.sync_api import expect

    from kubesim import make_node

    # a100: two nodes of 4 GPUs, one not ready: 4 ready of 8.
    org.nodes[3] = make_node("a100-2", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960,
                             labels={"gpu-type": "A100"}, ready=False)
    org.load()
    quota = org.quota(org.rnd, org.a100)
    log_in(page, "sysadmin", "pw-sysadmin")
    page.goto(reverse("quota-grid", args=[org.cluster.pk]))
    expect(page.locator("h1")).to_have_text("Quota of cluster lab")
    head = page.locator("#quota-summary")
    a100 = {name: head.locator(f"tr[data-summary={name}] td[data-pool=a100]") for name in ("gpus", "deserved", "ratio")}
    expect(a100["gpus"]).to_have_text("4 / 8")
    expect(a100["deserved"]).to_have_text("0")
    expect(a100["ratio"]).to_have_text("0")
    expect(a100["ratio"]).not_to_have_class("num oversubscribed")

    cell = page.locator(f"#quota-{quota.pk}")
    cell.get_by_title("Edit the quota of rnd in a100").click()
    editor = cell.locator(".quota-editor")
    editor.get_by_label("Deserved GPUs").fill("6")
    editor.get_by_role("button", name="Save").click()
    expect(editor.locator(".saved")).to_have_text("Saved: 6 deserved GPUs.")
    expect(editor.locator(".warning")).to_have_text(
        "Warning: Departments now have 6 GPUs deserved in a100, above its 4 ready GPUs (of 8): "
        "over-subscription ratio 1.5.")
    # The head followed the save while the editor is still open: the mark is words and a class.
    expect(a100["deserved"]).to_have_text("6")
    expect(a100["ratio"]).to_have_text("1.5 over-subscribed")
    expect(a100["ratio"]).to_have_class("num oversubscribed")
    shoot(page, "quota-oversubscribed-editor")

    editor.get_by_role("link", name="Close").click()
    expect(page.locator(".quota-editor")).to_have_count(0)
    expect(page.locator(f"#quota-{quota.pk} a.cell-edit")).to_have_text("6")
    expect(a100["gpus"]).to_have_text("4 / 8")
    expect(a100["deserved"]).to_have_text("6")
    expect(a100["ratio"]).to_have_text("1.5 over-subscribed")
    expect(a100["ratio"]).to_have_class("num oversubscribed")
    # The other pool is untouched and unmarked.
    expect(head.locator("tr[data-summary=ratio] td[data-pool=default]")).to_have_text("0")
    shoot(page, "quota-oversubscribed-closed")

    # The overview says the same.
    page.goto(reverse("cluster-overview", args=[org.cluster.pk]))
    row = page.locator("#pool-capacity tr[data-pool=a100] td")
    expect(row).to_have_text(["a100", "4 / 8", "6", "1.5 over-subscribed"])
    shoot(page, "overview-capacity")
