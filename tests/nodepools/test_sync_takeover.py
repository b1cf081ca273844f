"""A hung leader (SIGSTOP: its process keeps its connections, so its advisory lock) is replaced.

Real `manage.py sync_clusters` processes on PostgreSQL. Intervals are shortened through the options
(`--heartbeat-interval`, `--takeover-after`); the default 15 s takeover must happen within 20 s, so
these shortened ones within the same proportion.
"""
from __future__ import annotations

import signal
import time

import pytest

from nodepools.models import Cluster, Node, Pod
from tests.nodepools.test_sync import workload
from tests.nodepools.test_sync_leader import (  # noqa: F401 (fixture)
    LOCK_POLL, STARTUP, leader_lock_pids, pg_lab, wait_for,
)

HEARTBEAT, TAKEOVER = 0.5, 5.0
FAST = ("--heartbeat-interval", str(HEARTBEAT), "--takeover-after", str(TAKEOVER))


def rows_written():
    return (sorted(Pod.objects.values_list("namespace", "name", "updated", "resource_version")),
            sorted(Node.objects.values_list("name", "updated", "resource_version")))


def test_sync_clusters_help_lists_the_heartbeat_and_takeover_options():
    import subprocess
    import sys

    from tests.nodepools.test_sync_leader import BASE_DIR

    out = subprocess.run([sys.executable, "manage.py", "sync_clusters", "--help"], cwd=BASE_DIR, check=True,
                         capture_output=True, text=True).stdout
    out = " ".join(out.split())  # argparse wraps lines
    assert "--heartbeat-interval HEARTBEAT_INTERVAL the leader writes Cluster.leader_heartbeat this often (default 5.0)" in out
    assert "leader without heartbeat this long, and leads (default 15.0)" in out


@pytest.mark.postgres
def test_a_stopped_leader_is_replaced_and_writes_nothing_when_it_resumes(pg_lab, monkeypatch):
    # Live pages call the figures stale after STALE_AFTER_SECONDS without heartbeat; scaled like the rest.
    monkeypatch.setattr(Cluster, "STALE_AFTER_SECONDS", 4 * HEARTBEAT)
    old = pg_lab.spawn("old", *FAST)
    wait_for(lambda: Pod.objects.count() == 8, timeout=STARTUP, what="the first process's initial sync")
    wait_for(lambda: Cluster.objects.get(pk=pg_lab.cluster.pk).leader_heartbeat is not None, timeout=STARTUP,
             what="a heartbeat")
    new = pg_lab.spawn("new", *FAST)
    wait_for(lambda: "standby" in new.text(), timeout=STARTUP, what="the second process to stand by")
    time.sleep(2 * HEARTBEAT)  # must not happen: two heartbeats on, the figures are not stale
    assert Cluster.objects.get(pk=pg_lab.cluster.pk).stale_since() is None  # the leader beats
    [old_lock] = leader_lock_pids(pg_lab.cluster.pk)

    old.proc.send_signal(signal.SIGSTOP)  # hung: its lock session stays open
    stopped = time.monotonic()
    stale_at = wait_for(lambda: Cluster.objects.get(pk=pg_lab.cluster.pk).stale_since() is not None,
                        timeout=TAKEOVER, what="the cluster to show stale figures")
    assert "leader; syncing" not in new.text(), "stale must show before the takeover"
    led_at = wait_for(lambda: "leader; syncing" in new.text(), timeout=30, what="the standby to take over")
    assert stale_at < led_at
    assert led_at - stopped <= TAKEOVER * 20 / 15, f"took {led_at - stopped:.1f}s"
    assert "left no heartbeat" in new.text()
    assert leader_lock_pids(pg_lab.cluster.pk) not in ([], [old_lock])

    # The new leader mirrors changes; the cluster is current again.
    pg_lab.emu.add_pod(workload("after-takeover", "rnd-a", "a100-2"))
    pg_lab.emu.delete_pod("runai-rnd-a", "train-1")
    wait_for(lambda: Pod.objects.filter(name="after-takeover").exists()
             and not Pod.objects.filter(name="train-1").exists(), what="the new leader's writes")
    wait_for(lambda: Cluster.objects.get(pk=pg_lab.cluster.pk).stale_since() is None, what="fresh heartbeats")
    before = rows_written()  # all the new leader writes of those changes (a batch writes its nodes' state with it)

    # The old leader resumes with those events queued on its watches: it writes none of them.
    mark = old.size()
    old.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: "lost leadership" in old.text(mark), timeout=15, what="the old leader to notice")
    wait_for(lambda: "standby" in old.text(mark), timeout=15, what="the old leader to stand by")
    time.sleep(2 * LOCK_POLL)  # must not happen: standing by for two tries of the lock, it neither writes nor leads
    after_text = old.text(mark)
    assert " wrote " not in after_text and "leader; syncing" not in after_text, after_text
    assert rows_written() == before
    assert Pod.objects.filter(name="after-takeover").count() == 1
    assert "leader; syncing" in new.text() and old.proc.poll() is None  # standby now, still running
