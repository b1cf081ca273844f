"""One hour of the ledger from pods' lifetimes, quotas and utilization: pure, exact, no database.

`hour_rows(hour_start, intervals, deserved, utilization)` integrates, over [hour_start, hour_start + 1 h),
each pod's requests over the seconds it held them (docs/concepts.md#gpu-hours) and sums them per (pool, GPU model,
project). Everything is exact: times are whole seconds, GPUs a Decimal with three places (a fraction of
a GPU counts by its fraction), so GPU-seconds are exact Decimals and any sum of them is too.

Over-quota (docs/concepts.md#over-quota): at every instant a project holds max(0, allocated − deserved) GPUs of a pool above
its deserved quota of that instant. Which of its pods hold them decides the GPU model they are counted in:
the project's pods are stacked non-preemptible first (they run within the quota), then by start (the
earliest first; the later ones borrowed), and what lies above the deserved quota is over-quota. Pods of no
project have no quota, so nothing of theirs is over it.

Idle and utilization come measured, per pod: the share of its GPU-time under the idle threshold and its
average utilization (`PodUtilization`); the ledger keeps them in GPU-seconds (quantized to milliseconds).
"""
from __future__ import annotations

import bisect
import dataclasses
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Callable, Iterable, Mapping

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
    over_quota_gpu_seconds: Decimal = ZERO
    non_preemptible_gpu_seconds: Decimal = ZERO
    idle_gpu_seconds: Decimal = ZERO
    measured_gpu_seconds: Decimal = ZERO
    busy_gpu_seconds: Decimal = ZERO
    cpu_core_seconds: Decimal = ZERO
    memory_byte_seconds: Decimal = ZERO
    pods: int = 0

    FIELDS = ("gpu_seconds", "over_quota_gpu_seconds", "non_preemptible_gpu_seconds", "idle_gpu_seconds",
              "measured_gpu_seconds", "busy_gpu_seconds", "cpu_core_seconds", "memory_byte_seconds")

    def values(self) -> dict[str, Decimal]:
        return {name: getattr(self, name) for name in self.FIELDS}

    def is_zero(self) -> bool:
        return not any(getattr(self, name) for name in self.FIELDS)

    def minus(self, other: "Figures") -> "Figures":
        return Figures(**{name: getattr(self, name) - getattr(other, name) for name in self.FIELDS})


def _share(amount: Decimal, share: float) -> Decimal:
    share = min(1.0, max(0.0, share))
    return (amount * Decimal(repr(share))).quantize(MILLI, rounding=ROUND_HALF_EVEN)


# A row's key: (pool id, GPU model, project id).
RowKey = tuple


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
        key = (pod.pool_id, pod.gpu_model, pod.project_id)
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
        if not pod.preemptible:
            row.non_preemptible_gpu_seconds += gpu_seconds
        measured = utilization.get((pod.namespace, pod.name))
        if measured is not None:
            if measured.utilization is not None:
                row.measured_gpu_seconds += gpu_seconds
                row.busy_gpu_seconds += _share(gpu_seconds, measured.utilization / 100)
            if measured.idle_share is not None:
                row.idle_gpu_seconds += _share(gpu_seconds, measured.idle_share)
        if pod.project_id is not None:
            groups.setdefault((pod.pool_id, pod.project_id), []).append((start, end, pod))
    for (pool, project), pods in groups.items():
        for model, over in _over_quota(pods, deserved.segments(pool, project, hour_start, hour_end)).items():
            rows[(pool, model, project)].over_quota_gpu_seconds += over
    return rows


def _stack_order(item: tuple[int, int, Interval]):
    start, _, pod = item
    return (pod.preemptible, pod.start, pod.key)


def _over_quota(pods: list[tuple[int, int, Interval]], quota: list[tuple[int, int, Decimal]]) -> dict[str, Decimal]:
    """GPU-seconds above the deserved quota per GPU model, for one project's pods in one pool."""
    over: dict[str, Decimal] = {}
    lowest = min(d for _, _, d in quota)
    total = sum((p.gpus for _, _, p in pods), ZERO)
    if total <= lowest:
        return over  # never above its quota this hour
    if max(d for _, _, d in quota) <= 0:
        for start, end, pod in pods:  # all of it above a quota of nothing
            over[pod.gpu_model] = over.get(pod.gpu_model, ZERO) + pod.gpus * (end - start)
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
                    over[pod.gpu_model] = over.get(pod.gpu_model, ZERO) + above * seconds
    return over
