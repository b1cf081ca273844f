"""What the cluster's Prometheus says of one past hour of every pod's GPUs (the DCGM exporter's utilization,
`gpumetrics.utilization_expr`: `DCGM_FI_DEV_GPU_UTIL` of a whole GPU, `DCGM_FI_PROF_GR_ENGINE_ACTIVE` × 100 of
a MIG instance; joined to pods by its `namespace` / `pod` labels), for the ledger.

Two queries per cluster and hour, whatever the number of pods:

- an instant query at the hour's end: each pod's average utilization over the hour
  (`avg by (namespace, pod) (avg_over_time(util[3599s] @ end))`);
- a range query over the hour, one point a minute: per pod, how many of its GPUs were idle — the
  console's one meaning of idle (docs/concepts.md#idle: under CONSOLE_GPU_IDLE_THRESHOLD % for the
  whole CONSOLE_GPU_IDLE_WINDOW_MINUTES, having reported a window ago; `gpumetrics.idle_expr`) — and how
  many reported. A pod's idle share of the hour is idle GPU-points / reporting GPU-points.

A MIG instance is a series of its own (the exporter's `GPU_I_PROFILE`, `GPU_I_ID`) labelled with the pod
holding it, read from its graphics engine activity (the exporter does not measure GPU_UTIL for instances), so that a slice's utilization and idle minutes are its pod's, as a whole GPU's are (a pod of
several slices: their average, each slice a GPU-point of the idle share).

Off the pages' path (the sync's leader), within CONSOLE_GPU_REFRESH_TIMEOUT per query.
"""
from __future__ import annotations

import datetime

from django.conf import settings

import gpumetrics
from ledger.compute import PodUtilization
from projects import prometheus as prom
from projects.utilization import idle_threshold, idle_window, selector
from projects.utilization import utilization as utilization_promql

STEP = 60  # seconds between the points of the idle reading


def _timeout() -> float:
    return float(getattr(settings, "GPUMETRICS_REFRESH_TIMEOUT", 10))


def hour_utilization(cluster, hour: datetime.datetime) -> tuple[dict[tuple[str, str], PodUtilization], str]:
    """({(namespace, pod): PodUtilization}, "") or ({}, why not)."""
    if not prom.prometheus_url(cluster):
        return {}, gpumetrics.NOT_CONFIGURED.reason
    end = hour + datetime.timedelta(hours=1)
    # 3599 s: a sample at the hour's very start is the previous hour's (Prometheus 2 closes ranges on the left).
    hourly = utilization_promql(cluster, over=lambda sel: f"avg_over_time({sel}[3599s]{prom.at(end)})")
    average = prom.query(cluster, f"avg by (namespace, pod) ({hourly})", timeout=_timeout())
    if average.reason:
        return {}, average.reason
    idle = gpumetrics.idle_expr(selector(cluster), threshold=idle_threshold(),
                                window_seconds=idle_window().total_seconds())
    shares = prom.query_range(
        cluster, f'label_replace(count by (namespace, pod) ({idle}), "figure", "idle", "", "") or '
                 f'label_replace(count by (namespace, pod) ({utilization_promql(cluster)}), "figure", "held", "", "")',
        start=hour + datetime.timedelta(seconds=STEP), end=end, step=STEP, timeout=_timeout())
    if shares.reason:
        return {}, shares.reason
    utilization = {(s["metric"].get("namespace", ""), s["metric"].get("pod", "")): s["value"]
                   for s in average.result}
    points: dict[tuple[str, str], dict[str, float]] = {}
    for series in shares.result:
        metric = series["metric"]
        key = (metric.get("namespace", ""), metric.get("pod", ""))
        figure = points.setdefault(key, {"idle": 0.0, "held": 0.0})
        figure[metric.get("figure", "held")] += sum(v for _, v in series.get("values") or ())
    out: dict[tuple[str, str], PodUtilization] = {}
    for key in set(utilization) | set(points):
        held = points.get(key, {}).get("held", 0.0)
        share = points[key]["idle"] / held if held else None
        out[key] = PodUtilization(utilization=utilization.get(key), idle_share=share)
    return out, ""
