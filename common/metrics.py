"""Prometheus metrics of the console (prometheus-client), in one place for every process.

The web processes expose them at `/metrics` (console/health.py, bearer token from METRICS_TOKEN_FILE).
The sync runs in a process of its own: it calls the `sync_*` functions below and serves its metrics and
its readiness on a port of its own with `start_sync_server(port)` (`/metrics`, `/readyz`, `/healthz`),
reached only inside the cluster (deploy/base/networkpolicy.yaml lets only the monitoring namespace in).

Each process has its own registry (the default one): every web replica and every sync replica is
scraped on its own, as Prometheus does with pods.
"""
from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest

# --- Web -------------------------------------------------------------------------------------------------

REQUEST_LATENCY = Histogram(
    "console_http_request_duration_seconds",
    "Time to answer an HTTP request, by view and status code.",
    ["view", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
WEBSOCKET_CLIENTS = Gauge("console_websocket_clients", "Open live-update websockets of this process.")
HINTS_SENT = Counter("console_hints_sent_total", "Change hints sent to the live pages, by kind.", ["kind"])

# --- Sync ------------------------------------------------------------------------------------------------

SYNC_LAG = Gauge(
    "console_sync_lag_seconds",
    "Seconds by which the database trailed the cluster's watch stream at the sync's last commit: commit time "
    "minus the time the oldest change of that commit was received from the API server, by cluster and kind.",
    ["cluster", "kind"],
)
SYNC_LAST_EVENT = Gauge(
    "console_sync_last_event_timestamp_seconds",
    "Unix time the sync last committed changes it received (time() minus this = age of the last event).",
    ["cluster", "kind"],
)
SYNC_WATCH_RESTARTS = Counter(
    "console_sync_watch_restarts_total", "Watches that ended and were resumed or restarted.", ["cluster", "kind"]
)
SYNC_ROWS_WRITTEN = Counter(
    "console_sync_rows_written_total", "Rows the sync inserted, updated or deleted.", ["cluster", "kind"]
)
SYNC_RELISTS = Counter("console_sync_relists_total", "Full lists (first list, 410 Gone, resync).", ["cluster", "kind"])
SYNC_LEADER = Gauge("console_sync_leader", "1 when this process holds the cluster's sync lock, else 0.", ["cluster"])

_sync_state_lock = threading.Lock()
_sync_leaders: dict[str, bool] = {}
_sync_last_event: dict[str, float] = {}
_sync_started = time.time()


def observe_request(view: str, method: str, status: int, seconds: float) -> None:
    REQUEST_LATENCY.labels(view=view, method=method, status=str(status)).observe(seconds)


def websocket_opened() -> None:
    WEBSOCKET_CLIENTS.inc()


def websocket_closed() -> None:
    WEBSOCKET_CLIENTS.dec()


def hint_sent(kinds) -> None:
    """One hint sent (nodepools.hints.publish): counted once per kind it names."""
    for kind in kinds or ("",):
        HINTS_SENT.labels(kind=kind).inc()


def _as_timestamp(when: datetime | float | None) -> float:
    if when is None:
        return time.time()
    if isinstance(when, datetime):
        return when.timestamp()
    return float(when)


def sync_event_seen(cluster: str, kind: str, when: datetime | float | None = None) -> None:
    """The sync committed changes of `kind` in `cluster` it received from the API server at `when` (the
    writer calls this after each commit, nodepools/sync/worker.py): the lag is now minus `when`."""
    now = time.time()
    SYNC_LAG.labels(cluster=cluster, kind=kind).set(max(0.0, now - _as_timestamp(when)))
    SYNC_LAST_EVENT.labels(cluster=cluster, kind=kind).set(now)
    with _sync_state_lock:
        _sync_last_event[cluster] = now


def sync_watch_restarted(cluster: str, kind: str) -> None:
    SYNC_WATCH_RESTARTS.labels(cluster=cluster, kind=kind).inc()


def sync_rows_written(cluster: str, kind: str, n: int) -> None:
    if n > 0:
        SYNC_ROWS_WRITTEN.labels(cluster=cluster, kind=kind).inc(n)


def sync_relisted(cluster: str, kind: str) -> None:
    SYNC_RELISTS.labels(cluster=cluster, kind=kind).inc()
    with _sync_state_lock:
        # A full list is an event too: a quiet cluster is not a stale one right after its list.
        _sync_last_event[cluster] = time.time()


def sync_leadership(cluster: str, leader: bool) -> None:
    """This process took (True) or lost / does not hold (False) the cluster's advisory lock."""
    SYNC_LEADER.labels(cluster=cluster).set(1 if leader else 0)
    with _sync_state_lock:
        _sync_leaders[cluster] = leader


def sync_status() -> dict[str, Any]:
    """The sync's readiness report: leader or standby, and per cluster the age of its last event."""
    now = time.time()
    with _sync_state_lock:
        leaders = dict(_sync_leaders)
        last = dict(_sync_last_event)
    clusters = {}
    for name in sorted(set(leaders) | set(last)):
        clusters[name] = {
            "leader": leaders.get(name, False),
            "last_event_age_seconds": round(now - last[name], 3) if name in last else None,
        }
    return {
        "role": "leader" if any(leaders.values()) else "standby",
        "uptime_seconds": round(now - _sync_started, 3),
        "clusters": clusters,
    }


def sync_reset_state() -> None:
    """Forget leadership and events (tests; a restarted sync loop)."""
    with _sync_state_lock:
        _sync_leaders.clear()
        _sync_last_event.clear()


class _SyncHandler(BaseHTTPRequestHandler):
    server_version = "console-sync"

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body, ctype = generate_latest(REGISTRY), CONTENT_TYPE_LATEST
        elif path in ("/readyz", "/healthz"):
            # A standby is ready too: it is up and will take over when the leader goes.
            body, ctype = json.dumps(sync_status()).encode(), "application/json"
        else:
            self.send_error(404, "Not found: /metrics, /readyz or /healthz")
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):  # scrapes every few seconds would flood the log
        pass


def start_sync_server(port: int, addr: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Serve the sync's /metrics and /readyz on `port` from a daemon thread (port 0: any free one)."""
    server = ThreadingHTTPServer((addr, port), _SyncHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="sync-metrics", daemon=True).start()
    return server


def add_sync_server_arguments(parser) -> None:
    """For `sync_clusters`: `--metrics-port` (default SYNC_METRICS_PORT or off)."""
    default = int(os.environ.get("SYNC_METRICS_PORT", "0") or 0)
    parser.add_argument("--metrics-port", type=int, default=default,
                        help="serve /metrics and /readyz on this port (0: off; default $SYNC_METRICS_PORT)")


def start_sync_server_from_options(options: dict) -> ThreadingHTTPServer | None:
    port = options.get("metrics_port") or 0
    return start_sync_server(port) if port else None


class WebsocketMetricsMiddleware:
    """ASGI middleware counting accepted websockets of this process (the live pages' clients)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        accepted = False

        async def counting_send(message):
            nonlocal accepted
            if message["type"] == "websocket.accept" and not accepted:
                accepted = True
                websocket_opened()
            await send(message)

        try:
            return await self.app(scope, receive, counting_send)
        finally:
            if accepted:
                websocket_closed()
