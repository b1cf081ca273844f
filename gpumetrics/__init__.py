"""GPU utilization and memory from the NVIDIA DCGM exporter, read through a cluster's Prometheus.

A low floor: imports only the standard library, ``requests`` and (for settings) Django; ``nodepools``,
``projects`` and ``usage`` import it. The console never scrapes nodes itself.

Configuration — a cluster names its Prometheus (``nodepools.Cluster.prometheus_url``,
``prometheus_bearer_token_file``, ``prometheus_basic_auth_file``, ``prometheus_label_matchers``).
Every function takes that cluster (any object with those attributes) or a :class:`PrometheusConfig`.
Settings: ``GPUMETRICS_TIMEOUT`` (s, default 0.5: a page's budget), ``GPUMETRICS_IDLE_TIMEOUT`` (s, default
5: the Idle GPUs page's budget, shared by its queries of every cluster), ``GPUMETRICS_CACHE_SECONDS``
(default 5: answers and failures are reused that long per Prometheus + query),
``GPUMETRICS_IDLE_THRESHOLD`` (%, default 5), ``GPU_IDLE_WINDOW_MINUTES`` (default 30): an allocated GPU is
idle when its utilization stayed under the threshold for the whole window (``idle_expr``; the Idle GPUs
page, the usage snapshots and the pools' "Idle allocated GPUs" share this one definition).

Figures (each makes ONE query whatever the number of rows — a second only when the answer holds no
series, to say why — and returns :class:`Unavailable` — falsy,
with ``.reason`` for the cell's title — when there are none: "no Prometheus configured for this
cluster", "Prometheus unreachable: connection refused", "Prometheus timed out after 0.5 s",
"no DCGM series for this cluster", "series lack the Hostname label", ...):

- ``node_gpu_metrics(cluster, node_names | None) -> NodeGpuMetrics | Unavailable``:
  ``.get(name) -> GpuFigures | None`` (None: no series of that node; ``.missing_reason``).
- ``group_gpu_metrics(cluster, {key: [node names]}) -> GroupGpuMetrics | Unavailable``:
  ``.get(key) -> GpuFigures`` summed over the group's nodes; ``figures_sum([GpuFigures])`` sums
  figures already read (the pools' figures: every node of a cluster read at once, by the sync's leader).
- ``GpuFigures``: ``gpus``, ``utilization`` (% over all devices, or None), ``memory_used_mib``,
  ``memory_total_mib`` (used + free), ``allocated`` (devices a pod holds), ``allocated_utilization``
  (%, or None), ``idle_allocated`` (allocated devices idle over the window: ``max_over_time`` under the threshold), ``engine_active``
  (0..1 or None).
- ``device_metrics(cluster, node_name) -> list[GpuDevice] | Unavailable``: per GPU ``index``, ``uuid``,
  ``model``, ``utilization``, ``memory_used_mib``, ``memory_free_mib``, ``memory_total_mib``,
  ``engine_active``, ``namespace``, ``pod``, ``container`` (empty when no pod holds it).
- ``pod_gpu_metrics(cluster, [(namespace, pod), ...]) -> {(namespace, pod): PodGpuFigures} | Unavailable``:
  ``gpus``, ``utilization`` (% averaged over its GPUs), ``memory_used_mib``; a pod without exported
  GPUs is absent.

Utilization (%) is read from ``utilization_expr(select, over)``, the one PromQL of it: a whole GPU's
``DCGM_FI_DEV_GPU_UTIL``, a MIG instance's (series with ``GPU_I_PROFILE``) ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` × 100
(NVIDIA's exporter does not measure GPU_UTIL for MIG instances); ``idle_expr`` is built on it.

Lower level, for charts and windows (dcgmb's idle detection):

- ``query(config, promql, timeout=None) -> [{"metric": {...}, "value": float}]`` (``/api/v1/query``),
- ``query_range(config, promql, start=, end=, step=, timeout=None) -> [{"metric", "values": [(t, v)]}]``
  (``/api/v1/query_range``); both raise ``PrometheusError`` (``.reason``),
- ``config_from(cluster) -> PrometheusConfig | None``; ``PrometheusConfig.selector(metric, **labels)``
  builds ``metric{extra matchers, label="v", other=~"re"}`` (values ``"v"`` or ``("=~", "re")``);
  ``names_regex(names)`` an exact alternation; ``parse_matchers(text)`` validates extra matchers;
- ``stats.requests``: HTTP requests sent (tests count queries); ``cache_clear()``;
- ``Budget(seconds)``: a page's time budget shared by its queries (``left()``, ``spent()``; a query
  that spent it is ``note``d so the skipped ones show its reason, else ``NO_BUDGET``).

``gpumetrics.localprom``: ``LocalPrometheus`` (a real Prometheus for tests and ``make run``),
``backfill_openmetrics`` (promtool backfill of samples, for the benchmark).
"""
from gpumetrics.client import (
    NO_BUDGET, NOT_CONFIGURED, Budget, PrometheusConfig, PrometheusError, Unavailable, cache_clear, config_from, names_regex,
    parse_matchers, query, query_range, stats,
)
from gpumetrics.metrics import (
    FB_FREE, FB_USED, GPU_UTIL, GR_ENGINE_ACTIVE, MIG_INSTANCE, MIG_PROFILE, NO_HOSTNAME, NO_SERIES, GpuDevice,
    GpuFigures, GroupGpuMetrics, NodeGpuMetrics, PodGpuFigures, device_metrics, figures_sum, group_gpu_metrics, idle_expr,
    idle_threshold, idle_window_seconds, node_gpu_metrics, pod_gpu_metrics, utilization_expr,
)

__all__ = [
    "FB_FREE", "FB_USED", "GPU_UTIL", "GR_ENGINE_ACTIVE", "MIG_INSTANCE", "MIG_PROFILE", "NO_BUDGET", "NOT_CONFIGURED", "Budget", "NO_HOSTNAME", "NO_SERIES",
    "GpuDevice", "GpuFigures", "GroupGpuMetrics", "NodeGpuMetrics", "PodGpuFigures", "PrometheusConfig",
    "PrometheusError", "Unavailable", "cache_clear", "config_from", "device_metrics", "figures_sum", "group_gpu_metrics",
    "idle_expr", "idle_threshold", "idle_window_seconds", "names_regex", "node_gpu_metrics", "parse_matchers", "pod_gpu_metrics", "query",
    "query_range", "stats", "utilization_expr",
]
