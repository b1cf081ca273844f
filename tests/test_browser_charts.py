"""Charts in a real browser (Chromium through Playwright, against Daphne; fixtures of test_browser.py):
drawn by the vendored uPlot with their legend, values under the pointer, drag-to-zoom on time charts,
and no console error (a Content-Security-Policy violation would be one)."""
from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from tests import test_browser
from tests.test_browser import _hints_reach_the_in_process_server, chromium, live_asgi, log_in, menu_link, page, shoot  # noqa: F401

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
    # Nobody points at it: the legend says how to read a group, never "—" (groups of different pools do
    # not add up, so there is no total to show).
    expect(chart.locator(".u-legend tr.u-series").first.locator(".u-value")).to_have_text(
        "point at a group for its figures")
    assert "—" not in chart.locator(".u-legend").inner_text()
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
    y = box["y"] + box["height"] / 2
    allocated = chart.locator(".u-legend tr.u-series", has_text="Allocated").locator(".u-value")
    capacity = chart.locator(".u-legend tr.u-series", has_text="Capacity").locator(".u-value")
    # Nobody points at it: the legend shows the latest values (6 GPUs allocated, 8 ready), not "—".
    expect(allocated).to_have_text("6")
    expect(capacity).to_have_text("8")
    expect(chart.locator(".u-legend tr.u-series").first.locator(".u-value")).to_contain_text("latest, ")
    # The time axis spans the 7 days asked for, though the history holds 2.5 hours.
    full = page.evaluate("() => { const u = document.getElementById('usage-chart').uplot; return [u.scales.x.min, u.scales.x.max]; }")
    assert abs(full[1] - full[0] - 7 * 86400) < 120, full
    # Whole-GPU ticks only: the value axis reads 0, 1, 2, ... never 0.5.
    assert all(float(v).is_integer() for v in page.evaluate("document.getElementById('usage-chart').uplot.axes[1]._splits"))

    def x_of(index):  # where a person sees the point `index` (its pixel from the left of the plot)
        return page.evaluate(f"() => {{ const u = document.getElementById('usage-chart').uplot; "
                             f"return u.valToPos(u.data[0][{index}], 'x'); }}")

    # Drag across the last hours (where the points are): the time axis zooms in on them.
    page.mouse.move(box["x"] + x_of(0) - 20, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] - 1, y, steps=5)
    page.mouse.up()
    zoomed = page.evaluate("() => { const u = document.getElementById('usage-chart').uplot; return [u.scales.x.min, u.scales.x.max]; }")
    assert full[0] < zoomed[0] < zoomed[1] <= full[1] and zoomed[1] - zoomed[0] < 86400, (full, zoomed)
    # Hover the newest point, then the oldest: their figures in the legend.
    page.mouse.move(box["x"] + x_of(5), y)
    expect(allocated).to_have_text("6")
    expect(capacity).to_have_text("8")
    page.mouse.move(box["x"] + x_of(0), y)
    expect(allocated).to_have_text("1")
    shoot(page, "chart-pool-usage-zoomed")
    # A double-click shows the whole period again.
    page.mouse.dblclick(box["x"] + box["width"] / 2, y)
    page.wait_for_timeout(100)
    reset = page.evaluate("() => { const u = document.getElementById('usage-chart').uplot; return [u.scales.x.min, u.scales.x.max]; }")
    assert reset == full
    page.mouse.move(box["x"] + box["width"] - 2, y)
    shoot(page, "chart-pool-usage")


def test_usage_page_chart_is_drawn(page, console_errors, org, users, history):
    from playwright.sync_api import expect

    log_in(page, "sysadmin", "pw-sysadmin")
    menu_link(page, "Usage", "Usage history").click()
    expect(page.locator("h1")).to_have_text("Usage history")
    chart = page.locator("#usage-chart")
    expect(chart.locator("canvas")).to_be_visible()
    expect(chart.locator(".u-legend")).to_contain_text("Allocated (GPUs)")
    shoot(page, "chart-usage-page")


def _fake_prometheus(http_server, *, points):
    """A Prometheus answering the owner's figure now (80 % over 2 GPUs) and `points` [(seconds ago, %)] for
    every range query (the chart of 24 hours or 7 days)."""
    import json
    import time

    def answer(request):
        now = time.time()
        if request.path.startswith("/api/v1/query_range"):
            result = [{"metric": {}, "values": [[now - ago, str(v)] for ago, v in points]}] if points else []
            data = {"resultType": "matrix", "result": result}
        else:
            data = {"resultType": "vector", "result": [{"metric": {"figure": "sum"}, "value": [now, "160"]},
                                                       {"metric": {"figure": "count"}, "value": [now, "2"]}]}
        return 200, "application/json", json.dumps({"status": "success", "data": data}).encode()

    return http_server(answer)


AXIS = """() => { const u = document.getElementById('utilization-chart').uplot;
  return {min: u.scales.x.min, max: u.scales.x.max, ticks: u.axes[0]._values, points: u.data[0].length}; }"""


