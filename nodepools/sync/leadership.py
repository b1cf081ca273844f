"""Leadership: one sync process acts per cluster, and a hung leader is replaced.

PostgreSQL: the leader holds pg_try_advisory_lock(LEADER_KEY, cluster) on a dedicated connection and
writes `Cluster.leader_heartbeat = now()` through that connection every `heartbeat_interval`. Every write
transaction first calls `fence()`: it takes FENCE_KEY shared and checks in pg_locks that our lock
connection still holds the leader lock, so a process that lost the lock writes nothing.

A standby polls the lock. A leader that crashed loses its session and so its lock. A hung leader (stopped,
deadlocked) keeps both: when the heartbeat (by the database's clock) and the lock session's last activity
are both older than `takeover_after`, the standby ends that session (`pg_terminate_backend`, the holder
found in pg_locks joined to pg_stat_activity) and takes the lock. It then takes FENCE_KEY exclusively
once, so it starts only after every write of the old leader has ended; writes of a hung leader that
still hold FENCE_KEY past `takeover_after` are ended too. The old leader, if it ever resumes, finds its
lock connection gone: its heartbeat, its fence and its lock check fail, and it stands by.

SQLite: a single sync process is assumed (`SingleLeadership`); it still leaves the heartbeat.
"""
from __future__ import annotations

import logging
import threading
import time

import psycopg
from django.db import connection
from django.db.models.functions import Now

from nodepools.models import Cluster

logger = logging.getLogger("nodepools.sync")

LEADER_KEY, FENCE_KEY = 0x6770, 0x6771  # advisory lock classes ("gp", "gq"); the object is the cluster id

# Advisory locks are per database: other databases on the server (another console) have their own.
_THIS_DATABASE = "l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
_HOLDERS_SQL = (
    "SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.classid::bigint = %s "
    f"AND l.objid::bigint = %s AND l.objsubid = 2 AND l.granted AND l.pid <> pg_backend_pid() AND {_THIS_DATABASE}"
)


class LeadershipLost(Exception):
    pass


class SingleLeadership:
    """SQLite: one sync process is assumed (run a single `sync_clusters`); always the leader."""

    def __init__(self, cluster_id: int | None = None) -> None:
        self.cluster_id = cluster_id

    def acquire(self, stop: threading.Event) -> bool:
        self.heartbeat()
        return True

    def check(self) -> bool:
        return True

    def fence(self) -> None:
        pass

    def heartbeat(self) -> None:
        if self.cluster_id is not None:
            Cluster.objects.filter(pk=self.cluster_id).update(leader_heartbeat=Now())

    def release(self) -> None:
        pass


