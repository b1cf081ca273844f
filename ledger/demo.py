"""The demo's ledger: rates for its GPU models and thirty days of closed hours before the demo starts,
consistent with its organisation (`nodepools.demo_cluster`: the same pods on the same nodes of the same
pools, owned by the same projects, against their deserved quota), so that a statement of the current
month shows from the first minute. `manage.py demo` calls `demo_ledger_seed` once per cluster.

The history is what the ledger would have closed had the demo run for thirty days: inference and build
pods run all the time; training pods run in episodes (a deterministic pattern per pod: some hours a day);
team-nlp holds its GPUs idle (as the emulated DCGM exporter reports it), the others keep them busy.
Each hour goes through the ledger's own `compute.hour_rows`, so the rows follow its rules exactly.
"""
from __future__ import annotations

import datetime
import hashlib
from dataclasses import replace
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from kube import gpu as kube_gpu
from kube.requests import pod_is_active
from ledger import compute
from ledger.models import ClosedHour, DeservedHistory, Kind, LedgerState, Rate
from ledger.services import HOUR, _add_to_days, _deserved, _entry, _insert_entries, hour_floor, rate_create
from nodepools import kube
from nodepools.demo_cluster import IDLE_PROJECT, POOL_LABEL_KEY, demo_objects
from nodepools.models import Cluster, NodePool
from projects.models import Project

DAYS = 30
# EUR per GPU-hour of each GPU model of the demo (and of the Karpenter pools' H100 and T4 nodes), from
# two months back; the A100 80GB's price falls ten days before the demo starts (a change applies from
# its date only: the statement prices the days before it at the old rate).
RATES = {
    "Tesla-V100-SXM2-16GB": Decimal("0.90"),
    "Tesla-V100-SXM2-32GB": Decimal("1.10"),
    "NVIDIA-A100-SXM4-40GB": Decimal("1.80"),
    "NVIDIA-A100-SXM4-80GB": Decimal("2.40"),
    "NVIDIA-H100-80GB-HBM3": Decimal("3.90"),
    "Tesla-T4": Decimal("0.35"),
    # The shared pools' GPUs: an A100 80GB cut into MIG slices is priced per slice at its model's rate × the
    # slice's share, or at its profile's own rate (MIG_RATES); a time-sliced L4's replica at the L4's rate ×
    # its share (a quarter); a KAI fraction of an A10G at the A10G's rate × the fraction.
    "NVIDIA-L4": Decimal("0.80"),
    "NVIDIA-A10G": Decimal("1.00"),
}
# A MIG profile with its own price per slice-hour (the 1g.10gb notebooks' slices, dearer than 1/7 of the
# A100 80GB's 2.40: small slices are in demand); the other profiles are priced at the model's rate × share.
MIG_RATES = {("NVIDIA-A100-SXM4-80GB", "1g.10gb"): Decimal("0.40")}
A100_80_LATER = Decimal("2.20")
CURRENCY = "EUR"
CPU_CORE_HOUR = Decimal("0.012")
MEMORY_GIB_HOUR = Decimal("0.002")


