"""How NVIDIA's GPU operator publishes a node's GPUs, for the emulator's nodes (pure functions).

Written from NVIDIA's own documentation:

- GPU feature discovery's labels (NVIDIA/k8s-device-plugin ``docs/gpu-feature-discovery/README.md``,
  "Generated Labels", "MIG 'single' strategy", "MIG 'mixed' strategy"): ``nvidia.com/gpu.product``,
  ``.count``, ``.memory`` (MiB), ``.family``, ``.replicas``; with MIG *single* every GPU is cut alike and
  ``nvidia.com/gpu`` counts the slices, ``nvidia.com/gpu.product`` gets ``-MIG-<profile>``, ``.count`` the
  slices, ``.memory`` one slice's memory, plus ``nvidia.com/gpu.multiprocessors``, ``.slices.gi``,
  ``.slices.ci``, ``.engines.*``; with MIG *mixed* each profile is its own extended resource
  ``nvidia.com/mig-<g>g.<mem>gb`` with labels ``nvidia.com/mig-<profile>.count``, ``.memory``,
  ``.multiprocessors``, ``.slices.gi``, ``.slices.ci``, ``.engines.*``, and ``nvidia.com/gpu`` counts the
  GPUs not cut. The doc's examples give a slice's memory as its name's gigabytes × 1024
  (``1g.5gb`` → 5120, ``mig-1g.10gb`` → 10240): so here too;
- the device plugin's sharing (NVIDIA/k8s-device-plugin ``README.md``, "Shared Access to GPUs", "With CUDA
  Time-Slicing", "With CUDA MPS", "Catalog of Labels"): ``replicas: N`` advertises physical × N
  ``nvidia.com/gpu`` (or, with ``renameByDefault: true``, ``nvidia.com/gpu.shared``), labels
  ``nvidia.com/gpu.replicas=N`` and ``nvidia.com/gpu.sharing-strategy`` (``none``, ``time-slicing``,
  ``mps``), and, not renamed, ``nvidia.com/gpu.product=<product>-SHARED``;
- the MIG manager's layouts (NVIDIA/mig-parted ``deployments/container/nvidia-mig-manager-example.yaml``
  and ``-hopper-blackwell.yaml``, the ``default-mig-parted-config`` the GPU operator ships): a node's
  ``nvidia.com/mig.config`` names one (``all-disabled``, ``all-1g.10gb``, ``all-balanced``, ...), whose
  slices per GPU depend on the GPU model; the manager reports ``nvidia.com/mig.config.state``
  (``pkg/mig/reconfigure/reconfigure.go``: ``pending``, ``rebooting``, ``success``, ``failed``).

A100/H100/H200 GPUs have 7 compute slices (a ``<g>g`` profile takes g of them).
"""
from __future__ import annotations

import re
from collections.abc import Mapping

GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
MEMORY_LABEL = "nvidia.com/gpu.memory"
FAMILY_LABEL = "nvidia.com/gpu.family"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
PRESENT_LABEL = "nvidia.com/gpu.present"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MPS_CAPABLE_LABEL = "nvidia.com/mps.capable"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_STATES = ("pending", "rebooting", "success", "failed")
SHARED_SUFFIX = "-SHARED"
SHARING_STRATEGIES = ("none", "time-slicing", "mps")
MIG_STRATEGIES = ("none", "single", "mixed")
COMPUTE_SLICES = 7
#: Streaming multiprocessors of one compute slice (A100: 14; H100/H200: 16, 132 for the whole GPU).
_SMS_PER_SLICE = {"ampere": 14, "hopper": 16, "blackwell": 18}
_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb$")

