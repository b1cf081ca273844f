"""Trust in the ledger, by Hypothesis: random pods (lifetimes, GPUs, priorities, owners), random deserved
quotas over time and random utilization go through the sync's writer (the pods' own start and finish
times) and the ledger's hour closing; then, whatever they were:

- the ledger's GPU-seconds equal the pods' own integral, in total and hour by hour (split at the hour
  boundaries, to the second: exactly);
- over-quota equals ∫ max(0, allocated − deserved of the time) per pool and project, computed here
  another way (by segments of constant allocation, not by stacking pods);
- no part (over-quota, non-preemptible, idle) exceeds the whole;
- a month's statement (read from the daily rows) equals the sum of its hours (read from the hourly rows),
  split at the month boundary, and its cost equals each hour priced at the rate of its day (a rate
  changes at the month boundary, for one pool only); every total is the sum of the lines shown.
"""
from __future__ import annotations

import datetime as dt
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

UTC = dt.timezone.utc
# Six hours across a month boundary (and so a day boundary): January 31, 22:00 to February 1, 04:00.
START = dt.datetime(2026, 1, 31, 22, tzinfo=UTC)
HOURS = 6
END = START + dt.timedelta(hours=HOURS)
T0 = int(START.timestamp())
SPAN = HOURS * 3600
GPUS = [Decimal("0.25"), Decimal("0.5"), Decimal(1), Decimal(2), Decimal(3)]
JAN, FEB = dt.date(2026, 1, 1), dt.date(2026, 2, 1)


def rfc(t: int) -> str:
    return dt.datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


pods_strategy = st.lists(
    st.fixed_dictionaries({
        # Start and end may lie outside the window (cut at its edges); end None: still running.
        "start": st.integers(min_value=-1800, max_value=SPAN - 1),
        "length": st.one_of(st.none(), st.integers(min_value=1, max_value=SPAN + 3600)),
        "gpus": st.sampled_from(GPUS),
        "priority": st.sampled_from([50, 75, 100, 125]),
        "owner": st.sampled_from(["rnd-a", "rnd-b", "ops-a", None]),
        "node": st.sampled_from(["v100-1", "v100-2", "a100-1", "a100-2"]),
        "utilization": st.one_of(st.none(), st.floats(min_value=0, max_value=100)),
        "idle_share": st.one_of(st.none(), st.floats(min_value=0, max_value=1)),
    }),
    min_size=1, max_size=10,
)
quota_strategy = st.lists(
    st.tuples(st.sampled_from(["rnd-a", "rnd-b", "ops-a"]), st.sampled_from(["default", "a100"]),
              st.integers(min_value=0, max_value=SPAN - 1), st.sampled_from([Decimal(0), Decimal(1), Decimal("2.5"), Decimal(4)])),
    max_size=6,
)


def _pod_object(i: int, p: dict) -> dict:
    from kubesim import make_pod

    start = T0 + p["start"]
    end = None if p["length"] is None else start + p["length"]
    namespace = f"runai-{p['owner']}" if p["owner"] else "system-jobs"
    obj = make_pod(f"p{i}", namespace, node=p["node"], phase="Running" if end is None else "Succeeded",
                   priority=p["priority"], created=rfc(start - 30),
                   containers=[{"name": "main", "requests": {"cpu": "1", "memory": "1Gi",
                                                             "nvidia.com/gpu": str(p["gpus"])}}])
    obj["metadata"]["uid"] = f"uid-{i}"
    status = obj["status"]
    for condition in status["conditions"]:
        if condition["type"] == "PodScheduled":
            condition["lastTransitionTime"] = rfc(start)  # bound (allocated) from here
    if end is not None:
        for container in status["containerStatuses"]:
            container["state"]["terminated"]["finishedAt"] = rfc(end)
    return obj


def _quota_steps(quotas, org):
    """{(pool id, project id): [(since, deserved)]} from the generated changes (deserved 1 before them)."""
    from ledger.services import EPOCH

    pools = {"default": org.default.pk, "a100": org.a100.pk}
    projects = {"rnd-a": org.rnd_a.pk, "rnd-b": org.rnd_b.pk, "ops-a": org.ops_a.pk}
    steps: dict[tuple, list] = {}
    for project, pool, at, deserved in quotas:
        key = (pools[pool], projects[project])
        steps.setdefault(key, [(EPOCH, Decimal(1))]).append((START + dt.timedelta(seconds=at), deserved))
    for key in steps:
        steps[key].sort(key=lambda s: s[0])
    return steps


