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

A100/H100/H200 GPUs have 7 compute slices (a ``<g>g`` profile takes g of them). The names and their
reading come from :mod:`kube.gpu`; the layouts and the publishing are the emulator's hardware.
"""
from __future__ import annotations

from kube import gpu as kgpu

# The names are the console's and the emulator's one vocabulary (kube.gpu, taken from the same docs).
GPU = kgpu.GPU_RESOURCE
GPU_SHARED = kgpu.GPU_SHARED_RESOURCE
MIG_RESOURCE_PREFIX = kgpu.MIG_RESOURCE_PREFIX
PRODUCT_LABEL = kgpu.LABEL_GPU_PRODUCT
COUNT_LABEL = kgpu.LABEL_GPU_COUNT
MEMORY_LABEL = kgpu.LABEL_GPU_MEMORY
FAMILY_LABEL = kgpu.LABEL_GPU_FAMILY
REPLICAS_LABEL = kgpu.LABEL_GPU_REPLICAS
SHARING_STRATEGY_LABEL = kgpu.LABEL_SHARING_STRATEGY
PRESENT_LABEL = kgpu.LABEL_GPU_PRESENT
MIG_STRATEGY_LABEL = kgpu.LABEL_MIG_STRATEGY
MIG_CAPABLE_LABEL = kgpu.LABEL_MIG_CAPABLE
MPS_CAPABLE_LABEL = kgpu.LABEL_MPS_CAPABLE
MIG_CONFIG_LABEL = kgpu.LABEL_MIG_CONFIG
MIG_CONFIG_STATE_LABEL = kgpu.LABEL_MIG_CONFIG_STATE
MIG_STATES = kgpu.MIG_CONFIG_STATES
SHARED_SUFFIX = kgpu.SHARED_SUFFIX
SHARING_STRATEGIES = (kgpu.SHARING_NONE, kgpu.SHARING_TIME_SLICING, kgpu.SHARING_MPS)
MIG_STRATEGIES = (kgpu.MIG_STRATEGY_NONE, kgpu.MIG_STRATEGY_SINGLE, kgpu.MIG_STRATEGY_MIXED)
#: Streaming multiprocessors of one compute slice (A100: 14; H100/H200: 16, 132 for the whole GPU).
_SMS_PER_SLICE = {"ampere": 14, "hopper": 16, "blackwell": 18}

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
    """``3g.40gb`` -> (3 GPU-instance slices, 40 GB) (kube.gpu.parse_mig_profile); None when it is none."""
    parsed = kgpu.parse_mig_profile(profile)
    return (parsed.gpu_slices, parsed.memory_gb) if parsed else None


mig_resource = kgpu.mig_resource  # ``3g.40gb`` -> ``nvidia.com/mig-3g.40gb``


def profile_memory_mib(profile: str) -> int:
    parsed = parse_profile(profile)
    return parsed[1] * kgpu.MIB_PER_GB if parsed else 0


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
            labels.update({k: v for k, v in _profile_labels(kgpu.GPU_RESOURCE, profile, count, family).items()
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


is_exposure_resource = kgpu.is_gpu_resource  # nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-<profile>


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
