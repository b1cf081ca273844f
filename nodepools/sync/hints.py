"""Change hints of the sync, coalesced: at most one per cluster per `hint_interval`.

A hint says which kinds changed ("nodes", "pods", "cluster" when the connection state or the last full
sync changed); the live pages refetch their regions (nodepools/hints.py is the contract).
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Callable, Iterable

from django.db import transaction

from nodepools import hints

logger = logging.getLogger("nodepools.sync")

_hint_loop: Any = None
_hint_loop_lock = threading.Lock()


def _hints_loop():
    """One event loop thread for publishing hints: works from any thread (even one running its own
    event loop, as a test driving a browser does) and never makes the writer wait for Redis."""
    global _hint_loop
    with _hint_loop_lock:
        if _hint_loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="sync-hints", daemon=True).start()
            _hint_loop = loop
        return _hint_loop


class Hinter:
    """Coalesces the kinds changed by committed batches into at most one hint per `interval`.

    `fence` (the leadership's) guards the database mark left for web processes without Redis, so a
    process that lost the leadership writes nothing, not even that mark.
    """

    def __init__(self, cluster_id: int, interval: float, fence: Callable[[], None] | None = None) -> None:
        self.cluster_id, self.interval, self.fence = cluster_id, interval, fence
        self.kinds: set[str] = set()
        self.written: float | None = None  # the newest committed write's stamp (Unix time) not yet announced
        self.last = 0.0
        self.sent = 0

    def add(self, kinds: Iterable[str], written: float | None = None) -> None:
        self.kinds.update(kinds)
        if written is not None:
            self.written = max(self.written or written, written)

    def due_in(self) -> float | None:
        """Seconds until the kinds gathered so far may be sent (0: now); None when there is nothing to send.
        The writer waits no longer than this for new events, so that a coalesced hint leaves on time
        rather than at the writer's next tick."""
        if not self.kinds:
            return None
        return max(0.0, self.interval - (time.monotonic() - self.last))

    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.kinds or (not force and now - self.last < self.interval):
            return

        kinds, self.kinds, self.last = self.kinds, set(), now
        written, self.written = self.written, None
        with transaction.atomic():  # the mark pages compare (and, without Redis, poll)
            if self.fence is not None:
                self.fence()
            hints.record(self.cluster_id)
        future = asyncio.run_coroutine_threadsafe(hints.publish_async(self.cluster_id, kinds, written), _hints_loop())
        future.add_done_callback(self._published)
        self.sent += 1

    def _published(self, future) -> None:
        if future.exception() is not None:  # the live pages miss a hint; the sync goes on
            logger.warning("cluster %s: could not publish a change hint: %s", self.cluster_id, future.exception())
