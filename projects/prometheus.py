"""The Prometheus reads of projects/utilization.py over the shared `gpumetrics` client (timeout, cache,
reasons), each answering `Answer(result, reason)` instead of raising: a page shows "—" with the reason.

Instant queries read at a given time with PromQL's `@` modifier (the client asks for "now"), so
that a usage snapshot reads the interval it stands for.
"""
from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import gpumetrics

# Idle detection reads a window of every allocated GPU: more than a table cell's budget.
IDLE_TIMEOUT = 5.0


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


def query(cluster, expr: str, *, timeout: float | None = None) -> Answer:
    config = gpumetrics.config_from(cluster)
    if config is None:
        return Answer([], gpumetrics.NOT_CONFIGURED.reason)
    try:
        return Answer(gpumetrics.query(config, expr, timeout=timeout))
    except gpumetrics.PrometheusError as exc:
        return Answer([], exc.reason)


def query_range(cluster, expr: str, *, start: datetime.datetime, end: datetime.datetime, step: int,
                timeout: float | None = None) -> Answer:
    config = gpumetrics.config_from(cluster)
    if config is None:
        return Answer([], gpumetrics.NOT_CONFIGURED.reason)
    try:
        return Answer(gpumetrics.query_range(config, expr, start=start.timestamp(), end=end.timestamp(), step=step,
                                             timeout=timeout))
    except gpumetrics.PrometheusError as exc:
        return Answer([], exc.reason)


def at(moment: datetime.datetime | None) -> str:
    """` @ <unix time>` pinning a selector's evaluation, or "" for now."""
    return f" @ {moment.timestamp():.3f}" if moment is not None else ""
