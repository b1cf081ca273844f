"""How the console writes numbers (tables, templates and CSV alike)."""
from __future__ import annotations

from decimal import Decimal


def number(value) -> str:
    """Decimal/float without trailing zeros; None as an em dash (unlimited, or not known)."""
    if value is None:
        return "—"
    if isinstance(value, Decimal):
        value = value.normalize()
        return f"{value:f}"
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)
