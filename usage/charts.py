"""The usage-history chart's figure (see ui/charts.py): capacity, deserved and allocated GPUs over time,
titled with the period the data really covers."""
from __future__ import annotations

import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from common.words import noun
from common.parsing import days_before
from ui.charts import time_figure

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
        return f"{hours} {noun(hours, 'hour')}"
    return f"{hours // 24} {noun(hours // 24, 'day')}"


def last_days(days: int) -> str:
    return f"last {days} day{'s' if days != 1 else ''}"


def period_title(points: list[dict[str, Any]], *, days: int, now: datetime.datetime | None = None) -> str:
    """"last 7 days", and when the history does not cover the whole period, the range it really covers."""
    last = last_days(days)
    if not points:
        return f"{last}: no history"
    now = now or timezone.now()
    start, end = points[0]["taken"], points[-1]["taken"]
    # One or two missing snapshots at the start still cover the period.
    slack = datetime.timedelta(seconds=2 * getattr(settings, "USAGE_SNAPSHOT_EVERY", 900))
    if start <= now - datetime.timedelta(days=days) + slack:
        return last
    fmt = "%Y-%m-%d %H:%M"
    end_fmt = "%H:%M" if start.date() == end.date() else fmt
    return f"{last}, history from {start:{fmt}} to {end:{end_fmt}} UTC (only {_span(end - start)} of history)"


def range_title(start: datetime.datetime, end: datetime.datetime) -> str:
    """A chosen date range in words: "2026-03-01 to 2026-03-07 (UTC)" (`end` exclusive, at midnight)."""
    last = end - datetime.timedelta(days=1) if end.time() == datetime.time.min else end
    if last.date() <= start.date():
        return f"{start:%Y-%m-%d} (UTC)"
    return f"{start:%Y-%m-%d} to {last:%Y-%m-%d} (UTC)"


def usage_figure(points: list[dict[str, Any]], *, subject: str, days: int,
                 now: datetime.datetime | None = None, start: datetime.datetime | None = None,
                 end: datetime.datetime | None = None) -> dict[str, Any]:
    """`points` from `usage.selectors.gpu_series` (oldest first). The time axis spans the last `days`
    up to now, or the chosen range [`start`, `end`) when given."""
    now = now or timezone.now()
    chosen = start is not None or end is not None
    if chosen:
        # An open range: from a day to now, or the `days` up to a day (its start not chosen).
        if end is None:
            title = f"{start:%Y-%m-%d} to now (UTC)"
            end = now
        else:
            start = start if start is not None else days_before(end, days)
            title = range_title(start, end)
    else:
        start, end = now - datetime.timedelta(days=days), now
        title = period_title(points, days=days, now=now)
    points = thin(points)
    series = [(key, label, [p.get(key) for p in points]) for key, label in SERIES]
    # A series without any value (a department has no capacity of its own) is left out.
    series = [s for s in series if any(v is not None for v in s[2]) or not points]
    return time_figure(title=f"GPUs of {subject}, {title}", unit="GPUs", start=start, end=end,
                       times=[p["taken"] for p in points], series=series,
                       empty=f"No usage history {'in ' + title if chosen else 'in the ' + last_days(days)}: "
                             "snapshots are taken every 15 minutes by manage.py snapshot_usage.")
