"""Tables and freshness as a person meets them in a real browser: filter and sort a table, then save its
columns and find the same view; the header's "updated N s ago" counting on and restarting with a live
update; a cell that a live update changed marked for a moment.

Same setting as tests/test_browser.py (Daphne in a thread of this process) and its fixtures.
"""
from __future__ import annotations

import os
import re
import threading
import time

import pytest

from tests.test_browser import (  # noqa: F401  (fixtures)
    CHROMIUM, REQUIRE, _hints_reach_the_in_process_server, chromium, live_asgi, log_in, page)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.path.exists(CHROMIUM) and not REQUIRE,
                       reason=f"needs Chromium at {CHROMIUM} (apt-get install -y chromium)"),
]


def _synced(org):
    """The org's cluster as a running sync leaves it: connected, fully listed, its leader reporting."""
    from django.utils import timezone

    from nodepools.models import Cluster, ConnectionState

    Cluster.objects.filter(pk=org.cluster.pk).update(connection_state=ConnectionState.CONNECTED,
                                                     last_full_sync=timezone.now() - timezone.timedelta(minutes=15),
                                                     leader_heartbeat=timezone.now())


def _hint(cluster_pk: int, kinds=("nodes",)) -> None:
    """What the sync does after writing: a change hint (from a thread of its own, as the sync's; this one
    runs Playwright's event loop)."""
    from nodepools import hints

    sender = threading.Thread(target=hints.publish, args=(cluster_pk, list(kinds)))
    sender.start()
    sender.join(10)


def test_filter_and_sort_then_save_columns_and_the_view_is_kept(page, org, users):
    from playwright.sync_api import expect

    log_in(page, "sysadmin", "pw-sysadmin")
    page.goto("/nodes/")
    rows = page.locator("#nodes-table tbody tr td:first-child")
    expect(rows).to_have_count(4)
    # Filter by pool (htmx swaps the table and pushes the address), then sort by name, descending.
    page.select_option("select[name=pool]", str(org.a100.pk))
    page.wait_for_url(re.compile(rf"pool={org.a100.pk}"), timeout=20000)
    expect(rows).to_have_text(["a100-1", "a100-2"])
    page.locator("#nodes-table thead th a", has_text="Node").first.click()
    page.wait_for_url(re.compile(r"sort=name"))
    page.locator("#nodes-table thead th a", has_text=re.compile(r"^Node$")).click()
    page.wait_for_url(re.compile(r"sort=-name"))
    expect(rows).to_have_text(["a100-2", "a100-1"])
    # Now hide a column and save: the page comes back filtered and sorted as it was.
    page.click("summary:has-text('Columns')")
    page.locator(".columns-chooser").get_by_label("Zone", exact=True).uncheck()
    with page.expect_navigation():
        page.locator(".columns-chooser").get_by_role("button", name="Save columns").click()
    assert f"pool={org.a100.pk}" in page.url and "sort=-name" in page.url, page.url
    expect(rows).to_have_text(["a100-2", "a100-1"])
    expect(page.locator("select[name=pool]")).to_have_value(str(org.a100.pk))
    expect(page.locator("#nodes-table thead th")).not_to_contain_text(["Zone"])
    # Moving a column keeps the view as well.
    page.click("summary:has-text('Columns')")
    with page.expect_navigation():
        page.locator(".columns-chooser").get_by_role("button", name="Move Node pool left").click()
    assert f"pool={org.a100.pk}" in page.url and "sort=-name" in page.url, page.url
    expect(rows).to_have_text(["a100-2", "a100-1"])


def test_the_header_says_how_old_the_figures_are_and_counts_on(page, org, users):
    from playwright.sync_api import expect

    _synced(org)
    log_in(page, "cluster-viewer", "pw-cluster-viewer")
    page.goto("/nodes/")
    age = page.locator("header.topbar #data-age")
    expect(age).to_have_count(1)
    expect(age).to_have_text(re.compile(r"^updated [0-2] s ago$"))
    # The old full sync is no measure of the figures' age; nothing on the page says it in words.
    assert "full sync" not in page.locator("body").inner_text().lower()
    expect(page.locator("#live-status")).to_have_attribute("data-state", "on")
    # It counts on by itself, second by second.
    expect(age).to_have_text(re.compile(r"^updated [3-9] s ago$"), timeout=8000)
    before = int(re.search(r"(\d+) s", age.inner_text()).group(1))
    page.wait_for_timeout(2100)
    after = int(re.search(r"(\d+) s", age.inner_text()).group(1))
    assert after >= before + 2, (before, after)
    # A live update brings the figures afresh: the count restarts.
    _hint(org.cluster.pk)
    expect(age).to_have_text(re.compile(r"^updated [01] s ago$"), timeout=5000)

    # The overview says it once as well (in the header), and no "last full sync" beside its title.
    page.goto(f"/clusters/{org.cluster.pk}/")
    expect(page.locator("#data-age")).to_have_count(1)
    assert "full sync" not in page.locator("main").inner_text().lower()


def test_a_cell_changed_live_is_marked_for_a_moment(page, org, users):
    from playwright.sync_api import expect

    from nodepools.models import Node, NodeStatus

    _synced(org)
    log_in(page, "cluster-viewer", "pw-cluster-viewer")
    page.goto("/nodes/?sort=name")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "on")
    changed_row = page.locator("#nodes-table tr[data-node='a100-1']")
    other_row = page.locator("#nodes-table tr[data-node='a100-2']")
    expect(changed_row.locator("td").nth(1)).to_have_text("Ready")
    # a100-1 turns not ready: the sync writes it and sends a hint; the page refetches its table.
    Node.objects.filter(name="a100-1").update(status=NodeStatus.NOT_READY, status_reasons=["Disk pressure"])
    _hint(org.cluster.pk)
    marked = changed_row.locator("td.live-changed")
    expect(marked).not_to_have_count(0, timeout=5000)
    shown = time.monotonic()
    assert "Ready" != marked.first.inner_text()
    expect(other_row.locator("td.live-changed")).to_have_count(0)
    # The mark goes after about two seconds; the new text stays.
    expect(marked).to_have_count(0, timeout=4000)
    assert 1.0 < time.monotonic() - shown < 4.0
    expect(changed_row.locator("td").nth(1)).not_to_have_text("Ready")

    # With reduced motion the mark does not animate (it appears and goes at once).
    page.emulate_media(reduced_motion="reduce")
    duration = page.evaluate("getComputedStyle(document.querySelector('#nodes-table td')).transitionDuration")
    assert set(duration.replace(" ", "").split(",")) == {"0s"}
    page.emulate_media(reduced_motion="no-preference")
    duration = page.evaluate("getComputedStyle(document.querySelector('#nodes-table td')).transitionDuration")
    assert duration.split(",")[0].strip() != "0s"