def _deserved_at(steps, key, t: int) -> Decimal:
    value = Decimal(1) if key in steps else Decimal(0)  # quota rows without history: 0 (the org's)
    for since, deserved in steps.get(key, ()):
        if since.timestamp() <= t:
            value = deserved
    return value


def _over_quota_by_segments(lifetimes, steps, hour_start: int) -> dict[tuple, Decimal]:
    """∫ max(0, allocated − deserved) dt per (pool, project) over one hour, by constant segments."""
    hour_end = hour_start + 3600
    out: dict[tuple, Decimal] = {}
    groups: dict[tuple, list] = {}
    for life in lifetimes:
        if life["project"] is None:
            continue
        groups.setdefault((life["pool"], life["project"]), []).append(life)
    for key, lives in groups.items():
        bounds = {hour_start, hour_end}
        for life in lives:
            for t in (life["start"], life["end"]):
                if t is not None and hour_start < t < hour_end:
                    bounds.add(t)
        for since, _ in steps.get(key, ()):
            if hour_start < since.timestamp() < hour_end:
                bounds.add(int(since.timestamp()))
        bounds = sorted(bounds)
        total = Decimal(0)
        for left, right in zip(bounds, bounds[1:]):
            held = sum((life["gpus"] for life in lives
                        if life["start"] <= left and (life["end"] is None or life["end"] >= right)), Decimal(0))
            total += max(Decimal(0), held - _deserved_at(steps, key, left)) * (right - left)
        out[key] = total
    return out


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(pods=pods_strategy, quotas=quota_strategy)
def test_the_ledger_adds_up_to_the_pods_own_integral(org, users, pods, quotas):
    with transaction.atomic():
        _check(org, users, pods, quotas)
        transaction.set_rollback(True)


