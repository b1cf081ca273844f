"""GPU utilization of what projects and departments hold, from the DCGM exporter's series in the
cluster's Prometheus (issue 14; `gpumetrics.utilization_expr`: a whole GPU's DCGM_FI_DEV_GPU_UTIL, a MIG
instance's DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100): the figures of the project and department pages and their charts,
the per-pod hook of the workloads table, and the detection of idle allocated GPUs (the usage app's
"Idle GPUs" page and its snapshots read it).

Series are joined to the console's rows by the exporter's `namespace` / `pod` labels (a project owns
namespaces) and `Hostname` (a node). Every read takes the number of Prometheus queries it needs,
whatever the number of rows: one instant query (plus one range query for since-when) per cluster.

A figure that cannot be had is None with a reason ("—" on the page, the reason on hover).
"""
from __future__ import annotations

import dataclasses
import datetime
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any, Iterable

from django.conf import settings
from django.utils import timezone

import gpumetrics
from kube import gpu as kube_gpu
from nodepools.models import Cluster
from projects import prometheus as prom
from projects.models import ProjectNamespace
from ui.charts import figure_table, time_figure

# Labels naming one GPU held by one pod (the exporter's own; `Hostname` is the node). A MIG instance is a
# series of its own (GPU_I_PROFILE, GPU_I_ID): instances of one GPU held by one pod share this key, so that
# the range reading may bring a busy one along; since-when drops it (busy at the end: not idle).
GPU_KEY = ("Hostname", "UUID", "gpu", "namespace", "pod")
MIG_PROFILE_LABEL, MIG_INSTANCE_LABEL = gpumetrics.MIG_PROFILE, gpumetrics.MIG_INSTANCE
MAX_CHART_POINTS = 300  # a chart's points stay bounded whatever the period: the step grows with it
PERIODS = {"24h": datetime.timedelta(hours=24), "7d": datetime.timedelta(days=7)}


def idle_threshold() -> float:
    """Utilization (%) under which an allocated GPU counts as idle (settings.GPUMETRICS_IDLE_THRESHOLD from
    CONSOLE_GPU_IDLE_THRESHOLD, default 5): the same threshold as the pools' idle column."""
    return gpumetrics.idle_threshold()


def idle_window() -> datetime.timedelta:
    """How long utilization must stay under the threshold (CONSOLE_GPU_IDLE_WINDOW_MINUTES, default 30): the
    same window as the pools' "Idle allocated GPUs" (gpumetrics.idle_expr, max_over_time over it)."""
    return datetime.timedelta(seconds=gpumetrics.idle_window_seconds())


def idle_lookback() -> datetime.timedelta:
    """How far back since-when is looked for (CONSOLE_GPU_IDLE_LOOKBACK_HOURS, default 24): a GPU idle
    for longer shows "before" the start of that period."""
    return datetime.timedelta(hours=float(getattr(settings, "GPU_IDLE_LOOKBACK_HOURS", 24)))


def duration(delta: datetime.timedelta) -> str:
    """PromQL duration, whole seconds (e.g. `1800s`)."""
    return f"{max(1, int(delta.total_seconds()))}s"


def quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def namespace_matcher(namespaces: Iterable[str]) -> str:
    """`namespace=~"a|b"` (anchored by PromQL); names are escaped, so a dot is a dot."""
    return f'namespace=~{quote(gpumetrics.names_regex(namespaces))}'


def selector(cluster, *matchers: str) -> gpumetrics.metrics.Select:
    """The series of GPUs (and MIG instances) held by pods, for `gpumetrics.utilization_expr`:
    `select(metric, (op, value))` is `metric{pod!="", <matchers>, <the cluster's extra matchers>,
    GPU_I_PROFILE<op>"<value>"}`."""
    extra = prom.extra_matchers(cluster)

    def select(metric: str, mig: tuple[str, str]) -> str:
        parts = ['pod!=""', *[m for m in matchers if m]]
        if extra:
            parts.append(extra)
        parts.append(f"{MIG_PROFILE_LABEL}{mig[0]}{quote(mig[1])}")
        return f"{metric}{{{', '.join(parts)}}}"

    return select


