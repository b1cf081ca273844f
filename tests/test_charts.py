"""Charts: drawn in the browser by the vendored uPlot from JSON the server puts in the page
(`json_script`), with the same figures as a table for screen readers, and no SVG renderer of our own."""
import datetime
from decimal import Decimal
import json
import re
from pathlib import Path

import pytest
from django.utils import timezone

from projects import services
from projects.selectors import overview_chart
from usage import selectors as usage_selectors
from usage.charts import period_title
from usage.services import usage_snapshot_take

ROOT = Path(__file__).resolve().parent.parent
UPLOT = "js/vendor/uPlot-1.6.32.iife.min.js"


def figure(html: str, chart_id: str) -> dict:
    match = re.search(rf'<script id="{chart_id}-data" type="application/json">(.*?)</script>', html, re.S)
    assert match, f"no JSON figure {chart_id} in the page"
    return json.loads(match.group(1))


def table(html: str, chart_id: str) -> list[list[str]]:
    """The accessible table of a chart: one list of cell texts per body row."""
    section = html[html.index(f'id="{chart_id}"'):]
    body = section[section.index("<tbody>"):section.index("</tbody>")]
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def text(value) -> str:
    return "—" if value is None else f"{value:g}"


def test_the_chart_library_is_vendored_with_its_licence_and_served(client, users):
    assert (ROOT / "static" / UPLOT).stat().st_size > 30_000
    assert "MIT" in (ROOT / "static/js/vendor/uPlot-LICENSE.txt").read_text()
    client.force_login(users["sysadmin"])
    page = client.get("/").content.decode()
    assert f'src="/static/{UPLOT}"' in page and 'src="/static/js/charts.js"' in page
    for path in (UPLOT, "js/charts.js", "css/vendor/uPlot-1.6.32.min.css", "css/charts.css"):
        response = client.get(f"/static/{path}")
        assert response.status_code == 200, path
        b"".join(response.streaming_content)


def test_no_hand_written_svg_renderer_is_left():
    assert not (ROOT / "templates/usage/_chart_svg.html").exists()
    sources = [p for p in ROOT.glob("**/*.py") if ".venv" not in p.parts and "tests" not in p.parts]
    sources += list((ROOT / "templates").glob("**/*.html"))
    for path in sources:
        content = path.read_text()
        assert "quota_bars" not in content and "_chart_svg" not in content, path
    for path in ("ui/charts.py", "usage/charts.py", "usage/templatetags/usage_charts.py", "templates/home.html",
                 "templates/ui/_chart.html", "templates/usage/_chart.html"):
        assert "svg" not in (ROOT / path).read_text().lower(), path


def test_overview_chart_json_equals_the_selectors_figures_and_the_table_too(client, org, users):
    services.quota_update(actor=None, quota=org.quota(org.rnd, org.a100), expected_version=None, gpu_deserved=2)
    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    client.force_login(users["sysadmin"])
    html = client.get(f"/clusters/{org.cluster.pk}/").content.decode()
    data = figure(html, "quota-chart")
    rows = overview_chart(user=users["sysadmin"], cluster=org.cluster)
    assert data["type"] == "bars" and data["unit"] == "GPUs"
    assert data["x_labels"] == [f"{r['pool']} · {r['department']}" for r in rows]
    assert [s["label"] for s in data["series"]] == ["Deserved", "Allocated", "Over quota"]
    for series in data["series"]:
        assert series["values"] == [float(r[series["key"]]) for r in rows]
    a100_rnd = data["x_labels"].index("a100 · rnd")
    assert [s["values"][a100_rnd] for s in data["series"]] == [2, 3, 1]
    # The same numbers for screen readers, in a table.
    assert table(html, "quota-chart") == [
        [label] + [text(s["values"][i]) for s in data["series"]] for i, label in enumerate(data["x_labels"])]
    assert ["a100 · rnd", "2", "3", "1"] in table(html, "quota-chart")
    assert 'class="chart-plot"' in html and "<svg" not in html