class PgLeadership:
    """The leader lock, the heartbeat and the write fence of one cluster on PostgreSQL."""

    def __init__(self, cluster_id: int, poll: float, takeover_after: float = 15.0) -> None:
        self.cluster_id, self.poll, self.takeover_after = cluster_id, poll, takeover_after
        self.conn = None
        self.backend_pid: int | None = None

    def _connect(self):
        params = connection.settings_dict
        kwargs = {"dbname": params["NAME"], "user": params.get("USER") or None,
                  "password": params.get("PASSWORD") or None, "host": params.get("HOST") or None,
                  "port": params.get("PORT") or None, "autocommit": True, "connect_timeout": 10,
                  "application_name": f"gpu-console-sync-lock:{self.cluster_id}"}
        return psycopg.connect(**{k: v for k, v in kwargs.items() if v is not None})

    def acquire(self, stop: threading.Event) -> bool:
        """Wait (as standby) until the lock is ours; False if stopped first."""
        # A standby looks often enough to take over a hung leader within `takeover_after` + ~10 %.
        poll = max(0.05, min(self.poll, self.takeover_after / 10))
        while not stop.is_set():
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = self._connect()
                    self.backend_pid = self.conn.info.backend_pid
                got = self._try_lock(LEADER_KEY)
                if not got and self._take_over_if_hung():
                    got = self._wait_for_lock(LEADER_KEY, timeout=5.0)
                if got:
                    self._wait_for_fence(stop)
                    self.heartbeat()
                    return True
            except LeadershipLost:
                raise
            except Exception as exc:
                logger.warning("cluster %s: leader lock: %s", self.cluster_id, exc)
                self._close()
            stop.wait(poll)
        return False

    def _try_lock(self, key: int) -> bool:
        return bool(self.conn.execute("SELECT pg_try_advisory_lock(%s, %s)", [key, self.cluster_id]).fetchone()[0])

    def _wait_for_lock(self, key: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self._try_lock(key):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def _take_over_if_hung(self) -> bool:
        """End the leader's lock session if it left no heartbeat and did nothing for `takeover_after`."""
        row = self.conn.execute(
            "SELECT a.pid, EXTRACT(EPOCH FROM now() - c.leader_heartbeat), EXTRACT(EPOCH FROM now() - a.state_change), "
            "a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "CROSS JOIN (SELECT leader_heartbeat FROM nodepools_cluster WHERE id = %s) c "
            "WHERE l.locktype = 'advisory' AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 2 "
            f"AND l.granted AND l.pid <> pg_backend_pid() AND {_THIS_DATABASE}",
            [self.cluster_id, LEADER_KEY, self.cluster_id],
        ).fetchone()
        if row is None:
            return False
        pid, heartbeat_age, idle_for, application = row
        heartbeat_age = float("inf") if heartbeat_age is None else float(heartbeat_age)
        idle_for = float("inf") if idle_for is None else float(idle_for)
        if heartbeat_age <= self.takeover_after or idle_for <= self.takeover_after:
            return False
        logger.warning("cluster %s: the leader (lock session %s, %s) left no heartbeat for %.0fs: ending its "
                       "session and taking over", self.cluster_id, pid, application, heartbeat_age)
        self.conn.execute("SELECT pg_terminate_backend(%s)", [pid])
        self._end_fence_holders()
        return True

    def _end_fence_holders(self) -> None:
        """Write transactions of a hung leader still holding FENCE_KEY: end them (they can never commit)."""
        for (pid,) in self.conn.execute(_HOLDERS_SQL, [FENCE_KEY, self.cluster_id]).fetchall():
            logger.warning("cluster %s: ending a write of the replaced leader (session %s)", self.cluster_id, pid)
            self.conn.execute("SELECT pg_terminate_backend(%s)", [pid])

    def _wait_for_fence(self, stop: threading.Event) -> None:
        """FENCE_KEY exclusively once: every write of a previous leader has ended."""
        deadline = time.monotonic() + self.takeover_after
        while not self._try_lock(FENCE_KEY):
            if time.monotonic() >= deadline:
                self._end_fence_holders()
                deadline = time.monotonic() + self.takeover_after
            if stop.wait(0.05):
                break
        self.conn.execute("SELECT pg_advisory_unlock(%s, %s)", [FENCE_KEY, self.cluster_id])

    def heartbeat(self) -> None:
        """Leave `Cluster.leader_heartbeat` (through the lock connection: a lost lock cannot beat)."""
        try:
            self.conn.execute("UPDATE nodepools_cluster SET leader_heartbeat = now() WHERE id = %s", [self.cluster_id])
        except Exception as exc:
            raise LeadershipLost(f"cluster {self.cluster_id}: could not leave the heartbeat: {exc}") from exc

    def check(self) -> bool:
        try:
            return bool(self.conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = %s "
                "AND objid::bigint = %s AND objsubid = 2 AND pid = pg_backend_pid() AND granted)",
                [LEADER_KEY, self.cluster_id],
            ).fetchone()[0])
        except Exception as exc:
            logger.warning("cluster %s: leader lock connection lost: %s", self.cluster_id, exc)
            return False

    def fence(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", [FENCE_KEY, self.cluster_id])
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = %s "
                "AND objid::bigint = %s AND objsubid = 2 AND pid = %s AND granted)",
                [LEADER_KEY, self.cluster_id, self.backend_pid],
            )
            if not cursor.fetchone()[0]:
                raise LeadershipLost(f"cluster {self.cluster_id}: the leader lock is no longer ours")

    def _close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:  # pragma: no cover
                pass
        self.conn = None

    def release(self) -> None:
        self._close()  # closing the session releases its advisory locks


def leadership_for(cluster_id: int, options) -> SingleLeadership | PgLeadership:
    if connection.vendor == "postgresql":
        return PgLeadership(cluster_id, options.lock_poll, options.takeover_after)
    return SingleLeadership(cluster_id)
