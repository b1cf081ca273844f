"""The sync's tunables (every one is a `sync_clusters` option)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SyncOptions:
    """Tunables; the defaults are production values, tests shrink the intervals."""

    page_limit: int = 500
    backoff_base: float = 0.8
    backoff_max: float = 30.0
    connect_timeout: float = 10.0
    read_timeout: float = 90.0  # no byte for this long on a watch (bookmarks arrive ~every minute): reconnect
    list_timeout: float = 60.0
    watch_timeout_min: int = 300
    watch_timeout_max: int = 600
    unreachable_after: float = 20.0  # every watch failing this long: the cluster is unreachable
    # Gather events this long after the first one into one transaction. Short: what queued while the
    # previous transaction was written is taken at once anyway (a busy writer batches by itself), so a
    # longer wait only delays a lone change on its way to the open pages (bench/live.py).
    batch_delay: float = 0.01
    # While a full list arrives: its pages are gathered while they keep coming (the next within this long),
    # up to `list_batch_max` objects or `list_batch_seconds`, so that a list of hundreds of pages is written
    # in a few big transactions through the bulk path, not one small transaction per page.
    list_batch_delay: float = 0.25
    list_batch_seconds: float = 2.0
    batch_max: int = 2000  # objects per transaction during watches (SQLite: keep write transactions short)
    list_batch_max: int = 20000  # objects per transaction while a full list arrives (bulk path)
    copy_min_rows: int = 1000  # PostgreSQL: upsert through COPY into a staging table from this many rows
    # List pages buffered between the informers and the writer (bounds memory): enough that the informers keep
    # fetching while the writer commits a big batch of a full list (its COPY, upsert and commit).
    queue_pages: int = 32
    tick: float = 0.5  # the writer wakes at least this often (state, hints, leadership)
    hint_interval: float = 0.3  # at most one change hint per cluster this often (a due hint wakes the writer)
    lock_poll: float = 5.0  # standby retries the lock / leader re-checks it this often
    heartbeat_interval: float = 5.0  # the leader writes Cluster.leader_heartbeat this often
    takeover_after: float = 15.0  # PostgreSQL: a standby ends the lock session of a leader silent this long
    rescan: float = 10.0  # sync_clusters looks for added/removed clusters this often
    absent_recheck: float = 60.0  # an optional resource the cluster does not serve (no CRD) is looked for again this often
    pods_current_every: float = 30.0  # write Cluster.pods_current_at (the pods' mirror complete until then) this often


HELP = {
    "page_limit": "objects per list page",
    "backoff_base": "first retry delay after an error, doubling (with jitter) up to --backoff-max",
    "read_timeout": "reconnect a watch silent this long",
    "unreachable_after": "every watch failing this long: the cluster is unreachable (its nodes Unknown)",
    "batch_delay": "gather watch events this long into one transaction",
    "list_batch_delay": "while a full list arrives, wait this long for its next page before writing what came",
    "list_batch_seconds": "while a full list arrives, write what came at least this often",
    "list_batch_max": "objects per transaction while a full list arrives",
    "copy_min_rows": "PostgreSQL: write batches of at least this many rows through COPY",
    "lock_poll": "the leader re-checks its lock this often",
    "heartbeat_interval": "the leader writes Cluster.leader_heartbeat this often",
    "takeover_after": "PostgreSQL: a standby ends the lock session of a leader without heartbeat this long, and leads",
    "rescan": "look for added or removed clusters this often",
    "absent_recheck": "look this often again for an optional resource a cluster does not serve (e.g. Karpenter's CRDs)",
    "pods_current_every": "write Cluster.pods_current_at (the pods' mirror is complete until then; the GPU-hours ledger "
                          "closes an hour after it) this often",
}
