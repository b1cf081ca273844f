"""One cluster's sync: an informer thread per registered resource and the writer (the calling thread).

The writer takes what the informers send, feeds the `Mirror` and writes each batch in one transaction
(fenced by the leadership), keeps the cluster's connection state (connected / degraded / unreachable,
last error, last full sync), leaves the leader's heartbeat and sends coalesced change hints.
"""
from __future__ import annotations

import gc
import logging
import queue
import threading
import time
from datetime import datetime
from typing import Any, Callable

from django.db import transaction
from django.utils import timezone as dj_timezone

from common import metrics
from nodepools import versions
from nodepools.models import Cluster, ConnectionState
from nodepools.sync.hints import Hinter
from nodepools.sync.informer import Informer, api_client_for
from nodepools.sync.leadership import LeadershipLost, SingleLeadership
from nodepools.sync.mirror import Mirror
from nodepools.sync.options import SyncOptions
from nodepools.sync.resources import PODS, REGISTRY
from nodepools.sync.tasks import TASKS, LeaderTasks

logger = logging.getLogger("nodepools.sync")


class ClusterSync:
    """Informers for one cluster plus the writer that applies their output (in the calling thread).

    `start()`, then `step()` repeatedly (or `run_until(...)` in tests, `run(stop)` in production),
    then `stop()`.
    """

    def __init__(self, cluster: Cluster, options: SyncOptions | None = None, leadership=None,
                 resources: list[str] | None = None, run_tasks: bool = True) -> None:
        self.cluster = cluster
        self.run_tasks = run_tasks
        self.tasks: LeaderTasks | None = None
        self.options = options or SyncOptions()
        self.leadership = leadership or SingleLeadership(cluster.pk)
        self.resource_names = list(resources or REGISTRY)
        self.queue: queue.Queue = queue.Queue(maxsize=max(4, self.options.queue_pages))
        self.mirror: Mirror | None = None
        self.api_client = None
        self.informers: list[Informer] = []
        self.health: dict[str, tuple[bool, float, str]] = {}
        self.listed: set[str] = set()
        self.listing: set[str] = set()
        self.state: str | None = None
        self.last_error: str | None = None
        self.full_sync_at: datetime | None = None
        self.hinter = Hinter(cluster.pk, self.options.hint_interval, self.leadership.fence)
        self.batches = 0
        self.started = time.monotonic()
        self.pods_current_written = 0.0  # monotonic time Cluster.pods_current_at was last written

    def start(self) -> None:
        self.mirror = Mirror(self.cluster, self.resource_names, self.options.copy_min_rows)
        self.state = self.cluster.connection_state
        self.started = time.monotonic()
        try:
            self.api_client = api_client_for(self.cluster)
        except Exception as exc:
            # A broken kubeconfig: the cluster is unreachable until it is fixed (the runner retries).
            self.health = {name: (False, self.started, str(exc)) for name in self.resource_names}
            self.last_error = f"cannot configure the client: {exc}"
            raise
        self.informers = [Informer(REGISTRY[name], self.api_client, self.queue, self.options, self.cluster.name)
                          for name in self.resource_names]
        for informer in self.informers:
            informer.start()
        # The leader's other work (e.g. writing the scheduler's queues), off the writer's thread.
        self.tasks = LeaderTasks(self.cluster, self.api_client, self.leadership) if TASKS and self.run_tasks else None
        if self.tasks is not None and not self.tasks.inline:
            self.tasks.start()

    def stop(self) -> None:
        if getattr(self, "tasks", None) is not None:
            self.tasks.stop()
            if self.tasks.is_alive():
                self.tasks.join(timeout=10)
        for informer in self.informers:
            informer.stop()
        for informer in self.informers:
            informer.join(timeout=5)
        if self.api_client is not None:
            try:
                self.api_client.close()
            except Exception:  # pragma: no cover
                pass

    # -- the writer --------------------------------------------------------------------------------
    def _gather(self, timeout: float, take: Callable[[tuple], None]) -> int:
        """Hand what the informers send to `take` (one transaction's worth); returns how many messages.

        Watch events: those arriving within `batch_delay` of the first (a lone change is not held up).
        A full list: its pages while they keep coming (each within `list_batch_delay` of the previous),
        until every list is complete, `list_batch_max` objects or `list_batch_seconds`, so
        that a list is written in a few big transactions (PostgreSQL: through COPY) rather than one per
        page. Each message is taken as it arrives: the writer turns a page into rows while the
        informer fetches the next."""
        try:
            message = self.queue.get(timeout=timeout)
        except queue.Empty:
            return 0
        options = self.options
        started = time.monotonic()
        deadline = started + options.batch_delay
        limit, objects, count = options.batch_max, 0, 0
        listing = self.listing  # (kept by `take`: a page adds its kind, the list's end removes it)
        every = set(self.resource_names)
        while True:
            take(message)
            count += 1
            objects += self._size(message)
            what = message[0]
            if what == "page":
                limit = options.list_batch_max
                deadline = max(deadline, time.monotonic() + options.list_batch_delay)
            elif what == "listed" and not listing and self.listed >= every:
                break  # every list is complete (at start: of every kind, not only the first to end): write it now
            if objects >= limit or (listing and time.monotonic() - started >= options.list_batch_seconds):
                break
            remaining = deadline - time.monotonic()
            try:
                message = self.queue.get(timeout=remaining) if remaining > 0 else self.queue.get_nowait()
            except queue.Empty:
                break
        return count

    @staticmethod
    def _size(message: tuple) -> int:
        return len(message[2]) if message[0] in ("page", "events") else 1

    def step(self, timeout: float | None = None) -> dict[str, int]:
        """Take what the informers sent (waiting up to `timeout`), write it in one transaction."""
        wait = self.options.tick if timeout is None else timeout
        due = self.hinter.due_in()
        if due is not None:  # a coalesced hint is waiting: wake up when it may leave, not at the next tick
            wait = min(wait, due)
        mirror = self.mirror
        full_list = False
        received: dict[str, float] = {}  # per kind, when its oldest change in this batch came off the wire

        def take(message: tuple) -> None:
            nonlocal full_list
            what, kind = message[0], message[1]
            if what in ("page", "events"):
                received[kind] = min(received.get(kind, message[-1]), message[-1])
            if what == "page":
                self.listing.add(kind)
                seen = message[3]
                apply = mirror.apply
                for obj in message[2]:
                    apply(kind, obj, seen)
            elif what == "events":
                for event_type, obj in message[2]:
                    if event_type == "DELETED":
                        mirror.delete(kind, obj)
                    else:
                        mirror.apply(kind, obj)
            elif what == "listed":
                swept = mirror.sweep(kind, message[2])
                if swept:
                    logger.info("cluster %s: %d %s gone since the last list", self.cluster.name, swept, kind)
                self.listed.add(kind)
                self.listing.discard(kind)
                metrics.sync_relisted(self.cluster.name, kind)
                self.health[kind] = (True, time.monotonic(), "")
                full_list = True
            elif what == "health":
                error = message[2]
                previous = self.health.get(kind)
                if error is None:
                    self.health[kind] = (True, time.monotonic(), "")
                else:
                    since = previous[1] if previous and not previous[0] else time.monotonic()
                    self.health[kind] = (False, since, error)
                    self.last_error = error

        self._gather(wait, take)
        # A hint due for batches already committed leaves now, not after this batch is written too.
        self.hinter.flush()
        cluster_changes = self._state_changes(full_list)
        self._pods_current(cluster_changes)
        # A full list still arriving from a healthy informer: set-wise derivation waits for its end.
        mirror.list_in_progress = any(self.health.get(kind, (True,))[0] for kind in self.listing)
        # ... and the pods' lifetimes, which the end of the pods' list writes in full.
        mirror.pods_listing = PODS in self.listing and self.health.get(PODS, (True,))[0]
        written: dict[str, int] = {}
        if mirror.pending or cluster_changes:
            written = self._write(cluster_changes)
        for kind, at in received.items():  # committed (or nothing to write): the database caught up
            metrics.sync_event_seen(self.cluster.name, kind, at)
        self.hinter.flush()
        if self.tasks is not None and self.tasks.inline and self.listed:
            self.tasks.tick()  # SQLite: the leader's other work between batches, one writer at a time
        return written

    def _state_changes(self, full_list: bool) -> dict[str, Any]:
        now = time.monotonic()
        every = set(self.resource_names)
        failing = [kind for kind in self.resource_names if kind in self.health and not self.health[kind][0]]
        if not failing:
            state = ConnectionState.CONNECTED if set(self.health) >= every else self.state
        elif len(failing) == len(every) and min(self.health[k][1] for k in failing) <= now - self.options.unreachable_after:
            state = ConnectionState.UNREACHABLE
        else:
            state = ConnectionState.DEGRADED
        changes: dict[str, Any] = {}
        if state != self.state:
            changes["connection_state"] = state
        if self.last_error is not None and self.last_error != self.cluster.last_error:
            changes["last_error"] = self.last_error[:2000]
        if full_list and self.listed >= every and not self.listing:  # every resource listed afresh
            changes["last_full_sync"] = dj_timezone.now()
        if "connection_state" in changes:
            self.mirror.set_unreachable(state == ConnectionState.UNREACHABLE)
        return changes

    def _pods_current(self, changes: dict[str, Any]) -> None:
        """While the pods are listed and their watch is healthy, the mirror holds every pod as of now: the
        mirror remembers it (a pod a later list misses ended then), and `Cluster.pods_current_at` says it
        every `pods_current_every` seconds (the GPU-hours ledger closes an hour once it passed its end)."""
        if PODS not in self.resource_names or PODS not in self.listed or PODS in self.listing:
            return
        if not self.health.get(PODS, (False,))[0]:
            return
        now = dj_timezone.now()
        self.mirror.in_view_at = now
        if time.monotonic() - self.pods_current_written >= self.options.pods_current_every:
            changes["pods_current_at"] = now

    def _write(self, cluster_changes: dict[str, Any]) -> dict[str, int]:
        try:
            with transaction.atomic():
                self.leadership.fence()
                versions.lock(self.cluster.pk)  # before any node or pod row (nodepools.versions)
                written = self.mirror.flush()
                if cluster_changes:
                    Cluster.objects.filter(pk=self.cluster.pk).update(**cluster_changes)
        except LeadershipLost:
            raise
        except Exception:
            # The transaction rolled back: the in-memory index no longer matches the database.
            self.mirror = None
            raise
        for field, value in cluster_changes.items():
            setattr(self.cluster, field, value)
        if "pods_current_at" in cluster_changes:
            self.pods_current_written = time.monotonic()
        if "last_full_sync" in cluster_changes:
            # What the mirror holds now is long-lived: keep it out of the cyclic GC's scans.
            gc.collect(1)
            gc.freeze()
        if "connection_state" in cluster_changes:
            self.state = cluster_changes["connection_state"]
            logger.info("cluster %s: %s", self.cluster.name, self.state)
        self.batches += 1
        for kind, n in written.items():
            metrics.sync_rows_written(self.cluster.name, kind, n)
        kinds = {kind.removesuffix("_deleted") for kind, n in written.items() if n}
        if set(cluster_changes) - {"pods_current_at"}:  # connection state, last full sync, last error: shown live
            kinds.add("cluster")
        if kinds:
            logger.info("cluster %s: wrote %s", self.cluster.name,
                        ", ".join(f"{n} {k}" for k, n in sorted(written.items()) if n) or "cluster state")
            flushed_at = getattr(self.mirror, "flushed_at", None)
            self.hinter.add(kinds, flushed_at.timestamp() if flushed_at is not None else None)
        return written

    def run_until(self, condition: Callable[[], bool], timeout: float = 20.0) -> bool:
        """Step until `condition()` holds (checked after each step); False on timeout. For tests."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.step(timeout=0.05)
            if condition():
                self.hinter.flush(force=True)
                return True
        return False

    def run(self, stop: threading.Event) -> None:
        """Until `stop` is set or the leadership is lost (raises LeadershipLost)."""
        options = self.options
        next_check = time.monotonic() + options.lock_poll
        next_beat = time.monotonic() + options.heartbeat_interval
        while not stop.is_set():
            self.step()
            now = time.monotonic()
            if now >= next_beat:
                self.leadership.heartbeat()
                next_beat = now + options.heartbeat_interval
            if now >= next_check:
                if not self.leadership.check():
                    raise LeadershipLost(f"cluster {self.cluster.name}: lost the leader lock")
                next_check = now + options.lock_poll
        self.hinter.flush(force=True)
