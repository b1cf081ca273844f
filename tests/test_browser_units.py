"""Quantities and filters as a person reads them, in a real browser (Chromium through Playwright, against
Daphne; fixtures of tests/test_browser.py): memory in GiB / TiB and CPU in cores where the cluster writes
2147483648Ki, 8Ti or 32000m; every yes/no filter reading Any / Yes / No."""
from __future__ import annotations

import re

from tests.test_browser import (  # noqa: F401  (fixtures shared with the other browser tests)
    _hints_reach_the_in_process_server, chromium, live_asgi, log_in, menu_link, page, pytestmark, shoot,
)
from tests.test_browser_layout import karpenter_lab  # noqa: F401


def test_the_pool_page_shows_quantities_in_human_units(page, users, karpenter_lab):
    """Karpenter's limits and what is provisioned, as the cluster writes them (2147483648Ki, 8Ti, 960), read
    as GiB / TiB and cores; the node page likewise."""
    from playwright.sync_api import expect

    org, pool = karpenter_lab
    log_in(page, "sysadmin", "pw-sysadmin")
    menu_link(page, "Capacity", "Node pools").click()
    page.locator("#pools-table").get_by_role("link", name="h100-prod", exact=True).click()
    expect(page.locator("h1")).to_have_text("Node pool h100-prod")
    limits = page.locator("#blueprint-limits")
    memory = limits.locator("tr[data-resource='memory'] td")
    expect(memory.nth(1)).to_have_text("2 TiB")
    expect(memory.nth(2)).to_have_text("8 TiB")
    cpu = limits.locator("tr[data-resource='cpu'] td")
    expect(cpu.nth(1)).to_have_text("192 cores")
    expect(cpu.nth(2)).to_have_text("960 cores")
    expect(limits.locator("tr[data-resource='nvidia.com/gpu'] td").nth(1)).to_have_text("16")
    assert "Ki" not in limits.inner_text() and "Ti" not in limits.inner_text().replace("TiB", "")
    shoot(page, "units-pool-blueprint")
    # A node's page: CPU in cores, memory and GPU memory in GiB.
    page.goto("/nodes/?sort=name")
    page.locator("#nodes-table").get_by_role("link", name="a100-1", exact=True).click()
    expect(page.locator("h1")).to_have_text("Node a100-1")
    facts = page.locator("dl.facts").first
    expect(facts).to_contain_text("4 GPUs of 40 GiB")  # GPU memory in GiB, per physical GPU
    expect(facts.locator("dt:text-is('CPU') + dd")).to_have_text(re.compile(r"^[\d.]+ cores allocatable, [\d.]+ cores? allocated$"))
    expect(facts.locator("dt:text-is('Memory') + dd")).to_have_text(re.compile(r"^[\d.]+ GiB allocatable, [\d.]+ (GiB|MiB|B) allocated$"))


def test_the_preemptible_filter_reads_any_yes_no(page, org, users):
    from playwright.sync_api import expect

    from workloads.models import Workload

    Workload.objects.create(cluster=org.cluster, namespace="runai-rnd-a", name="train-1", priority=50,
                            phase="Pending")
    Workload.objects.create(cluster=org.cluster, namespace="runai-rnd-a", name="serve-1", priority=125,
                            phase="Pending")
    log_in(page, "researcher", "pw-researcher")
    page.locator("header.topbar nav.mainnav > a", has_text="Workloads").click()
    expect(page.locator("h1")).to_have_text("Workloads")
    preemptible = page.locator("form.filters label", has_text=re.compile(r"^\s*Preemptible")).locator("select")
    expect(preemptible.locator("option")).to_have_text(["Any", "Yes", "No"])
    expect(preemptible).to_have_value("")
    rows = page.locator("#workloads-table tbody tr[data-workload]")
    expect(rows).to_have_count(2)
    preemptible.select_option(label="Yes")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-workload", "train-1")
    expect(page).to_have_url(re.compile(r"preemptible=true"))
    preemptible.select_option(label="No")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-workload", "serve-1")
    preemptible.select_option(label="Any")
    expect(rows).to_have_count(2)
    shoot(page, "filter-any-yes-no")
