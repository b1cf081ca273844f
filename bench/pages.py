"""Benchmark of the console's pages at 5,000 nodes and 50,000 pods.

    .venv/bin/python bench/pages.py [--database sqlite|postgres] [--nodes 5000] [--pods 50000] [--repeat 40]

In one run, on a fresh database filled with a generated fleet (six node pools, three departments,
five projects):

  pages   server time (median, p95) of the nodes table (first page, filtered, sorted), the pools table,
          the overview and the quota grid, each with its SQL query count; the same query counts
          measured first on a fleet 100 times smaller, to show they do not grow with the rows
  csv     the CSV export of every node with all columns, through Django's ASGI handler (the async
          stream Daphne serves): time to first byte, total time, rows/s (the median of seven runs) and
          memory growth
          (tracemalloc peak of Python allocations during the export, measured in a separate pass)

Targets: p95 <= 150 ms per page; equal query counts at both sizes; CSV >= 20,000 rows/s and
<= 50 MiB growth. The machine may be shared: the load average before and after is printed.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))
PG_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/console_bench_pages")
CSV_RUNS = 7
TARGETS = {"page_p95_ms": 150, "csv_rows_per_s": 20_000, "csv_growth_mib": 50}
POOLS = ("a100-train", "h100-train", "a100-spot", "l4-inference", "t4-batch")
ORG = {"training": ["ml-training", "research"], "serving": ["inference", "batch"], "data": ["data-eng"]}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def prepare_database(kind: str) -> str:
    if kind == "sqlite":
        path = Path(tempfile.gettempdir()) / f"bench-pages-{os.getpid()}.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        return f"sqlite:///{path}"
    import psycopg
    from urllib.parse import urlsplit

    parts = urlsplit(PG_URL)
    name = parts.path.lstrip("/")
    with psycopg.connect(host=parts.hostname, port=parts.port or 5432, user=parts.username or "postgres",
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return PG_URL


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.ALLOWED_HOSTS = ["*"]
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.DEBUG = False
    call_command("migrate", verbosity=0)


def load(name: str, nodes: int, pods: int):
    from nodepools import services
    from kubesim import generate_cluster
    from projects import services as org

    cluster = services.cluster_create(actor=None, name=name)
    pools = [services.pool_create(actor=None, cluster=cluster, name=p, label_key="karpenter.sh/nodepool", label_value=p)
             for p in POOLS]
    for department_name, namespaces in ORG.items():
        department = org.department_create(actor=None, cluster=cluster, name=department_name)
        for pool in pools[:3]:
            org.quota_update(actor=None, quota=department.quotas.get(pool=pool), expected_version=None,
                             gpu_deserved=nodes // 10)
        for ns in namespaces:
            project = org.project_create(actor=None, department=department, name=ns, namespaces=[ns])
            org.quota_update(actor=None, quota=project.quotas.get(pool=pools[0]), expected_version=None,
                             gpu_deserved=nodes // 30)
    node_objs, pod_objs = generate_cluster(nodes, pods, seed=1)
    started = time.perf_counter()
    services.cluster_objects_replace(cluster=cluster, nodes=node_objs, pods=pod_objs)
    log(f"loaded cluster {name}: {nodes} nodes, {pods} pods in {time.perf_counter() - started:.1f}s")
    # Fresh tables have no planner statistics yet (in production autovacuum / a periodic ANALYZE
    # keeps them): gather them, as a running database would have.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return cluster, pools


def page_urls(cluster, pools) -> dict[str, str]:
    return {
        "nodes: first page": "/nodes/",
        "nodes: filtered": f"/nodes/?cluster={cluster.pk}&pool={pools[1].pk}&status=ready&q=h100",
        "nodes: sorted": "/nodes/?sort=-gpu_allocated",
        "nodes: sorted by name, page 40": "/nodes/?sort=name&page=40",
        "pools table": "/pools/",
        "overview": f"/clusters/{cluster.pk}/",
        "quota grid": f"/clusters/{cluster.pk}/quota/",
        "department page": None,  # filled in below
    }


def measure_queries(client, urls) -> dict[str, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = {}
    for name, url in urls.items():
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        counts[name] = len(ctx.captured_queries)
    return counts


def measure_pages(client, urls, repeat: int) -> dict[str, tuple[float, float]]:
    results = {}
    for name, url in urls.items():
        client.get(url)  # warm caches, compile templates
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
        times.sort()
        results[name] = (statistics.median(times), times[max(0, int(round(0.95 * len(times))) - 1)])
    return results


async def asgi_get(app, path: str, query: str, cookie: str):
    """GET through Django's ASGI handler; returns (status, first-byte seconds, total seconds, bytes)."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"cookie", cookie.encode())],
        "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000),
    }
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(3600)

    state = {"status": None, "first": None, "bytes": 0}
    started = time.perf_counter()

    async def send(message):
        if message["type"] == "http.response.start":
            state["status"] = message["status"]
        elif message["type"] == "http.response.body":
            if message.get("body"):
                if state["first"] is None:
                    state["first"] = time.perf_counter() - started
                state["bytes"] += len(message["body"])

    await app(scope, receive, send)
    return state["status"], state["first"], time.perf_counter() - started, state["bytes"]


