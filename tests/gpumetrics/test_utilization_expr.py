"""THE PromQL of GPU utilization (gpumetrics.utilization_expr), which every surface builds its query from: a
whole GPU's DCGM_FI_DEV_GPU_UTIL, a MIG instance's DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100 (NVIDIA's exporter does
not measure GPU_UTIL for instances), each selector under its own range function, united by `or`."""
from __future__ import annotations

import gpumetrics
from gpumetrics import PrometheusConfig


def test_whole_gpus_read_gpu_util_and_mig_instances_their_engine_activity_in_one_query():
    config = PrometheusConfig(url="http://prometheus.example:9090", matchers=(("cluster", "=", "lab"),))

    def select(metric, mig):
        return config.selector(metric, pod=("!=", ""), GPU_I_PROFILE=mig)

    assert gpumetrics.utilization_expr(select) == (
        '(DCGM_FI_DEV_GPU_UTIL{cluster="lab",pod!="",GPU_I_PROFILE=""} or '
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{cluster="lab",pod!="",GPU_I_PROFILE!=""} * 100)')
    assert gpumetrics.utilization_expr(select, lambda sel: f"avg_over_time({sel}[300s])") == (
        '(avg_over_time(DCGM_FI_DEV_GPU_UTIL{cluster="lab",pod!="",GPU_I_PROFILE=""}[300s]) or '
        'avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{cluster="lab",pod!="",GPU_I_PROFILE!=""}[300s]) * 100)')
    # Idle: the highest utilization over the window under the threshold, having reported a window ago.
    assert gpumetrics.idle_expr(select, threshold=5, window_seconds=1800) == (
        '((max_over_time(DCGM_FI_DEV_GPU_UTIL{cluster="lab",pod!="",GPU_I_PROFILE=""}[1800s]) or '
        'max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{cluster="lab",pod!="",GPU_I_PROFILE!=""}[1800s]) * 100) < 5) '
        'and (DCGM_FI_DEV_GPU_UTIL{cluster="lab",pod!="",GPU_I_PROFILE=""} offset 1800s or '
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{cluster="lab",pod!="",GPU_I_PROFILE!=""} offset 1800s * 100)')
