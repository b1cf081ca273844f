"""/healthz, /readyz, /metrics, the metrics the sync calls, its own /metrics server and JSON logs."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from django.db import connection

from common import metrics
from console import health

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def metrics_token(tmp_path, settings):
    path = tmp_path / "metrics-token"
    path.write_text("s3cret-scrape-token\n")
    settings.METRICS_TOKEN_FILE = str(path)
    return "s3cret-scrape-token"


def test_healthz_answers_without_touching_the_database(client):
    # No django_db mark: any database access here would raise.
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.content == b"ok\n"


@pytest.mark.django_db
def test_probes_answer_a_pod_ip_host_over_plain_http_even_in_production_settings(client, settings):
    # The kubelet calls http://10.1.2.3:8000/readyz: no allowed host, no HTTPS.
    settings.ALLOWED_HOSTS = ["gpu.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/healthz", HTTP_HOST="10.1.2.3:8000").status_code == 200
    assert client.get("/readyz", HTTP_HOST="10.1.2.3:8000").status_code == 200
    # Every other page still refuses that host.
    assert client.get("/login/", HTTP_HOST="10.1.2.3:8000").status_code == 400


@pytest.mark.django_db
def test_readyz_is_ready_with_database_and_migrations(client, settings):
    settings.REDIS_URL = ""
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": ["database", "migrations"]}


@pytest.mark.django_db
def test_readyz_names_an_unreachable_database(client, monkeypatch):
    def broken_cursor(*args, **kwargs):
        raise connection.Database.OperationalError("connection refused")

    monkeypatch.setattr(connection, "cursor", broken_cursor)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failed"] == ["database unreachable: OperationalError: connection refused"]


@pytest.mark.django_db
def test_readyz_names_migrations_not_applied(client, monkeypatch):
    from django.db.migrations.executor import MigrationExecutor
    from django.db.migrations.recorder import MigrationRecorder

    monkeypatch.setattr(health, "_migrations_applied", False)
    graph = MigrationExecutor(connection).loader.graph
    leaf = next(node for node in graph.leaf_nodes() if node[0] == "accounts")
    MigrationRecorder(connection).record_unapplied(*leaf)
    response = client.get("/readyz")
    assert response.status_code == 503
    [failure] = response.json()["failed"]
    assert failure.startswith(f"migrations not applied: {leaf[0]}.{leaf[1]}")
    assert "run python manage.py migrate" in failure


@pytest.mark.django_db
def test_readyz_names_unreachable_redis(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    response = client.get("/readyz")
    assert response.status_code == 503
    [failure] = response.json()["failed"]
    assert failure.startswith("redis unreachable: ConnectionError")


@pytest.mark.redis
@pytest.mark.django_db
def test_readyz_checks_a_reachable_redis(client, settings):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == ["database", "migrations", "redis"]


def test_metrics_refused_without_a_configured_token(client, settings):
    settings.METRICS_TOKEN_FILE = ""
    response = client.get("/metrics")
    assert response.status_code == 403
    assert b"no METRICS_TOKEN_FILE" in response.content


def test_metrics_refused_without_or_with_a_wrong_token(client, metrics_token):
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {metrics_token}").status_code == 403


@pytest.mark.django_db
def test_metrics_with_the_token_show_request_latency_by_view_and_status(client, metrics_token):
    client.get("/login/")
    client.get("/no-such-page/")
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {metrics_token}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert 'console_http_request_duration_seconds_count{method="GET",status="200",view="login"}' in text
    assert 'console_http_request_duration_seconds_count{method="GET",status="404",view="<unmatched>"}' in text
    assert "console_websocket_clients " in text


def test_metrics_of_the_sync_and_hints(client, metrics_token):
    def sample(text: str, series: str) -> float:
        found = [line for line in text.splitlines() if line.startswith(series + " ")]
        return float(found[0].split()[-1]) if found else 0.0

    restarts = 'console_sync_watch_restarts_total{cluster="prod-east",kind="pods"}'
    rows = 'console_sync_rows_written_total{cluster="prod-east",kind="nodes"}'
    relists = 'console_sync_relists_total{cluster="prod-east",kind="nodes"}'
    # Counters only grow, and other tests may have synced a cluster of that name: compare with before.
    before = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {metrics_token}").content.decode()
    metrics.sync_reset_state()
    metrics.sync_watch_restarted("prod-east", "pods")
    metrics.sync_rows_written("prod-east", "nodes", 7)
    metrics.sync_relisted("prod-east", "nodes")
    metrics.sync_event_seen("prod-east", "pods", datetime.now(timezone.utc) - timedelta(seconds=3))
    metrics.sync_leadership("prod-east", True)
    metrics.hint_sent(["nodes", "pods"])
    text = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {metrics_token}").content.decode()
    assert sample(text, restarts) - sample(before, restarts) == 1.0
    assert sample(text, rows) - sample(before, rows) == 7.0
    assert sample(text, relists) - sample(before, relists) == 1.0
    assert 'console_sync_leader{cluster="prod-east"} 1.0' in text
    assert 'console_hints_sent_total{kind="pods"}' in text
    lag = [line for line in text.splitlines() if line.startswith('console_sync_lag_seconds{cluster="prod-east",kind="pods"}')]
    assert 3 <= float(lag[0].split()[-1]) < 10


def test_sync_serves_its_own_metrics_and_readiness_on_a_port():
    metrics.sync_reset_state()
    server = metrics.start_sync_server(0, addr="127.0.0.1")
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        status = json.load(urllib.request.urlopen(f"{base}/readyz", timeout=5))
        assert status["role"] == "standby" and status["clusters"] == {}
        metrics.sync_leadership("lab", True)
        metrics.sync_event_seen("lab", "nodes")
        metrics.sync_leadership("other", False)
        status = json.load(urllib.request.urlopen(f"{base}/readyz", timeout=5))
        assert status["role"] == "leader"
        assert status["clusters"]["lab"]["leader"] is True
        assert 0 <= status["clusters"]["lab"]["last_event_age_seconds"] < 5
        assert status["clusters"]["other"] == {"leader": False, "last_event_age_seconds": None}
        text = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
        assert 'console_sync_leader{cluster="lab"} 1.0' in text
    finally:
        server.shutdown()
        metrics.sync_reset_state()


def test_websocket_clients_gauge_follows_accepted_connections():
    import asyncio

    async def app(scope, receive, send):
        await send({"type": "websocket.accept"})
        assert metrics.WEBSOCKET_CLIENTS._value.get() == before + 1
        await send({"type": "websocket.close"})

    async def send(message):
        pass

    before = metrics.WEBSOCKET_CLIENTS._value.get()
    asyncio.run(metrics.WebsocketMetricsMiddleware(app)({"type": "websocket"}, None, send))
    assert metrics.WEBSOCKET_CLIENTS._value.get() == before


def test_json_formatter_gives_one_object_a_line_with_request_status_and_exception(rf):
    from common.jsonlog import JsonFormatter

    request = rf.get("/nodes/?q=a")
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("django.request").makeRecord(
            "django.request", logging.ERROR, __file__, 1, "Internal Server Error: %s", (request.path,),
            sys.exc_info(), extra={"request": request, "status_code": 500},
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "ERROR"
    assert entry["logger"] == "django.request"
    assert entry["message"] == "Internal Server Error: /nodes/"
    assert entry["path"] == "/nodes/" and entry["method"] == "GET" and entry["status"] == 500
    assert entry["timestamp"].endswith("+00:00")
    assert "ValueError: boom" in entry["exception"] and "\n" not in line


def test_log_format_json_makes_the_process_log_json():
    code = (
        "import django, logging; django.setup(); "
        "logging.getLogger('console.test').warning('hello %s', 'there')"
    )
    env = {"LOG_FORMAT": "json", "DJANGO_SETTINGS_MODULE": "console.settings", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    entry = json.loads(line)
    assert entry["logger"] == "console.test" and entry["message"] == "hello there" and entry["level"] == "WARNING"