# Per GPU memory class (GFD's product names), the MIG manager's layouts: name -> {profile: per GPU}.
_A100_80 = {
    "all-1g.10gb": {"1g.10gb": 7}, "all-1g.20gb": {"1g.20gb": 4}, "all-2g.20gb": {"2g.20gb": 3},
    "all-3g.40gb": {"3g.40gb": 2}, "all-4g.40gb": {"4g.40gb": 1}, "all-7g.80gb": {"7g.80gb": 1},
    "all-balanced": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
}
_A100_40 = {
    "all-1g.5gb": {"1g.5gb": 7}, "all-1g.10gb": {"1g.10gb": 4}, "all-2g.10gb": {"2g.10gb": 3},
    "all-3g.20gb": {"3g.20gb": 2}, "all-4g.20gb": {"4g.20gb": 1}, "all-7g.40gb": {"7g.40gb": 1},
    "all-balanced": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
}
_H200 = {
    "all-1g.18gb": {"1g.18gb": 7}, "all-1g.35gb": {"1g.35gb": 4}, "all-2g.35gb": {"2g.35gb": 3},
    "all-3g.71gb": {"3g.71gb": 2}, "all-4g.71gb": {"4g.71gb": 1}, "all-7g.141gb": {"7g.141gb": 1},
    "all-balanced": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
}
_LAYOUTS: tuple[tuple[str, dict[str, dict[str, int]]], ...] = (
    ("A100-SXM4-80GB", _A100_80), ("A100-PCIE-80GB", _A100_80), ("A100-80GB", _A100_80),
    ("H100-80GB", _A100_80), ("H100-SXM", _A100_80), ("A100-SXM4-40GB", _A100_40), ("A100-PCIE-40GB", _A100_40),
    ("H200", _H200),
)
DISABLED = "all-disabled"


