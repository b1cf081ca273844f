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


# ---------------------------------------------------------------------------------------------------
# Limits in words: what a person may enter, never a database's range or a count of digits.

# Past this a number is no longer a quantity anyone types (2**53: what a float still holds exactly).
BEYOND_WORDS = 2**53


def number(value: int | float | Decimal) -> str:
    """1000000 -> "1,000,000"; Decimal("9999.5") -> "9,999.5" (no exponent, no trailing zeros)."""
    if isinstance(value, Decimal):
        value = value.normalize()
        if value == value.to_integral_value():
            return f"{int(value):,}"
        whole, _, frac = f"{value:f}".partition(".")
        return f"{int(whole):,}.{frac}" if whole != "-0" else f"-0.{frac}"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}"


def amount(value: int | float | Decimal, unit: str | tuple[str, str] = "") -> str:
    """"1,000,000 GPUs", "1 GPU", "64 GiB": `unit` the singular (plural + "s") or (singular, plural)."""
    if not unit:
        return number(value)
    one, many = (unit, None) if isinstance(unit, str) else unit
    return f"{number(value)} {noun(value, one, many)}"


def at_most(limit: int | float | Decimal, unit: str | tuple[str, str] = "") -> str:
    if abs(limit) >= BEYOND_WORDS:
        return "Enter a smaller number: this one is larger than the console can store."
    return f"Enter at most {amount(limit, unit)}."


def at_least(limit: int | float | Decimal, unit: str | tuple[str, str] = "") -> str:
    if limit == 0:
        return "Cannot be negative: enter 0 or more."
    if abs(limit) >= BEYOND_WORDS:
        return "Enter a larger number: this one is smaller than the console can store."
    return f"Enter at least {amount(limit, unit)}."


def places(decimal_places: int) -> str:
    if not decimal_places:
        return "Enter a whole number (no decimal places)."
    return f"Enter at most {decimal_places} decimal {noun(decimal_places, 'place')}."


def below(max_digits: int, decimal_places: int, unit: str | tuple[str, str] = "") -> str:
    """What a (max_digits, decimal_places) number column holds, said as its bound."""
    return f"Enter less than {amount(10 ** (max_digits - decimal_places), unit)}."


# ---------------------------------------------------------------------------------------------------
# Labels: what people call a thing, with its Kubernetes name beside where an operator needs it.

def labelled(display_name: str, name: str) -> str:
    """labelled("R&D", "rnd") -> "R&D (rnd)"; labelled("", "rnd") and labelled("rnd", "rnd") -> "rnd"."""
    display_name = (display_name or "").strip()
    if not display_name or display_name == name:
        return name
    return f"{display_name} ({name})"
