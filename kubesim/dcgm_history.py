"""A past of DCGM-exporter samples for a real Prometheus: OpenMetrics text with values that change over
time, turned into TSDB blocks by `promtool tsdb create-blocks-from openmetrics` (then start
`gpumetrics.localprom.LocalPrometheus(tsdb_dir=...)` on them).

Used by bench/pages.py (an hour of samples of 40,000 GPUs) and by the tests of idle GPUs (a scripted
window: a GPU idle, one busy, one that became idle recently). The label set is the DCGM exporter's
(`gpu`, `UUID`, `device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`, and `container` /
`namespace` / `pod` for a GPU a pod holds), plus the `instance` / `job` Prometheus adds when scraping.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterable

PROMTOOL = os.environ.get("PROMTOOL_BIN", shutil.which("promtool") or "/usr/bin/promtool")
HELP = {
    "DCGM_FI_DEV_GPU_UTIL": ("GPU utilization (in %).", "gauge"),
    "DCGM_FI_DEV_FB_USED": ("Framebuffer memory used (in MiB).", "gauge"),
    "DCGM_FI_DEV_FB_FREE": ("Framebuffer memory free (in MiB).", "gauge"),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("Ratio of time the graphics engine is active.", "gauge"),
}


@dataclasses.dataclass
class Gpu:
    """One GPU device of a node, and the pod holding it (if any); `util(t)` its utilization at time t."""

    hostname: str
    index: int
    model: str
    memory_mib: int
    util: Callable[[float], float]
    namespace: str = ""
    pod: str = ""
    container: str = "main"
    extra: str = ""  # more labels, e.g. `cluster="prod"` (a Prometheus holding several clusters)
    mig_profile: str = ""  # a MIG instance of the GPU (GPU_I_PROFILE, GPU_I_ID): no DCGM_FI_DEV_GPU_UTIL, as
    gpu_instance: int = 0  # NVIDIA's exporter (its utilization is DCGM_FI_PROF_GR_ENGINE_ACTIVE, kubesim.dcgm)

    @property
    def uuid(self) -> str:
        digest = hashlib.sha1(f"{self.hostname}/{self.index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    def labels(self) -> str:
        parts = [f'gpu="{self.index}"', f'UUID="{self.uuid}"', f'device="nvidia{self.index}"',
                 f'modelName="{self.model}"']
        if self.mig_profile:
            parts += [f'GPU_I_PROFILE="{self.mig_profile}"', f'GPU_I_ID="{self.gpu_instance}"']
        parts += [f'Hostname="{self.hostname}"', 'DCGM_FI_DRIVER_VERSION="550.54.15"']
        if self.pod:
            parts += [f'container="{self.container}"', f'namespace="{self.namespace}"', f'pod="{self.pod}"']
        parts += [f'instance="{self.hostname}:9400"', 'job="dcgm-exporter"']
        if self.extra:
            parts.append(self.extra)
        return ",".join(parts)


def write_openmetrics(path: Path, gpus: Iterable[Gpu], *, start: float, end: float, interval: float,
                      metrics: Iterable[str] = ("DCGM_FI_DEV_GPU_UTIL",)) -> int:
    """Every sample of every GPU from `start` to `end` (epoch seconds) every `interval`; returns the count.
    Memory used follows utilization (a busy GPU holds most of its memory)."""
    gpus = list(gpus)
    count = 0
    steps = int((end - start) // interval) + 1
    with open(path, "w", buffering=1 << 20) as out:
        for metric in metrics:
            help_text, kind = HELP[metric]
            out.write(f"# HELP {metric} {help_text}\n# TYPE {metric} {kind}\n")
            for gpu in gpus:
                if metric == "DCGM_FI_DEV_GPU_UTIL" and gpu.mig_profile:
                    continue
                labels = gpu.labels()
                lines = []
                for step in range(steps):
                    t = start + step * interval
                    util = gpu.util(t)
                    if metric == "DCGM_FI_DEV_GPU_UTIL":
                        value = int(round(util))
                    elif metric == "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
                        value = round(util / 100, 6)
                    else:
                        used = int(gpu.memory_mib * (0.1 + 0.8 * util / 100)) if gpu.pod else 0
                        value = used if metric == "DCGM_FI_DEV_FB_USED" else gpu.memory_mib - used
                    lines.append(f"{metric}{{{labels}}} {value} {t:.3f}\n")
                out.write("".join(lines))
                count += steps
        out.write("# EOF\n")
    return count


def create_blocks(openmetrics: Path, data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data_dir)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
