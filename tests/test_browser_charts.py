"""Charts in a real browser (Chromium through Playwright, against Daphne; fixtures of test_browser.py):
drawn by the vendored uPlot with their legend, values under the pointer, drag-to-zoom on time charts,
and no console error (a Content-Security-Policy violation would be one)."""
from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from tests import test_browser
from tests.test_browser import _hints_reach_the_in_process_server, chromium, live_asgi, log_in, page, shoot  # noqa: F401

pytestmark = test_browser.pytestmark

# One Twisted reactor per process: when test_browser.py's tests run too, both modules' session
# fixtures share the one Daphne server.
_server = {}
_start, _stop = test_browser.LiveASGIServer.start, test_browser.LiveASGIServer.stop


def _start_once(self):
    if "server" not in _server:
        _server["server"] = _start(self)
    return _server["server"]


def _stop_once(self):
    if _server.pop("server", None) is not None:
        _stop(self)


test_browser.LiveASGIServer.start = _start_once
test_browser.LiveASGIServer.stop = _stop_once


@pytest.fixture
def console_errors(page):
    errors: list[str] = []

    def record(message):
        # The browser's own favicon request (the console has no icon) is not an error of the page.
        if message.type == "error" and not message.location.get("url", "").endswith("/favicon.ico"):
            errors.append(f"{message.text} ({message.location.get('url')})")

    page.on("console", record)
    yield errors
    assert errors == [], f"console errors: {errors}"


@pytest.fixture
def history(org):
    from projects import services
    from usage.services import usage_snapshot_take

    services.quota_update(actor=None, quota=org.quota(org.rnd, org.a100), expected_version=None, gpu_deserved=2)
    now = timezone.now().replace(microsecond=0)
    for index in range(6):
        org.run(f"train-{index}", org.rnd_a, "a100-1", gpus=1)
        usage_snapshot_take(at=now - datetime.timedelta(minutes=30 * (5 - index)))


def legend_values(figure) -> dict[str, str]:
    rows = figure.locator(".u-legend tr.u-series")
    return {rows.nth(i).locator("th").inner_text().strip(): rows.nth(i).locator("td.u-value").inner_text().strip()
            for i in range(rows.count())}


