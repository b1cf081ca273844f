"""Two real `manage.py sync_clusters` processes on PostgreSQL: one leader per cluster, failover, fencing."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from nodepools.models import Node, Pod
from nodepools.sync import LEADER_KEY
from tests.nodepools.test_sync import Lab, load_small_cluster, workload

pytestmark = pytest.mark.postgres
BASE_DIR = Path(__file__).resolve().parents[2]
# Starting a Django process (imports) can take half a minute on a loaded machine; not what is tested here.
STARTUP = 120.0
# How often a standby process tries the leader lock (`--lock-poll`).
LOCK_POLL = 0.5


class SyncProcess:
    def __init__(self, name: str, tmp_path: Path, *args: str):
        settings = connection.settings_dict
        url = f"postgres://{settings['USER']}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{settings['NAME']}"
        self.log_path = tmp_path / f"{name}.log"
        self.log = open(self.log_path, "wb")
        env = {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1", "LOG_LEVEL": "INFO"}
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "sync_clusters", "--lock-poll", str(LOCK_POLL), "--backoff-base", "0.1",
             "--backoff-max", "1", "--tick", "0.1", "--rescan", "0.5", "--batch-delay", "0.02", *args],
            cwd=BASE_DIR, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )

    def text(self, since: int = 0) -> str:
        return self.log_path.read_bytes()[since:].decode(errors="replace")

    def size(self) -> int:
        return self.log_path.stat().st_size

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def wait_for(condition, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def leader_lock_pids(cluster_id: int) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = %s AND objid::bigint = %s "
            "AND objsubid = 2 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [LEADER_KEY, cluster_id])
        return [row[0] for row in cursor.fetchall()]


@pytest.fixture
def pg_lab(transactional_db, sim, tmp_path):
    lab = Lab(sim, tmp_path)
    load_small_cluster(sim)
    processes: list[SyncProcess] = []

    def spawn(name, *args):
        process = SyncProcess(name, tmp_path, *args)
        processes.append(process)
        return process

    lab.spawn = spawn
    yield lab
    for process in processes:
        process.stop()


def test_one_leader_and_the_standby_takes_over_after_kill_9(pg_lab):
    first = pg_lab.spawn("first")
    wait_for(lambda: Pod.objects.count() == 8, timeout=STARTUP, what="the first process's initial sync")
    second = pg_lab.spawn("second")
    wait_for(lambda: "standby" in second.text(), timeout=STARTUP, what="the second process to stand by")
    # Must not happen, so there is no event to wait for: in two more tries of the lock the standby does not lead.
    time.sleep(2 * LOCK_POLL)
    assert "leader; syncing" in first.text() and "leader; syncing" not in second.text()
    assert len(leader_lock_pids(pg_lab.cluster.pk)) == 1

    first.proc.kill()  # kill -9: no cleanup at all
    first.proc.wait()
    killed = time.monotonic()
    pg_lab.emu.add_pod(workload("after-failover", "rnd-a", "a100-2"))
    pg_lab.emu.delete_pod("runai-rnd-a", "train-1")
    done = wait_for(lambda: Pod.objects.filter(name="after-failover").exists()
                    and not Pod.objects.filter(name="train-1").exists(), what="the standby to take over")
    assert done - killed < 30
    assert "leader; syncing" in second.text()
    assert Node.objects.count() == 4


def test_a_leader_that_lost_its_lock_writes_nothing(pg_lab):
    old = pg_lab.spawn("old")
    wait_for(lambda: Pod.objects.count() == 8, timeout=STARTUP, what="the initial sync")
    new = pg_lab.spawn("new")
    wait_for(lambda: "standby" in new.text(), timeout=STARTUP, what="the standby")
    [lock_pid] = leader_lock_pids(pg_lab.cluster.pk)

    # Freeze the leader so that it cannot notice, and cut its lock connection: the standby takes over.
    old.proc.send_signal(signal.SIGSTOP)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [lock_pid])
    wait_for(lambda: "leader; syncing" in new.text(), what="the standby to become leader")
    pg_lab.emu.add_pod(workload("during-handover", "rnd-a", "a100-2"))
    wait_for(lambda: Pod.objects.filter(name="during-handover").exists(), what="the new leader's write")

    # The old leader wakes up with that event queued on its watch: it must not write it (nor anything).
    mark = old.size()
    old.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: "lost" in old.text(mark), what="the old leader to notice", timeout=15)
    time.sleep(2 * LOCK_POLL)  # must not happen: standing by for two tries of the lock, it writes nothing
    after = old.text(mark)
    assert " wrote " not in after, after
    assert Pod.objects.filter(name="during-handover").count() == 1
    assert leader_lock_pids(pg_lab.cluster.pk) != [lock_pid]


def test_the_write_fence_refuses_once_the_lock_connection_is_gone(db):
    import threading

    from django.db import transaction

    from nodepools.sync import LeadershipLost, PgLeadership

    leadership = PgLeadership(cluster_id=424242, poll=0.1)
    assert leadership.acquire(threading.Event())
    try:
        with transaction.atomic():
            leadership.fence()  # ours: passes
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [leadership.backend_pid])
        # pg_terminate_backend only signals the backend: its lock is gone once it has exited.
        wait_for(lambda: not leader_lock_pids(424242), timeout=10, what="the lock connection to end")
        with pytest.raises(LeadershipLost), transaction.atomic():
            leadership.fence()
        assert not leadership.check()
    finally:
        leadership.release()
