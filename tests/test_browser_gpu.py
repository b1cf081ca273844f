"""A person reads GPU utilization on the nodes page and the node page, from a real Prometheus scraping
the emulator's DCGM exporter; when Prometheus goes away, the cells show "—" and say why on hover."""
from __future__ import annotations

import pytest

from tests.test_browser import (CHROMIUM, REQUIRE, _hints_reach_the_in_process_server, chromium,  # noqa: F401
                                live_asgi, log_in, page, shoot)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not __import__("os").path.exists(CHROMIUM) and not REQUIRE,
                       reason=f"needs Chromium at {CHROMIUM} (apt-get install -y chromium)"),
]


def test_gpu_utilization_on_the_nodes_and_node_pages_and_why_it_is_missing(page, org, users, prometheus, settings,
                                                                            emulators):
    from playwright.sync_api import expect

    import gpumetrics
    from kubesim.dcgm import MEMORY_USED_ANNOTATION, UTILIZATION_ANNOTATION
    from nodepools import services

    settings.GPUMETRICS_TIMEOUT = 5
    org.run("train-1", org.rnd_a, "a100-1", gpus=2,
            annotations={UTILIZATION_ANNOTATION: "90", MEMORY_USED_ANNOTATION: "20480"})
    emu = emulators(bookmark_interval=1.0)  # KubeEmulator's own, which this test always had
    emu.load(nodes=org.nodes, pods=org.pods)
    prom = prometheus(emu.url + "/dcgm/metrics")
    prom.wait_for_series("DCGM_FI_DEV_GPU_UTIL", count=16)
    services.cluster_update(actor=None, cluster=org.cluster, prometheus_url=prom.url)
    gpumetrics.cache_clear()

    log_in(page, "sysadmin", "pw-sysadmin")
    page.goto("/nodes/?sort=name")
    headers = page.locator("#nodes-table thead th").all_inner_texts()
    util = headers.index("GPU utilization (%)")
    memory = headers.index("Used/total GPU memory (GiB)")
    row = page.locator("#nodes-table tbody tr", has_text="a100-1")
    expect(row.locator("td").nth(util)).to_have_text("45")  # two of four GPUs at 90 %
    expect(row.locator("td").nth(memory)).to_have_text("40/160")
    shoot(page, "nodes-gpu-utilization")

    row.get_by_role("link", name="a100-1").click()
    gpus = page.locator("#node-gpus tbody tr")
    expect(gpus).to_have_count(4)
    expect(gpus.nth(0)).to_contain_text("runai-rnd-a/train-1")
    expect(gpus.nth(0).locator("td").nth(3)).to_have_text("90")
    expect(page.locator("#node-gpus thead th").nth(6)).to_have_text("Graphics engine active (%)")
    expect(gpus.nth(0).locator("td").nth(6)).to_have_text("90")  # DCGM_FI_PROF_GR_ENGINE_ACTIVE 0.9
    expect(gpus.nth(3)).to_contain_text("none")

    prom.stop()  # Prometheus goes away
    gpumetrics.cache_clear()
    page.goto("/nodes/?sort=name")
    cell = page.locator("#nodes-table tbody tr", has_text="a100-1").locator("td").nth(util)
    expect(cell).to_have_text("—")
    expect(cell.locator(".na")).to_have_attribute("title", "Prometheus unreachable: connection refused")
