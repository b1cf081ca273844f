"""Resource quantities (`500m`, `2`, `1Gi`, `129843200Ki`, `1e3`), as the API server reads and writes them.

Follows k8s.io/apimachinery/pkg/api/resource (quantity.go: `parseQuantityString`, `ParseQuantity`,
`CanonicalizeBytes`), so that the console, the emulator and the cluster agree on every amount:

- `<sign><digits>[.<digits>]<suffix>`; the suffix is a decimal SI one (`n u m k M G T P E`, or none), a
  binary one (`Ki Mi Gi Ti Pi Ei`) or an exponent (`e3`, `E-6`, within ±(2³¹-1));
- amounts are rounded up (away from zero) to whole nanos — asking for any amount gets at least `1n`;
- binary amounts are capped at 2⁶³-1, as upstream does;
- surrounding whitespace is trimmed, as `Quantity.UnmarshalJSON` does for what the API server decodes.

Two departures, both refusing what upstream lets through: text without a single digit (`.`, `-`, `+`),
which upstream reads as 0, and amounts beyond 10¹⁰⁰⁰, which nothing measures and which would cost dearly to
turn into integers. Anything else that is not a quantity raises `QuantityError` with the API server's words.
"""
from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, ROUND_UP, Context, Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

__all__ = [
    "BINARY_SI", "DECIMAL_EXPONENT", "DECIMAL_SI", "FORMAT_MESSAGE", "QuantityError", "canonical_quantity",
    "GIB_PLACES", "MIB_PER_GIB", "format_quantity", "gib_from_mib", "mib_from_gib", "parse_quantity", "parse_quantity_format", "plain_quantity",
]

FORMAT_MESSAGE = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
SUFFIX_MESSAGE = "unable to parse quantity's suffix"

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"

_DIGITS = frozenset("0123456789")
_EXPONENT_RE = re.compile(r"^[+-]?[0-9]+\Z")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXPONENT = {exponent: suffix for suffix, exponent in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}  # powers of 1024
_BINARY_BY_POWER = {power: suffix for suffix, power in _BINARY_SUFFIXES.items()}
_MAX_INT32 = 2**31 - 1
_MAX_BINARY = Decimal(2**63 - 1)  # upstream's maxAllowed
_MAX_ADJUSTED = 1000
_NANO = Decimal("1e-9")


class QuantityError(ValueError):
    """A resource quantity that does not follow Kubernetes syntax: `str()` is the API server's words and the
    value (`quantities must match the regular expression '…', got 'lots'`), `reason` the words alone."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


def _refuse(value: Any, message: str = FORMAT_MESSAGE) -> QuantityError:
    return QuantityError(f"{message}, got {value!r}", message)


def _split(text: str) -> tuple[bool, str, str, str]:
    """(positive, integer digits, fraction digits, suffix): upstream's parseQuantityString."""
    end = len(text)
    pos = 0
    positive = True
    if end and text[0] in "+-":
        positive = text[0] == "+"
        pos = 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos]
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    if not num and not denom:
        raise _refuse(text)  # no digit at all: `.`, `-`, `+` (upstream reads them as 0)
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise _refuse(text)
    return positive, num or "0", denom, text[suffix_start:]


