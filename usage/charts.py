"""The usage-history chart's figure (see ui/charts.py): capacity, deserved and allocated GPUs over time,
titled with the period the data really covers."""
from __future__ import annotations

import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from ui.charts import number

MAX_POINTS = 600  # more than a chart's width in pixels gains nothing: thin evenly beyond it

SERIES = (
    ("capacity", "Capacity (Ready)"),
    ("deserved", "Deserved"),
    ("allocated", "Allocated"),
)


def thin(points: list[dict[str, Any]], limit: int = MAX_POINTS) -> list[dict[str, Any]]:
    """At most `limit` points, evenly spaced, always keeping the newest."""
    if len(points) <= limit:
        return points
    step = len(points) / limit
    return [points[int(i * step)] for i in range(limit - 1)] + [points[-1]]


def _span(delta: datetime.timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    if minutes < 120:
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} hours"
    return f"{hours // 24} days"


def period_title(points: list[dict[str, Any]], *, days: int, now: datetime.datetime | None = None) -> str:
    """"last 7 days" when the history covers the whole period; otherwise the range it really covers."""
    if not points:
        return f"no history in the last {days} day{'s' if days != 1 else ''}"
    now = now or timezone.now()
    start, end = points[0]["taken"], points[-1]["taken"]
    # One or two missing snapshots at the start still cover the period.
    slack = datetime.timedelta(seconds=2 * getattr(settings, "USAGE_SNAPSHOT_EVERY", 900))
    if start <= now - datetime.timedelta(days=days) + slack:
        return f"last {days} day{'s' if days != 1 else ''}"
    fmt = "%Y-%m-%d %H:%M"
    end_fmt = "%H:%M" if start.date() == end.date() else fmt
    return f"{start:{fmt}} to {end:{end_fmt}} UTC (only {_span(end - start)} of history)"


def usage_figure(points: list[dict[str, Any]], *, subject: str, days: int,
                 now: datetime.datetime | None = None) -> dict[str, Any]:
    """`points` from `usage.selectors.gpu_series` (oldest first)."""
    title = period_title(points, days=days, now=now)
    points = thin(points)
    series = [{"key": key, "label": label, "values": [number(p.get(key)) for p in points]} for key, label in SERIES]
    return {
        "type": "time",
        "title": f"GPUs of {subject}, {title}",
        "unit": "GPUs",
        "x_label": "Time (UTC)",
        "x": [int(p["taken"].timestamp()) for p in points],
        "x_labels": [p["taken"].astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M") for p in points],
        # A series without any value (a department has no capacity of its own) is left out.
        "series": [s for s in series if any(v is not None for v in s["values"]) or not points],
    }