def test_overview_chart_survives_the_live_table_refresh(client, org, users):
    client.force_login(users["sysadmin"])
    html = client.get(f"/clusters/{org.cluster.pk}/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="table").content.decode()
    assert figure(html, "quota-chart")["x_labels"]


@pytest.fixture
def history(org):
    services.quota_update(actor=None, quota=org.quota(org.rnd, org.a100), expected_version=None, gpu_deserved=4)
    now = timezone.now().replace(microsecond=0)
    times = [now - datetime.timedelta(hours=2), now - datetime.timedelta(hours=1), now]
    for index, at in enumerate(times):
        org.run(f"train-{index}", org.rnd_a, "a100-1", gpus=1)
        usage_snapshot_take(at=at)
    return times


def test_pool_usage_chart_json_equals_the_selectors_series_and_the_table_too(client, org, users, history):
    client.force_login(users["rnd_viewer"])
    html = client.get(f"/pools/{org.a100.pk}/").content.decode()
    data = figure(html, "usage-chart")
    points = usage_selectors.gpu_series(user=users["rnd_viewer"], pool=org.a100)
    assert data["type"] == "time" and len(points) == 3
    assert data["x"] == [int(p["taken"].timestamp()) for p in points]
    assert {s["key"]: s["values"] for s in data["series"]} == {
        key: [float(p[key]) for p in points] for key in ("capacity", "deserved", "allocated")}
    assert [s["values"] for s in data["series"]] == [[8, 8, 8], [4, 4, 4], [1, 2, 3]]
    rows = table(html, "usage-chart")
    assert rows == [[label] + [text(s["values"][i]) for s in data["series"]] for i, label in enumerate(data["x_labels"])]
    assert rows[-1] == [history[-1].strftime("%Y-%m-%d %H:%M"), "8", "4", "3"]


def test_usage_chart_title_says_the_real_range_when_history_is_short(client, org, users, history):
    client.force_login(users["rnd_viewer"])
    html = client.get(f"/departments/{org.rnd.pk}/").content.decode()
    data = figure(html, "usage-chart")
    start, end = history[0], history[-1]
    # The axis spans the 7 days asked for; the title says how little of them the history covers.
    assert data["title"].startswith("GPUs of department rnd, last 7 days, history from ")
    assert f"{start:%Y-%m-%d %H:%M} to " in data["title"] and "(only 2 hours of history)" in data["title"]
    assert data["title"] in html  # the visible caption
    # A department has no capacity of its own: no empty series.
    assert [s["key"] for s in data["series"]] == ["deserved", "allocated"]


def test_usage_chart_title_says_last_7_days_when_the_history_covers_them():
    now = timezone.now()
    points = [{"taken": now - datetime.timedelta(days=7) + datetime.timedelta(minutes=10)}, {"taken": now}]
    assert period_title(points, days=7, now=now) == "last 7 days"
    points[0]["taken"] = now - datetime.timedelta(days=3)
    assert period_title(points, days=7, now=now).startswith("last 7 days, history from ")
    assert period_title(points, days=7, now=now).endswith("(only 3 days of history)")


def test_usage_page_chart_covers_the_pools_the_user_may_see(client, org, users, history):
    client.force_login(users["rnd_admin"])
    page = client.get("/usage/").content.decode()
    data = figure(page, "usage-chart")
    assert data["title"].startswith("GPUs of all node pools you may see")


# --- The time axis spans the period asked for, whatever the number of points ---------------------------

def test_a_time_figure_spans_its_period_and_names_the_latest_values():
    from ui.charts import time_figure

    end = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.timezone.utc)
    start = end - datetime.timedelta(hours=24)
    one = end - datetime.timedelta(hours=1)
    fig = time_figure(title="t", unit="%", start=start, end=end, times=[one],
                      series=[("utilization", "Average GPU utilization", [80]), ("idle", "Idle", [None])])
    # One point: the axis still spans the 24 hours (uPlot alone would span 1,000 days after it).
    assert fig["x_range"] == [int(start.timestamp()), int(end.timestamp())]
    assert fig["x"] == [int(one.timestamp())] and fig["x_labels"] == ["2026-11-26 11:00"]
    assert [(s["latest"], s["latest_text"]) for s in fig["series"]] == [(80, "80"), (None, "no data in this period")]
    assert fig["legend_rest"] == "latest, 2026-11-26 11:00"
    empty = time_figure(title="t", unit="%", start=start, end=end, times=[], series=[], empty="Nothing.")
    assert empty["x_range"] == fig["x_range"] and empty["x"] == [] and empty["empty"] == "Nothing."
    assert empty["legend_rest"] == "no data in this period"
    # The latest value of a series is its last one that is known.
    fig = time_figure(title="t", unit="GPUs", start=start, end=end, times=[one, end],
                      series=[("allocated", "Allocated", [Decimal("2.5"), None])])
    assert fig["series"][0]["latest_text"] == "2.5" and fig["legend_rest"] == "latest, 2026-11-26 11:00"


