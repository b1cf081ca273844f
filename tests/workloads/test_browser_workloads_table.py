"""The workloads table as a person meets it in Chromium at 1440 x 900 (fixtures of tests/test_browser.py; the
cluster is the emulator over HTTP, mirrored by the real sync): every row fits the window, no cell is taller than
about five lines, a long pending reason opens its whole story in its row, Stop asks first (dismissed: nothing
stops; confirmed: the row stays, Stopped, and the workload's page tells who stopped it)."""
from __future__ import annotations

import pytest

from tests import test_browser
from tests.test_browser import _hints_reach_the_in_process_server, chromium, live_asgi, log_in, page  # noqa: F401
from tests.test_browser_tables_live import _hint
from tests.workloads.test_submit_emulator import submit, syncing  # noqa: F401  (fixture)

pytestmark = test_browser.pytestmark

# What a busy cluster's scheduler says of a pod it cannot place: some forty lines in a narrow cell.
LONG = "0/40 nodes are available: " + ", ".join(
    f"1 node(s) had untolerated taint {{team-{i}: reserved}}" for i in range(1, 40)) + "."
NAMES = ("search-8gpu", "train-a", "train-b", "train-c")


@pytest.fixture
def workloads(lab, sim, syncing, users, api):
    """Four workloads of rnd-a submitted through the console; search-8gpu's pod cannot be placed (the
    scheduler's long words), the others' pods run."""
    from kubesim import make_pod
    from nodepools.models import Pod
    from workloads import render
    from workloads.models import Workload

    for name in NAMES:
        assert submit(api, users["researcher"], lab.rnd_a, name=name).status_code == 201
    for name in NAMES:
        waiting = name == "search-8gpu"
        sim.add_pod(make_pod(f"{name}-x1", "runai-rnd-a", node=None if waiting else "a100-1",
                             phase="Pending" if waiting else "Running", priority=50,
                             scheduling_message=LONG if waiting else "",
                             labels={render.JOB_NAME_LABEL: name, "job-name": name},
                             containers=[{"name": "main", "requests": {"nvidia.com/gpu": "2"}}]))
    assert syncing.run_until(lambda: Workload.objects.filter(name__in=NAMES).count() == 4
                             and Pod.objects.filter(name="search-8gpu-x1", scheduling_message=LONG).exists()
                             and Pod.objects.filter(name__endswith="-x1", phase="Running").count() == 3)
    return {w.name: w for w in Workload.objects.filter(name__in=NAMES)}


MEASURE = """() => {
  const table = document.querySelector('#workloads-table');
  const box = table.closest('.table-container') || table.parentElement;
  const cells = [...table.querySelectorAll('tbody td')];
  const line = parseFloat(getComputedStyle(table.querySelector('tbody td')).lineHeight) || 20;
  const tallest = cells.reduce((m, td) => Math.max(m, td.getBoundingClientRect().height), 0);
  return {tableWidth: table.scrollWidth, boxWidth: box.clientWidth, boxScroll: box.scrollWidth,
          windowWidth: document.documentElement.clientWidth, pageScroll: document.documentElement.scrollWidth,
          tallest, line,
          offscreen: [...table.querySelectorAll('tbody tr')].filter(tr => {
            const last = tr.lastElementChild.getBoundingClientRect();
            return last.right > document.documentElement.clientWidth; }).length};
}"""


