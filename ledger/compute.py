"""One hour of the ledger from pods' lifetimes, quotas and utilization: pure, exact, no database.

`hour_rows(hour_start, intervals, deserved, utilization)` integrates, over [hour_start, hour_start + 1 h),
each pod's requests over the seconds it held them (docs/concepts.md#gpu-hours) and sums them per (pool, GPU model,
project, unit). The unit is what the pod's GPUs are billed in (kube.gpu.billing_unit): whole GPUs (a row's key
is then (pool, model, project), as always), slices of a MIG profile (`1g.10gb`), replicas of a time-sliced GPU
(`replica:4`) or GPU-equivalents (`fraction`: KAI fractions); the key of such a row ends with its unit. Every
row keeps GPU-equivalent seconds (`gpu_seconds`) and seconds of its unit (`unit_seconds`: slice-seconds,
replica-seconds), so that a statement shows a line's quantity in its unit and its rate per unit. Everything is exact: times are whole seconds, GPUs a Decimal with three places (a fraction of
a GPU counts by its fraction), so GPU-seconds are exact Decimals and any sum of them is too.

Over-quota (docs/concepts.md#over-quota): at every instant a project holds max(0, allocated − deserved) GPUs of a pool above
its deserved quota of that instant. Which of its pods hold them decides the GPU model they are counted in:
the project's pods are stacked non-preemptible first (they run within the quota), then by start (the
earliest first; the later ones borrowed), and what lies above the deserved quota is over-quota. Pods of no
project have no quota, so nothing of theirs is over it.

Idle and utilization come measured, per pod: the share of its GPU-time under the idle threshold and its
average utilization (`PodUtilization`); the ledger keeps them in GPU-seconds (quantized to milliseconds), and
which GPU-seconds they were measured of (`idle_measured_gpu_seconds`, `measured_gpu_seconds`): a pod Prometheus
said nothing of (none configured, none reachable, no exporter) adds to neither, so that its idle time is
"not measured", not zero.
"""
from __future__ import annotations

import bisect
import dataclasses
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import Callable, Iterable, Mapping

from kube import gpu

HOUR = 3600
MILLI = Decimal("0.001")
ZERO = Decimal(0)


@dataclasses.dataclass(frozen=True, slots=True)
class Interval:
    """A pod's lifetime (Unix seconds; `end` None: still running) and what it requested."""

    key: str
    namespace: str
    name: str
    pool_id: int | None
    gpu_model: str
    project_id: int | None
    gpus: Decimal
    cpu_millis: int
    memory_bytes: int
    preemptible: bool
    start: int
    end: int | None
    unit: str = ""  # kube.gpu.billing_unit: "" whole GPUs, a MIG profile, `replica:<n>`, `fraction`
    units: Decimal | None = None  # how many of `unit` (None: as many as `gpus`)


@dataclasses.dataclass(frozen=True, slots=True)
class PodUtilization:
    """What Prometheus said of a pod's GPUs over the hour: average utilization (%), share of idle GPU-time
    (0..1); None where it did not say."""

    utilization: float | None = None
    idle_share: float | None = None


class Deserved:
    """Each (pool, project)'s deserved GPUs over time: steps (since, value), oldest first; before the first
    step the first value holds (the quota as first recorded); an owner without steps has `default(pool,
    project)` (its quota now)."""

    def __init__(self, steps: Mapping[tuple, list[tuple[int, Decimal]]] | None = None,
                 default: Callable[[int | None, int | None], Decimal] | None = None) -> None:
        self.steps = {key: sorted(value) for key, value in (steps or {}).items()}
        self.default = default or (lambda pool, project: ZERO)

    def segments(self, pool: int | None, project: int, start: int, end: int) -> list[tuple[int, int, Decimal]]:
        """[(from, to, deserved)] covering [start, end)."""
        steps = self.steps.get((pool, project))
        if not steps:
            return [(start, end, Decimal(self.default(pool, project)))]
        times = [t for t, _ in steps]
        i = bisect.bisect_right(times, start) - 1
        value = steps[max(i, 0)][1]
        out, at = [], start
        for t, v in steps[max(i + 1, 0):]:
            if t >= end:
                break
            if t > at:
                out.append((at, t, value))
                at = t
            value = v
        out.append((at, end, value))
        return out


@dataclasses.dataclass
class Figures:
    """The sums of one ledger row (see ledger.models.Amounts)."""

    gpu_seconds: Decimal = ZERO
    unit_seconds: Decimal = ZERO
    over_quota_gpu_seconds: Decimal = ZERO
    non_preemptible_gpu_seconds: Decimal = ZERO
    idle_gpu_seconds: Decimal = ZERO
    idle_measured_gpu_seconds: Decimal = ZERO
    measured_gpu_seconds: Decimal = ZERO
    busy_gpu_seconds: Decimal = ZERO
    cpu_core_seconds: Decimal = ZERO
    memory_byte_seconds: Decimal = ZERO
    pods: int = 0

    FIELDS = ("gpu_seconds", "unit_seconds", "over_quota_gpu_seconds", "non_preemptible_gpu_seconds", "idle_gpu_seconds",
              "idle_measured_gpu_seconds", "measured_gpu_seconds", "busy_gpu_seconds", "cpu_core_seconds", "memory_byte_seconds")

    def values(self) -> dict[str, Decimal]:
        return {name: getattr(self, name) for name in self.FIELDS}

    def is_zero(self) -> bool:
        return not any(getattr(self, name) for name in self.FIELDS)

    def minus(self, other: "Figures") -> "Figures":
        return Figures(**{name: getattr(self, name) - getattr(other, name) for name in self.FIELDS})


