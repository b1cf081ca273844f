"""The one GPU arithmetic: a node's GPU inventory and a pod's GPU demand, in GPU-equivalents.

Standard library only (and `kube.quantity`, `kube.requests`); the console's apps and the emulator both use it.

Names come from NVIDIA's and KAI's own documents:

- GPU feature discovery labels — NVIDIA/k8s-device-plugin `docs/gpu-feature-discovery/README.md`
  ("Generated Labels", "MIG 'single' strategy", "MIG 'mixed' strategy"): `nvidia.com/gpu.product`,
  `nvidia.com/gpu.count`, `nvidia.com/gpu.memory` (MiB per GPU), `nvidia.com/gpu.family`,
  `nvidia.com/gpu.replicas`, `nvidia.com/mig.strategy`; with the single strategy `gpu.product` ends in
  `-MIG-<profile>` and `gpu.count` / `gpu.memory` are overridden to count MIG devices and their memory; with
  the mixed strategy each profile has `nvidia.com/mig-<profile>.count` and `.memory` labels.
- The device plugin's README ("Shared Access to GPUs": time-slicing and MPS, "Catalog of Labels"):
  `sharing.timeSlicing/mps.resources[].replicas` multiply the advertised `nvidia.com/gpu`;
  `renameByDefault=true` advertises `nvidia.com/gpu.shared` instead; `nvidia.com/gpu.sharing-strategy`
  (`none`, `time-slicing`, `mps`); the product label gains `-SHARED` when the resource is not renamed.
- NVIDIA's MIG manager (NVIDIA/mig-parted `deployments/systemd/config-default.yaml`, the GPU Operator's
  "GPU Operator with MIG" page): the layout label `nvidia.com/mig.config` (`all-1g.10gb`, `all-balanced`, …)
  and `nvidia.com/mig.config.state` (`pending`, `rebooting`, `success`, `failed`); MIG resources are
  `nvidia.com/mig-<g>g.<mem>gb`, e.g. `all-balanced` on an A100 80GB is 2 × `1g.10gb`, 1 × `2g.20gb`,
  1 × `3g.40gb` per GPU.
- KAI Scheduler `docs/gpu-sharing/README.md` and `pkg/common/constants/constants.go`: the pod annotations
  `gpu-fraction` (a share of one device, e.g. `"0.5"`), `gpu-fraction-num-devices` (that share on each of
  N devices), `gpu-memory` (MiB of one device); KAI reserves the shared GPU with a reservation pod in the
  namespace `kai-resource-reservation` and groups the sharers with the label `runai-gpu-group`
  (Run:ai's "GPU fractions" pages use the same annotations). `docs/gpu-sharing/autoscaling/README.md`:
  with no node known, a `gpu-memory` request counts as 0.1 GPU (`--gpu-memory-to-fraction-ratio`).

**The GPU-equivalent** is the unit of capacity, allocation, quota, fair share and GPU-hours:

- a whole GPU is 1;
- a MIG slice is its compute slices over the GPU's: A100, A800, H100, H800, H200, GH200, B200, B300 and
  GB200 have 7, so `1g.10gb` = 1/7 and `3g.40gb` = 3/7 of an A100 80GB; A30 and RTX PRO 6000 have 4
  (`1g.6gb` = 1/4 of an A30). A profile `<c>c.<g>g.<mem>gb` (compute instances inside a GPU instance) counts
  its `c` compute slices;
- a time-slicing or MPS replica is 1/replicas of its GPU;
- a KAI `gpu-fraction` is its value (times `gpu-fraction-num-devices`);
- a KAI `gpu-memory` is its share of the GPU's memory (capped at 1);
- a KAI reservation pod is nobody's allocation: its GPU is shared, the fractions on it are their owners'.

Arithmetic is exact (`fractions.Fraction`); `to_decimal()` gives the stored figure, rounded half-even to
`PLACES` (3) decimal places, the precision of every GPU figure the console stores. Seven `1g.10gb` slices
are exactly 1 here; stored one by one they are 7 × 0.143 = 1.001, within 0.0005 per slice.

Physical GPUs and their memory count once: a time-sliced node of 8 GPUs × 4 replicas is 8 GPUs, not 32;
a MIG node of 8 A100 80GB is 8 GPUs of 81920 MiB whatever its layout.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from math import ceil, floor
from typing import Any

from kube.quantity import QuantityError, parse_quantity
from kube.requests import GPU, pod_requests

__all__ = [
    "ANNOTATION_GPU_FRACTION", "ANNOTATION_GPU_FRACTION_NUM_DEVICES", "ANNOTATION_GPU_MEMORY",
    "GPU_RESOURCE", "GPU_SHARED_RESOURCE", "GpuDemand", "LABEL_GPU_COUNT", "LABEL_GPU_FAMILY",
    "LABEL_GPU_MEMORY", "LABEL_GPU_PRESENT", "LABEL_GPU_PRODUCT", "LABEL_GPU_REPLICAS", "LABEL_MIG_CONFIG",
    "LABEL_MIG_CONFIG_STATE", "LABEL_MIG_STRATEGY", "LABEL_SHARING_STRATEGY", "MigProfile", "MigSlices",
    "NodeGpus", "PLACES", "RESERVATION_NAMESPACE", "GPU_GROUP_LABEL", "compute_slices", "is_gpu_resource",
    "is_reservation_pod", "gpu_devices", "mig_profile_share", "mig_resource", "node_gpus", "node_gpus_of", "parse_mig_profile",
    "PoolGpus", "kai_gpus", "pool_gpus", "pod_gpu_demand", "pod_gpu_request", "demand_on", "sharing_record", "node_from_record",
    "request_record", "request_from_record", "to_decimal", "BillingUnit", "billing_unit", "unit_share",
    "unit_label", "UNIT_WHOLE", "UNIT_FRACTION", "FRACTIONAL_KINDS", "LABEL_DEVICE_PLUGIN_CONFIG", "LABEL_MIG_CAPABLE",
    "MIG_CONFIG_DISABLED", "MIG_CONFIG_BALANCED", "mig_layouts", "mig_config_errors",
]

PLACES = 3
_QUANTUM = Decimal(1).scaleb(-PLACES)

# --- NVIDIA device plugin: extended resources ------------------------------------------------------
GPU_RESOURCE = GPU  # nvidia.com/gpu, named once in kube.requests
GPU_SHARED_RESOURCE = "nvidia.com/gpu.shared"  # renameByDefault=true (time-slicing or MPS)
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

# --- GPU feature discovery and the device plugin: node labels --------------------------------------
LABEL_GPU_PRESENT = "nvidia.com/gpu.present"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
LABEL_GPU_FAMILY = "nvidia.com/gpu.family"
LABEL_GPU_REPLICAS = "nvidia.com/gpu.replicas"
LABEL_SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"
LABEL_MIG_CAPABLE = "nvidia.com/mig.capable"
LABEL_MPS_CAPABLE = "nvidia.com/mps.capable"
LABEL_DEVICE_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
LABEL_DEPLOY_TOOLKIT = "nvidia.com/gpu.deploy.container-toolkit"
LABEL_DEPLOY_DCGM_EXPORTER = "nvidia.com/gpu.deploy.dcgm-exporter"
# NVIDIA MIG manager (GPU Operator): the layout asked for and how applying it goes.
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
MIG_CONFIG_STATES = ("pending", "rebooting", "success", "failed")

MIG_STRATEGY_NONE, MIG_STRATEGY_SINGLE, MIG_STRATEGY_MIXED = "none", "single", "mixed"
SHARING_NONE, SHARING_TIME_SLICING, SHARING_MPS = "none", "time-slicing", "mps"
SHARED_SUFFIX = "-SHARED"
MIG_PRODUCT_MARK = "-MIG-"

# --- KAI Scheduler GPU sharing (Run:ai fractions) --------------------------------------------------
ANNOTATION_GPU_FRACTION = "gpu-fraction"
ANNOTATION_GPU_FRACTION_NUM_DEVICES = "gpu-fraction-num-devices"
ANNOTATION_GPU_FRACTION_CONTAINER = "gpu-fraction-container-name"
ANNOTATION_GPU_MEMORY = "gpu-memory"  # MiB
RESERVATION_NAMESPACE = "kai-resource-reservation"
GPU_GROUP_LABEL = "runai-gpu-group"
# KAI's node-scale-adjuster counts a gpu-memory pod as this share when the node is not known.
GPU_MEMORY_DEFAULT_SHARE = Fraction(1, 10)

# Exposures: how a node publishes its GPUs.
NONE, WHOLE, MIG_SINGLE, MIG_MIXED, TIME_SLICING, MPS = (
    "none", "whole", "mig-single", "mig-mixed", "time-slicing", "mps",
)
EXPOSURES = (NONE, WHOLE, MIG_SINGLE, MIG_MIXED, TIME_SLICING, MPS)

# Compute slices per GPU (NVIDIA MIG user guide, "Supported MIG Profiles"): 7 unless listed here.
_FOUR_SLICE_MODELS = ("A30", "RTX-PRO-6000", "RTX PRO 6000")
DEFAULT_COMPUTE_SLICES = 7
# Memory slices per GPU: 8 on the 7-slice GPUs, 4 on the 4-slice ones.
_MEMORY_SLICES = {7: 8, 4: 4}

_PROFILE_RE = re.compile(r"^(?:(?P<c>[1-9][0-9]?)c\.)?(?P<g>[1-9][0-9]?)g\.(?P<mem>[0-9]+)gb(?P<extra>[.+-][a-z.+-]*)?$")
_GB_RE = re.compile(r"(?<![0-9])([0-9]+)\s*GB", re.IGNORECASE)
MIB_PER_GB = 1024


def to_decimal(value: Fraction | Decimal | int) -> Decimal:
    """A GPU figure as the console stores it: rounded half-even to PLACES decimal places."""
    if isinstance(value, Fraction):
        return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(_QUANTUM, ROUND_HALF_EVEN)
    return Decimal(value).quantize(_QUANTUM, ROUND_HALF_EVEN)


def fraction_of(value: Any) -> Fraction:
    """A stored share (`"1/7"`, `"0.5"`, a number) as a Fraction; 0 when it is none."""
    try:
        return value if isinstance(value, Fraction) else Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        return Fraction(0)


# ---------------------------------------------------------------------------------------------------
# MIG profiles

@dataclass(frozen=True)
class MigProfile:
    """A MIG profile name read: `3g.40gb` is 3 GPU-instance slices and 40 GB; `1c.3g.40gb` 1 compute slice
    of a `3g.40gb` instance; `1g.10gb+me` (media extensions) keeps `extra`."""

    name: str
    gpu_slices: int
    memory_gb: int
    compute_slices: int  # the c of `<c>c.` or the g
    extra: str = ""

    @property
    def resource(self) -> str:
        return mig_resource(self.name)


def parse_mig_profile(name: str) -> MigProfile | None:
    """`3g.40gb`, `mig-3g.40gb` or `nvidia.com/mig-3g.40gb` read; None when it is not a MIG profile."""
    text = str(name or "")
    if text.startswith(MIG_RESOURCE_PREFIX):
        text = text[len(MIG_RESOURCE_PREFIX):]
    elif text.startswith("mig-"):
        text = text[4:]
    match = _PROFILE_RE.match(text)
    if match is None:
        return None
    g = int(match["g"])
    c = int(match["c"]) if match["c"] else g
    return MigProfile(name=text, gpu_slices=g, memory_gb=int(match["mem"]), compute_slices=c,
                      extra=match["extra"] or "")


def mig_resource(profile: str) -> str:
    """The extended resource of a profile with the mixed strategy: `3g.40gb` → `nvidia.com/mig-3g.40gb`
    (`+` of a `+me` profile becomes `.`, as the device plugin names it)."""
    text = str(profile)
    if text.startswith(MIG_RESOURCE_PREFIX):
        return text
    if text.startswith("mig-"):
        text = text[4:]
    return MIG_RESOURCE_PREFIX + text.replace("+", ".")


def is_mig_resource(name: str) -> bool:
    return str(name).startswith(MIG_RESOURCE_PREFIX) and parse_mig_profile(name) is not None


def is_gpu_resource(name: str) -> bool:
    """`nvidia.com/gpu`, `nvidia.com/gpu.shared` or a MIG profile's resource."""
    return name in (GPU_RESOURCE, GPU_SHARED_RESOURCE) or is_mig_resource(name)


