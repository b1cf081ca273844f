"""kube.gpu.billing_unit: the unit a pod's GPU-time is billed in on its node (whole GPUs, slices of a MIG
profile, replicas of a time-sliced GPU, GPU-equivalents of fractions) and how many of it — and the unit's
worth in GPU-equivalents times that count is always the pod's GPU-equivalents."""
from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from kube import gpu
from kubesim.factories import make_node
from tests.kube.test_gpu import A100_80, pod


def billed(resources=None, annotations=None, node=None):
    inv = gpu.node_gpus_of(node) if node is not None else None
    demand = gpu.demand_on(gpu.pod_gpu_request(pod(resources, annotations)), inv)
    return gpu.billing_unit(demand, inv), demand, inv


def test_each_way_of_holding_gpus_has_its_unit():
    mixed = make_node("m", gpus=1, gpu_product=A100_80, mig_config="all-balanced")
    single = make_node("s", gpus=1, gpu_product=A100_80, mig_config="all-1g.10gb", mig_strategy="single")
    sliced = make_node("t", gpus=2, gpu_product=A100_80, gpu_replicas=4)
    whole = make_node("w", gpus=8, gpu_product=A100_80)
    cases = [
        (({"nvidia.com/gpu": "2"}, None, whole), ("", Fraction(2))),
        (({"nvidia.com/mig-1g.10gb": "2"}, None, mixed), ("1g.10gb", Fraction(2))),
        (({"nvidia.com/mig-3g.40gb": "1"}, None, mixed), ("3g.40gb", Fraction(1))),
        (({"nvidia.com/gpu": "1"}, None, single), ("1g.10gb", Fraction(1))),
        (({"nvidia.com/gpu": "2"}, None, sliced), ("replica:4", Fraction(2))),
        ((None, {"gpu-fraction": "0.25"}, whole), ("fraction", Fraction(1, 4))),
        ((None, {"gpu-memory": "40960"}, whole), ("fraction", Fraction(1, 2))),
        (({"nvidia.com/mig-1g.10gb": "1", "nvidia.com/mig-2g.20gb": "1"}, None, mixed), ("fraction", Fraction(3, 7))),
        (({"cpu": "1"}, None, whole), ("", Fraction(0))),
    ]
    for (resources, annotations, node), expected in cases:
        unit, demand, inv = billed(resources, annotations, node)
        assert (unit.unit, unit.count) == expected, (resources, annotations)
        assert unit.count * gpu.unit_share(unit.unit, inv.product) == demand.equivalents


def test_units_are_named_as_people_read_them():
    assert [gpu.unit_label(u) for u in ("", "1g.10gb", "replica:4", "fraction")] == [
        "GPU", "MIG 1g.10gb", "replica (1/4 GPU)", "GPU-equivalent"]
    assert gpu.unit_share("1g.6gb", "NVIDIA-A30") == Fraction(1, 4)
    assert gpu.unit_share("replica:0") == 1 and gpu.unit_replicas("replica:x") is None


@given(profile=st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.20gb"]),
       count=st.integers(min_value=1, max_value=7))
def test_slices_times_their_share_are_the_pod_s_gpu_equivalents(profile, count):
    mixed = make_node("m", gpus=1, gpu_product=A100_80, mig_config="all-balanced")
    unit, demand, inv = billed({f"nvidia.com/mig-{profile}": str(count)}, None, mixed)
    assert (unit.unit, unit.count) == (profile, count)
    assert count * gpu.mig_profile_share(profile, A100_80) == demand.equivalents


@given(replicas=st.integers(min_value=2, max_value=16), asked=st.integers(min_value=1, max_value=8))
def test_replicas_times_one_over_n_are_the_pod_s_gpu_equivalents(replicas, asked):
    sliced = make_node("t", gpus=1, gpu_product=A100_80, gpu_replicas=replicas)
    unit, demand, _ = billed({"nvidia.com/gpu": str(asked)}, None, sliced)
    assert (unit.unit, unit.count) == (f"replica:{replicas}", asked)
    assert unit.count * gpu.unit_share(unit.unit) == demand.equivalents == Fraction(asked, replicas)
