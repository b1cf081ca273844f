"""Server-rendered SVG bar charts (no JavaScript, no chart library)."""
from __future__ import annotations

from decimal import Decimal
from typing import Any, Sequence

SERIES = (("deserved", "Deserved"), ("allocated", "Allocated"), ("over_quota", "Over quota"))


def quota_bars(rows: Sequence[dict[str, Any]], *, width: int = 900, bar: int = 14, gap: int = 10,
               label_width: int = 220) -> dict[str, Any]:
    """Geometry of a horizontal grouped bar chart: one group per (pool, department), one bar per series."""
    top = max([Decimal(r[key] or 0) for r in rows for key, _ in SERIES] + [Decimal(1)])
    plot = width - label_width - 60
    groups, y = [], 24
    for r in rows:
        bars = []
        for i, (key, label) in enumerate(SERIES):
            value = Decimal(r[key] or 0)
            bars.append({"key": key, "label": label, "value": value, "y": y + i * bar,
                         "width": float(value / top * plot), "text_x": label_width + float(value / top * plot) + 4})
        groups.append({"title": f"{r['pool']} · {r['department']}", "y": y, "text_y": y + bar * 1.5 + 4, "bars": bars})
        y += bar * len(SERIES) + gap
    ticks = [{"x": label_width + plot * i / 4, "value": (top * i / 4).quantize(Decimal("0.1")).normalize()}
             for i in range(5)]
    return {"groups": groups, "height": y + 20, "width": width, "label_width": label_width, "plot": plot,
            "ticks": ticks, "axis_y": y + 4, "series": SERIES}