def test_the_pool_usage_chart_spans_the_last_7_days(client, org, users, history):
    client.force_login(users["rnd_viewer"])
    before = int(timezone.now().timestamp())
    data = figure(client.get(f"/pools/{org.a100.pk}/").content.decode(), "usage-chart")
    start, end = data["x_range"]
    assert before - 5 <= end <= int(timezone.now().timestamp()) + 5
    assert end - start == 7 * 86400
    assert data["series"][-1]["latest_text"] == "3"  # allocated, newest snapshot


def test_the_usage_page_chart_spans_the_dates_chosen(client, org, users, history):
    client.force_login(users["sysadmin"])
    today = timezone.now().date()
    first = today - datetime.timedelta(days=1)
    data = figure(client.get("/usage/", {"date_from": first.isoformat(), "date_to": today.isoformat()}).content.decode(),
                  "usage-chart")
    midnight = datetime.datetime.combine(first, datetime.time.min, tzinfo=datetime.timezone.utc)
    assert data["x_range"] == [int(midnight.timestamp()), int(midnight.timestamp()) + 2 * 86400]
    assert data["title"] == f"GPUs of all node pools you may see, {first:%Y-%m-%d} to {today:%Y-%m-%d} (UTC)"
    # Only the days chosen: ten days ago holds none of the history (all taken in the last 2 hours)...
    old = today - datetime.timedelta(days=10)
    page = client.get("/usage/", {"date_from": old.isoformat(), "date_to": old.isoformat()}).content.decode()
    assert 'id="usage-chart-data"' not in page
    assert f"No usage history in {old:%Y-%m-%d} (UTC): snapshots are taken every 15 minutes" in page
    # ...and a start alone runs to now.
    data = figure(client.get("/usage/", {"date_from": first.isoformat()}).content.decode(), "usage-chart")
    assert data["title"].endswith(f"{first:%Y-%m-%d} to now (UTC)") and len(data["x"]) == 3


def test_the_utilization_chart_spans_24_hours_or_7_days_with_a_single_point(org, http_server):
    import json as json_

    import gpumetrics
    from projects.utilization import utilization_figure

    now = timezone.now().replace(microsecond=0)

    def answer(request):
        t = now.timestamp() - 3600
        body = {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[t, "80"]]}]}}
        return 200, "application/json", json_.dumps(body).encode()

    gpumetrics.cache_clear()
    org.cluster.prometheus_url = http_server(answer)
    org.cluster.save()
    for period, span in (("24h", 86400), ("7d", 7 * 86400)):
        fig, empty = utilization_figure(cluster=org.cluster, namespaces=["runai-rnd-a"], subject="project rnd-a",
                                        period=period, now=now)
        assert empty == "" and len(fig["x"]) == 1
        assert fig["x_range"] == [int(now.timestamp()) - span, int(now.timestamp())], period
        assert fig["series"][0]["latest_text"] == "80"
    fig, empty = utilization_figure(cluster=org.cluster, namespaces=[], subject="project rnd-a", now=now)
    assert empty == "No namespaces: nothing to chart." and fig["x_range"][1] - fig["x_range"][0] == 86400
    gpumetrics.cache_clear()
