"""Idle GPU-hours and utilization of an hour, from a real Prometheus holding the DCGM exporter's samples
of that hour (backfilled with promtool): the console's one meaning of idle — under the threshold for the
whole idle window — minute by minute, weighted by each pod's GPU-time."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from gpumetrics.localprom import backfill_openmetrics
from ledger import services
from ledger.models import LedgerEntry
from tests.ledger.test_closing import run

UTC = dt.timezone.utc


def exposition(values: dict[str, float]) -> str:
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for i, (pod, value) in enumerate(sorted(values.items())):
        namespace = {"busy": "runai-rnd-a", "idle": "runai-rnd-b", "nap": "runai-ops-a"}[pod]
        lines.append(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="GPU-{i}",Hostname="a100-1",namespace="{namespace}",'
                     f'pod="{pod}"}} {value}')
    return "\n".join(lines) + "\n"


@pytest.mark.django_db
def test_idle_share_and_utilization_of_an_hour_come_from_prometheus(org, prometheus, tmp_path):
    now = dt.datetime.now(UTC)
    hour = services.hour_floor(now) - dt.timedelta(hours=2)
    h = hour.timestamp()
    tsdb = str(tmp_path / "tsdb")
    # busy: 80 % all along; idle: 1 % all along; nap: 2 % from an hour before until half past, then 90 %.
    backfill_openmetrics(tsdb, exposition({"busy": 80, "idle": 1, "nap": 2}), start=h - 3600, end=h + 1740, step=60)
    backfill_openmetrics(tsdb, exposition({"busy": 80, "idle": 1, "nap": 90}), start=h + 1800, end=h + 3600, step=60)
    prom = prometheus(tsdb_dir=tsdb)
    org.cluster.prometheus_url = prom.url
    org.cluster.save()
    for name, project in (("busy", org.rnd_a), ("idle", org.rnd_b), ("nap", org.ops_a)):
        run(org, name, project, "a100-1", hour - dt.timedelta(hours=1))
    services.ledger_hour_close(cluster=org.cluster, hour=hour)
    entries = {e.project_id: e for e in LedgerEntry.objects.filter(hour=hour)}
    busy, idle, nap = entries[org.rnd_a.pk], entries[org.rnd_b.pk], entries[org.ops_a.pk]
    assert (busy.idle_gpu_seconds, busy.measured_gpu_seconds, busy.busy_gpu_seconds) == (0, 3600, 2880)
    assert busy.gpu_utilization == Decimal("80.0")
    assert (idle.idle_gpu_seconds, idle.gpu_utilization) == (3600, Decimal("1.0"))
    # Idle while its last half hour stayed under 5 %: the minutes up to half past (29 of the 60 points).
    assert nap.idle_gpu_seconds == Decimal(3600 * 29 / 60)
    assert nap.gpu_utilization == Decimal("47.5")  # (29 × 2 % + 31 × 90 %) / 60


@pytest.mark.django_db
def test_an_hour_closes_without_utilization_when_prometheus_does_not_answer(org, http_server, caplog):
    org.cluster.prometheus_url = http_server(lambda request: (503, "text/plain", b"down"))
    org.cluster.save()
    hour = services.hour_floor(dt.datetime.now(UTC)) - dt.timedelta(hours=2)
    run(org, "busy", org.rnd_a, "a100-1", hour - dt.timedelta(hours=1))
    services.ledger_hour_close(cluster=org.cluster, hour=hour)
    [entry] = LedgerEntry.objects.filter(hour=hour)
    assert entry.gpu_seconds == 3600 and entry.measured_gpu_seconds == 0 and entry.gpu_utilization is None
    assert "closed without GPU utilization" in caplog.text
