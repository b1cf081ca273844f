"""Work the leader of a cluster does besides mirroring: tasks that apps above register at start-up.

A task is `fn(cluster, api_client)`, run every `every` seconds in a thread of its own (so that a slow
API call never holds up the mirror's writer), only while this process leads the cluster. The leader
checks its lock before each run; a task's writes go through the services like any other write.
Enforcement (the scheduler's queues, `enforcers`) is one: it registers in its AppConfig.ready().
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from django.db import close_old_connections, connection

from audit.context import SYNC, via

logger = logging.getLogger("nodepools.sync")


@dataclass(frozen=True)
class LeaderTask:
    name: str
    fn: Callable[[Any, Any], Any]  # (cluster, api_client) -> anything
    every: float | Callable[[], float] = 5.0  # seconds, or a function read at each run (a setting)

    def period(self) -> float:
        return float(self.every()) if callable(self.every) else float(self.every)


TASKS: dict[str, LeaderTask] = {}


def register_leader_task(name: str, fn: Callable[[Any, Any], Any],
                         every: float | Callable[[], float] = 5.0) -> LeaderTask:
    TASKS[name] = task = LeaderTask(name, fn, every)
    return task


class LeaderTasks(threading.Thread):
    """Runs the registered tasks for one cluster until stopped (or the lock is lost): in a thread of its
    own on PostgreSQL; on SQLite, which writes one transaction at a time, the writer calls `tick()`
    between its batches instead (`inline`)."""

    def __init__(self, cluster, api_client, leadership, stop: threading.Event | None = None) -> None:
        super().__init__(name=f"leader-tasks-{cluster.name}", daemon=True)
        self.cluster, self.api_client, self.leadership = cluster, api_client, leadership
        self.stop_event = stop or threading.Event()
        self.runs: dict[str, int] = {}
        self.errors: dict[str, str] = {}
        self.due: dict[str, float] = {name: 0.0 for name in TASKS}
        self.inline = connection.vendor == "sqlite"

    def stop(self) -> None:
        self.stop_event.set()

    def run_once(self, task: LeaderTask) -> None:
        if not self.inline:
            close_old_connections()
        try:
            if not self.leadership.check():
                self.stop_event.set()
                return
            with via(SYNC):
                task.fn(self.cluster, self.api_client)
            self.errors.pop(task.name, None)
        except Exception as exc:  # noqa: BLE001 - a failing round is retried at the next tick
            self.errors[task.name] = f"{type(exc).__name__}: {exc}"
            logger.warning("cluster %s: %s: %s", self.cluster.name, task.name, exc)
        finally:
            self.runs[task.name] = self.runs.get(task.name, 0) + 1

    def tick(self) -> float:
        """Run the tasks that are due; returns the seconds until the next one is."""
        now = time.monotonic()
        for name, task in list(TASKS.items()):
            if self.stop_event.is_set():
                break
            if now >= self.due.get(name, 0.0):
                self.run_once(task)
                self.due[name] = time.monotonic() + task.period()
        return min((self.due[n] for n in TASKS), default=now + 1.0) - time.monotonic()

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                wait = self.tick()
                self.stop_event.wait(max(0.05, min(wait, 1.0)))
        finally:
            connection.close()