def base_product(product: str) -> str:
    """The GPU model without what sharing adds: `A100-SXM4-40GB-MIG-1g.5gb-SHARED` → `A100-SXM4-40GB`."""
    text = str(product or "")
    if text.endswith(SHARED_SUFFIX):
        text = text[: -len(SHARED_SUFFIX)]
    mark = text.find(MIG_PRODUCT_MARK)
    return text[:mark] if mark >= 0 else text


def product_mig_profile(product: str) -> str:
    """The profile a single-strategy product label names (`…-MIG-1g.5gb` → `1g.5gb`), or ""."""
    text = str(product or "")
    if text.endswith(SHARED_SUFFIX):
        text = text[: -len(SHARED_SUFFIX)]
    mark = text.find(MIG_PRODUCT_MARK)
    return text[mark + len(MIG_PRODUCT_MARK):] if mark >= 0 else ""


def compute_slices(product: str) -> int:
    """Compute slices of one GPU of `product`: 4 for A30 and RTX PRO 6000, 7 for the others (A100, H100,
    H200, B200, …)."""
    model = base_product(product).upper()
    return 4 if any(mark.upper() in model for mark in _FOUR_SLICE_MODELS) else DEFAULT_COMPUTE_SLICES


def mig_profile_share(profile: str | MigProfile, product: str = "") -> Fraction:
    """A slice of `profile` in GPU-equivalents on a GPU of `product`: its compute slices over the GPU's
    (`1g.10gb` on an A100 = 1/7, `3g.40gb` = 3/7, `1g.6gb` on an A30 = 1/4). Raises ValueError for a name
    that is not a profile."""
    parsed = profile if isinstance(profile, MigProfile) else parse_mig_profile(profile)
    if parsed is None:
        raise ValueError(f"{profile!r} is not a MIG profile (<g>g.<memory>gb, e.g. 1g.10gb)")
    total = compute_slices(product)
    return min(Fraction(1), Fraction(parsed.compute_slices, total))