def measure_csv(cookie: str, rows: int) -> dict[str, float]:
    from django.core.asgi import get_asgi_application

    app = get_asgi_application()
    query = "format=csv&columns=all"
    asyncio.run(asgi_get(app, "/nodes/", query, cookie))  # warm
    # Seven runs, the median one reported: one run on a shared machine is too noisy to judge by.
    runs = [asyncio.run(asgi_get(app, "/nodes/", query, cookie)) for _ in range(CSV_RUNS)]
    status, first, total, size = sorted(runs, key=lambda r: r[2])[CSV_RUNS // 2]
    assert status == 200
    tracemalloc.start()
    asyncio.run(asgi_get(app, "/nodes/", query, cookie))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"ttfb_ms": first * 1000, "total_s": total, "rows_per_s": rows / total, "bytes": size,
            "growth_mib": peak / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--repeat", type=int, default=40)
    args = parser.parse_args()

    load_before = os.getloadavg()
    setup_django(prepare_database(args.database))
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from projects import services as org
    from access.rules import Role
    from projects.models import Department

    admin = get_user_model().objects.create_user("bench-admin", password="x")
    org.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=admin)
    client = Client()
    client.force_login(admin)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"

    # The same pages on a fleet 100 times smaller: the query counts must be the same.
    small, small_pools = load("small", max(args.nodes // 100, 6), max(args.pods // 100, 6))
    small_urls = page_urls(small, small_pools)
    small_urls["department page"] = f"/departments/{Department.objects.get(cluster=small, name='training').pk}/"
    small_counts = measure_queries(client, small_urls)
    from nodepools import services

    services.cluster_delete(actor=None, cluster=small)

    cluster, pools = load("fleet", args.nodes, args.pods)
    urls = page_urls(cluster, pools)
    urls["department page"] = f"/departments/{Department.objects.get(cluster=cluster, name='training').pk}/"
    counts = measure_queries(client, urls)
    timings = measure_pages(client, urls, args.repeat)
    csv = measure_csv(cookie, args.nodes)
    load_after = os.getloadavg()

    print(f"\nbench/pages.py on {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[1]}: {args.nodes} nodes, "
          f"{args.pods} pods, {args.repeat} requests per page; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after (2 cores)")
    print(f"{'page':34} {'median ms':>10} {'p95 ms':>8} {'queries':>8} {'at 1/100':>9}  target p95 <= "
          f"{TARGETS['page_p95_ms']} ms, equal queries")
    ok = True
    for name in urls:
        median, p95 = timings[name]
        same = counts[name] == small_counts[name]
        good = p95 <= TARGETS["page_p95_ms"] and same
        ok &= good
        print(f"{name:34} {median:10.1f} {p95:8.1f} {counts[name]:8d} {small_counts[name]:9d}  {'ok' if good else 'MISSED'}")
    csv_ok = csv["rows_per_s"] >= TARGETS["csv_rows_per_s"] and csv["growth_mib"] <= TARGETS["csv_growth_mib"]
    ok &= csv_ok
    print(f"CSV of all {args.nodes} nodes, all columns ({csv['bytes'] / 2**20:.2f} MiB): first byte "
          f"{csv['ttfb_ms']:.0f} ms, total {csv['total_s'] * 1000:.0f} ms = {csv['rows_per_s']:,.0f} rows/s "
          f"(target >= {TARGETS['csv_rows_per_s']:,}), memory growth {csv['growth_mib']:.1f} MiB "
          f"(target <= {TARGETS['csv_growth_mib']})  {'ok' if csv_ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