def utilization(cluster, *matchers: str, over=None) -> str:
    """PromQL of the utilization (%) of every GPU held by a pod (`selector`), each series wrapped in `over`
    (e.g. `avg_over_time(…[5m])`): `gpumetrics.utilization_expr`, so that a MIG instance reads its graphics
    engine activity × 100 and a whole GPU DCGM_FI_DEV_GPU_UTIL, on every page, export and reading."""
    return gpumetrics.utilization_expr(selector(cluster, *matchers), over)


def _value(sample: dict) -> float | None:
    value = sample.get("value")
    if isinstance(value, (list, tuple)):  # the raw API's [time, "text"]
        value = value[1]
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


# ---------------------------------------------------------------------------------------------------
# Project and department figures

@dataclasses.dataclass
class Utilization:
    """Average utilization (%) of the GPUs an owner's pods hold now, and how many report; or a reason."""

    percent: float | None = None
    gpus: int = 0
    reason: str = ""
    failed: bool = False  # Prometheus gave no answer (absent, down, slow): nothing more is asked of it

    @property
    def shown(self) -> str:
        if self.percent is None:
            return "—"
        return f"{self.percent:.0f} %"


def owner_namespaces(*, project=None, department=None) -> list[str]:
    rows = ProjectNamespace.objects.all()
    rows = rows.filter(project=project) if project is not None else rows.filter(project__department=department)
    return list(rows.values_list("name", flat=True))


def owner_utilization(*, cluster, namespaces: list[str], window: datetime.timedelta | None = None,
                      budget: gpumetrics.Budget | None = None) -> Utilization:
    """One instant query: the average over the last 5 minutes of each GPU held by a pod in `namespaces`."""
    if not namespaces:
        return Utilization(reason="No namespaces: the owner holds no GPUs.")
    window = window or datetime.timedelta(minutes=5)
    # Two figures in one round trip: a label tells them apart.
    util = utilization(cluster, namespace_matcher(namespaces), over=lambda sel: f"avg_over_time({sel}[{duration(window)}])")
    expr = (f'label_replace(sum({util}), "figure", "sum", "", "") or '
            f'label_replace(count({util}), "figure", "count", "", "")')
    answer = prom.query(cluster, expr, budget=budget)
    if answer.reason:
        return Utilization(reason=answer.reason, failed=True)
    figures = {s["metric"].get("figure"): _value(s) for s in answer.result}
    count = int(figures.get("count") or 0)
    if not count:
        return Utilization(gpus=0, reason="No GPU of these namespaces reports utilization (none allocated, "
                                           "or the exporter's series lack the namespace/pod labels).")
    return Utilization(percent=(figures.get("sum") or 0) / count, gpus=count)


def utilization_figure(*, cluster, namespaces: list[str], subject: str, period: str = "24h",
                       now: datetime.datetime | None = None, budget: gpumetrics.Budget | None = None
                       ) -> tuple[dict[str, Any], str]:
    """The chart of the average utilization of an owner's GPUs over `period` (24h or 7d): one range
    query with a step that keeps at most MAX_CHART_POINTS points. Returns (figure, reason when empty)."""
    span = PERIODS.get(period, PERIODS["24h"])
    end = now or timezone.now()
    start = end - span
    step = max(60, math.ceil(span.total_seconds() / MAX_CHART_POINTS))
    title = f"GPU utilization of {subject}, last {'24 hours' if period == '24h' else '7 days'}"

    def figure(points: list[tuple[int, float]], empty: str = "No utilization reported in this period.") -> dict:
        # The axis spans the whole period asked for, whatever the number of points (one included).
        return time_figure(title=title, unit="%", start=start, end=end,
                           times=[datetime.datetime.fromtimestamp(t, datetime.timezone.utc) for t, _ in points],
                           series=[("utilization", "Average GPU utilization", [round(v, 1) for _, v in points])]
                           if points else [], empty=empty)

    if not namespaces:
        return figure([], "No namespaces: nothing to chart."), "No namespaces: nothing to chart."
    util = utilization(cluster, namespace_matcher(namespaces), over=lambda sel: f"avg_over_time({sel}[{step}s])")
    answer = prom.query_range(cluster, f"avg({util})", start=start, end=end, step=step, budget=budget)
    if answer.reason:
        return figure([], answer.reason), answer.reason
    values = answer.result[0]["values"] if answer.result else []
    points = [(int(float(t)), float(v)) for t, v in values if not math.isnan(float(v))]
    if not points:
        return figure([]), "No utilization reported in this period."
    return figure(points), ""


