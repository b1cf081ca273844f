"""Chart figures for static/js/charts.js (drawn with the vendored uPlot) and for the accessible table
beside every chart. The server decides every number; the browser only draws them.

A figure is plain JSON (it goes into the page through `json_script`):
  {"type": "bars" | "time", "title", "unit", "x_label",
   "x": [category index | epoch seconds], "x_labels": [text of each x],
   "series": [{"key", "label", "values": [number | null]}]}
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any, Sequence

QUOTA_SERIES = (("deserved", "Deserved"), ("allocated", "Allocated"), ("over_quota", "Over quota"))


def number(value: Any) -> float | None:
    """A JSON number (Decimal would become a string); None stays None (no value)."""
    if value is None:
        return None
    value = Decimal(str(value))
    return int(value) if value == value.to_integral_value() else float(value)


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
    }


def figure_table(figure: dict[str, Any]) -> dict[str, Any]:
    """The figure's numbers as table rows (one per x), for screen readers and for pages without JavaScript."""
    series = figure["series"]
    return {
        "headers": [figure["x_label"]] + [f"{s['label']} ({figure['unit']})" for s in series],
        "rows": [(label, [s["values"][i] for s in series]) for i, label in enumerate(figure["x_labels"])],
    }
