"""A statement's trend: GPU-hours per day of the month, of which over-quota and idle, as a chart figure
(ui/charts.py's format, drawn by static/js/charts.js; its figures also as a table under it)."""
from __future__ import annotations

from typing import Any

from ui.charts import number

SERIES = (("allocated", "GPU-hours", "gpu_hours"), ("over_quota", "Over-quota GPU-hours", "over_quota_hours"),
          ("idle", "Idle GPU-hours", "idle_hours"))


def trend_figure(days: list[dict[str, Any]], *, subject: str) -> dict[str, Any]:
    """`days` from a Statement (one point per day of the month, oldest first)."""
    return {
        "type": "bars",
        "title": f"GPU-hours per day of {subject}",
        "unit": "GPU-hours",
        "x_label": "Day (UTC)",
        "x": list(range(len(days))),
        "x_labels": [d["day"].isoformat() for d in days],
        "series": [{"key": key, "label": label, "values": [number(d[field]) for d in days]}
                   for key, label, field in SERIES],
    }
