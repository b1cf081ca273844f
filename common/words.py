"""Words that agree with their number: "1 GPU", "2 GPUs", "0.5 GPUs" (standard library only).

Templates use Django's `pluralize`; Python text building a count uses `noun` (a count may be a Decimal of
GPUs: exactly one is singular, any other amount plural, as people write "0.5 GPUs")."""
from __future__ import annotations

from decimal import Decimal


def noun(count: int | float | Decimal, one: str, many: str | None = None) -> str:
    """`one` when `count` is exactly 1, else `many` (default `one` + "s")."""
    return one if count == 1 else (many if many is not None else one + "s")


def verb(count: int | float | Decimal, one: str, many: str) -> str:
    """The verb agreeing with `count` things: verb(1, "keeps", "keep")."""
    return one if count == 1 else many
