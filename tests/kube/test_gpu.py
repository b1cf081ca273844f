"""kube.gpu: a node's GPUs and a pod's GPU demand in GPU-equivalents, however NVIDIA publishes them."""
from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kube import gpu
from kubesim.factories import make_node, make_pod
from kubesim import nvidia

A100_80 = "NVIDIA-A100-SXM4-80GB"
A100_40 = "NVIDIA-A100-SXM4-40GB"


def inventory(node):
    return gpu.node_gpus_of(node)


def pod(resources=None, annotations=None, namespace="runai-team"):
    obj = {"metadata": {"name": "p", "namespace": namespace, "annotations": dict(annotations or {})},
           "spec": {"containers": [{"name": "main", "resources": {"limits": dict(resources or {})}}]}}
    return obj


# --- the nodes, as NVIDIA's device plugin and GPU feature discovery publish them ---------------

def test_mig_mixed_all_balanced_counts_eight_gpus_not_zero():
    node = make_node("mig", gpus=8, gpu_product=A100_80, mig_config="all-balanced", mig_strategy="mixed")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "0"
    inv = inventory(node)
    assert inv.exposure == gpu.MIG_MIXED
    assert inv.physical == 8
    assert inv.allocatable == 8  # 16 × 1/7 + 8 × 2/7 + 8 × 3/7
    assert inv.total_memory_mib == 8 * 81920
    by_profile = {s.profile: s for s in inv.slices}
    assert {p: (s.allocatable, s.share) for p, s in by_profile.items()} == {
        "1g.10gb": (16, Fraction(1, 7)), "2g.20gb": (8, Fraction(2, 7)), "3g.40gb": (8, Fraction(3, 7))}
    assert by_profile["3g.40gb"].memory_mib == 40 * 1024
    assert inv.mig_config == "all-balanced"


def test_time_sliced_node_counts_its_physical_gpus_and_memory_once():
    node = make_node("ts", gpus=8, gpu_product=A100_80, gpu_replicas=4)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "32"
    inv = inventory(node)
    assert (inv.exposure, inv.physical, inv.replicas, inv.allocatable) == (gpu.TIME_SLICING, 8, 4, 8)
    assert inv.total_memory_mib == 8 * 81920  # not 32 ×
    assert inv.product == A100_80  # without -SHARED
    one_replica = gpu.pod_gpu_demand(pod({"nvidia.com/gpu": "1"}), inv)
    assert (one_replica.kind, one_replica.equivalents) == ("replica", Fraction(1, 4))


def test_renamed_shared_resource_and_mps():
    inv = inventory(make_node("sh", gpus=2, gpu_product=A100_40, gpu_replicas=10, rename_shared=True))
    assert (inv.physical, inv.allocatable, inv.unit("nvidia.com/gpu.shared")) == (2, 2, Fraction(1, 10))
    assert gpu.pod_gpu_demand(pod({"nvidia.com/gpu.shared": "3"}), inv).equivalents == Fraction(3, 10)
    mps = inventory(make_node("mps", gpus=4, gpu_product=A100_40, gpu_replicas=2, sharing_strategy="mps"))
    assert (mps.exposure, mps.physical, mps.allocatable) == (gpu.MPS, 4, 4)


def test_mig_single_reads_physical_gpus_from_the_overridden_count():
    node = make_node("single", gpus=8, gpu_product=A100_80, mig_config="all-1g.10gb", mig_strategy="single")
    assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "56"
    inv = inventory(node)
    assert (inv.exposure, inv.physical, inv.allocatable, inv.memory_mib) == (gpu.MIG_SINGLE, 8, 8, 81920)
    assert gpu.pod_gpu_demand(pod({"nvidia.com/gpu": "2"}), inv).equivalents == Fraction(2, 7)
    # GFD's own example: 8 A100 40GB in 1g.5gb slices, 56 devices
    labels = {"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb",
              "nvidia.com/gpu.count": "56", "nvidia.com/gpu.memory": "5120"}
    inv = gpu.node_gpus(labels, {"nvidia.com/gpu": "56"})
    assert (inv.physical, inv.memory_mib, inv.allocatable) == (8, 40960, 8)
    three = gpu.node_gpus({**labels, "nvidia.com/gpu.product": "A100-SXM4-80GB-MIG-3g.40gb",
                           "nvidia.com/gpu.count": "16"}, {"nvidia.com/gpu": "16"})
    assert (three.physical, three.allocatable) == (8, Fraction(48, 7))  # 2 × 3g.40gb leave 1/7 of each GPU


