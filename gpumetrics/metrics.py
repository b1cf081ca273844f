"""The DCGM exporter's figures per node, per group of nodes, per GPU device and per pod.

Every function makes ONE Prometheus query whatever the number of rows (a regular expression of the
names asked for, aggregated by Prometheus), answers from the cache for a few seconds, and returns
either its figures or :class:`~gpumetrics.client.Unavailable` with the reason. Only an answer without
any series costs a second query, the cluster-wide diagnostics that say why (no DCGM series at all, or
series without the labels the console joins by): counting every series of a large fleet is the
dearest part of a query, so a page that has its figures never pays for it.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from gpumetrics.client import (
    NOT_CONFIGURED, PrometheusConfig, PrometheusError, Unavailable, _setting, config_from, names_regex,
    promql_string, query,
)

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
METRICS = (GPU_UTIL, FB_USED, FB_FREE, GR_ENGINE_ACTIVE)
MIG_PROFILE = "GPU_I_PROFILE"  # the exporter's label of a MIG instance's series (its profile, `1g.10gb`)
MIG_INSTANCE = "GPU_I_ID"
_METRICS_RE = "|".join(METRICS)
_SUMMED_RE = "|".join((FB_USED, FB_FREE, GR_ENGINE_ACTIVE))  # summed per metric; utilization: utilization_expr
DEFAULT_IDLE_THRESHOLD = 5.0
DEFAULT_IDLE_WINDOW_MINUTES = 30.0

NO_SERIES = "no DCGM series for this cluster"
NO_HOSTNAME = "series lack the Hostname label"
NO_POD_LABELS = "series lack the namespace/pod labels"


def idle_threshold() -> float:
    """``settings.GPUMETRICS_IDLE_THRESHOLD`` (%, default 5): an allocated GPU under it is idle."""
    return _setting("GPUMETRICS_IDLE_THRESHOLD", DEFAULT_IDLE_THRESHOLD)


def idle_window_seconds() -> float:
    """``settings.GPU_IDLE_WINDOW_MINUTES`` (default 30) in seconds: how long an allocated GPU's
    utilization must stay under the threshold to count as idle (the Idle GPUs page's window too)."""
    return 60 * _setting("GPU_IDLE_WINDOW_MINUTES", DEFAULT_IDLE_WINDOW_MINUTES)


def _duration(seconds: float) -> str:
    return f"{max(1, int(seconds))}s"


@dataclass(frozen=True)
class GpuFigures:
    """The DCGM figures of a node or of a group of nodes (a pool), now.

    ``utilization`` is the average over every exported device (%), ``allocated_utilization`` over
    the devices a pod holds (None when none is); memory in MiB (total = used + free); ``idle_allocated``
    counts idle allocated devices — held by a pod for the whole idle window with utilization under the
    threshold all along (``max_over_time`` over the window), the Idle GPUs page's definition; ``engine_active`` is the average graphics
    engine activity (0..1) or None when the exporter does not serve DCGM_FI_PROF_GR_ENGINE_ACTIVE."""

    gpus: int = 0
    utilization: float | None = None
    memory_used_mib: float = 0.0
    memory_total_mib: float = 0.0
    allocated: int = 0
    allocated_utilization: float | None = None
    idle_allocated: int = 0
    engine_active: float | None = None

    def __bool__(self) -> bool:
        return True


@dataclass(frozen=True)
class NodeGpuMetrics:
    """``node_gpu_metrics()``'s answer: figures by node name (``get(name)``: None when Prometheus
    holds no series of that node; ``missing_reason`` then says so)."""

    by_node: dict[str, GpuFigures] = field(default_factory=dict)

    def get(self, name: str) -> GpuFigures | None:
        return self.by_node.get(name)

    missing_reason = "no DCGM series for this node (is its DCGM exporter running?)"

    def __bool__(self) -> bool:
        return True


@dataclass(frozen=True)
class GroupGpuMetrics:
    """``group_gpu_metrics()``'s answer: figures by group key (a group without series has zeros)."""

    by_group: dict[Any, GpuFigures] = field(default_factory=dict)

    def get(self, key: Any) -> GpuFigures:
        return self.by_group.get(key) or GpuFigures()

    def __bool__(self) -> bool:
        return True


@dataclass(frozen=True)
class GpuDevice:
    """One GPU of a node as the exporter describes it."""

    index: int
    uuid: str
    model: str
    utilization: float | None
    memory_used_mib: float | None
    memory_free_mib: float | None
    engine_active: float | None
    namespace: str = ""
    pod: str = ""
    container: str = ""

    @property
    def memory_total_mib(self) -> float | None:
        if self.memory_used_mib is None or self.memory_free_mib is None:
            return None
        return self.memory_used_mib + self.memory_free_mib

    @property
    def engine_active_percent(self) -> float | None:
        """DCGM_FI_PROF_GR_ENGINE_ACTIVE (a ratio 0..1) in %, or None when the exporter does not serve it."""
        return None if self.engine_active is None else self.engine_active * 100


@dataclass(frozen=True)
class PodGpuFigures:
    """The GPUs a pod holds, as the exporter reports them (utilization averaged over them, %)."""

    gpus: int
    utilization: float | None
    memory_used_mib: float

    def __bool__(self) -> bool:
        return True


# ---------------------------------------------------------------------------------------------------

def _tag(expr: str, label: str, value: str) -> str:
    return f"label_replace({expr}, {promql_string(label)}, {promql_string(value)}, \"\", \"\")"


def _diagnostics(config: PrometheusConfig) -> list[str]:
    every = utilization_expr(lambda metric, mig: config.selector(metric, **{MIG_PROFILE: mig}))
    hosted = utilization_expr(lambda metric, mig: config.selector(metric, Hostname=("!=", ""), **{MIG_PROFILE: mig}))
    return [_tag(f"count({every})", "gpumetrics_stat", "all"), _tag(f"count({hosted})", "gpumetrics_stat", "hosted")]


def _check(config: PrometheusConfig, stats: dict[str, float]) -> None:
    if not stats.get("all"):
        raise PrometheusError(NO_SERIES + (f" ({config.name})" if config.name else ""))
    if not stats.get("hosted"):
        raise PrometheusError(NO_HOSTNAME)


def _explain_empty(config: PrometheusConfig, *, timeout: float | None, since: float) -> None:
    """The diagnostics of an answer without series (a second query, only then, within what the first
    left of `timeout`, counted from `since`; none when nothing is left): raises PrometheusError when the
    cluster has no DCGM series or they lack the Hostname label."""
    if timeout is not None:
        timeout -= time.monotonic() - since
        if timeout < 0.02:
            return
    rows = query(config, " or ".join(_diagnostics(config)), timeout=timeout)
    _check(config, {row["metric"].get("gpumetrics_stat", ""): row["value"] for row in rows})


def _run(cluster_or_config: Any, build, *, timeout: float | None):
    config = config_from(cluster_or_config)
    if config is None:
        return None, NOT_CONFIGURED
    try:
        return config, query(config, build(config), timeout=timeout)
    except PrometheusError as exc:
        return config, Unavailable(exc.reason)


Select = Callable[[str, tuple[str, str]], str]


def utilization_expr(select: Select, over: Callable[[str], str] | None = None) -> str:
    """THE PromQL of GPU utilization (%), one series per whole GPU and per MIG instance: every surface that
    reads utilization (pools, nodes, projects and departments, workloads, idle GPUs, usage, ledger) builds
    its query from this.

    - A whole GPU (no ``GPU_I_PROFILE`` label): ``DCGM_FI_DEV_GPU_UTIL`` (%).
    - A MIG instance (``GPU_I_PROFILE`` set): ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (ratio 0..1) × 100. NVIDIA's
      dcgm-exporter does not report ``DCGM_FI_DEV_GPU_UTIL`` for MIG instances (absent, or 0): its maintainers
      say so in NVIDIA/dcgm-exporter issues #216 ("there are no plans to support DCGM_FI_DEV_GPU_UTIL for MIG
      instances", pointing to DCGM_FI_PROF_GR_ENGINE_ACTIVE), #430 ("not supported for MIG configurations
      ... use DCGM_FI_PROF_GR_ENGINE_ACTIVE ... which is reported for MIG devices") and #50 (use the
      DCGM_FI_PROF_* metrics instead); DCGM's profiling (DCP) metrics are what it measures per instance, and
      the exporter's default counters (etc/default-counters.csv, "Datacenter Profiling (DCP) metrics") list
      DCGM_FI_PROF_GR_ENGINE_ACTIVE.

    `select(metric, (op, value))` returns the selector of `metric` with the caller's matchers plus
    ``GPU_I_PROFILE<op>"<value>"``; `over` wraps each selector (``max_over_time(…[30m])``, ``… offset 30m``)
    before the two are united, so that range functions read the samples themselves (no subquery). The two
    halves never share a label set (one has ``GPU_I_PROFILE``, the other not): ``or`` is their union."""
    over = over or (lambda sel: sel)
    whole = over(select(GPU_UTIL, ("=", "")))
    instances = over(select(GR_ENGINE_ACTIVE, ("!=", "")))
    return f"({whole} or {instances} * 100)"


def idle_expr(select: Select, *, threshold: float, window_seconds: float) -> str:
    """PromQL of the idle allocated GPUs (and MIG instances) among the series `select` gives (as for
    `utilization_expr`, of pods): the highest utilization over the window stays under the threshold, and the
    GPU already reported (was held) at the window's start — a pod that just started is not idle yet
    (projects.utilization's Idle GPUs page uses the same definition)."""
    window = _duration(window_seconds)
    highest = utilization_expr(select, lambda sel: f"max_over_time({sel}[{window}])")
    before = utilization_expr(select, lambda sel: f"{sel} offset {window}")
    return f"({highest} < {threshold:g}) and {before}"


def _figures_query(config: PrometheusConfig, group_label: str, selectors: list[tuple[str | None, dict]],
                   threshold: float, window_seconds: float | None = None, *, idle: bool = True) -> str:
    """One query: per group, per metric, sums and counts split by allocated (a pod label) or not, and
    the idle allocated devices (under the threshold for the whole idle window)."""
    window_seconds = idle_window_seconds() if window_seconds is None else window_seconds

    def grouped(build: Callable[[dict], str]) -> str:
        parts = []
        for key, kwargs in selectors:
            expr = build(kwargs)
            parts.append(expr if key is None else _tag(expr, "gpumetrics_group", key))
        return " or ".join(parts) if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def util_of(kwargs: dict, **more) -> Select:
        return lambda metric, mig: config.selector(metric, **{**kwargs, **more, MIG_PROFILE: mig})

    def alloc(expr: str) -> str:
        return f"label_replace({expr}, \"gpumetrics_alloc\", \"1\", \"pod\", \".+\")"

    # Memory and engine activity per metric; utilization (%) from THE utilization expression (GPU_UTIL of
    # whole GPUs, GR_ENGINE_ACTIVE × 100 of MIG instances), one series per device either way.
    every = alloc(grouped(lambda kw: config.selector("", **{**kw, "__name__": ("=~", _SUMMED_RE)})))
    util = alloc(grouped(lambda kw: utilization_expr(util_of(kw))))
    idle_devices = grouped(lambda kw: idle_expr(util_of(kw, pod=("!=", "")), threshold=threshold,
                                                window_seconds=window_seconds))
    by = f"__name__, {group_label}, gpumetrics_alloc"
    exprs = [_tag(f"sum by ({by}) ({every})", "gpumetrics_stat", "sum"),
             _tag(f"count by ({by}) ({every})", "gpumetrics_stat", "count"),
             _tag(f"sum by ({group_label}, gpumetrics_alloc) ({util})", "gpumetrics_stat", "util_sum"),
             _tag(f"count by ({group_label}, gpumetrics_alloc) ({util})", "gpumetrics_stat", "util_count")]
    if idle:  # a window of every allocated GPU: the dearest part, left out where no idle count is shown
        exprs.append(_tag(f"count by ({group_label}) ({idle_devices})", "gpumetrics_stat", "idle"))
    return " or ".join(exprs)


def _figures(rows: list[dict], group_label: str) -> dict[str, GpuFigures]:
    acc: dict[str, dict[tuple[str, str, str], float]] = defaultdict(dict)
    for row in rows:
        m = row["metric"]
        stat = m.get("gpumetrics_stat", "")
        key = m.get(group_label, "")
        acc[key][(stat, m.get("__name__", ""), m.get("gpumetrics_alloc", ""))] = row["value"]
    out: dict[str, GpuFigures] = {}
    for key, v in acc.items():
        def g(stat, name, alloc=None):
            if alloc is None:
                return v.get((stat, name, ""), 0.0) + v.get((stat, name, "1"), 0.0)
            return v.get((stat, name, alloc), 0.0)

        gpus = int(g("util_count", ""))
        allocated = int(g("util_count", "", "1"))
        gr_count = g("count", GR_ENGINE_ACTIVE)
        out[key] = GpuFigures(
            gpus=gpus,
            utilization=g("util_sum", "") / gpus if gpus else None,
            memory_used_mib=g("sum", FB_USED),
            memory_total_mib=g("sum", FB_USED) + g("sum", FB_FREE),
            allocated=allocated,
            allocated_utilization=g("util_sum", "", "1") / allocated if allocated else None,
            idle_allocated=int(v.get(("idle", "", ""), 0)),
            engine_active=g("sum", GR_ENGINE_ACTIVE) / gr_count if gr_count else None,
        )
    return out


def figures_sum(parts: Iterable[GpuFigures]) -> GpuFigures:
    """The figures of a group of nodes from its nodes' figures (averages weighted by their devices)."""
    parts = list(parts)
    gpus = sum(p.gpus for p in parts)
    allocated = sum(p.allocated for p in parts)

    def weighted(value, weight) -> tuple[float, int]:
        total = count = 0
        for p in parts:
            if value(p) is not None and weight(p):
                total += value(p) * weight(p)
                count += weight(p)
        return total, count

    util, util_n = weighted(lambda p: p.utilization, lambda p: p.gpus)
    alloc, alloc_n = weighted(lambda p: p.allocated_utilization, lambda p: p.allocated)
    engine, engine_n = weighted(lambda p: p.engine_active, lambda p: p.gpus)
    return GpuFigures(
        gpus=gpus, utilization=util / util_n if util_n else None,
        memory_used_mib=sum(p.memory_used_mib for p in parts), memory_total_mib=sum(p.memory_total_mib for p in parts),
        allocated=allocated, allocated_utilization=alloc / alloc_n if alloc_n else None,
        idle_allocated=sum(p.idle_allocated for p in parts), engine_active=engine / engine_n if engine_n else None,
    )


# ---------------------------------------------------------------------------------------------------
# Public functions

def node_gpu_metrics(cluster: Any, node_names: Iterable[str] | None, *, timeout: float | None = None,
                     threshold: float | None = None, window_seconds: float | None = None, idle: bool = True
                     ) -> NodeGpuMetrics | Unavailable:
    """Figures of these nodes (``None``: every node of the cluster), by node name: ONE query
    (``idle=False``: without the idle count, whose window is the query's dearest part; it is then 0)."""
    names = None if node_names is None else sorted(set(node_names))
    threshold = idle_threshold() if threshold is None else threshold
    if names == []:
        return NodeGpuMetrics()
    host = ("!=", "") if names is None else ("=~", names_regex(names))
    started = time.monotonic()
    config, rows = _run(cluster, lambda c: _figures_query(c, "Hostname", [(None, {"Hostname": host})], threshold,
                                                             window_seconds, idle=idle),
                        timeout=timeout)
    if isinstance(rows, Unavailable):
        return rows
    figures = _figures(rows, "Hostname")
    if not figures:
        try:
            _explain_empty(config, timeout=timeout, since=started)
        except PrometheusError as exc:
            return Unavailable(exc.reason)
    return NodeGpuMetrics(by_node=figures)


def group_gpu_metrics(cluster: Any, groups: Mapping[Any, Iterable[str]], *, timeout: float | None = None,
                      threshold: float | None = None, window_seconds: float | None = None
                      ) -> GroupGpuMetrics | Unavailable:
    """Figures summed over groups of nodes (e.g. pools: ``{pool_id: [node names]}``): ONE query."""
    threshold = idle_threshold() if threshold is None else threshold
    keyed = {str(k): (k, sorted(set(v))) for k, v in groups.items()}
    selectors = [(sk, {"Hostname": ("=~", names_regex(names))}) for sk, (_, names) in sorted(keyed.items()) if names]
    if not selectors:
        return GroupGpuMetrics()
    started = time.monotonic()
    config, rows = _run(cluster, lambda c: _figures_query(c, "gpumetrics_group", selectors, threshold, window_seconds),
                        timeout=timeout)
    if isinstance(rows, Unavailable):
        return rows
    figures = _figures(rows, "gpumetrics_group")
    if not figures:
        try:
            _explain_empty(config, timeout=timeout, since=started)
        except PrometheusError as exc:
            return Unavailable(exc.reason)
    return GroupGpuMetrics(by_group={keyed[sk][0]: f for sk, f in figures.items() if sk in keyed})


def _device_utilization(dev: dict[str, Any]) -> float | None:
    """A device's utilization (%) as `utilization_expr` reads it: a MIG instance's is its graphics engine
    activity × 100 (the exporter does not measure DCGM_FI_DEV_GPU_UTIL for instances), a GPU's GPU_UTIL."""
    if dev["labels"].get(MIG_PROFILE):
        engine = dev.get(GR_ENGINE_ACTIVE)
        return None if engine is None else engine * 100
    return dev.get(GPU_UTIL)


def device_metrics(cluster: Any, node_name: str, *, timeout: float | None = None) -> list[GpuDevice] | Unavailable:
    """Every GPU of one node (index order), with the pod holding it: ONE query."""
    def build(c: PrometheusConfig) -> str:
        return c.selector("", __name__=("=~", _METRICS_RE), Hostname=node_name)

    started = time.monotonic()
    config, rows = _run(cluster, build, timeout=timeout)
    if isinstance(rows, Unavailable):
        return rows
    devices: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        m = row["metric"]
        key = (m.get("gpu", ""), m.get("UUID", ""))
        dev = devices.setdefault(key, {"labels": m})
        dev[m.get("__name__", "")] = row["value"]
        if m.get("pod"):
            dev["labels"] = m
    if not devices:
        try:
            _explain_empty(config, timeout=timeout, since=started)
        except PrometheusError as exc:
            return Unavailable(exc.reason)
    out = []
    for (gpu, uuid), dev in devices.items():
        labels = dev["labels"]
        try:
            index = int(gpu)
        except ValueError:
            index = -1
        out.append(GpuDevice(
            index=index, uuid=uuid, model=labels.get("modelName", ""), utilization=_device_utilization(dev),
            memory_used_mib=dev.get(FB_USED), memory_free_mib=dev.get(FB_FREE), engine_active=dev.get(GR_ENGINE_ACTIVE),
            namespace=labels.get("namespace", ""), pod=labels.get("pod", ""), container=labels.get("container", ""),
        ))
    return sorted(out, key=lambda d: (d.index, d.uuid))


def pod_gpu_metrics(cluster: Any, pods: Iterable[tuple[str, str]], *, timeout: float | None = None
                    ) -> dict[tuple[str, str], PodGpuFigures] | Unavailable:
    """Figures of pods given as ``(namespace, name)``, keyed the same way (a pod holding no exported
    GPU is absent): ONE query."""
    wanted = set(pods)
    if not wanted:
        return {}

    def build(c: PrometheusConfig) -> str:
        sel = dict(namespace=("=~", names_regex({ns for ns, _ in wanted})),
                   pod=("=~", names_regex({name for _, name in wanted})))
        by = "namespace, pod"
        util = utilization_expr(lambda metric, mig: c.selector(metric, **sel, **{MIG_PROFILE: mig}))
        return " or ".join([
            _tag(f"sum by ({by}) ({util})", "gpumetrics_stat", "util_sum"),
            _tag(f"count by ({by}) ({util})", "gpumetrics_stat", "gpus"),
            _tag(f"sum by ({by}) ({c.selector(FB_USED, **sel)})", "gpumetrics_stat", "fb_used"),
        ])

    started = time.monotonic()
    config, rows = _run(cluster, build, timeout=timeout)
    if isinstance(rows, Unavailable):
        return rows
    acc: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for row in rows:
        m = row["metric"]
        key = (m.get("namespace", ""), m.get("pod", ""))
        if key in wanted:
            acc[key][m.get("gpumetrics_stat", "")] = row["value"]
    if not acc:
        # None of these pods holds an exported GPU: say why when the cluster's series explain it.
        try:
            _explain_empty(config, timeout=timeout, since=started)
        except PrometheusError as exc:
            return Unavailable(exc.reason)
        return {}
    return {key: PodGpuFigures(gpus=int(v.get("gpus", 0)),
                               utilization=v["util_sum"] / v["gpus"] if v.get("gpus") else None,
                               memory_used_mib=v.get("fb_used", 0.0))
            for key, v in acc.items()}
