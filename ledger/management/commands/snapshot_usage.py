"""Store usage snapshots: `--once`, or every `--every` seconds (default USAGE_SNAPSHOT_EVERY, 900) until stopped.

After each snapshot it applies retention, a batch per transaction: usage snapshots older than
USAGE_RETENTION_DAYS, the GPU-hours ledger's hourly rows older than LEDGER_HOURLY_RETENTION_DAYS (its
daily rows stay) and pods' lifetimes ended more than LEDGER_CORRECTION_DAYS ago (`--no-retention` skips it)."""
from __future__ import annotations

import logging
import signal
import threading
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections, connection

from audit.context import COMMAND, via
from ledger.services import ledger_retention_apply
from usage.services import usage_retention_apply, usage_snapshot_take

logger = logging.getLogger("usage.snapshot")


class Command(BaseCommand):
    help = "Store a snapshot of deserved / allocated / over-quota GPU, CPU and memory per pool, department and project."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="Take one snapshot and exit.")
        parser.add_argument("--every", type=int, default=None,
                            help=f"Seconds between snapshots (default {settings.USAGE_SNAPSHOT_EVERY}).")
        parser.add_argument("--count", type=int, default=None, help="Stop after this many snapshots (for tests).")
        parser.add_argument("--no-retention", action="store_true",
                            help="Do not delete expired snapshots, ledger hours and pods' lifetimes.")

    def handle(self, *args, once=False, every=None, count=None, no_retention=False, **options):
        every = every or settings.USAGE_SNAPSHOT_EVERY
        if every < 1:
            raise CommandError("--every must be at least 1 second.")
        stop = threading.Event()
        if not once and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
        taken = 0
        while not stop.is_set():
            started = time.monotonic()
            try:
                with via(COMMAND):
                    rows = usage_snapshot_take()
            except Exception:  # a database hiccup must not end the loop; the next round retries
                logger.exception("usage snapshot failed")
                if once:
                    raise
            else:
                taken += 1
                self.stdout.write(f"usage snapshot: {rows} rows")
                if not no_retention:
                    self._retention()
            finally:
                if not connection.in_atomic_block:  # a long-running loop drops broken or stale connections
                    close_old_connections()
            if once or (count is not None and taken >= count):
                break
            # Keep the cadence: wait the rest of the interval, waking early on SIGTERM / SIGINT.
            stop.wait(max(0.0, every - (time.monotonic() - started)))

    def _retention(self) -> None:
        try:
            expired = usage_retention_apply()
            ledger = ledger_retention_apply()
        except Exception:  # retention is retried at the next round; the snapshot is stored
            logger.exception("retention failed")
            return
        if expired or any(ledger.values()):
            self.stdout.write(f"retention: {expired} usage snapshots, {ledger['ledger_hours']} ledger hours, "
                              f"{ledger['pod_lifetimes']} pods' lifetimes deleted")