def test_whole_gpus_and_nodes_without_gpus():
    inv = inventory(make_node("w", gpus=4, gpu_product=A100_40))
    assert (inv.exposure, inv.physical, inv.allocatable, inv.memory_mib) == (gpu.WHOLE, 4, 4, 40960)
    cpu = inventory(make_node("cpu"))
    assert (cpu.exposure, cpu.physical, cpu.allocatable, cpu.total_memory_mib) == (gpu.NONE, 0, 0, 0)
    # an unhealthy device lowers allocatable, not the physical count
    hurt = gpu.node_gpus({"nvidia.com/gpu.count": "8"}, {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "7"})
    assert (hurt.physical, hurt.allocatable) == (8, 7)
    # garbage is read as absent, never raised
    assert gpu.node_gpus({"nvidia.com/gpu.count": "lots"}, {"nvidia.com/gpu": "many"}).physical == 0


# --- shares ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("profile, product, share", [
    ("1g.10gb", A100_80, Fraction(1, 7)), ("3g.40gb", A100_80, Fraction(3, 7)), ("7g.80gb", A100_80, 1),
    ("1g.18gb", "NVIDIA-H200", Fraction(1, 7)), ("nvidia.com/mig-2g.20gb", "NVIDIA-H100-80GB-HBM3", Fraction(2, 7)),
    ("1g.6gb", "NVIDIA-A30", Fraction(1, 4)), ("2g.12gb", "NVIDIA-A30", Fraction(1, 2)),
    ("1c.3g.40gb", A100_80, Fraction(1, 7)), ("1g.10gb+me", A100_80, Fraction(1, 7)),
])
def test_mig_profile_share(profile, product, share):
    assert gpu.mig_profile_share(profile, product) == share


