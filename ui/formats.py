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


# Human units: binary multiples for bytes (as Kubernetes' Ki, Mi, Gi, Ti), cores for CPU.
_BINARY = (("PiB", Decimal(2**50)), ("TiB", Decimal(2**40)), ("GiB", Decimal(2**30)), ("MiB", Decimal(2**20)),
           ("KiB", Decimal(2**10)))
BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage", "storage"})


def _decimal(value) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return value if isinstance(value, Decimal) else Decimal(str(value))
    except ArithmeticError:
        return None


def _short(value: Decimal) -> str:
    """One decimal below 100, whole numbers above ("15.8", "244", "2")."""
    places = Decimal("0.1") if abs(value) < 100 else Decimal(1)
    return number(value.quantize(places))


def bytes_text(amount) -> str:
    """Bytes in the largest binary unit that keeps the figure at least 1: "2 TiB", "15.8 GiB", "512 MiB";
    None (not known) as an em dash."""
    amount = _decimal(amount)
    if amount is None:
        return "—"
    for unit, size in _BINARY:
        if abs(amount) >= size:
            return f"{_short(amount / size)} {unit}"
    return f"{number(amount.quantize(Decimal(1)))} B"


def mib_text(mib) -> str:
    """MiB (GPU memory, quota memory) in human units: 40960 -> "40 GiB"."""
    mib = _decimal(mib)
    return "—" if mib is None else bytes_text(mib * 2**20)


def cores_text(cores) -> str:
    """CPU cores: "1 core", "0.5 cores", "32 cores"."""
    cores = _decimal(cores)
    if cores is None:
        return "—"
    text = number(cores.quantize(Decimal("0.001")).normalize())
    return f"{text} core" if cores == 1 else f"{text} cores"


def millicores_text(millis) -> str:
    millis = _decimal(millis)
    return "—" if millis is None else cores_text(millis / 1000)


def quantity_text(resource: str, amount) -> str:
    """A parsed Kubernetes quantity (a number) of `resource` in human units: memory and storage as
    GiB / TiB, cpu as cores, anything else (GPUs, nodes, pods) as a plain number."""
    if resource in BYTE_RESOURCES:
        return bytes_text(amount)
    if resource == "cpu":
        return cores_text(amount)
    amount = _decimal(amount)
    return "—" if amount is None else number(amount.normalize() if amount == amount.to_integral_value() else amount)