def test_overview_chart_is_drawn_with_legend_and_values_on_hover(page, console_errors, org, users, history):
    from playwright.sync_api import expect

    log_in(page, "sysadmin", "pw-sysadmin")
    expect(page.locator("h1")).to_have_text("Cluster lab")
    chart = page.locator("#quota-chart")
    expect(chart.locator("figcaption")).to_have_text("Deserved, allocated and over-quota GPUs per department and pool")
    expect(chart.locator("canvas")).to_be_visible()
    legend = chart.locator(".u-legend")
    for label in ["Deserved (GPUs)", "Allocated (GPUs)", "Over quota (GPUs)"]:
        expect(legend).to_contain_text(label)
    # Every series has a coloured swatch.
    swatches = chart.locator(".u-legend tr.u-series:not(:first-child) .u-marker")
    assert swatches.count() == 3
    colours = {swatches.nth(i).evaluate("e => getComputedStyle(e).backgroundColor") for i in range(3)}
    assert len(colours) == 3 and "rgba(0, 0, 0, 0)" not in colours
    # Hover the group "a100 · rnd": the legend shows its figures.
    chart.scroll_into_view_if_needed()
    labels = page.evaluate("JSON.parse(document.getElementById('quota-chart-data').textContent).x_labels")
    index = labels.index("a100 · rnd")
    box = chart.locator(".u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * (index + 0.5) / len(labels), box["y"] + box["height"] - 5)
    expect(chart.locator(".u-legend tr.u-series").first.locator(".u-value")).to_have_text("a100 · rnd")
    values = legend_values(chart)
    assert (values["Deserved (GPUs)"], values["Allocated (GPUs)"], values["Over quota (GPUs)"]) == ("2", "6", "4")
    # The figures are also there as a table.
    chart.locator("summary").click()
    expect(chart.locator("table tbody tr", has_text="a100 · rnd")).to_contain_text("2")
    chart.locator("summary").click()
    page.mouse.move(box["x"] + box["width"] * (index + 0.5) / len(labels), box["y"] + box["height"] - 5)
    shoot(page, "chart-overview")
    # The live table refetches its region (chart included): the new chart is drawn again.
    page.evaluate("document.getElementById('quota-chart').setAttribute('data-old', '1')")
    page.evaluate("htmx.ajax('GET', location.pathname, {target: '#table', swap: 'outerHTML'})")
    expect(page.locator("#quota-chart:not([data-old]) canvas")).to_be_visible()
    expect(page.locator("#quota-chart .u-legend")).to_contain_text("Over quota (GPUs)")


def test_pool_usage_chart_zooms_and_shows_values_on_hover(page, console_errors, org, users, history):
    from playwright.sync_api import expect

    log_in(page, "rnd-viewer", "pw-rnd-viewer")
    page.goto(f"/pools/{org.a100.pk}/")
    chart = page.locator("#usage-chart")
    expect(chart.locator("figcaption")).to_contain_text("GPUs of node pool a100")
    expect(chart.locator("figcaption")).to_contain_text("(only 2 hours of history)")
    expect(chart.locator("canvas")).to_be_visible()
    for label in ["Capacity (Ready) (GPUs)", "Deserved (GPUs)", "Allocated (GPUs)"]:
        expect(chart.locator(".u-legend")).to_contain_text(label)
    chart.scroll_into_view_if_needed()
    box = chart.locator(".u-over").bounding_box()
    # Hover the newest point (the right edge): 6 GPUs allocated, 8 ready.
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
    expect(chart.locator(".u-legend tr.u-series", has_text="Allocated").locator(".u-value")).to_have_text("6")
    expect(chart.locator(".u-legend tr.u-series", has_text="Capacity").locator(".u-value")).to_have_text("8")
    page.mouse.move(box["x"] + 2, box["y"] + box["height"] / 2)
    expect(chart.locator(".u-legend tr.u-series", has_text="Allocated").locator(".u-value")).to_have_text("1")
    # Whole-GPU ticks only: the value axis reads 0, 1, 2, ... never 0.5.
    span = page.evaluate("() => { const u = document.getElementById('usage-chart').uplot; "
                         "return [u.scales.x.min, u.scales.x.max, u.axes[1]._splits]; }")
    full = span[:2]
    assert all(float(v).is_integer() for v in span[2]), span[2]
    # Drag across the middle third: the time axis zooms in; a double-click shows everything again.
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] / 3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 2 / 3, y, steps=5)
    page.mouse.up()
    zoomed = page.evaluate("() => { const u = document.getElementById('usage-chart').uplot; return [u.scales.x.min, u.scales.x.max]; }")
    assert full[0] < zoomed[0] < zoomed[1] < full[1]
    shoot(page, "chart-pool-usage-zoomed")
    page.mouse.dblclick(box["x"] + box["width"] / 2, y)
    page.wait_for_timeout(100)
    reset = page.evaluate("() => { const u = document.getElementById('usage-chart').uplot; return [u.scales.x.min, u.scales.x.max]; }")
    assert reset == full
    page.mouse.move(box["x"] + box["width"] - 2, y)
    shoot(page, "chart-pool-usage")


def test_usage_page_chart_is_drawn(page, console_errors, org, users, history):
    from playwright.sync_api import expect

    log_in(page, "sysadmin", "pw-sysadmin")
    page.click("nav >> text=Usage")
    expect(page.locator("h1")).to_have_text("Usage history")
    chart = page.locator("#usage-chart")
    expect(chart.locator("canvas")).to_be_visible()
    expect(chart.locator(".u-legend")).to_contain_text("Allocated (GPUs)")
    shoot(page, "chart-usage-page")