def _share(amount: Decimal, share: float) -> Decimal:
    share = min(1.0, max(0.0, share))
    return (amount * Decimal(repr(share))).quantize(MILLI, rounding=ROUND_HALF_EVEN)


# A row's key: (pool id, GPU model, project id) for whole GPUs, (pool id, GPU model, project id, unit) else.
RowKey = tuple


def row_key(pool: int | None, model: str, project: int | None, unit: str = "") -> RowKey:
    return (pool, model, project, unit) if unit else (pool, model, project)


def key_unit(key: RowKey) -> str:
    """The unit of a row's key ("" : whole GPUs)."""
    return key[3] if len(key) > 3 else ""


def hour_rows(hour_start: int, intervals: Iterable[Interval], deserved: Deserved,
              utilization: Mapping[tuple[str, str], PodUtilization] | None = None) -> dict[RowKey, Figures]:
    """The ledger rows of the hour starting at `hour_start` (Unix seconds, a whole hour)."""
    hour_end = hour_start + HOUR
    utilization = utilization or {}
    rows: dict[RowKey, Figures] = {}
    # (pool, project) -> [(clipped start, clipped end, interval)] of its pods that hold GPUs, for over-quota.
    groups: dict[tuple, list[tuple[int, int, Interval]]] = {}
    for pod in intervals:
        start = max(pod.start, hour_start)
        end = hour_end if pod.end is None else min(pod.end, hour_end)
        if end <= start:
            continue
        seconds = end - start
        key = row_key(pod.pool_id, pod.gpu_model, pod.project_id, pod.unit)
        row = rows.get(key)
        if row is None:
            row = rows[key] = Figures()
        row.pods += 1
        row.cpu_core_seconds += Decimal(pod.cpu_millis * seconds) / 1000
        row.memory_byte_seconds += pod.memory_bytes * seconds
        if not pod.gpus:
            continue
        gpu_seconds = pod.gpus * seconds
        row.gpu_seconds += gpu_seconds
        row.unit_seconds += (pod.gpus if pod.units is None or not pod.unit else pod.units) * seconds
        if not pod.preemptible:
            row.non_preemptible_gpu_seconds += gpu_seconds
        measured = utilization.get((pod.namespace, pod.name))
        if measured is not None:
            if measured.utilization is not None:
                row.measured_gpu_seconds += gpu_seconds
                row.busy_gpu_seconds += _share(gpu_seconds, measured.utilization / 100)
            if measured.idle_share is not None:
                row.idle_gpu_seconds += _share(gpu_seconds, measured.idle_share)
                row.idle_measured_gpu_seconds += gpu_seconds
        if pod.project_id is not None:
            groups.setdefault((pod.pool_id, pod.project_id), []).append((start, end, pod))
    for (pool, project), pods in groups.items():
        for (model, unit), over in _over_quota(pods, deserved.segments(pool, project, hour_start, hour_end)).items():
            rows[row_key(pool, model, project, unit)].over_quota_gpu_seconds += over
    return rows


def _stack_order(item: tuple[int, int, Interval]):
    start, _, pod = item
    return (pod.preemptible, pod.start, pod.key)


def _over_quota(pods: list[tuple[int, int, Interval]], quota: list[tuple[int, int, Decimal]]) -> dict[tuple, Decimal]:
    """GPU-seconds above the deserved quota per (GPU model, unit), for one project's pods in one pool."""
    over: dict[tuple, Decimal] = {}
    lowest = min(d for _, _, d in quota)
    total = sum((p.gpus for _, _, p in pods), ZERO)
    if total <= lowest:
        return over  # never above its quota this hour
    if max(d for _, _, d in quota) <= 0:
        for start, end, pod in pods:  # all of it above a quota of nothing
            at = (pod.gpu_model, pod.unit)
            over[at] = over.get(at, ZERO) + pod.gpus * (end - start)
        return over
    pods = sorted(pods, key=_stack_order)
    bounds = {b for s, e, _ in pods for b in (s, e)} | {b for s, e, _ in quota for b in (s, e)}
    bounds = sorted(bounds)
    q = 0
    for left, right in zip(bounds, bounds[1:]):
        while quota[q][1] <= left:
            q += 1
        limit = quota[q][2]
        seconds = right - left
        held = ZERO
        for start, end, pod in pods:
            if start <= left and end >= right:
                below, held = held, held + pod.gpus
                above = held - max(limit, below)
                if above > 0:
                    at = (pod.gpu_model, pod.unit)
                    over[at] = over.get(at, ZERO) + above * seconds
    return over


# ---------------------------------------------------------------------------------------------------
# Prices per unit (docs/using/auditor.md#slices-replicas-and-fractions)

def unit_price(unit: str, model: str, gpu_hour: Decimal | None, profile_hour: Decimal | None = None
               ) -> tuple[Decimal | None, bool]:
    """(price per hour of one `unit` of GPU `model`, whether it is derived from the model's price).

    Whole GPUs and GPU-equivalents (`fraction`) cost the model's price per GPU-hour (`gpu_hour`); a slice
    of a MIG profile costs the profile's own price per slice-hour (`profile_hour`) when one is set, else
    the model's price × the profile's share of the GPU (`1g.10gb` of an A100: 1/7); a replica of a GPU
    shared n ways costs the model's price / n. None when no price holds."""
    if unit and unit != gpu.UNIT_FRACTION and gpu.parse_mig_profile(unit) is not None and profile_hour is not None:
        return profile_hour, False
    if gpu_hour is None:
        return None, False
    share = gpu.unit_share(unit, model)
    if share == 1:
        return gpu_hour, False
    with localcontext(prec=60):
        return gpu_hour * share.numerator / share.denominator, True