# ---------------------------------------------------------------------------------------------------
# Per pod (the workloads table's hook)

def pod_gpu_utilization(pods: Iterable[Any]) -> tuple[dict[tuple[int, str, str], float], dict[int, str]]:
    """Utilization (%) now of the GPUs each pod holds, averaged over them (gpumetrics.pod_gpu_metrics).

    `pods`: objects with cluster_id (or cluster), namespace and name (Pod rows, workloads). One query per
    cluster, whatever the number of pods. Returns ({(cluster_id, namespace, pod): percent},
    {cluster_id: reason} for clusters without figures). A pod missing from the first dict while its
    cluster has no reason holds no GPU that reports (show "—").
    """
    wanted: dict[int, set[tuple[str, str]]] = {}
    for pod in pods:
        cluster_id = getattr(pod, "cluster_id", None) or getattr(pod, "cluster").pk
        wanted.setdefault(cluster_id, set()).add((pod.namespace, pod.name))
    values: dict[tuple[int, str, str], float] = {}
    reasons: dict[int, str] = {}
    for cluster in Cluster.objects.filter(pk__in=wanted):
        figures = gpumetrics.pod_gpu_metrics(cluster, sorted(wanted[cluster.pk]))
        if isinstance(figures, gpumetrics.Unavailable):
            reasons[cluster.pk] = figures.reason
            continue
        for (namespace, name), pod_figures in figures.items():
            if pod_figures.utilization is not None:
                values[(cluster.pk, namespace, name)] = pod_figures.utilization
    return values, reasons


# ---------------------------------------------------------------------------------------------------
# Idle allocated GPUs

@dataclasses.dataclass
class IdleGpu:
    cluster_id: int
    node: str
    uuid: str
    index: str
    model: str
    namespace: str
    pod: str
    since: datetime.datetime
    since_before: bool  # idle for longer than the lookback: `since` is its start
    now: datetime.datetime
    mig_profile: str = ""  # a MIG instance: its profile (the exporter's GPU_I_PROFILE) and instance id (GPU_I_ID)
    gpu_instance: str = ""

    @property
    def idle_hours(self) -> float:
        return max(0.0, (self.now - self.since).total_seconds() / 3600)

    @property
    def share(self) -> Fraction:
        """What it is in GPU-equivalents: 1 for a GPU, a MIG instance its profile's share (1g.10gb: 1/7)."""
        if not self.mig_profile or kube_gpu.parse_mig_profile(self.mig_profile) is None:
            return Fraction(1)
        return kube_gpu.mig_profile_share(self.mig_profile, self.model)

    @property
    def gpu_hours_wasted(self) -> Decimal:
        """Idle hours × its share: GPU-equivalent hours (a 1g.10gb slice idle for 7 hours wastes 1)."""
        return Decimal(str(round(self.idle_hours * self.share.numerator / self.share.denominator, 2)))

    @property
    def device(self) -> str:
        """The GPU as people name it: its index, and for a MIG instance its profile and instance."""
        if not self.mig_profile:
            return self.index
        return f"{self.index} (MIG {self.mig_profile}, instance {self.gpu_instance})"