def test_the_table_fits_1440_px_and_a_long_reason_opens_in_its_row(page, users, workloads):
    from playwright.sync_api import expect

    page.set_viewport_size({"width": 1440, "height": 900})
    log_in(page, "sysadmin", "pw-sysadmin")
    page.goto("/workloads/")
    row = page.locator("#workloads-table tr[data-workload='search-8gpu']")
    expect(row).to_be_visible()
    # The console's answer comes after the page (its later fetch): measure once it is in.
    expect(row.locator("[id^='pending-reason-']")).not_to_contain_text("reading…", timeout=20000)
    measured = page.evaluate(MEASURE)
    assert measured["tableWidth"] <= measured["boxWidth"], measured
    assert measured["pageScroll"] <= measured["windowWidth"], measured
    assert measured["offscreen"] == 0, measured
    assert measured["tallest"] <= 5.5 * measured["line"], measured
    for name in NAMES:
        one = page.locator(f"#workloads-table tr[data-workload='{name}']")
        expect(one).to_contain_text("rnd-a")
        expect(one.get_by_role("link", name="Stop")).to_be_in_viewport()
    # The reason is one line; its story opens in the row: the scheduler's words whole, then the console's answer.
    story = row.locator(".reason-story .story")
    expect(story).to_be_hidden()
    row.locator(".reason-story summary").click()
    expect(story).to_be_visible()
    expect(story).to_contain_text("team-39: reserved")
    expect(story).to_contain_text("Why is it waiting?")
    # Opened, it scrolls inside its own box rather than making the row a page long.
    assert story.bounding_box()["height"] <= 17 * measured["line"]
    # A live update (a hint, as the sync sends it) refetches the table through its view: the story stays open.
    page.evaluate("() => { window.__refetched = 0; "
                  "document.addEventListener('live:refreshed', () => window.__refetched++); }")
    _hint(workloads["search-8gpu"].cluster_id, ["jobs"])
    page.wait_for_function("() => window.__refetched > 0", timeout=15000)
    # ... and when the console's answer, fetched after the new table, replaces the reason cell again.
    expect(row.locator("[id^='pending-reason-']")).not_to_contain_text("reading…", timeout=20000)
    expect(row.locator(".reason-story .why")).to_contain_text("Why is it waiting?")
    expect(row.locator(".reason-story .story")).to_be_visible()
    expect(row.locator(".reason-story .story")).to_contain_text("team-39: reserved")


def test_stop_asks_first_and_the_stopped_workload_keeps_its_row_and_timeline(page, users, sim, syncing, workloads):
    from playwright.sync_api import expect

    from workloads.models import Workload

    page.set_viewport_size({"width": 1440, "height": 900})
    log_in(page, "researcher", "pw-researcher")
    page.goto("/workloads/")
    row = page.locator("#workloads-table tr[data-workload='train-b']")
    # Dismissed: the confirmation names what stops, and nothing stops.
    row.get_by_role("link", name="Stop").click()
    dialog = page.locator("#stop-confirm dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Stop workload train-b?")
    expect(dialog).to_contain_text("project rnd-a")
    expect(dialog).to_contain_text("1 pod (1 running)")
    expect(dialog).to_contain_text("2 GPUs it asks for are freed")
    dialog.get_by_role("link", name="Keep it running").click()
    expect(dialog).to_have_count(0)
    assert sorted(j["metadata"]["name"] for j in sim.list("jobs.batch", "runai-rnd-a")) == sorted(NAMES)
    expect(row).to_contain_text("Running")

    # Confirmed: its Job is deleted in the cluster; the row stays, Stopped (live, without a reload).
    row.get_by_role("link", name="Stop").click()
    page.locator("#stop-confirm dialog").get_by_role("button", name="Stop train-b").click()
    expect(page.locator("ul.messages li").first).to_contain_text("Workload train-b is being stopped")
    assert "train-b" not in [j["metadata"]["name"] for j in sim.list("jobs.batch", "runai-rnd-a")]
    assert syncing.run_until(lambda: Workload.objects.filter(name="train-b", phase="Stopped").exists())
    row = page.locator("#workloads-table tr[data-workload='train-b']")
    expect(row).to_contain_text("Stopped", timeout=20000)
    expect(row.get_by_role("link", name="Stop")).to_have_count(0)
    # Its page answers, with its timeline: submitted by, started, stopped by whom, its Job gone.
    row.get_by_role("link", name="train-b").click()
    expect(page.locator("h1")).to_have_text("Workload train-b")
    expect(page.locator("#workload-phase")).to_have_text("Stopped")
    timeline = page.locator("#workload-timeline li")
    expect(timeline.first).to_contain_text("Submitted by researcher")
    expect(page.locator("#workload-timeline")).to_contain_text("Stopped by researcher")
    expect(timeline.last).to_contain_text("Its Job left the cluster")