def _stable(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def demo_rates(*, today: datetime.date) -> int:
    """The demo's rates (those of a GPU model that has none yet); returns how many were added."""
    added = 0
    since = (today.replace(day=1) - datetime.timedelta(days=40)).replace(day=1)
    for model, price in RATES.items():
        if Rate.objects.filter(gpu_model=model).exists():
            continue
        rate_create(actor=None, gpu_model=model, currency=CURRENCY, valid_from=since, gpu_hour=price,
                    cpu_core_hour=CPU_CORE_HOUR, memory_gib_hour=MEMORY_GIB_HOUR, description="Demo price")
        added += 1
        for (rated_model, profile), slice_price in MIG_RATES.items():
            if rated_model == model:
                rate_create(actor=None, gpu_model=model, mig_profile=profile, currency=CURRENCY, valid_from=since,
                            gpu_hour=slice_price, cpu_core_hour=CPU_CORE_HOUR, memory_gib_hour=MEMORY_GIB_HOUR,
                            description=f"Demo price of a {profile} slice")
                added += 1
        if model == "NVIDIA-A100-SXM4-80GB":
            rate_create(actor=None, gpu_model=model, currency=CURRENCY, valid_from=today - datetime.timedelta(days=10),
                        gpu_hour=A100_80_LATER, cpu_core_hour=CPU_CORE_HOUR, memory_gib_hour=MEMORY_GIB_HOUR,
                        description="Demo price: reserved capacity renewed cheaper")
            added += 1
    return added


def _running(pod: dict, hour_index: int) -> bool:
    """Whether a demo pod ran in the hour `hour_index` (hours since the epoch): training pods in episodes."""
    kind = (pod["metadata"].get("labels") or {}).get("workload-kind", "")
    if kind not in ("train", "build-preemptible"):
        return True
    seed = _stable(pod["metadata"]["name"])
    day, hour = divmod(hour_index, 24)
    # Weekdays busier than weekends; each pod its own working hours.
    start = seed % 10
    length = 8 + seed % 9 if (day + 4) % 7 < 5 else 3 + seed % 4
    return (hour - start) % 24 < length


def _demo_pods(cluster: Cluster) -> list[tuple]:
    """The demo's running pods as (pod, pool id, GPU model, project id, requests, unit, units), read once: GPUs
    in GPU-equivalents on the pod's node, billed in the unit the sync would store (kube.gpu.billing_unit:
    whole GPUs, slices of a MIG profile, replicas of a time-sliced GPU, GPU-equivalents of fractions)."""
    nodes, pods = demo_objects()
    pools = {p.name: p.pk for p in NodePool.objects.filter(cluster=cluster)}
    default = pools.get(NodePool.DEFAULT_NAME)
    node_pool, node_gpus = {}, {}
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        node_pool[node["metadata"]["name"]] = pools.get(labels.get(POOL_LABEL_KEY), default)
        node_gpus[node["metadata"]["name"]] = kube_gpu.node_gpus(labels, node["status"].get("capacity"),
                                                                node["status"].get("allocatable"))
    projects = {f"runai-{name}": pk for name, pk in Project.objects.filter(cluster=cluster).values_list("name", "pk")}
    out = []
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node and pod_is_active(pod):
            resources, record = kube.pod_resources_and_request(pod)
            gpus, unit, units = kube.gpu_priced(record, node_gpus.get(node))
            out.append((pod, node_pool.get(node), node_gpus[node].product if node in node_gpus else "",
                        projects.get(pod["metadata"]["namespace"]), replace(resources, gpus=gpus), unit, units))
    return out


def _intervals(demo_pods: list[tuple], pools: dict, projects: dict, hour: datetime.datetime
               ) -> tuple[list[compute.Interval], dict]:
    start = int(hour.timestamp())
    index = start // 3600
    out, utilization = [], {}
    for pod, pool, model, project, requests, unit, units in demo_pods:
        if not _running(pod, index):
            continue
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        # Episodes start and end inside the hour now and then, so that hours are not all whole.
        seed = _stable(f"{name}/{index}")
        begin = start + (seed % 1800 if seed % 5 == 0 else 0)
        end = start + 3600 - (seed % 900 if seed % 7 == 0 else 0)
        out.append(compute.Interval(f"{namespace}/{name}", namespace, name, pool, model, project, requests.gpus,
                                    requests.cpu_millis, requests.memory_bytes,
                                    kube.is_preemptible(pod["spec"].get("priority")), begin, end, unit,
                                    units if unit else None))
        if requests.gpus:
            idle = namespace == f"runai-{IDLE_PROJECT}"
            busy = 1.0 if idle else 55 + _stable(name) % 35
            utilization[(namespace, name)] = compute.PodUtilization(
                utilization=busy, idle_share=0.95 if idle else (0.05 if seed % 11 == 0 else 0.0))
    out += _karpenter_intervals(pools, projects, start)
    return out, utilization


def _karpenter_intervals(pools: dict, projects: dict, start: int) -> list[compute.Interval]:
    """The Karpenter pools of `make run` (when the demo has them): inference on H100 in working hours,
    batch scoring on spot T4 at night."""
    hour = (start // 3600) % 24
    out = []
    if pools.get("h100-prod") and 8 <= hour < 20:
        out.append(compute.Interval(f"h100-{start}", "runai-serve-chat", "chat-h100-1", pools["h100-prod"],
                                    "NVIDIA-H100-80GB-HBM3", projects.get("runai-serve-chat"), Decimal(8), 16000,
                                    64 << 30, False, start, start + 3600))
    if pools.get("t4-spot") and (hour >= 22 or hour < 6):
        out.append(compute.Interval(f"t4-{start}", "runai-batch-scoring", "scoring-t4", pools["t4-spot"], "Tesla-T4",
                                    projects.get("runai-batch-scoring"), Decimal(4), 8000, 32 << 30, True,
                                    start, start + 3600))
    return out


@transaction.atomic
def demo_ledger_seed(*, cluster: Cluster, days: int = DAYS, now: datetime.datetime | None = None) -> int:
    """Rates, and `days` of closed hours through the current hour (once per cluster: nothing when its ledger
    already has a state). Returns the hourly rows written."""
    now = now or timezone.now()
    demo_rates(today=now.astimezone(datetime.timezone.utc).date())
    if LedgerState.objects.filter(cluster_id=cluster.pk).exists():
        return 0
    # Through the end of the current hour, so that the current month has closed hours even in the first
    # minutes of its first day (the sync's leader closes the hours after it).
    end = hour_floor(now) + HOUR
    start = end - datetime.timedelta(days=days)
    # The demo's quotas were set a moment ago, but its story is that they held all along: its history
    # of deserved quota starts over (later changes are recorded as they come).
    DeservedHistory.objects.filter(pool_id__in=NodePool.objects.filter(cluster=cluster).values("pk")).delete()
    deserved = _deserved(cluster.pk)
    departments = dict(Project.objects.filter(cluster=cluster).values_list("pk", "department_id"))
    demo_pods = _demo_pods(cluster)
    pools = {p.name: p.pk for p in NodePool.objects.filter(cluster=cluster)}
    projects = {f"runai-{name}": pk for name, pk in Project.objects.filter(cluster=cluster).values_list("name", "pk")}
    entries, closed = [], []
    hour = start
    while hour < end:
        intervals, utilization = _intervals(demo_pods, pools, projects, hour)
        rows = compute.hour_rows(int(hour.timestamp()), intervals, deserved, utilization)
        recorded = hour + HOUR + datetime.timedelta(minutes=2)
        entries += [_entry(cluster.pk, hour, Kind.CLOSING, recorded, key, departments.get(key[2]), figures)
                    for key, figures in rows.items() if not figures.is_zero()]
        closed.append(ClosedHour(cluster_id=cluster.pk, hour=hour, closed_at=recorded,
                                 pods=sum(f.pods for f in rows.values())))
        hour += HOUR
    _insert_entries(entries)
    ClosedHour.objects.bulk_create(closed, batch_size=2000)
    _add_to_days(entries)
    LedgerState.objects.create(cluster_id=cluster.pk, started=start, closed_until=end, scanned_until=now)
    return len(entries)