def idle_queries(cluster, *, threshold: float, window: datetime.timedelta, step: int,
                 now: datetime.datetime | None = None) -> tuple[str, str]:
    """(instant, range) PromQL of idle GPUs.

    Instant: GPUs held by a pod whose highest utilization over the window stayed under the threshold.
    Range: the highest utilization in every step of those GPUs only (`@ end()` pins the idle test to
    the range's end), from which since-when is read: the step after the last one at or above the
    threshold, or the first one the GPU reported in.
    """
    highest = utilization(cluster, over=lambda sel: f"max_over_time({sel}[{duration(window)}]{prom.at(now)})")
    idle = f"{highest} < {threshold:g}"
    steps = utilization(cluster, over=lambda sel: f"max_over_time({sel}[{step}s])")
    at_end = utilization(cluster, over=lambda sel: f"max_over_time({sel}[{duration(window)}] @ end())")
    history = f"{steps} and on ({', '.join(GPU_KEY)}) ({at_end} < {threshold:g})"
    return idle, history


def since_when(values: list[tuple[float, float]], *, threshold: float) -> tuple[float | None, bool]:
    """From (time, highest utilization in the step ending then), oldest first: when the GPU became
    idle (the first point after the last busy one), and whether that is merely the first point."""
    points = sorted(values)
    if not points:
        return None, False
    last_busy = None
    for index, (_, value) in enumerate(points):
        if value >= threshold:
            last_busy = index
    if last_busy is None:
        return points[0][0], True
    if last_busy + 1 >= len(points):
        return None, False  # busy at the end: not idle
    return points[last_busy + 1][0], False


def cluster_idle_gpus(cluster, *, now: datetime.datetime | None = None, threshold: float | None = None,
                      window: datetime.timedelta | None = None, lookback: datetime.timedelta | None = None,
                      budget: gpumetrics.Budget | None = None) -> tuple[list[IdleGpu], str]:
    """Idle allocated GPUs of one cluster (two Prometheus queries, sharing `budget`: the page's, else one
    of GPUMETRICS_IDLE_TIMEOUT seconds), or ([], reason)."""
    budget = budget or prom.idle_budget()
    threshold = idle_threshold() if threshold is None else threshold
    window = window or idle_window()
    lookback = max(lookback or idle_lookback(), window * 2)
    now = (now or timezone.now()).replace(microsecond=0)
    start = now - lookback
    step = max(5, math.ceil(min(lookback.total_seconds() / 500, window.total_seconds() / 4)))
    idle, history = idle_queries(cluster, threshold=threshold, window=window, step=step, now=now)
    answer = prom.query(cluster, idle, budget=budget)
    if answer.reason:
        return [], answer.reason
    if not answer.result:
        return [], ""
    ranged = prom.query_range(cluster, history, start=start, end=now, step=step, budget=budget)
    if ranged.reason:
        return [], ranged.reason
    found = []
    for series in ranged.result:
        labels = series["metric"]
        values = [(float(t), float(v)) for t, v in series.get("values", []) if not math.isnan(float(v))]
        since, first = since_when(values, threshold=threshold)
        if since is None:
            continue
        since_at = datetime.datetime.fromtimestamp(since, datetime.timezone.utc)
        # Reporting for less than the window (a pod that just started) is not idle yet.
        if now - since_at < window:
            continue
        found.append(IdleGpu(
            cluster_id=cluster.pk, node=labels.get("Hostname", ""), uuid=labels.get("UUID", ""),
            index=labels.get("gpu", ""), model=labels.get("modelName", ""),
            namespace=labels.get("namespace", ""), pod=labels.get("pod", ""), since=since_at,
            since_before=first and since - start.timestamp() <= step, now=now,
            mig_profile=labels.get(MIG_PROFILE_LABEL, ""), gpu_instance=labels.get(MIG_INSTANCE_LABEL, ""),
        ))
    return found, ""


