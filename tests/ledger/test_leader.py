"""The sync's leader closes the ledger's hours (a leader task of the live sync, against the Kubernetes
API emulator over HTTP): the pods' own times, as its writer recorded them."""
from __future__ import annotations

import datetime as dt

import pytest

from ledger.models import ClosedHour, LedgerEntry, LedgerState
from tests.nodepools.test_pod_lifetimes import bound_at
from tests.nodepools.test_sync import Lab, gpu_node, operands, workload

UTC = dt.timezone.utc


@pytest.fixture
def lab(transactional_db, sim, tmp_path):
    # (Committed: on PostgreSQL the leader's tasks run in a thread of their own, on their own connection.)
    lab = Lab(sim, tmp_path, pods_current_every=0.2)
    yield lab
    lab.stop()


def test_the_sync_leader_closes_the_hour_that_ended_from_the_pods_own_times(lab, settings):
    settings.LEDGER_CLOSE_DELAY = 0
    # The leader's first round may come before the mirror is known complete (on PostgreSQL the tasks run
    # in a thread of their own from the start): the next round must come soon, not a minute later.
    settings.LEDGER_EVERY = 0.2
    now = dt.datetime.now(UTC)
    hour = now.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1)
    # The ledger of the cluster has closed everything before that hour.
    LedgerState.objects.create(cluster_id=lab.cluster.pk, started=hour, closed_until=hour, scanned_until=now)
    lab.emu.load(nodes=[gpu_node("a100-1", labels={"gpu-type": "A100"})], pods=operands("a100-1") + [
        bound_at(workload("train-1", "rnd-a", "a100-1", gpus=2), hour + dt.timedelta(minutes=45))])
    lab.start().synced()
    lab.until(lambda: ClosedHour.objects.filter(cluster_id=lab.cluster.pk, hour=hour).exists())
    [entry] = LedgerEntry.objects.filter(hour=hour)
    assert (entry.project_id, entry.pool_id, entry.gpu_seconds) == (lab.rnd_a.pk, lab.a100.pk, 2 * 15 * 60)
    assert LedgerState.objects.get(cluster_id=lab.cluster.pk).closed_until == hour + dt.timedelta(hours=1)