def test_not_a_profile_is_refused_with_the_rule():
    with pytest.raises(ValueError, match="not a MIG profile"):
        gpu.mig_profile_share("big", A100_80)
    assert gpu.parse_mig_profile("nvidia.com/gpu") is None
    assert gpu.mig_resource("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"


@pytest.mark.parametrize("profile, product, per_gpu", [
    ("1g.10gb", A100_80, 7), ("1g.20gb", A100_80, 4), ("2g.20gb", A100_80, 3), ("3g.40gb", A100_80, 2),
    ("1g.10gb", A100_40, 4), ("1g.5gb", A100_40, 7), ("1g.35gb", "NVIDIA-H200", 4), ("3g.71gb", "NVIDIA-H200", 2),
])
def test_instances_per_gpu_follow_the_mig_managers_layouts(profile, product, per_gpu):
    assert gpu.instances_per_gpu(profile, product) == per_gpu


# --- pod demand -----------------------------------------------------------------------------------

def test_kai_fractions_and_gpu_memory():
    half = gpu.pod_gpu_demand(pod(annotations={"gpu-fraction": "0.5"}))
    assert (half.kind, half.equivalents, half.gpus) == ("fraction", Fraction(1, 2), Decimal("0.500"))
    two = gpu.pod_gpu_demand(pod(annotations={"gpu-fraction": "0.25", "gpu-fraction-num-devices": "2"}))
    assert two.equivalents == Fraction(1, 2)
    inv = inventory(make_node("w", gpus=1, gpu_product=A100_80))
    mem = gpu.pod_gpu_demand(pod(annotations={"gpu-memory": "20480"}), inv)
    assert (mem.kind, mem.equivalents) == ("memory", Fraction(1, 4))
    # with no node known, KAI's node-scale-adjuster default; with a pool's GPU memory, its share
    assert gpu.pod_gpu_demand(pod(annotations={"gpu-memory": "2000"})).equivalents == Fraction(1, 10)
    assert gpu.pod_gpu_demand(pod(annotations={"gpu-memory": "40960"}), gpu_memory_mib=40960).equivalents == 1


def test_bad_fraction_annotations_count_nothing_and_say_why():
    bad = gpu.pod_gpu_demand(pod(annotations={"gpu-fraction": "1.5"}))
    assert bad.equivalents == 0 and "gpu-fraction" in bad.error and "at most 1" in bad.error
    assert "gpu-memory" in gpu.fraction_errors({"gpu-memory": "-3"})
    assert gpu.fraction_errors({"gpu-fraction": "0.3"}) == {}


def test_mig_requests_and_the_reservation_pod():
    inv = inventory(make_node("mig", gpus=8, gpu_product=A100_80, mig_config="all-balanced"))
    demand = gpu.pod_gpu_demand(pod({"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-1g.10gb": "2"}), inv)
    assert (demand.kind, demand.mig, demand.equivalents) == ("mig", {"3g.40gb": 1, "1g.10gb": 2}, Fraction(5, 7))
    assert gpu.demand_resources(demand) == {"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-1g.10gb": 2}
    # without a node the share follows the 7-slice convention
    assert gpu.pod_gpu_demand(pod({"nvidia.com/mig-1g.10gb": "1"})).equivalents == Fraction(1, 7)
    reservation = gpu.pod_gpu_demand(pod({"nvidia.com/gpu": "1"}, namespace="kai-resource-reservation"))
    assert (reservation.kind, reservation.equivalents) == ("reservation", 0)
    whole = gpu.pod_gpu_demand(make_pod("w", containers=[{"name": "main", "requests": {"nvidia.com/gpu": 2}}]))
    assert (whole.kind, whole.devices, whole.equivalents) == ("whole", 2, 2)


def test_stored_figures_round_half_even_to_three_places():
    assert gpu.to_decimal(Fraction(1, 7)) == Decimal("0.143")
    assert gpu.to_decimal(Fraction(3, 7)) == Decimal("0.429")
    assert gpu.to_decimal(7 * Fraction(1, 7)) == Decimal("1.000")


# --- properties over what NVIDIA publishes --------------------------------------------------------




@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(gpus=st.integers(1, 16), product=st.sampled_from([A100_80, A100_40, "NVIDIA-H200"]), data=st.data())
def test_every_exposure_keeps_physical_gpus_and_memory(gpus, product, data):
    layouts = sorted(nvidia.layouts_for(product))
    mode = data.draw(st.sampled_from(["whole", "mixed", "single", "shared", "renamed", "mps"]))
    kwargs = {}
    if mode == "mixed":
        kwargs = dict(mig_config=data.draw(st.sampled_from(layouts)), mig_strategy="mixed")
    elif mode == "single":
        singles = [name for name in layouts if len(nvidia.layout(product, name)) == 1]
        kwargs = dict(mig_config=data.draw(st.sampled_from(singles)), mig_strategy="single")
    elif mode in ("shared", "renamed", "mps"):
        kwargs = dict(gpu_replicas=data.draw(st.integers(2, 10)), rename_shared=mode == "renamed",
                      sharing_strategy="mps" if mode == "mps" else None)
    node = make_node("n", gpus=gpus, gpu_product=product, **kwargs)
    inv = inventory(node)
    memory = int(make_node("x", gpus=1, gpu_product=product)["metadata"]["labels"]["nvidia.com/gpu.memory"])
    assert inv.physical == gpus
    assert 0 <= inv.allocatable <= gpus
    if mode in ("whole", "shared", "renamed", "mps") or kwargs.get("mig_config") == "all-disabled":
        assert inv.allocatable == gpus
    if inv.memory_mib and mode != "single":
        assert inv.total_memory_mib == gpus * memory
    # Every unit the node publishes, taken by pods one at a time, adds up to the node's allocatable.
    taken = Fraction(0)
    for resource, amount in node["status"]["allocatable"].items():
        if gpu.is_gpu_resource(resource):
            taken += int(amount) * gpu.pod_gpu_demand(pod({resource: "1"}), inv).equivalents
    assert taken == inv.allocatable


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(fraction=st.fractions(min_value=Fraction(1, 100), max_value=1, max_denominator=100),
       devices=st.integers(1, 4))
def test_a_fraction_counts_its_value_on_each_device(fraction, devices):
    text = f"{float(fraction):.4f}".rstrip("0").rstrip(".")
    demand = gpu.pod_gpu_demand(pod(annotations={"gpu-fraction": text, "gpu-fraction-num-devices": str(devices)}))
    assert demand.kind == "fraction"
    assert demand.equivalents == Fraction(text) * devices


def test_a_fractional_gpu_quantity_counts_by_its_value_and_survives_storage():
    # The API server refuses it for an extended resource; a hand-made or legacy object may still carry it.
    demand = gpu.pod_gpu_demand(pod({"nvidia.com/gpu": "500m"}))
    assert (demand.kind, demand.equivalents) == ("whole", Fraction(1, 2))
    stored = gpu.request_from_record(gpu.request_record(demand))
    assert stored.equivalents == Fraction(1, 2)
    time_sliced = inventory(make_node("ts", gpus=1, gpu_product=A100_80, gpu_replicas=2))
    assert gpu.demand_on(stored, time_sliced).equivalents == Fraction(1, 4)


# --- MIG layouts (the values of nvidia.com/mig.config) ---------------------------------------------

@pytest.mark.parametrize("product, layouts", [
    ("NVIDIA-A100-SXM4-80GB", ["all-disabled", "all-balanced", "all-1g.10gb", "all-1g.20gb", "all-2g.20gb",
                               "all-3g.40gb", "all-4g.40gb", "all-7g.80gb"]),
    ("NVIDIA-A100-SXM4-40GB", ["all-disabled", "all-balanced", "all-1g.5gb", "all-1g.10gb", "all-2g.10gb",
                               "all-3g.20gb", "all-4g.20gb", "all-7g.40gb"]),
    # H200: 141 GB over 8 memory slices, rounded as NVIDIA names them (1g.18gb, 3g.71gb).
    ("NVIDIA-H200", ["all-disabled", "all-balanced", "all-1g.18gb", "all-1g.35gb", "all-2g.35gb", "all-3g.71gb",
                     "all-4g.71gb", "all-7g.141gb"]),
    ("NVIDIA-A30", ["all-disabled", "all-balanced", "all-1g.6gb", "all-2g.12gb", "all-4g.24gb"]),
    ("Some-GPU", ["all-disabled", "all-balanced"]),  # memory unknown: the two every GPU has
])
def test_the_mig_managers_default_layouts_of_a_gpu(product, layouts):
    assert gpu.mig_layouts(product) == layouts


@pytest.mark.parametrize("value, error", [
    ("all-1g.10gb", None), ("all-balanced", None), ("all-disabled", None), ("team_layout.v2", None),
    ("", "a MIG layout needs a name"), ("all-", "must start and end with an alphanumeric character"),
    ("all-big", "is neither all-disabled"), ("my layout", "must consist of alphanumeric characters"),
    ("x" * 64, "must be no more than 63 characters"),
])
def test_a_mig_layout_is_a_label_value_and_an_all_name_names_a_profile(value, error):
    errors = gpu.mig_config_errors(value)
    assert (errors == []) if error is None else any(error in e for e in errors)


@given(st.sampled_from(["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-PCIE-40GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200",
                        "NVIDIA-A30", "NVIDIA-B200"]))
def test_every_layout_offered_is_a_valid_layout_whose_profile_fits_the_gpu(product):
    for name in gpu.mig_layouts(product):
        assert gpu.mig_config_errors(name) == []
        if name not in ("all-disabled", "all-balanced"):
            profile = gpu.parse_mig_profile(name[len("all-"):])
            assert profile is not None and profile.gpu_slices <= gpu.compute_slices(product)
            assert profile.memory_gb * gpu.MIB_PER_GB <= gpu.product_memory_mib(product) + gpu.MIB_PER_GB


@given(st.text(max_size=80))
def test_any_text_gets_a_verdict_never_an_exception(text):
    assert isinstance(gpu.mig_config_errors(text), list)


@pytest.mark.parametrize("product", ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB", "NVIDIA-H200",
                                     "NVIDIA-H100-80GB-HBM3"])