def idle_gpus(clusters: Iterable[Any], *, budget: gpumetrics.Budget | None = None,
              **kwargs) -> tuple[list[IdleGpu], dict[int, str]]:
    """Idle allocated GPUs of every cluster given (those without a Prometheus are skipped, with their
    reason), within ONE budget for all their queries (the page's: GPUMETRICS_IDLE_TIMEOUT seconds unless
    given): a slow Prometheus holds the page that long at most, whatever the number of clusters."""
    budget = budget or prom.idle_budget()
    found: list[IdleGpu] = []
    reasons: dict[int, str] = {}
    for cluster in clusters:
        gpus, reason = cluster_idle_gpus(cluster, budget=budget, **kwargs)
        found.extend(gpus)
        if reason:
            reasons[cluster.pk] = reason
    return found, reasons


def cluster_pod_gpus(cluster, *, window: datetime.timedelta, at: datetime.datetime | None = None
                     ) -> tuple[list[tuple[str, str, float]], str]:
    """(node, namespace, average utilization over `window`) of every GPU held by a pod in the cluster,
    in one instant query; or ([], reason)."""
    answer = prom.query(cluster, utilization(cluster, over=lambda sel: f"avg_over_time({sel}[{duration(window)}]{prom.at(at)})"),
                        timeout=prom.idle_timeout())
    if answer.reason:
        return [], answer.reason
    rows = []
    for sample in answer.result:
        value = _value(sample)
        if value is not None:
            rows.append((sample["metric"].get("Hostname", ""), sample["metric"].get("namespace", ""), value))
    return rows, ""


def owner_panel(*, cluster, project=None, department=None) -> dict[str, Any]:
    """What a project or department page shows at once: the utilization of its allocated GPUs now (one
    instant query). The chart comes after the page, through `owner_chart` (its range query reads every
    sample of the period: it must not hold the page back)."""
    namespaces = owner_namespaces(project=project, department=department)
    return {"now": owner_utilization(cluster=cluster, namespaces=namespaces),
            "periods": [("24h", "Last 24 hours"), ("7d", "Last 7 days")]}


def owner_chart(*, cluster, project=None, department=None, period: str = "24h") -> dict[str, Any]:
    """The chart of the last 24 h or 7 d of a project's or department's GPU utilization (one range query)."""
    period = period if period in PERIODS else "24h"
    namespaces = owner_namespaces(project=project, department=department)
    subject = f"project {project.name}" if project is not None else f"department {department.name}"
    figure, empty = utilization_figure(cluster=cluster, namespaces=namespaces, subject=subject, period=period)
    return {"figure": figure, "table": figure_table(figure), "chart_id": "utilization-chart", "empty": empty,
            "period": period, "periods": [("24h", "Last 24 hours"), ("7d", "Last 7 days")]}


def owner_report(*, cluster, project=None, department=None, period: str = "24h") -> dict[str, Any]:
    """What the API carries of a project's or department's GPU utilization: the figure now and the chart of
    the period, the page's two reads (owner_utilization, utilization_figure) within ONE budget
    (GPUMETRICS_TIMEOUT); when the first gets no answer, the second is not asked and has its reason.

    {"gpu_utilization": % or None, "gpus": n, "unavailable": reason or None, "period": "24h" | "7d",
     "series": [{"time": datetime, "gpu_utilization": %}], "series_unavailable": reason or None}"""
    period = period if period in PERIODS else "24h"
    budget = gpumetrics.Budget()
    namespaces = owner_namespaces(project=project, department=department)
    now = owner_utilization(cluster=cluster, namespaces=namespaces, budget=budget)
    series: list[dict[str, Any]] = []
    if now.failed:
        empty = now.reason
    else:
        subject = f"project {project.name}" if project is not None else f"department {department.name}"
        figure, empty = utilization_figure(cluster=cluster, namespaces=namespaces, subject=subject, period=period,
                                           budget=budget)
        values = figure["series"][0]["values"] if figure["series"] else []
        series = [{"time": datetime.datetime.fromtimestamp(t, datetime.timezone.utc), "gpu_utilization": v}
                  for t, v in zip(figure["x"], values)]
    return {"gpu_utilization": None if now.percent is None else round(now.percent, 1), "gpus": now.gpus,
            "unavailable": (now.reason or None) if now.percent is None else None, "period": period,
            "series": series, "series_unavailable": empty or None}
