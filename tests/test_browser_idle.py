"""The Idle GPUs page and a project's GPU utilization in a real browser (Chromium through Playwright,
against Daphne; fixtures of test_browser.py), over the scripted hour of DCGM samples of
tests/usage/test_idle_gpus.py held by a real Prometheus."""
from __future__ import annotations

import pytest
from django.test import override_settings

from tests import test_browser
from tests.test_browser import chromium, live_asgi, log_in, menu_link, page, shoot  # noqa: F401
from tests.test_browser_charts import console_errors  # noqa: F401
from tests.usage.test_idle_gpus import fleet, history_prometheus  # noqa: F401

pytestmark = test_browser.pytestmark


@override_settings(GPU_IDLE_WINDOW_MINUTES=5, GPU_IDLE_LOOKBACK_HOURS=2, GPUMETRICS_TIMEOUT=5)
def test_a_department_admin_finds_the_idle_gpus_of_their_department(page, console_errors, users, fleet):
    from playwright.sync_api import expect

    log_in(page, "rnd-admin", "pw-rnd-admin")
    menu_link(page, "Usage", "Idle GPUs").click()
    expect(page.locator("h1")).to_have_text("Idle GPUs")
    table = page.locator("#idle-gpus-table")
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table).to_contain_text("idle-pod")
    expect(table).to_contain_text("young-pod")
    expect(table).not_to_contain_text("recent-pod")  # ops' GPU: not their department
    summary = page.locator("#idle-summary")
    expect(summary.locator("tbody tr", has_text="rnd-a")).to_contain_text("2")
    page.wait_for_load_state()  # htmx listens on the filter form once the page has loaded
    # Choose project rnd-b: none of its GPUs is idle.
    page.locator("#table-filters").get_by_label("Project").select_option(label="rnd-b")
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table).to_contain_text("Nothing to show")
    page.locator("#table-filters").get_by_label("Project").select_option(label="rnd-a")
    expect(table.locator("tbody tr")).to_have_count(2)
    shoot(page, "idle-gpus")
    # The project's page: its GPUs' utilization now, and the chart of the last 24 hours drawn.
    summary.get_by_role("link", name="rnd-a").click()
    expect(page.locator("h1")).to_have_text("Project rnd-a")
    # idle-pod's GPU at 1 % and young-pod's at 0 %: 0.5 % shown whole.
    expect(page.locator("#utilization-now")).to_have_text("0 %")
    expect(page.locator("#gpu-utilization")).to_contain_text("over 2 GPUs")
    chart = page.locator("#utilization-chart")
    expect(chart.locator("figcaption")).to_contain_text("GPU utilization of project rnd-a, last 24 hours")
    expect(chart.locator("canvas")).to_be_visible()
    expect(chart.locator(".u-legend")).to_contain_text("Average GPU utilization (%)")
    chart.locator("summary").click()  # the figures as a table, too
    expect(chart.locator("table tbody tr").first).to_be_visible()
    page.get_by_role("link", name="Last 7 days").click()
    expect(chart.locator("figcaption")).to_contain_text("last 7 days")