def test_a_single_point_of_utilization_spans_the_period_asked_for(page, console_errors, org, users, http_server):
    """One point used to make uPlot label the axis 2027 … 2029; the axis spans the 24 hours (then the 7
    days) asked for, and the legend shows the latest value without hovering."""
    import time

    from playwright.sync_api import expect

    import gpumetrics

    gpumetrics.cache_clear()
    org.cluster.prometheus_url = _fake_prometheus(http_server, points=[(3600, 80)])
    org.cluster.save()
    log_in(page, "researcher", "pw-researcher")
    page.goto(f"/projects/{org.rnd_a.pk}/")
    chart = page.locator("#utilization-chart")
    expect(chart.locator("figcaption")).to_have_text("GPU utilization of project rnd-a, last 24 hours")
    expect(chart.locator("canvas")).to_be_visible()
    axis = page.evaluate(AXIS)
    now = time.time()
    assert axis["points"] == 1
    assert abs(axis["max"] - now) < 120 and abs(axis["max"] - axis["min"] - 86400) < 1, axis
    # The tick labels a person reads: hours of the last day, dated today or yesterday, never another year.
    today, yesterday = time.strftime("%Y-%m-%d", time.gmtime(now)), time.strftime("%Y-%m-%d", time.gmtime(now - 86400))
    labels = " ".join(axis["ticks"])
    assert len(axis["ticks"]) >= 4 and all(":" in t for t in axis["ticks"]), axis["ticks"]
    dates = {part for t in axis["ticks"] for part in t.split("\n")[1:]}
    assert dates and dates <= {today, yesterday}, labels
    # At rest the legend reads the latest value and its time, not "—".
    legend = legend_values(chart)
    assert legend["Average GPU utilization (%)"] == "80", legend
    assert legend["Time (UTC)"].startswith("latest, " + time.strftime("%Y-%m-%d", time.gmtime(now - 3600))), legend
    assert "—" not in legend.values()
    shoot(page, "chart-utilization-one-point")
    # The last 7 days: the same single point, the axis spans a week.
    page.locator("#utilization-chart-region").get_by_role("link", name="Last 7 days").click()
    expect(page.locator("#utilization-chart figcaption")).to_have_text("GPU utilization of project rnd-a, last 7 days")
    expect(page.locator("#utilization-chart canvas")).to_be_visible()
    axis = page.evaluate(AXIS)
    assert abs(axis["max"] - axis["min"] - 7 * 86400) < 1 and abs(axis["max"] - time.time()) < 120, axis
    week = {time.strftime("%Y-%m-%d", time.gmtime(time.time() - days * 86400)) for days in range(8)}
    dates = {part for t in axis["ticks"] for part in t.split("\n") if "-" in part}
    assert len(dates) >= 5 and dates <= week, axis["ticks"]
    assert legend_values(page.locator("#utilization-chart"))["Average GPU utilization (%)"] == "80"


def test_a_chart_without_any_point_says_so_in_words(page, console_errors, org, users, http_server):
    from playwright.sync_api import expect

    import gpumetrics

    gpumetrics.cache_clear()
    org.cluster.prometheus_url = _fake_prometheus(http_server, points=[])
    org.cluster.save()
    log_in(page, "rnd-viewer", "pw-rnd-viewer")
    page.goto(f"/departments/{org.rnd.pk}/")
    chart = page.locator("#utilization-chart")
    expect(chart.locator("figcaption")).to_have_text("GPU utilization of department rnd, last 24 hours")
    expect(chart.locator("p.empty")).to_have_text("No utilization reported in this period.")
    expect(chart.locator("canvas")).to_have_count(0)


def test_the_usage_chart_spans_the_dates_chosen(page, console_errors, org, users, history):
    import datetime

    from playwright.sync_api import expect
    from django.utils import timezone

    log_in(page, "sysadmin", "pw-sysadmin")
    menu_link(page, "Usage", "Usage history").click()
    expect(page.locator("h1")).to_have_text("Usage history")
    today = timezone.now().date()
    start = today - datetime.timedelta(days=2)
    page.get_by_label("From (date, UTC)").fill(start.isoformat())
    page.get_by_label("To (date, UTC, inclusive)").fill(today.isoformat())
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("#usage-chart figcaption")).to_contain_text(f"{start:%Y-%m-%d} to {today:%Y-%m-%d} (UTC)")
    expect(page.locator("#usage-chart canvas")).to_be_visible()
    page.wait_for_function("() => !document.querySelector('.htmx-request')")
    span = page.evaluate("() => { const u = document.getElementById('usage-chart').uplot; return [u.scales.x.min, u.scales.x.max]; }")
    midnight = datetime.datetime.combine(start, datetime.time.min, tzinfo=datetime.timezone.utc).timestamp()
    assert span == [midnight, midnight + 3 * 86400], span
    # Dates without any history: the chart says so in words.
    before = start - datetime.timedelta(days=30)
    page.get_by_label("From (date, UTC)").fill(before.isoformat())
    page.get_by_label("To (date, UTC, inclusive)").fill((before + datetime.timedelta(days=1)).isoformat())
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("#usage-chart p.empty")).to_contain_text(f"No usage history in {before:%Y-%m-%d} to ")
    expect(page.locator("#usage-chart canvas")).to_have_count(0)
