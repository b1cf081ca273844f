"""A GPU usage chart as plain SVG geometry (no JavaScript): lines for capacity, deserved and allocated."""
from __future__ import annotations

from decimal import Decimal
from typing import Any

WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 10, 24
MAX_POINTS = 400

SERIES = (  # key, label, CSS class
    ("capacity", "Capacity (Ready GPUs)", "capacity"),
    ("deserved", "Deserved", "deserved"),
    ("allocated", "Allocated", "allocated"),
)


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    for step in (1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 40, 50, 64, 80, 100, 128, 200, 256, 400, 500, 512, 1000):
        if value <= step:
            return float(step)
    magnitude = 10 ** (len(str(int(value))) - 1)
    return float((int(value / magnitude) + 1) * magnitude)


def chart(points: list[dict[str, Any]]) -> dict[str, Any]:
    """SVG coordinates for `points` (dicts with `taken` and the series keys; None values are skipped)."""
    if len(points) > MAX_POINTS:  # thin evenly, always keeping the newest point
        step = len(points) / MAX_POINTS
        points = [points[int(i * step)] for i in range(MAX_POINTS - 1)] + [points[-1]]
    values = [float(p[key]) for p in points for key, _, _ in SERIES if p.get(key) is not None]
    top = _nice_max(max(values, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    if points:
        start, end = points[0]["taken"], points[-1]["taken"]
        span = max((end - start).total_seconds(), 1.0)
    else:
        start = end = None
        span = 1.0

    def x(taken) -> float:
        return LEFT + (taken - start).total_seconds() / span * plot_w if len(points) > 1 else LEFT + plot_w

    def y(value) -> float:
        return TOP + plot_h - float(value) / top * plot_h

    lines = []
    for key, label, css in SERIES:
        coords = [f"{x(p['taken']):.1f},{y(p[key]):.1f}" for p in points if p.get(key) is not None]
        if coords:
            last = next(p[key] for p in reversed(points) if p.get(key) is not None)
            lines.append({"key": key, "label": label, "css": css, "points": " ".join(coords),
                          "last": _fmt(last)})
    ticks = [{"y": f"{y(v):.1f}", "label": _fmt(v)} for v in (0, top / 2, top)]
    return {
        "width": WIDTH, "height": HEIGHT, "left": LEFT, "right": WIDTH - RIGHT, "top": TOP, "bottom": HEIGHT - BOTTOM,
        "lines": lines, "ticks": ticks, "start": start, "end": end, "count": len(points),
    }


def _fmt(value: Any) -> str:
    value = Decimal(str(value))
    return f"{value.normalize():f}" if value == value.to_integral() else f"{value.quantize(Decimal('0.01')):f}"
