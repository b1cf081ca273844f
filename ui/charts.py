"""Chart figures for static/js/charts.js (drawn with the vendored uPlot) and for the accessible table
beside every chart. The server decides every number; the browser only draws them.

A figure is plain JSON (it goes into the page through `json_script`):
  {"type": "bars" | "time", "title", "unit", "x_label",
   "x": [category index | epoch seconds], "x_labels": [text of each x],
   "series": [{"key", "label", "values": [number | null], "latest": number | null, "latest_text"}],
   "legend_rest": what the legend's first cell says while nobody points at the chart,
   "empty": words shown instead of a plot without any point}
A time figure also carries "x_range": [start, end] (epoch seconds): its axis spans the period asked for
(24 hours, 7 days, the chosen dates) whatever the number of points, one point included. Its legend shows
each series' latest value until the pointer is on the chart; a series without any value says so.
"""
from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any, Iterable, Sequence

from ui.formats import number as number_text

QUOTA_SERIES = (("deserved", "Deserved"), ("allocated", "Allocated"), ("over_quota", "Over quota"))
NO_DATA = "no data in this period"
TIME_FORMAT = "%Y-%m-%d %H:%M"


def number(value: Any) -> float | None:
    """A JSON number (Decimal would become a string); None stays None (no value)."""
    if value is None:
        return None
    value = Decimal(str(value))
    return int(value) if value == value.to_integral_value() else float(value)


def utc_text(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime(TIME_FORMAT)


def quota_figure(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Deserved / allocated / over-quota GPUs, one group of bars per (pool, department) row of
    `projects.selectors.overview_chart`."""
    return {
        "type": "bars",
        "title": "Deserved, allocated and over-quota GPUs per department and pool",
        "unit": "GPUs",
        "x_label": "Node pool · department",
        "x": list(range(len(rows))),
        "x_labels": [f"{r['pool']} · {r['department']}" for r in rows],
        "series": [{"key": key, "label": label, "values": [number(r[key] or 0) for r in rows]}
                   for key, label in QUOTA_SERIES],
        # Groups of different pools do not add up (GPUs of one pool are not GPUs of another): at rest the
        # legend says how to read a group rather than showing a sum.
        "legend_rest": "point at a group for its figures",
        "empty": "No department has quota in a pool yet.",
    }


def _latest(values: Sequence[Any]) -> Any:
    return next((v for v in reversed(values) if v is not None), None)


def time_figure(*, title: str, unit: str, start: datetime.datetime, end: datetime.datetime,
                times: Sequence[datetime.datetime], series: Iterable[tuple[str, str, Sequence[Any]]],
                x_label: str = "Time (UTC)", empty: str = "No data in this period.") -> dict[str, Any]:
    """A chart over time from `start` to `end` (the period asked for): its axis spans exactly that,
    whatever the number of points. `series`: (key, label, values aligned with `times`)."""
    xs = [int(t.timestamp()) for t in times]
    lo, hi = int(start.timestamp()), int(end.timestamp())
    # Points outside the period (a snapshot taken a second late) still show: the period grows to them.
    if xs:
        lo, hi = min(lo, xs[0]), max(hi, xs[-1])
    out = []
    for key, label, values in series:
        values = [number(v) for v in values]
        latest = _latest(values)
        out.append({"key": key, "label": label, "values": values, "latest": latest,
                    "latest_text": NO_DATA if latest is None else number_text(latest)})
    last = next((i for i in range(len(xs) - 1, -1, -1) if any(s["values"][i] is not None for s in out)), None)
    return {
        "type": "time", "title": title, "unit": unit, "x_label": x_label,
        "x": xs, "x_labels": [utc_text(t) for t in times], "x_range": [lo, hi],
        "series": out,
        "legend_rest": f"latest, {utc_text(times[last])}" if last is not None else NO_DATA,
        "empty": empty,
    }


def figure_table(figure: dict[str, Any]) -> dict[str, Any]:
    """The figure's numbers as table rows (one per x), for screen readers and for pages without JavaScript."""
    series = figure["series"]
    return {
        "headers": [figure["x_label"]] + [f"{s['label']} ({figure['unit']})" for s in series],
        "rows": [(label, [s["values"][i] for s in series]) for i, label in enumerate(figure["x_labels"])],
    }