def parse_profile(profile: str) -> tuple[int, int] | None:
    """``3g.40gb`` -> (3 compute slices, 40 GB); None when it is no MIG profile name."""
    found = _PROFILE.match(profile or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def mig_resource(profile: str) -> str:
    """The extended resource of a profile in the mixed strategy: ``nvidia.com/mig-3g.40gb``."""
    return MIG_RESOURCE_PREFIX + profile


def profile_memory_mib(profile: str) -> int:
    parsed = parse_profile(profile)
    return parsed[1] * 1024 if parsed else 0


def layouts_for(product: str) -> dict[str, dict[str, int]]:
    """The MIG layouts the MIG manager's default configuration has for this GPU (none: not MIG-capable)."""
    upper = (product or "").upper()
    for hint, layouts in _LAYOUTS:
        if hint.upper() in upper:
            return {DISABLED: {}, **layouts}
    return {}


def layout(product: str, name: str) -> dict[str, int] | None:
    """Slices per GPU of layout ``name`` on this GPU ({} for ``all-disabled``); None: unknown layout."""
    return layouts_for(product).get(name)


def _profile_labels(prefix: str, profile: str, count: int, family: str) -> dict[str, str]:
    g, _ = parse_profile(profile) or (1, 0)
    return {
        f"{prefix}.count": str(count),
        f"{prefix}.memory": str(profile_memory_mib(profile)),
        f"{prefix}.multiprocessors": str(g * _SMS_PER_SLICE.get(family, 14)),
        f"{prefix}.slices.gi": str(g),
        f"{prefix}.slices.ci": str(g),
        f"{prefix}.engines.copy": str(g),
    }


def exposure(*, gpus: int, product: str, memory_mib: int, family: str, mig_config: str | None = None,
             mig_strategy: str | None = None, replicas: int = 1, sharing_strategy: str | None = None,
             rename_shared: bool = False) -> tuple[dict[str, str], dict[str, str]]:
    """The GPU labels and extended resources (capacity = allocatable) the device plugin and GPU feature
    discovery publish for ``gpus`` physical GPUs of ``product``.

    ``mig_config``: a MIG manager layout (``all-1g.10gb``, ``all-balanced``...) applied with ``mig_strategy``
    (default ``mixed``; ``single`` needs a layout of one profile); ``replicas`` > 1: time-slicing (or
    ``sharing_strategy="mps"``), renamed to ``nvidia.com/gpu.shared`` with ``rename_shared``. Raises
    ValueError for a layout the GPU does not have or a single strategy over several profiles."""
    labels: dict[str, str] = {PRESENT_LABEL: "true", PRODUCT_LABEL: product, COUNT_LABEL: str(gpus),
                              FAMILY_LABEL: family, REPLICAS_LABEL: "1"}
    if memory_mib:
        labels[MEMORY_LABEL] = str(memory_mib)
    resources: dict[str, str] = {GPU: str(gpus)}
    capable = bool(layouts_for(product))
    labels[MIG_CAPABLE_LABEL] = "true" if capable else "false"
    if mig_config is not None:
        slices = layout(product, mig_config)
        if slices is None:
            raise ValueError(f"{MIG_CONFIG_LABEL}: {product} has no MIG layout {mig_config!r}")
        labels[MIG_CONFIG_LABEL] = mig_config
        labels[MIG_CONFIG_STATE_LABEL] = "success"
        strategy = mig_strategy or "mixed"
        if strategy not in ("single", "mixed"):
            raise ValueError(f"{MIG_STRATEGY_LABEL}: {strategy!r} is not single or mixed")
        labels[MIG_STRATEGY_LABEL] = strategy
        if not slices:
            return labels, resources
        if strategy == "single":
            if len(slices) != 1:
                raise ValueError(f"{MIG_STRATEGY_LABEL}: single needs every GPU cut alike; {mig_config} has "
                                 f"{len(slices)} profiles")
            (profile, per_gpu), = slices.items()
            count = per_gpu * gpus
            labels.update({PRODUCT_LABEL: f"{product}-MIG-{profile}", COUNT_LABEL: str(count),
                           MEMORY_LABEL: str(profile_memory_mib(profile))})
            labels.update({k: v for k, v in _profile_labels("nvidia.com/gpu", profile, count, family).items()
                           if k not in (COUNT_LABEL, MEMORY_LABEL)})
            resources[GPU] = str(count)
            return labels, resources
        resources[GPU] = "0"
        for profile, per_gpu in sorted(slices.items()):
            resources[mig_resource(profile)] = str(per_gpu * gpus)
            labels.update(_profile_labels(f"nvidia.com/mig-{profile}", profile, per_gpu * gpus, family))
        return labels, resources
    if mig_strategy:
        labels[MIG_STRATEGY_LABEL] = mig_strategy
    strategy = sharing_strategy or ("time-slicing" if replicas > 1 else "none")
    if strategy not in SHARING_STRATEGIES:
        raise ValueError(f"{SHARING_STRATEGY_LABEL}: {strategy!r} is none, time-slicing or mps")
    labels[SHARING_STRATEGY_LABEL] = strategy
    if strategy == "mps":
        labels[MPS_CAPABLE_LABEL] = "true"
    if replicas > 1:
        labels[REPLICAS_LABEL] = str(replicas)
        if rename_shared:
            resources = {GPU_SHARED: str(gpus * replicas)}
        else:
            resources[GPU] = str(gpus * replicas)
            labels[PRODUCT_LABEL] = product + SHARED_SUFFIX
    return labels, resources


def is_exposure_label(key: str) -> bool:
    """Whether GPU feature discovery / the device plugin write this label (what a new layout replaces)."""
    return key.startswith(("nvidia.com/gpu.", "nvidia.com/mig-", "nvidia.com/mig.strategy",
                           "nvidia.com/mig.capable", "nvidia.com/mps.capable"))


def is_exposure_resource(name: str) -> bool:
    return name in (GPU, GPU_SHARED) or name.startswith(MIG_RESOURCE_PREFIX)


#: The emulator's own note of the hardware (a real node's is the hardware itself): ``<gpus>/<product>/
#: <memory MiB>/<family>``, so that the MIG manager can publish a new layout from it.
HARDWARE_ANNOTATION = "emulator.gpu-capacity.io/gpu-hardware"


#: What the emulator notes of the geometry the MIG manager applied last (a real node's is in its GPUs).
APPLIED_ANNOTATION = "emulator.gpu-capacity.io/mig-config-applied"


def hardware_note(gpus: int, product: str, memory_mib: int, family: str) -> str:
    return f"{gpus}/{product}/{memory_mib}/{family}"


def parse_hardware(note: str) -> tuple[int, str, int, str] | None:
    parts = (note or "").split("/")
    if len(parts) != 4:
        return None
    try:
        return int(parts[0]), parts[1], int(parts[2]), parts[3]
    except ValueError:
        return None