# GPU memory (GB) of models whose product name does not say it (NVIDIA's data sheets; the MIG manager's
# `all-balanced` layouts of mig-parted's config-default.yaml agree: H200 `3g.71gb` ×2, B200 `3g.90gb` ×2).
_MODEL_MEMORY_GB = (("GH200", 96), ("H200", 141), ("B300", 270), ("GB200", 186), ("B200", 180), ("H100-NVL", 94),
                    ("H20", 96), ("A30", 24), ("RTX-PRO-6000", 96), ("A10G", 24), ("L40S", 48), ("L4", 24),
                    ("T4", 16))


def product_memory_mib(product: str) -> int | None:
    """A GPU's memory read from its model name (`A100-SXM4-80GB` → 81920 MiB, `H200` → 141 GiB), or None."""
    model = base_product(product)
    found = _GB_RE.findall(model)
    if found:
        return int(found[-1]) * MIB_PER_GB
    upper = model.upper()
    for mark, gb in _MODEL_MEMORY_GB:
        if mark in upper:
            return gb * MIB_PER_GB
    return None


def instances_per_gpu(profile: str | MigProfile, product: str = "") -> int:
    """How many slices of one profile fit one GPU (the `all-<profile>` layouts of NVIDIA's MIG manager):
    bounded by compute slices and by memory slices (A100 80GB: `1g.10gb` 7, `1g.20gb` 4, `3g.40gb` 2)."""
    parsed = profile if isinstance(profile, MigProfile) else parse_mig_profile(profile)
    if parsed is None:
        return 1
    total = compute_slices(product)
    by_compute = max(1, total // parsed.gpu_slices)
    memory = product_memory_mib(product)
    memory_slices = _MEMORY_SLICES.get(total)
    if memory and memory_slices and parsed.memory_gb:
        slice_gb = memory / MIB_PER_GB / memory_slices
        needed = max(1, round(parsed.memory_gb / slice_gb))
        return max(1, min(by_compute, memory_slices // needed))
    return by_compute


# ---------------------------------------------------------------------------------------------------
# MIG layouts (the values of nvidia.com/mig.config)

MIG_CONFIG_DISABLED = "all-disabled"
MIG_CONFIG_BALANCED = "all-balanced"
MIG_CONFIG_ALL_PREFIX = "all-"
# The profiles of NVIDIA's MIG user guide ("Supported MIG Profiles") as (GPU-instance slices, memory slices):
# a 7-slice GPU has 8 memory slices (A100 80GB: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb), a
# 4-slice GPU 4 (A30: 1g.6gb, 2g.12gb, 4g.24gb). The MIG manager's default configuration
# (NVIDIA/mig-parted `config-default.yaml`) has an `all-<profile>` layout for each, plus `all-disabled` and
# `all-balanced`.
_STANDARD_PROFILES = {7: ((1, 1), (1, 2), (2, 2), (3, 4), (4, 4), (7, 8)), 4: ((1, 1), (2, 2), (4, 4))}


def mig_layouts(product: str) -> list[str]:
    """The layouts the MIG manager's default configuration has for a GPU of `product`: `all-disabled`,
    `all-balanced`, then `all-<profile>` of every standard profile (A100 40GB: `all-1g.5gb`, `all-1g.10gb`,
    `all-2g.10gb`, `all-3g.20gb`, `all-4g.20gb`, `all-7g.40gb`); only the first two when the GPU's memory is
    not known from its name."""
    layouts = [MIG_CONFIG_DISABLED, MIG_CONFIG_BALANCED]
    memory = product_memory_mib(product)
    total = compute_slices(product)
    memory_slices = _MEMORY_SLICES.get(total)
    if not memory or not memory_slices:
        return layouts
    gb = memory / MIB_PER_GB
    for g, slices in _STANDARD_PROFILES.get(total, ()):
        layouts.append(f"{MIG_CONFIG_ALL_PREFIX}{g}g.{floor(gb * slices / memory_slices + 0.5)}gb")
    return layouts


def mig_config_errors(value: str) -> list[str]:
    """What is wrong with a value of `nvidia.com/mig.config` (empty list: nothing). A layout is a label
    value; one named `all-<x>` other than `all-disabled` and `all-balanced` names a MIG profile as `x`
    (`all-1g.10gb`); any other name is a custom layout of the MIG manager's configuration."""
    text = str(value)
    if not text:
        return ["a MIG layout needs a name, e.g. all-1g.10gb, all-balanced or all-disabled"]
    errors = []
    if len(text) > 63:
        errors.append("must be no more than 63 characters")
    if not _LABEL_VALUE_RE.match(text):
        errors.append("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                      "alphanumeric character (a label value, e.g. all-1g.10gb)")
    if (not errors and text.startswith(MIG_CONFIG_ALL_PREFIX)
            and text not in (MIG_CONFIG_DISABLED, MIG_CONFIG_BALANCED)
            and parse_mig_profile(text[len(MIG_CONFIG_ALL_PREFIX):]) is None):
        errors.append(f"'{text}' is neither all-disabled, all-balanced nor all-<profile> with a MIG profile "
                      "<g>g.<memory>gb (e.g. all-1g.10gb); a custom layout's name does not start with 'all-'")
    return errors


_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


# ---------------------------------------------------------------------------------------------------
# A node's inventory

@dataclass(frozen=True)
class MigSlices:
    """One MIG profile on a node: slices published (capacity) and schedulable (allocatable)."""

    profile: str
    resource: str
    capacity: int
    allocatable: int
    memory_mib: int | None  # per slice
    share: Fraction  # one slice in GPU-equivalents

    @property
    def equivalents(self) -> Fraction:
        return self.allocatable * self.share


@dataclass(frozen=True)
class NodeGpus:
    """A node's GPUs as NVIDIA publishes them.

    `physical` counts devices (8 for a node of 8 A100s, however cut or shared); `memory_mib` is one physical
    GPU's memory; `allocatable` is what the node lets pods use in GPU-equivalents (a MIG layout that leaves
    slices unused, or an unhealthy device, makes it less than `physical`). `units` maps each GPU resource
    the node publishes to what one unit is worth in GPU-equivalents."""

    product: str = ""
    exposure: str = NONE
    physical: int = 0
    memory_mib: int | None = None
    family: str = ""
    replicas: int = 1
    sharing_strategy: str = ""
    mig_strategy: str = ""
    mig_config: str = ""
    mig_config_state: str = ""
    whole_allocatable: int = 0  # devices under nvidia.com/gpu (or .shared) as published
    slices: tuple[MigSlices, ...] = ()
    allocatable: Fraction = Fraction(0)
    capacity: Fraction = Fraction(0)
    units: Mapping[str, Fraction] = field(default_factory=dict)

    @property
    def total_memory_mib(self) -> int:
        """Physical GPU memory of the node, counted once."""
        return self.physical * (self.memory_mib or 0)

    @property
    def is_shared(self) -> bool:
        return self.exposure in (TIME_SLICING, MPS)

    @property
    def is_mig(self) -> bool:
        return self.exposure in (MIG_SINGLE, MIG_MIXED)

    def unit(self, resource: str) -> Fraction | None:
        """One unit of `resource` on this node in GPU-equivalents; None when the node does not publish it."""
        return self.units.get(resource)

    def shape(self) -> str:
        """How the node's GPUs are shared, in a few words: `whole`, `MIG all-balanced`, `time-slicing × 4`."""
        if self.is_mig:
            return "MIG " + (self.mig_config or ", ".join(s.profile for s in self.slices) or self.mig_strategy)
        if self.is_shared:
            return f"{self.exposure} × {self.replicas}"
        return self.exposure


def _amounts(resources: Mapping[str, Any] | None) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for name, quantity in (resources or {}).items():
        try:
            out[str(name)] = quantity if isinstance(quantity, Decimal) else parse_quantity(quantity)
        except QuantityError:
            continue  # an unreadable amount counts as absent (the node's own reader reports it)
    return out


def gpu_devices(resources: Mapping[str, Any] | None) -> int | None:
    """The whole `nvidia.com/gpu` devices a resource list names (a Karpenter NodePool's `limits`, say): None
    when it names none or its amount is unreadable."""
    if not resources or GPU_RESOURCE not in resources:
        return None
    amount = _amounts({GPU_RESOURCE: resources[GPU_RESOURCE]}).get(GPU_RESOURCE)
    return int(amount) if amount is not None else None


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    try:
        value = int(str(labels.get(key, "")).strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def _count(value: Any) -> int | Fraction:
    """A stored count: an int, or a Fraction for a fractional amount ("1/2")."""
    amount = Fraction(str(value))
    return int(amount) if amount.denominator == 1 else amount


def _whole(amount: Decimal | None) -> int:
    return int(amount) if amount is not None and amount > 0 else 0


def node_gpus(labels: Mapping[str, str] | None, capacity: Mapping[str, Any] | None,
              allocatable: Mapping[str, Any] | None = None) -> NodeGpus:
    """A node's GPU inventory from its labels and its status capacity/allocatable (ResourceLists: quantities
    as text, or Decimals). Never raises: what cannot be read counts as absent."""
    labels = labels or {}
    cap = _amounts(capacity)
    alloc = _amounts(allocatable) if allocatable is not None else dict(cap)
    product_label = str(labels.get(LABEL_GPU_PRODUCT, ""))
    product = base_product(product_label)
    mig_strategy = str(labels.get(LABEL_MIG_STRATEGY, ""))
    sharing = str(labels.get(LABEL_SHARING_STRATEGY, ""))
    replicas = _int_label(labels, LABEL_GPU_REPLICAS) or 1
    count_label = _int_label(labels, LABEL_GPU_COUNT)
    memory_label = _int_label(labels, LABEL_GPU_MEMORY)
    family = str(labels.get(LABEL_GPU_FAMILY, ""))
    common = dict(product=product, family=family, mig_strategy=mig_strategy,
                  mig_config=str(labels.get(LABEL_MIG_CONFIG, "")),
                  mig_config_state=str(labels.get(LABEL_MIG_CONFIG_STATE, "")))

    mig_names = sorted({name for name in (*cap, *alloc) if is_mig_resource(name)})
    single_profile = product_mig_profile(product_label)
    shared_name = GPU_SHARED_RESOURCE if (GPU_SHARED_RESOURCE in cap or GPU_SHARED_RESOURCE in alloc) else GPU_RESOURCE
    gpu_cap = _whole(cap.get(shared_name))
    gpu_alloc = _whole(alloc.get(shared_name))

    if mig_names or mig_strategy == MIG_STRATEGY_MIXED:
        # Mixed: nvidia.com/gpu counts the GPUs not cut; each profile is its own resource.
        slices = []
        for name in mig_names:
            profile = parse_mig_profile(name)
            share = mig_profile_share(profile, product)
            memory = _int_label(labels, f"{name}.memory")
            # A time-sliced MIG profile publishes `<resource>.replicas` units per slice.
            profile_replicas = _int_label(labels, f"{name}.replicas") or 1
            slices.append(MigSlices(profile=profile.name, resource=name, capacity=_whole(cap.get(name)),
                                    allocatable=_whole(alloc.get(name)),
                                    memory_mib=memory if memory is not None else profile.memory_gb * MIB_PER_GB,
                                    share=share / profile_replicas))
        whole_cap, whole_alloc = _whole(cap.get(GPU_RESOURCE)), _whole(alloc.get(GPU_RESOURCE))
        cut = sum(s.capacity * s.share for s in slices)
        physical = count_label if count_label is not None else whole_cap + ceil(cut)
        memory = memory_label or product_memory_mib(product)
        units = {GPU_RESOURCE: Fraction(1)} | {s.resource: s.share for s in slices}
        return NodeGpus(exposure=MIG_MIXED, physical=physical, memory_mib=memory, whole_allocatable=whole_alloc,
                        slices=tuple(slices), allocatable=whole_alloc + sum(s.equivalents for s in slices),
                        capacity=whole_cap + cut, units=units, **common)

    if mig_strategy == MIG_STRATEGY_SINGLE and single_profile and parse_mig_profile(single_profile):
        # Single: nvidia.com/gpu counts MIG devices, all of one profile; gpu.count and gpu.memory are overridden.
        profile = parse_mig_profile(single_profile)
        share = mig_profile_share(profile, product)
        per_gpu = instances_per_gpu(profile, product)
        devices = count_label if count_label is not None else gpu_cap
        physical = ceil(devices / per_gpu) if devices else 0
        slice_ = MigSlices(profile=profile.name, resource=GPU_RESOURCE, capacity=gpu_cap, allocatable=gpu_alloc,
                           memory_mib=memory_label if memory_label is not None else profile.memory_gb * MIB_PER_GB,
                           share=share / (replicas if replicas > 1 else 1))
        return NodeGpus(exposure=MIG_SINGLE, physical=physical, memory_mib=product_memory_mib(product),
                        replicas=replicas, sharing_strategy=sharing, whole_allocatable=gpu_alloc,
                        slices=(slice_,), allocatable=slice_.equivalents, capacity=gpu_cap * slice_.share,
                        units={GPU_RESOURCE: slice_.share}, **common)

    if replicas > 1 or sharing in (SHARING_TIME_SLICING, SHARING_MPS) or shared_name == GPU_SHARED_RESOURCE:
        exposure = MPS if sharing == SHARING_MPS else TIME_SLICING
        physical = count_label if count_label is not None else ceil(gpu_cap / replicas)
        unit = Fraction(1, replicas)
        return NodeGpus(exposure=exposure, physical=physical, memory_mib=memory_label or product_memory_mib(product),
                        replicas=replicas, sharing_strategy=sharing or exposure, whole_allocatable=gpu_alloc,
                        allocatable=gpu_alloc * unit, capacity=gpu_cap * unit, units={shared_name: unit},
                        **common)

    if gpu_cap or gpu_alloc or str(labels.get(LABEL_GPU_PRESENT, "")) == "true" or count_label:
        physical = gpu_cap if gpu_cap else (count_label or 0)
        return NodeGpus(exposure=WHOLE, physical=physical, memory_mib=memory_label or product_memory_mib(product),
                        whole_allocatable=gpu_alloc, allocatable=Fraction(gpu_alloc), capacity=Fraction(gpu_cap),
                        units={GPU_RESOURCE: Fraction(1)}, **common)
    return NodeGpus(**common)


def node_gpus_of(node: Mapping[str, Any]) -> NodeGpus:
    """`node_gpus` of a Node object (the API server's JSON)."""
    metadata = node.get("metadata") or {}
    status = node.get("status") or {}
    return node_gpus(metadata.get("labels") or {}, status.get("capacity") or {},
                     status.get("allocatable") if status.get("allocatable") is not None else status.get("capacity"))


# ---------------------------------------------------------------------------------------------------
# A pod's demand

@dataclass(frozen=True)
class GpuDemand:
    """What a pod asks of GPUs, and its worth in GPU-equivalents.

    kind: `none`, `whole` (`nvidia.com/gpu` devices), `mig` (profile resources), `replica` (units of a
    time-sliced / MPS GPU, or of a single-strategy MIG node), `fraction` (KAI `gpu-fraction`), `memory`
    (KAI `gpu-memory`), `reservation` (KAI's reservation pod: nobody's allocation)."""

    kind: str = "none"
    devices: int = 0  # nvidia.com/gpu or nvidia.com/gpu.shared units asked
    mig: Mapping[str, int] = field(default_factory=dict)  # profile -> slices
    resources: Mapping[str, int | Fraction] = field(default_factory=dict)  # GPU extended resources asked, by name
    fraction: Fraction | None = None  # per device
    fraction_devices: int = 0
    memory_mib: int | None = None
    equivalents: Fraction = Fraction(0)
    error: str = ""  # an annotation that could not be read (counted as nothing)

    @property
    def gpus(self) -> Decimal:
        """GPU-equivalents as the console stores them."""
        return to_decimal(self.equivalents)

    @property
    def is_shared(self) -> bool:
        return self.kind in ("fraction", "memory", "replica")


def is_reservation_pod(pod: Mapping[str, Any]) -> bool:
    """KAI's GPU reservation pod (namespace `kai-resource-reservation`)."""
    return ((pod.get("metadata") or {}).get("namespace")) == RESERVATION_NAMESPACE


def _annotation_fraction(value: Any) -> Fraction | None:
    try:
        amount = Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        return None
    return amount if 0 < amount <= 1 else None


def fraction_errors(annotations: Mapping[str, Any] | None) -> dict[str, str]:
    """What is wrong with a pod's KAI sharing annotations, by annotation name (empty: nothing)."""
    annotations = annotations or {}
    errors = {}
    if ANNOTATION_GPU_FRACTION in annotations and _annotation_fraction(annotations[ANNOTATION_GPU_FRACTION]) is None:
        errors[ANNOTATION_GPU_FRACTION] = "must be a number greater than 0 and at most 1 (e.g. 0.5)"
    if ANNOTATION_GPU_MEMORY in annotations:
        try:
            if int(str(annotations[ANNOTATION_GPU_MEMORY]).strip()) <= 0:
                raise ValueError
        except ValueError:
            errors[ANNOTATION_GPU_MEMORY] = "must be a whole number of MiB greater than 0 (e.g. 2000)"
    if ANNOTATION_GPU_FRACTION_NUM_DEVICES in annotations:
        try:
            if int(str(annotations[ANNOTATION_GPU_FRACTION_NUM_DEVICES]).strip()) <= 0:
                raise ValueError
        except ValueError:
            errors[ANNOTATION_GPU_FRACTION_NUM_DEVICES] = "must be a whole number of devices greater than 0"
    if ANNOTATION_GPU_FRACTION in annotations and ANNOTATION_GPU_MEMORY in annotations:
        errors.setdefault(ANNOTATION_GPU_MEMORY, "ask either gpu-fraction or gpu-memory, not both")
    return errors


def pod_gpu_demand(pod: Mapping[str, Any], node: NodeGpus | None = None, *,
                   gpu_memory_mib: int | None = None, requests: Mapping[str, Decimal] | None = None) -> GpuDemand:
    """A pod's GPU demand in GPU-equivalents, on `node` when it is known (bound, or the node a fit tries).

    - `nvidia.com/gpu: n` is n GPUs on a whole-GPU node (or with no node), n/replicas on a time-sliced or
      MPS node, n slices on a single-strategy MIG node;
    - `nvidia.com/gpu.shared: n` is n/replicas (n when the node is not known);
    - `nvidia.com/mig-<profile>: n` is n × the profile's share (on the node's GPU model);
    - annotation `gpu-fraction: f` (× `gpu-fraction-num-devices`) is f; `gpu-memory: m` is m over the GPU's
      memory (the node's, else `gpu_memory_mib`, else KAI's default 0.1);
    - a reservation pod of KAI is 0 (its GPU's sharers count).

    `requests` may pass the pod's effective requests when already computed. Raises QuantityError for a
    malformed quantity (as `kube.requests.pod_requests` does); a malformed annotation counts as nothing and
    is named in `error`."""
    return demand_on(pod_gpu_request(pod, requests=requests), node, gpu_memory_mib=gpu_memory_mib)


def pod_gpu_request(pod: Mapping[str, Any], *, requests: Mapping[str, Decimal] | None = None) -> GpuDemand:
    """What a pod asks of GPUs, whatever node it lands on (`equivalents` as on a whole-GPU node of unknown
    memory); `demand_on` prices it on a node."""
    if is_reservation_pod(pod):
        return GpuDemand(kind="reservation")
    amounts = requests if requests is not None else pod_requests(pod)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    resources: dict[str, int] = {}
    mig: dict[str, int] = {}
    for name, amount in amounts.items():
        if not amount:
            continue
        if is_mig_resource(name):
            profile = parse_mig_profile(name)
            mig[profile.name] = mig.get(profile.name, 0) + _whole(amount)
            resources[name] = _whole(amount)
        elif name in (GPU_RESOURCE, GPU_SHARED_RESOURCE) and amount > 0:
            # Whole devices; a fractional amount (which the API server refuses for an extended resource, but a
            # hand-made or legacy object may carry) counts by its value.
            resources[name] = _whole(amount) if amount == amount.to_integral_value() else Fraction(amount)
    if resources:
        devices = resources.get(GPU_RESOURCE, 0) + resources.get(GPU_SHARED_RESOURCE, 0)
        return demand_on(GpuDemand(kind="mig" if mig else "whole", devices=devices, mig=mig, resources=resources))
    errors = fraction_errors(annotations)
    error = "; ".join(f"{key}: {text}" for key, text in errors.items())
    if ANNOTATION_GPU_FRACTION in annotations and ANNOTATION_GPU_FRACTION not in errors:
        fraction = _annotation_fraction(annotations[ANNOTATION_GPU_FRACTION])
        num = 1
        if ANNOTATION_GPU_FRACTION_NUM_DEVICES in annotations and ANNOTATION_GPU_FRACTION_NUM_DEVICES not in errors:
            num = int(str(annotations[ANNOTATION_GPU_FRACTION_NUM_DEVICES]).strip())
        return GpuDemand(kind="fraction", fraction=fraction, fraction_devices=num, equivalents=fraction * num,
                         error=error)
    if ANNOTATION_GPU_MEMORY in annotations and ANNOTATION_GPU_MEMORY not in errors:
        mib = int(str(annotations[ANNOTATION_GPU_MEMORY]).strip())
        return GpuDemand(kind="memory", memory_mib=mib, fraction_devices=1, equivalents=GPU_MEMORY_DEFAULT_SHARE,
                         error=error)
    return GpuDemand(error=error)


def demand_on(demand: GpuDemand, node: NodeGpus | None = None, *, gpu_memory_mib: int | None = None) -> GpuDemand:
    """`demand` priced in GPU-equivalents on `node` (None: a whole-GPU node; `gpu_memory_mib` for a
    `gpu-memory` request when no node is known)."""
    if demand.kind in ("none", "reservation", "fraction"):
        return demand
    if demand.kind == "memory":
        per_gpu = (node.memory_mib if node is not None and node.memory_mib else None) or gpu_memory_mib
        share = min(Fraction(1), Fraction(demand.memory_mib, per_gpu)) if per_gpu else GPU_MEMORY_DEFAULT_SHARE
        return replace(demand, equivalents=share)
    model = node.product if node is not None else ""
    total = Fraction(0)
    kind = "mig" if demand.mig else "whole"
    for name, count in demand.resources.items():
        unit = node.unit(name) if node is not None else None
        if unit is None:
            unit = mig_profile_share(name, model) if is_mig_resource(name) else Fraction(1)
        elif name in (GPU_RESOURCE, GPU_SHARED_RESOURCE) and unit != 1 and not demand.mig:
            kind = "replica"
        total += count * unit
    return replace(demand, kind=kind, equivalents=total)


# ---------------------------------------------------------------------------------------------------
# As stored (JSON): a node's sharing and a pod's request

def _text(value: Fraction) -> str:
    return str(value)


def sharing_record(inv: NodeGpus) -> dict[str, Any]:
    """A node's inventory as a JSON-able dict (what the console stores of how a node shares its GPUs)."""
    if inv.exposure == NONE:
        return {}
    record: dict[str, Any] = {"exposure": inv.exposure, "physical": inv.physical, "replicas": inv.replicas,
                              "allocatable": _text(inv.allocatable),
                              "units": {name: _text(unit) for name, unit in inv.units.items()}}
    for key in ("sharing_strategy", "mig_strategy", "mig_config", "mig_config_state"):
        if getattr(inv, key):
            record[key] = getattr(inv, key)
    if inv.slices:
        record["slices"] = [{"profile": s.profile, "resource": s.resource, "capacity": s.capacity,
                             "allocatable": s.allocatable, "memory_mib": s.memory_mib, "share": _text(s.share)}
                            for s in inv.slices]
    return record


def node_from_record(record: Mapping[str, Any] | None, *, product: str = "", memory_mib: int | None = None,
                     physical: int = 0) -> NodeGpus:
    """`sharing_record`'s dict back to a NodeGpus (enough to price a pod's demand on the node)."""
    record = record or {}
    if not record:
        units = {GPU_RESOURCE: Fraction(1)} if physical else {}
        return NodeGpus(product=product, exposure=WHOLE if physical else NONE, physical=physical,
                        memory_mib=memory_mib, allocatable=Fraction(physical), units=units)
    try:
        units = {str(k): Fraction(str(v)) for k, v in (record.get("units") or {}).items()}
        slices = tuple(MigSlices(profile=str(s["profile"]), resource=str(s["resource"]), capacity=int(s["capacity"]),
                                 allocatable=int(s["allocatable"]), memory_mib=s.get("memory_mib"),
                                 share=Fraction(str(s["share"]))) for s in record.get("slices") or ())
        allocatable = Fraction(str(record.get("allocatable", "0")))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        units, slices, allocatable = {GPU_RESOURCE: Fraction(1)}, (), Fraction(physical)
    return NodeGpus(product=product, exposure=str(record.get("exposure") or WHOLE),
                    physical=int(record.get("physical") or physical), memory_mib=memory_mib,
                    replicas=int(record.get("replicas") or 1), sharing_strategy=str(record.get("sharing_strategy", "")),
                    mig_strategy=str(record.get("mig_strategy", "")), mig_config=str(record.get("mig_config", "")),
                    mig_config_state=str(record.get("mig_config_state", "")), slices=slices,
                    allocatable=allocatable, units=units)


# The kinds of request (a stored request's `kind`) that share a GPU with others by KAI's GPU sharing: a
# `gpu-fraction` and a `gpu-memory` request.
FRACTIONAL_KINDS = ("fraction", "memory")


def request_record(demand: GpuDemand) -> dict[str, Any]:
    """A pod's node-independent demand (`pod_gpu_request`) as a JSON-able dict; {} for none."""
    if demand.kind == "none" and not demand.error:
        return {}
    record: dict[str, Any] = {"kind": demand.kind}
    if demand.resources:
        record["resources"] = {name: count if isinstance(count, int) else str(count)
                               for name, count in demand.resources.items()}
    if demand.fraction is not None:
        record["fraction"] = _text(demand.fraction)
        record["devices"] = demand.fraction_devices
    if demand.memory_mib is not None:
        record["memory_mib"] = demand.memory_mib
    if demand.error:
        record["error"] = demand.error
    return record


def request_from_record(record: Mapping[str, Any] | None) -> GpuDemand:
    """`request_record`'s dict back to a GpuDemand (node-independent)."""
    record = record or {}
    kind = str(record.get("kind") or "none")
    try:
        resources = {str(k): _count(v) for k, v in (record.get("resources") or {}).items()}
        fraction = Fraction(str(record["fraction"])) if "fraction" in record else None
        devices = int(record.get("devices") or (1 if fraction is not None else 0))
        memory = int(record["memory_mib"]) if "memory_mib" in record else None
    except (TypeError, ValueError, ZeroDivisionError):
        return GpuDemand(error="unreadable GPU request record")
    mig = {parse_mig_profile(n).name: c for n, c in resources.items() if is_mig_resource(n)}
    if kind == "fraction" and fraction is not None:
        return GpuDemand(kind=kind, fraction=fraction, fraction_devices=devices, equivalents=fraction * devices)
    if kind == "memory" and memory is not None:
        return GpuDemand(kind=kind, memory_mib=memory, fraction_devices=1, equivalents=GPU_MEMORY_DEFAULT_SHARE)
    if resources:
        return demand_on(GpuDemand(kind="mig" if mig else "whole",
                                   devices=resources.get(GPU_RESOURCE, 0) + resources.get(GPU_SHARED_RESOURCE, 0),
                                   mig=mig, resources=resources))
    return GpuDemand(kind=kind if kind == "reservation" else "none", error=str(record.get("error", "")))


def demand_resources(demand: GpuDemand) -> dict[str, int]:
    """The extended resources a demand names (`{"nvidia.com/mig-1g.10gb": 2}`), for a fit against a node."""
    return dict(demand.resources)


def floor_fits(free: Fraction, each: Fraction) -> int:
    """How many demands of `each` GPU-equivalents fit in `free`."""
    return floor(free / each) if each > 0 else 0


# ---------------------------------------------------------------------------------------------------
# The unit a pod's GPU-time is counted and priced in (the ledger's lines)

UNIT_WHOLE = ""  # whole GPUs
UNIT_FRACTION = "fraction"  # KAI gpu-fraction / gpu-memory, or a mix: GPU-equivalents
UNIT_REPLICA_PREFIX = "replica:"  # `replica:4`: one replica of a GPU time-sliced (or MPS) 4 ways


@dataclass(frozen=True)
class BillingUnit:
    """What a pod holds, in the unit it is billed in: `unit` is `""` (whole GPUs), a MIG profile
    (`1g.10gb`: slices of it), `replica:<n>` (replicas of a GPU shared n ways by time-slicing or MPS) or
    `fraction` (KAI fractions and GPU memory, or a pod asking several kinds at once: GPU-equivalents);
    `count` how many of that unit (exact)."""

    unit: str = UNIT_WHOLE
    count: Fraction = Fraction(0)

    @property
    def units(self) -> Decimal:
        return to_decimal(self.count)


def billing_unit(demand: GpuDemand, node: NodeGpus | None = None) -> BillingUnit:
    """The unit `demand` (already priced on `node`, `demand_on`) is billed in, and how many of it:

    - `nvidia.com/gpu` on a whole-GPU node (or none known): whole GPUs;
    - `nvidia.com/mig-<profile>` (mixed strategy), one profile: slices of it; `nvidia.com/gpu` on a
      single-strategy MIG node: slices of the node's profile (a time-sliced slice counts its share of one);
    - `nvidia.com/gpu` or `nvidia.com/gpu.shared` on a time-sliced or MPS node of n replicas: replicas;
    - a KAI `gpu-fraction` or `gpu-memory`, or a pod asking whole GPUs and slices together: GPU-equivalents.
    """
    if demand.kind in ("none", "reservation") or not demand.equivalents:
        return BillingUnit(UNIT_WHOLE, Fraction(0))
    if demand.kind in ("fraction", "memory"):
        return BillingUnit(UNIT_FRACTION, demand.equivalents)
    if demand.mig:
        if len(demand.mig) == 1 and not demand.devices:
            profile = next(iter(demand.mig))
            share = mig_profile_share(profile, node.product if node is not None else "")
            return BillingUnit(profile, demand.equivalents / share)
        return BillingUnit(UNIT_FRACTION, demand.equivalents)
    if node is not None and node.exposure == MIG_SINGLE and node.slices:
        profile = node.slices[0].profile
        return BillingUnit(profile, demand.equivalents / mig_profile_share(profile, node.product))
    if node is not None and node.is_shared and node.replicas > 1:
        return BillingUnit(f"{UNIT_REPLICA_PREFIX}{node.replicas}", demand.equivalents * node.replicas)
    if demand.equivalents == demand.devices:
        return BillingUnit(UNIT_WHOLE, demand.equivalents)
    return BillingUnit(UNIT_FRACTION, demand.equivalents)


def unit_replicas(unit: str) -> int | None:
    """n of `replica:<n>`, else None."""
    if not str(unit).startswith(UNIT_REPLICA_PREFIX):
        return None
    try:
        n = int(str(unit)[len(UNIT_REPLICA_PREFIX):])
    except ValueError:
        return None
    return n if n > 0 else None


def unit_share(unit: str, product: str = "") -> Fraction:
    """One `unit` in GPU-equivalents on a GPU of `product`: 1 for a whole GPU and for a GPU-equivalent
    (`fraction`), the profile's share for a MIG profile, 1/n for `replica:<n>`."""
    if unit in (UNIT_WHOLE, UNIT_FRACTION):
        return Fraction(1)
    replicas = unit_replicas(unit)
    if replicas is not None:
        return Fraction(1, replicas)
    if parse_mig_profile(unit) is not None:
        return mig_profile_share(unit, product)
    return Fraction(1)


def unit_label(unit: str) -> str:
    """How a statement names a unit: `GPU`, `MIG 1g.10gb`, `replica (1/4 GPU)`, `GPU-equivalent`."""
    if unit == UNIT_WHOLE:
        return "GPU"
    if unit == UNIT_FRACTION:
        return "GPU-equivalent"
    replicas = unit_replicas(unit)
    if replicas is not None:
        return f"replica (1/{replicas} GPU)"
    if parse_mig_profile(unit) is not None:
        return f"MIG {unit}"
    return unit

# A pool's GPUs as each scheduler counts them (the enforcers write quotas in these units)

def kai_gpus(inv: NodeGpus) -> Fraction:
    """A node's allocatable GPUs as KAI Scheduler's queues count them.

    KAI counts a MIG device by its GPU-instance slices: `nvidia.com/mig-3g.40gb` is 3 GPUs, `1g.10gb` is 1
    (KAI-Scheduler `pkg/scheduler/api/common_info/resources/mig.go`, ExtractGpuAndMemoryFromMigResourceName,
    summed by GetGpusQuota / ResourceVector.TotalGPUs; `docs/queues/README.md` states queue quotas in GPUs).
    So a mixed-strategy node counts its uncut GPUs once each and each slice by its `g`; a single-strategy node
    publishes its MIG devices as `nvidia.com/gpu`, one each. Whole, time-sliced and fractional GPUs count
    as GPU-equivalents, as they are."""
    if inv.exposure == MIG_MIXED:
        uncut = inv.allocatable - sum((s.equivalents for s in inv.slices), Fraction(0))
        return uncut + sum((s.allocatable * _gpu_slices(s.profile) for s in inv.slices), Fraction(0))
    if inv.exposure == MIG_SINGLE:
        return Fraction(sum(s.allocatable for s in inv.slices))
    return Fraction(inv.allocatable)


def _gpu_slices(profile: str) -> int:
    parsed = parse_mig_profile(profile)
    return parsed.gpu_slices if parsed is not None else 0


@dataclass(frozen=True)
class PoolGpus:
    """A pool's allocatable GPUs three ways: in GPU-equivalents (the console's unit), as KAI counts them
    (`kai_gpus`), and per extended resource the nodes publish (`units`: `nvidia.com/gpu` devices or replicas,
    `nvidia.com/mig-<profile>` slices), which is how Kueue counts them (a resource, an integer amount each)."""

    equivalents: Fraction = Fraction(0)
    kai: Fraction = Fraction(0)
    units: Mapping[str, int] = field(default_factory=dict)
    mig: bool = False
    # GPU-equivalents of the units of each resource (`worth` of one unit: their ratio).
    unit_equivalents: Mapping[str, Fraction] = field(default_factory=dict)

    def worth(self, resource: str) -> Fraction:
        """One unit of `resource` in GPU-equivalents over the pool (1 when the pool publishes none)."""
        count = self.units.get(resource)
        return self.unit_equivalents.get(resource, Fraction(0)) / count if count else Fraction(1)

    def kai_per_equivalent(self) -> Fraction:
        """KAI's GPUs per GPU-equivalent over the pool: 7 on A100s cut into MIG slices (mixed, or single of
        `1g.10gb`), 7/3 for single-strategy `3g.40gb` devices, 1 for whole, time-sliced or fractional GPUs
        (and for a pool with no GPUs)."""
        if not self.mig or not self.equivalents:
            return Fraction(1)
        return self.kai / self.equivalents

    def mig_resources(self) -> tuple[str, ...]:
        """The MIG profiles' resources (`nvidia.com/mig-1g.10gb`, …) the pool's nodes publish, sorted."""
        return tuple(sorted(name for name in self.units if is_mig_resource(name)))


def pool_gpus(nodes: Iterable[NodeGpus]) -> PoolGpus:
    """`PoolGpus` of a pool's nodes (their allocatable GPUs, whatever their condition: a quota does not follow
    a node going NotReady and back)."""
    equivalents, kai = Fraction(0), Fraction(0)
    units: dict[str, int] = {}
    worth: dict[str, Fraction] = {}
    mig = False

    def add(name: str, count: int, each: Fraction) -> None:
        units[name] = units.get(name, 0) + count
        worth[name] = worth.get(name, Fraction(0)) + count * each

    for inv in nodes:
        if inv.exposure == NONE:
            continue
        equivalents += inv.allocatable
        kai += kai_gpus(inv)
        mig = mig or inv.is_mig
        if inv.exposure == MIG_MIXED:
            uncut = inv.allocatable - sum((s.equivalents for s in inv.slices), Fraction(0))
            if uncut > 0:
                add(GPU_RESOURCE, int(uncut), Fraction(1))
            for s in inv.slices:
                add(s.resource, s.allocatable, s.share)
        elif inv.exposure == MIG_SINGLE:
            for s in inv.slices:
                add(GPU_RESOURCE, s.allocatable, s.share)
        else:
            name = next(iter(inv.units), GPU_RESOURCE)
            per_unit = inv.units.get(name) or Fraction(1)
            add(name, int(inv.allocatable / per_unit), per_unit)
    return PoolGpus(equivalents=equivalents, kai=kai, units=units, mig=mig, unit_equivalents=worth)