def _check(org, users, pods, quotas):
    from ledger import selectors, services
    from ledger.compute import PodUtilization
    from ledger.models import DeservedHistory, LedgerEntry
    from nodepools import services as pool_services
    from nodepools.models import PodLifetime

    # The pods, through the sync's writer (their own start and finish times).
    objects = [_pod_object(i, p) for i, p in enumerate(pods)]
    pool_services.cluster_objects_replace(cluster=org.cluster, nodes=org.nodes, pods=org.pods + objects)
    steps = _quota_steps(quotas, org)
    for (pool, project), rows in steps.items():
        DeservedHistory.objects.bulk_create(DeservedHistory(pool_id=pool, project_id=project, gpu_deserved=d, since=s)
                                            for s, d in rows)
    # Rates: V100 everywhere from January; A100 everywhere from January, and dearer in pool a100 from
    # February 1 (the month boundary) — but only there.
    rate = dict(currency="EUR", cpu_core_hour=Decimal("0.01"), memory_gib_hour=Decimal("0.003"))
    services.rate_create(actor=None, gpu_model="Tesla-V100-SXM2-16GB", valid_from=JAN, gpu_hour=Decimal("0.9"), **rate)
    services.rate_create(actor=None, gpu_model="NVIDIA-A100-SXM4-40GB", valid_from=JAN, gpu_hour=Decimal("2.1"), **rate)
    services.rate_create(actor=None, gpu_model="NVIDIA-A100-SXM4-40GB", pool=org.a100, valid_from=FEB,
                         gpu_hour=Decimal("2.7"), **rate)
    utilization = {(o["metadata"]["namespace"], o["metadata"]["name"]): PodUtilization(p["utilization"], p["idle_share"])
                   for o, p in zip(objects, pods)}
    for h in range(HOURS):
        services.ledger_hour_close(cluster=org.cluster, hour=START + dt.timedelta(hours=h), utilization=utilization)

    lifetimes = [{"start": int(l.started.timestamp()), "end": None if l.ended is None else int(l.ended.timestamp()),
                  "gpus": l.gpus, "pool": l.pool_id, "namespace": l.namespace}
                 for l in PodLifetime.objects.filter(cluster=org.cluster, uid__startswith="uid-")]
    assert len(lifetimes) == len(pods)
    owners = {f"runai-{p.name}": p.pk for p in (org.rnd_a, org.rnd_b, org.ops_a)}
    for life in lifetimes:
        life["project"] = owners.get(life["namespace"])

    def integral(a: int, b: int) -> Decimal:
        total = Decimal(0)
        for life in lifetimes:
            s, e = max(life["start"], a), b if life["end"] is None else min(life["end"], b)
            if e > s:
                total += life["gpus"] * (e - s)
        return total

    entries = list(LedgerEntry.objects.filter(cluster_id=org.cluster.pk))
    # The whole window, then each hour: exactly the pods' own integral.
    assert sum((e.gpu_seconds for e in entries), Decimal(0)) == integral(T0, T0 + SPAN)
    for h in range(HOURS):
        hour = START + dt.timedelta(hours=h)
        of_hour = [e for e in entries if e.hour == hour]
        start = T0 + 3600 * h
        assert sum((e.gpu_seconds for e in of_hour), Decimal(0)) == integral(start, start + 3600), hour
        expected = _over_quota_by_segments(lifetimes, steps, start)
        got: dict[tuple, Decimal] = {}
        for e in of_hour:
            if e.project_id is not None:
                got[(e.pool_id, e.project_id)] = got.get((e.pool_id, e.project_id), Decimal(0)) + e.over_quota_gpu_seconds
        assert {k: v for k, v in got.items() if v} == {k: v for k, v in expected.items() if v}, hour
    for e in entries:
        assert 0 <= e.over_quota_gpu_seconds <= e.gpu_seconds
        assert 0 <= e.non_preemptible_gpu_seconds <= e.gpu_seconds
        assert 0 <= e.idle_gpu_seconds <= e.gpu_seconds
        assert 0 <= e.busy_gpu_seconds <= e.measured_gpu_seconds <= e.gpu_seconds
        if e.project_id is None:
            assert e.over_quota_gpu_seconds == 0

    # Each month's statement of each department: the sum of its hours, priced at each day's rate.
    book = selectors.rate_book()
    for month in (selectors.Month(2026, 1), selectors.Month(2026, 2)):
        month_entries = [e for e in entries if e.hour.date().month == month.month]
        for department in (org.rnd, org.ops):
            statement = selectors.department_statement(user=users["sysadmin"], department=department, month=month)
            mine = [e for e in month_entries if e.department_id == department.pk]
            for field in ("gpu_seconds", "over_quota_gpu_seconds", "non_preemptible_gpu_seconds", "idle_gpu_seconds",
                          "idle_measured_gpu_seconds", "measured_gpu_seconds", "busy_gpu_seconds", "cpu_core_seconds", "memory_byte_seconds"):
                assert statement.exact[field] == sum((getattr(e, field) for e in mine), Decimal(0)), field
            for line in statement.lines:
                hours = [e for e in mine if (e.project_id, e.pool_id, e.gpu_model) == (line.ids["project"],
                                                                                       line.ids["pool"], line.key[3])]
                cost = Decimal(0)
                for e in hours:
                    r = book.at(e.pool_id, e.gpu_model, e.hour.date())
                    cost += (e.gpu_seconds * r.gpu_hour + e.cpu_core_seconds * r.cpu_core_hour
                             + e.memory_byte_seconds / Decimal(1 << 30) * r.memory_gib_hour) / 3600
                assert line.cost == cost.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
                assert line.gpu_hours == (sum((e.gpu_seconds for e in hours), Decimal(0)) / 3600).quantize(
                    Decimal("0.01"), rounding=ROUND_HALF_UP)
            for name in ("gpu_hours", "over_quota_hours", "cost"):
                assert statement.totals[name] == sum((getattr(line, name) for line in statement.lines), Decimal(0))
            # Idle: "not measured" (None) on a line none of whose GPU-time Prometheus said the idle share of;
            # a total is the sum of the measured lines, None when none is.
            for name in ("idle_hours", "idle_cost"):
                measured = [getattr(line, name) for line in statement.lines if getattr(line, name) is not None]
                assert statement.totals[name] == (sum(measured, Decimal(0)) if measured else None)
            for line in statement.lines:
                assert (line.idle_hours is None) == (line.exact["idle_measured_gpu_seconds"] == 0)
                assert 0 <= line.exact["idle_gpu_seconds"] <= line.exact["idle_measured_gpu_seconds"] <= line.exact["gpu_seconds"]