def _interpret(suffix: str, text: str) -> tuple[int, int, str]:
    """(base, exponent, format) of a suffix: upstream's suffixer.interpret."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, 10 * _BINARY_SUFFIXES[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        if _EXPONENT_RE.match(suffix[1:]):
            exponent = int(suffix[1:])
            if -_MAX_INT32 <= exponent <= _MAX_INT32:
                return 10, exponent, DECIMAL_EXPONENT
    raise _refuse(text, SUFFIX_MESSAGE)


def _shift(number: int, exponent: int, negative: bool) -> Decimal:
    """number × 10^exponent, exactly (no context rounding)."""
    digits = Decimal(number).as_tuple().digits
    return Decimal((1 if negative else 0, digits, exponent))


def parse_quantity_format(value: Any) -> tuple[Decimal, str]:
    """The amount of a quantity and the format it was written in (`DecimalSI`, `BinarySI`,
    `DecimalExponent`, which `format_quantity` writes back). Raises QuantityError on anything else."""
    if isinstance(value, bool) or value is None:
        raise _refuse(value)
    if isinstance(value, int):
        return Decimal(value), DECIMAL_SI
    if isinstance(value, (float, Decimal)):
        text = str(value)  # JSON numbers are quantities too; nan and inf are refused below
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise QuantityError(f"quantities must be strings or numbers, got {value!r}")
    if not text:
        raise _refuse(value)
    return _parse_text(text)


@lru_cache(maxsize=8192)
def _parse_text(text: str) -> tuple[Decimal, str]:
    """The parse of a trimmed text (cached: clusters repeat the same few quantities endlessly)."""
    positive, num, denom, suffix = _split(text)
    base, exponent, fmt = _interpret(suffix, text)
    unscaled = int(num + denom)
    if base == 10:
        amount = _shift(unscaled, exponent - len(denom), not positive)
    else:
        amount = _shift(unscaled << exponent, -len(denom), not positive)
    if amount.adjusted() > _MAX_ADJUSTED and amount != 0:
        raise QuantityError(f"quantities beyond 1e{_MAX_ADJUSTED} are not supported, got {text!r}")
    if amount == 0:
        return Decimal(0), fmt
    # Round non-zero amounts up, away from zero, to the smallest representable one (1n): "if you want
    # some resources, you should get some resources".
    if amount.as_tuple().exponent < -9:  # type: ignore[operator]
        if amount.adjusted() < -9:
            amount = _NANO.copy_sign(amount)
        else:
            amount = amount.quantize(_NANO, rounding=ROUND_UP, context=Context(prec=amount.adjusted() + 20))
    if fmt == BINARY_SI:
        if abs(amount) > _MAX_BINARY:
            amount = _MAX_BINARY.copy_sign(amount)
        if abs(amount) < 1:
            fmt = DECIMAL_SI  # "this avoids rounding and hopefully confusion, too"
    return amount, fmt


def parse_quantity(value: Any) -> Decimal:
    """`500m` -> 0.5, `1Gi` -> 1073741824, `1e3` -> 1000, `3.001n` -> 4e-9. Raises QuantityError on
    anything that is not a quantity, naming the value."""
    return parse_quantity_format(value)[0]


def _finite(value: Decimal | int | str) -> Decimal:
    """An amount to write as text: a finite number (QuantityError otherwise)."""
    try:
        amount = value if isinstance(value, Decimal) else Decimal(value)
    except (InvalidOperation, TypeError, ValueError) as exc:
        raise _refuse(value) from exc
    if not amount.is_finite():
        raise _refuse(value)
    return amount


def format_quantity(value: Decimal | int | str, fmt: str = DECIMAL_SI) -> str:
    """The canonical text of an amount, as the API server writes it: `DecimalSI` (default) an integer with an
    SI suffix whose exponent is a multiple of 3 (`1500m`, `2k`, `1e21` beyond `E`), `BinarySI` a power of
    1024 when the amount is a whole number of at least 1024 (`1Gi`, else as DecimalSI), `DecimalExponent`
    an exponent that is a multiple of 3 (`80e-3`)."""
    amount = _finite(value)
    if amount == 0:
        return "0"
    sign = "-" if amount < 0 else ""
    magnitude = abs(amount)
    if fmt == BINARY_SI and magnitude >= 1024 and magnitude == magnitude.to_integral_value():
        number, power = int(magnitude), 0
        while number % 1024 == 0:
            number //= 1024
            power += 1
        if power <= 6:  # past Ei there is no binary suffix: the exact decimal form below
            return f"{sign}{number}{_BINARY_BY_POWER.get(power, '')}"
    _, digits, exponent = magnitude.as_tuple()
    number = int("".join(map(str, digits)))
    while number % 10 == 0:
        number //= 10
        exponent += 1  # type: ignore[operator]
    remainder = exponent % 3  # type: ignore[operator]
    number *= 10**remainder
    exponent -= remainder  # type: ignore[operator]
    if fmt == DECIMAL_EXPONENT:
        suffix = f"e{exponent}" if exponent else ""
    else:
        suffix = _DECIMAL_BY_EXPONENT.get(exponent, f"e{exponent}")  # type: ignore[arg-type]
    return f"{sign}{number}{suffix}"


def plain_quantity(value: Decimal | int | str) -> str:
    """The amount as a plain decimal number, which is a quantity too (`4`, `0.5`, `1500`): what the console
    writes where people read the figure (queue quotas, the emulator's statuses)."""
    return f"{_finite(value).normalize():f}"


def canonical_quantity(value: Any) -> str:
    """The API server's text of a quantity (`1024Mi` -> `1Gi`, `1000M` -> `1G`, `.001Ki` -> `1024m`)."""
    return format_quantity(*parse_quantity_format(value))


# ---------------------------------------------------------------------------------------------------
# MiB and GiB (Mi, Gi): the console stores memory quotas in MiB and shows them, and asks them, in GiB.

MIB_PER_GIB = 1024
# A GiB amount to this many places names every whole MiB exactly (1 MiB = 0.0009765625 GiB; rounding to
# 4 places moves it by at most 0.05 MiB, so GiB -> MiB -> GiB gives back what was shown).
GIB_PLACES = 4


def gib_from_mib(mib: int | None) -> Decimal | None:
    """2048 -> Decimal("2"), 1536 -> Decimal("1.5"), 1 -> Decimal("0.001"); None (unlimited) stays None."""
    if mib is None:
        return None
    gib = (Decimal(mib) / MIB_PER_GIB).quantize(Decimal(1).scaleb(-GIB_PLACES), rounding=ROUND_HALF_UP)
    return Decimal(f"{gib.normalize():f}")


def mib_from_gib(gib: Decimal | int | None) -> int | None:
    """Decimal("1.5") -> 1536: the nearest whole MiB (half up); None (unlimited) stays None."""
    if gib is None:
        return None
    return int((Decimal(gib) * MIB_PER_GIB).to_integral_value(rounding=ROUND_HALF_UP))
