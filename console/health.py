"""The console observing itself: `/healthz`, `/readyz` (for the kubelet's probes) and `/metrics`.

`OpsMiddleware` comes first in MIDDLEWARE. It answers the three paths itself, before SecurityMiddleware
(HTTPS redirect) and CommonMiddleware (ALLOWED_HOSTS): the kubelet and Prometheus reach a pod by its IP
over plain HTTP, with a Host header no ALLOWED_HOSTS list names. Every other request is timed into the
latency histogram, labelled by the view that answered it.
"""
from __future__ import annotations

import hmac
import logging
import time
from pathlib import Path

import redis
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from common import metrics
from common import caches

logger = logging.getLogger(__name__)

_migrations_applied = False  # once true it stays true for this process (a new release is a new pod)


def healthz(request):
    """Alive: the process answers. Touches nothing else, so a slow database never restarts pods."""
    return HttpResponse("ok\n", content_type="text/plain")


def _check_database() -> str | None:
    try:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any driver error means "not reachable" to a probe
        return f"database unreachable: {exc.__class__.__name__}: {exc}".strip()
    return None


def _check_migrations() -> str | None:
    global _migrations_applied
    if _migrations_applied:
        return None

    try:
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:
        return f"migrations could not be checked: {exc.__class__.__name__}: {exc}"
    if plan:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in plan[:5])
        more = f" and {len(plan) - 5} more" if len(plan) > 5 else ""
        return f"migrations not applied: {names}{more} (run python manage.py migrate)"
    _migrations_applied = True
    return None


@caches.register
def _forget_migrations_applied() -> None:
    global _migrations_applied
    _migrations_applied = False


def _check_redis() -> str | None:
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return None

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        return f"redis unreachable: {exc.__class__.__name__}: {exc}"
    return None


def readyz(request):
    """Ready for traffic: database reachable, migrations applied, Redis reachable when REDIS_URL is set.
    503 with the list of what failed."""
    failures = []
    database = _check_database()
    if database:
        failures.append(database)
    else:
        migrations = _check_migrations()
        if migrations:
            failures.append(migrations)
    redis_failure = _check_redis()
    if redis_failure:
        failures.append(redis_failure)
    if failures:
        logger.warning("not ready: %s", "; ".join(failures))
        return JsonResponse({"status": "not ready", "failed": failures}, status=503)
    return JsonResponse({"status": "ready", "checks": ["database", "migrations"] + (["redis"] if settings.REDIS_URL else [])})


def metrics_token() -> str | None:
    path = getattr(settings, "METRICS_TOKEN_FILE", "")
    if not path:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError:
        logger.error("METRICS_TOKEN_FILE %s cannot be read: /metrics refuses every request", path)
        return None
    return token or None


def metrics_view(request):
    """Prometheus exposition, only with `Authorization: Bearer <token of METRICS_TOKEN_FILE>`."""
    expected = metrics_token()
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, given = header.partition(" ")
    if expected is None:
        return HttpResponse("Forbidden: /metrics is off (no METRICS_TOKEN_FILE configured).\n",
                            status=403, content_type="text/plain")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
        return HttpResponse("Forbidden: /metrics needs 'Authorization: Bearer <metrics token>'.\n",
                            status=403, content_type="text/plain")
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
OPS_VIEWS = {"/healthz": healthz, "/readyz": readyz, "/metrics": metrics_view}


def _view_label(request) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "<unmatched>"
    return match.view_name or match.route or "<unnamed>"


class OpsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        ops_view = OPS_VIEWS.get(request.path_info.rstrip("/") or "/")
        if ops_view is not None:
            if request.method not in ("GET", "HEAD"):
                return HttpResponse("Method not allowed.\n", status=405, content_type="text/plain")
            return ops_view(request)
        started = time.perf_counter()
        response = self.get_response(request)
        method = request.method if request.method in _METHODS else "other"
        metrics.observe_request(_view_label(request), method, response.status_code,
                                time.perf_counter() - started)
        return response
