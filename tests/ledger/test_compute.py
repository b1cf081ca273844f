"""One hour of the ledger from lifetimes, quotas and utilization (ledger/compute.py), worked out by hand."""
from __future__ import annotations

from decimal import Decimal

from ledger.compute import Deserved, Interval, PodUtilization, hour_rows

H = 1_800_000_000 - 1_800_000_000 % 3600  # an hour's start
A100 = "NVIDIA-A100-SXM4-80GB"
V100 = "Tesla-V100-SXM2-16GB"


def pod(name, start, end, gpus="1", *, project=1, pool=10, model=A100, preemptible=True, cpu=1000, memory=1 << 30):
    return Interval(name, "ns", name, pool, model, project, Decimal(gpus), cpu, memory, preemptible, start, end)


def test_a_pod_that_ran_seven_minutes_counts_seven_minutes():
    rows = hour_rows(H, [pod("a", H + 600, H + 1020, gpus="2")], Deserved(default=lambda pool, project: Decimal(8)))
    row = rows[(10, A100, 1)]
    assert row.gpu_seconds == Decimal(2 * 420)
    assert row.cpu_core_seconds == Decimal(420)
    assert row.memory_byte_seconds == (1 << 30) * 420
    assert row.over_quota_gpu_seconds == 0


def test_lifetimes_are_cut_at_the_hour_and_running_pods_count_to_its_end():
    rows = hour_rows(H, [pod("before", H - 5000, H + 100), pod("after", H + 3500, H + 9000),
                         pod("running", H - 1, None, gpus="0.5")], Deserved())
    assert rows[(10, A100, 1)].gpu_seconds == Decimal(100 + 100) + Decimal("0.5") * 3600


def test_over_quota_is_what_lies_above_the_deserved_quota_latest_preemptible_first():
    # Deserved 2: an inference pod (non-preemptible) of 1 GPU, then training pods of 1 GPU (A100, early)
    # and 2 GPUs (V100, later): the later one lies above the quota.
    pods = [pod("serve", H - 10, None, preemptible=False),
            pod("train-early", H - 5, None),
            pod("train-late", H + 1800, None, gpus="2", model=V100)]
    rows = hour_rows(H, pods, Deserved(default=lambda pool, project: Decimal(2)))
    assert rows[(10, A100, 1)].over_quota_gpu_seconds == 0
    assert rows[(10, V100, 1)].over_quota_gpu_seconds == Decimal(2 * 1800)
    assert rows[(10, A100, 1)].non_preemptible_gpu_seconds == Decimal(3600)


def test_over_quota_follows_the_deserved_quota_of_the_time():
    # 4 GPUs all hour; deserved 4, then 1 from the half hour on: 3 GPUs over quota for 1800 s.
    deserved = Deserved({(10, 1): [(0, Decimal(4)), (H + 1800, Decimal(1))]})
    rows = hour_rows(H, [pod("a", H - 100, None, gpus="4")], deserved)
    assert rows[(10, A100, 1)].over_quota_gpu_seconds == Decimal(3 * 1800)


def test_pods_of_no_project_have_a_row_of_their_own_and_no_quota():
    rows = hour_rows(H, [pod("system", H, None, project=None, gpus="1")], Deserved())
    assert rows[(10, A100, None)].gpu_seconds == 3600
    assert rows[(10, A100, None)].over_quota_gpu_seconds == 0


def test_idle_and_utilization_weigh_each_pods_gpu_time():
    pods = [pod("idle", H, None, gpus="2"), pod("busy", H, H + 1800, gpus="1")]
    utilization = {("ns", "idle"): PodUtilization(utilization=1.0, idle_share=1.0),
                   ("ns", "busy"): PodUtilization(utilization=90.0, idle_share=0.0)}
    row = hour_rows(H, pods, Deserved(default=lambda pool, project: Decimal(10)), utilization)[(10, A100, 1)]
    assert row.idle_gpu_seconds == Decimal(7200)
    assert row.measured_gpu_seconds == Decimal(7200 + 1800)
    assert row.busy_gpu_seconds == Decimal("72") + Decimal("1620")
    # Average utilization of the allocated GPUs: (1 % × 7200 + 90 % × 1800) / 9000.
    assert row.busy_gpu_seconds * 100 / row.measured_gpu_seconds == Decimal("18.8")


def test_a_pod_without_utilization_is_not_measured():
    row = hour_rows(H, [pod("a", H, None)], Deserved())[(10, A100, 1)]
    assert row.measured_gpu_seconds == 0 and row.idle_gpu_seconds == 0