def test_the_layouts_offered_are_those_the_emulators_mig_manager_has(product):
    # The emulator's MIG manager (its own table of NVIDIA's default configuration) is the second opinion.
    assert set(gpu.mig_layouts(product)) == set(nvidia.layouts_for(product))

def test_a_pools_gpus_as_kai_and_kueue_count_them():
    """KAI counts a MIG slice by its g (7 per A100 however it is cut), Kueue each resource by itself; whole,
    time-sliced and fractional GPUs stay GPU-equivalents to KAI."""
    from kubesim import make_node

    def inv(**kw):
        return gpu.node_gpus_of(make_node("n", gpu_product="NVIDIA-A100-SXM4-80GB", **kw))

    mixed = gpu.pool_gpus([inv(gpus=2, mig_config="all-balanced"), inv(gpus=1, mig_config="all-3g.40gb")])
    assert (mixed.equivalents, mixed.kai, mixed.kai_per_equivalent()) == (Fraction(20, 7), 20, 7)
    assert dict(mixed.units) == {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-2g.20gb": 2,
                                 "nvidia.com/mig-3g.40gb": 4}
    assert mixed.mig_resources() == ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb")
    sliced = gpu.pool_gpus([inv(gpus=8, gpu_replicas=4), inv(gpus=4)])
    assert (sliced.equivalents, sliced.kai_per_equivalent(), dict(sliced.units)) == (12, 1, {"nvidia.com/gpu": 36})
    assert gpu.pool_gpus([]).kai_per_equivalent() == 1
