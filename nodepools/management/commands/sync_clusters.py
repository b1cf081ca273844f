"""Keep every registered cluster's Nodes and Pods mirrored until stopped (see nodepools/sync/).

Run one per deployment (more on PostgreSQL for failover: one leader per cluster, the others standby).
"""
from __future__ import annotations

import dataclasses
import gc
import logging
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand

from common.metrics import add_sync_server_arguments, start_sync_server_from_options
from nodepools.sync import SyncOptions, run_clusters
from nodepools.sync.options import HELP

logger = logging.getLogger("nodepools.sync")


class Command(BaseCommand):
    help = "Mirror the Nodes and Pods of every registered cluster (list + watch), until stopped."
    # No system checks at start: they import every URLconf and view (seconds before the first list), and the
    # web processes and `manage.py check` (CI) run them for the same code.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--cluster", action="append", dest="clusters", metavar="NAME",
                            help="sync only this cluster (repeatable); default: every registered cluster")
        defaults = SyncOptions()
        for field in dataclasses.fields(SyncOptions):
            parser.add_argument("--" + field.name.replace("_", "-"), type=type(getattr(defaults, field.name)),
                                default=getattr(defaults, field.name),
                                help=f"{HELP.get(field.name, field.name.replace('_', ' '))} (default {getattr(defaults, field.name)})")
        add_sync_server_arguments(parser)  # --metrics-port: /metrics and /readyz of this process

    def handle(self, *args, clusters=None, **options):
        # A long-running writer: no per-query debug logging (it costs more than the writes themselves).
        settings.DEBUG = False
        # The mirror keeps hundreds of thousands of long-lived objects and every list page makes tens of
        # thousands of short-lived ones: with the default thresholds the cyclic GC rescans the mirror
        # so often that it costs more than the parsing (the worker also freezes the heap after full lists).
        gc.set_threshold(100_000, 50, 100)
        values = {f.name: options[f.name] for f in dataclasses.fields(SyncOptions)}
        stop = threading.Event()

        def on_signal(signum, frame):
            logger.info("sync stopping (signal %s)", signum)
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        start_sync_server_from_options(options)
        logger.info("sync started%s", f" for {', '.join(clusters)}" if clusters else "")
        run_clusters(stop, SyncOptions(**values), clusters)
        logger.info("sync stopped")
