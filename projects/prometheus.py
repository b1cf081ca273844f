"""The Prometheus reads of projects/utilization.py over the shared `gpumetrics` client (timeout, cache,
reasons), each answering `Answer(result, reason)` instead of raising: a page shows "—" with the reason.

Instant queries read at a given time with PromQL's `@` modifier (the client asks for "now"), so
that a usage snapshot reads the interval it stands for.
"""
from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from django.conf import settings

import gpumetrics

# Idle detection reads a window of every allocated GPU: more than a table cell's budget.
DEFAULT_IDLE_TIMEOUT = 5.0


def idle_timeout() -> float:
    """settings.GPUMETRICS_IDLE_TIMEOUT (seconds, default 5, CONSOLE_GPU_IDLE_TIMEOUT): the Idle GPUs
    page's budget, shared by its queries of every cluster (a usage snapshot's, per cluster)."""
    return float(getattr(settings, "GPUMETRICS_IDLE_TIMEOUT", DEFAULT_IDLE_TIMEOUT))


def idle_budget() -> gpumetrics.Budget:
    """A fresh budget of idle_timeout() seconds (one per page, shared by its queries)."""
    return gpumetrics.Budget(idle_timeout())


@dataclasses.dataclass
class Answer:
    result: list[dict[str, Any]]
    reason: str = ""


def prometheus_url(cluster) -> str:
    config = gpumetrics.config_from(cluster)
    return config.url if config else ""


def extra_matchers(cluster) -> str:
    """The cluster's extra label matchers as PromQL (`a="b",c=~"d"`), or ""."""
    config = gpumetrics.config_from(cluster)
    return config.selector()[1:-1] if config else ""


def _ask(cluster, call, *, timeout: float | None, budget: gpumetrics.Budget | None) -> Answer:
    """`call(config, timeout)` within `budget` when given (what is left of it; once spent, not sent: the
    reason of the query that spent it, or NO_BUDGET), else within `timeout`."""
    config = gpumetrics.config_from(cluster)
    if config is None:
        return Answer([], gpumetrics.NOT_CONFIGURED.reason)
    if budget is not None:
        if budget.spent():
            return Answer([], budget.spent_reason(getattr(cluster, "pk", None)))
        timeout = budget.left() if timeout is None else min(timeout, budget.left())
    try:
        return Answer(call(config, timeout))
    except gpumetrics.PrometheusError as exc:
        if budget is not None:
            budget.note(getattr(cluster, "pk", None), exc.reason)
        return Answer([], exc.reason)


def query(cluster, expr: str, *, timeout: float | None = None, budget: gpumetrics.Budget | None = None) -> Answer:
    return _ask(cluster, lambda config, t: gpumetrics.query(config, expr, timeout=t), timeout=timeout, budget=budget)


def query_range(cluster, expr: str, *, start: datetime.datetime, end: datetime.datetime, step: int,
                timeout: float | None = None, budget: gpumetrics.Budget | None = None) -> Answer:
    return _ask(cluster, lambda config, t: gpumetrics.query_range(
        config, expr, start=start.timestamp(), end=end.timestamp(), step=step, timeout=t),
        timeout=timeout, budget=budget)


def at(moment: datetime.datetime | None) -> str:
    """` @ <unix time>` pinning a selector's evaluation, or "" for now."""
    return f" @ {moment.timestamp():.3f}" if moment is not None else ""
