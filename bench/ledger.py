"""Benchmark of the GPU-hours ledger on PostgreSQL: a year of hourly rows of a 200-project fleet.

    .venv/bin/python bench/ledger.py [--projects 200] [--pools 6] [--days 365] [--fill 0.55] [--repeat 40]
                                     [--nodes 5000] [--pods 150000] [--close-runs 3]

BENCH_POSTGRES_URL names the database (default postgres://postgres@127.0.0.1:5432/console_bench_ledger;
dropped and created afresh). In one run:

  data      a cluster with --pools node pools (two per GPU model: V100, A100, H100), 20 departments of
            --projects / 20 projects; a year of hourly ledger rows (hour × pool × project where the project
            ran that hour: --fill of them, ~6 million rows at the defaults) written with COPY, their daily
            rows (INSERT … SELECT … GROUP BY, as the leader keeps them) and the closed-hour marks; rates of
            the three models with a change of rate in the middle of the year.
  statement a department's month statement page (10 projects × 6 pools, the last full month, priced day by
            day): server time median and p95 over --repeat requests, and its SQL query count.
  csv       the cluster-wide year CSV of the hourly ledger (`/ledger/export.csv?cluster=…&date_from=…&date_to=…`,
            every row) through Django's ASGI handler (the async stream Daphne serves): time to first byte,
            rows/s, and the peak of Python allocations during it (tracemalloc; flat = independent of rows).
  close     a 5,000-node / 150,000-pod cluster (kubesim's generator) loaded through the sync's writer
            (which keeps the pods' lifetimes; timed), then closing one hour of it (--close-runs
            successive hours: median and max), and the statement page's p95 while hours close in another
            thread (the pages do not wait for the leader).

Targets: statement p95 <= 300 ms; CSV >= 50,000 rows/s with a peak <= 64 MiB; closing an hour <= 5 s.
The machine may be shared: the load average (1 min) is printed beside every figure.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import os
import statistics
import sys
import threading
import time
import tracemalloc
from decimal import Decimal
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))
PG_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/console_bench_ledger")
TARGETS = {"statement_p95_ms": 300, "csv_rows_per_s": 50_000, "csv_peak_mib": 64, "close_s": 5}
MODELS = ("Tesla-V100-SXM2-32GB", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3")
UTC = dt.timezone.utc


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load1() -> float:
    return os.getloadavg()[0]


def prepare_database() -> str:
    """A fresh BENCH_POSTGRES_URL database (bench/pages.py's way)."""
    import bench.pages

    bench.pages.PG_URL = PG_URL
    return bench.pages.prepare_database("postgres")


# ---------------------------------------------------------------------------------------------------
# The fleet's organisation and a year of its ledger

def organisation(projects: int, pools: int):
    from nodepools import services as pool_services
    from projects import services as org

    cluster = pool_services.cluster_create(actor=None, name="fleet")
    pool_objs = [pool_services.pool_create(actor=None, cluster=cluster, name=f"{MODELS[i % 3].split('-')[1].lower()}-{i}",
                                           label_key="bench/pool", label_value=f"p{i}") for i in range(pools)]
    departments = [org.department_create(actor=None, cluster=cluster, name=f"dept-{d:02d}") for d in range(20)]
    project_objs = [org.project_create(actor=None, department=departments[p % 20], name=f"proj-{p:03d}")
                    for p in range(projects)]
    return cluster, pool_objs, departments, project_objs


def _runs(project: int, pool: int, hour: int, fill: float) -> int:
    """0, or the GPUs a project held in a pool in an hour (deterministic)."""
    digest = hashlib.blake2b(f"{project}/{pool}/{hour // 6}".encode(), digest_size=4).digest()
    value = int.from_bytes(digest, "big") / 2**32
    if value >= fill:
        return 0
    return 1 + int(value * 97) % 8


def write_year(cluster, pools, projects, *, start: dt.datetime, hours: int, fill: float) -> int:
    """COPY a year of hourly rows (text format, big writes), then the days and the closed-hour marks."""
    from django.db import connection

    from ledger.models import LedgerEntry

    columns = ("hour", "kind", "recorded", "cluster_id", "pool_id", "gpu_model", "department_id", "project_id",
               *LedgerEntry.AMOUNTS)
    table = LedgerEntry._meta.db_table
    plan = [(p.pk, p.department_id, i % 20) for i, p in enumerate(projects)]
    pool_plan = [(pool.pk, MODELS[i % 3]) for i, pool in enumerate(pools)]
    written = 0
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for h in range(hours):
                hour = start + dt.timedelta(hours=h)
                stamp = hour.strftime("%Y-%m-%d %H:%M:%S+00")
                recorded = (hour + dt.timedelta(hours=1, minutes=2)).strftime("%Y-%m-%d %H:%M:%S+00")
                lines = []
                for pi, (pool, model) in enumerate(pool_plan):
                    for index, (project, department, _) in enumerate(plan):
                        gpus = _runs(index, pi, h, fill)
                        if not gpus:
                            continue
                        seconds = gpus * 3600
                        over = seconds // 2 if index % 3 == 0 else 0
                        idle = seconds // 10 if index % 7 == 0 else 0
                        lines.append(f"{stamp}\t0\t{recorded}\t{cluster.pk}\t{pool}\t{model}\t{department}\t{project}\t"
                                     f"{seconds}.000\t{over}.000\t{seconds if index % 5 == 0 else 0}.000\t{idle}.000\t"
                                     f"{seconds}.000\t{seconds * 6 // 10}.000\t{gpus * 8 * 3600}.000\t"
                                     f"{gpus * 64 * 2**30 * 3600}\n")
                copy.write("".join(lines))
                written += len(lines)
                if h % 1000 == 0:
                    log(f"  {h}/{hours} hours, {written:,} rows")
        amounts = ", ".join(LedgerEntry.AMOUNTS)
        sums = ", ".join(f"SUM({a})" for a in LedgerEntry.AMOUNTS)
        cursor.execute(
            f"INSERT INTO ledger_ledgerday (day, kind, cluster_id, pool_id, gpu_model, department_id, project_id, {amounts}) "
            f"SELECT (hour AT TIME ZONE 'UTC')::date, kind, cluster_id, pool_id, gpu_model, department_id, project_id, {sums} "
            f"FROM {table} GROUP BY 1, 2, 3, 4, 5, 6, 7")
        cursor.execute(
            "INSERT INTO ledger_closedhour (cluster_id, hour, closed_at, pods) "
            "SELECT %s, h, h + interval '62 minutes', 0 FROM generate_series(%s::timestamptz, %s::timestamptz, "
            "interval '1 hour') h", [cluster.pk, start, start + dt.timedelta(hours=hours - 1)])
        cursor.execute(f"ANALYZE {table}")
        cursor.execute("ANALYZE ledger_ledgerday")
    return written


def rates(start: dt.date) -> None:
    from ledger.services import rate_create

    for model, price in zip(MODELS, (Decimal("1.10"), Decimal("2.40"), Decimal("3.90"))):
        rate_create(actor=None, gpu_model=model, currency="EUR", valid_from=start, gpu_hour=price,
                    cpu_core_hour=Decimal("0.012"), memory_gib_hour=Decimal("0.002"))
        rate_create(actor=None, gpu_model=model, currency="EUR", valid_from=start + dt.timedelta(days=180),
                    gpu_hour=price * Decimal("0.9"), cpu_core_hour=Decimal("0.012"), memory_gib_hour=Decimal("0.002"))


# ---------------------------------------------------------------------------------------------------
# Measurements

def time_pages(client, url: str, repeat: int) -> tuple[list[float], int]:
    from django.db import connection

    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    queries = []

    def count(execute, sql, params, many, context):
        queries.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        client.get(url)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200
    return times, len(queries)


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, int(round(0.95 * len(values))) - 1)]


def measure_csv(cookie: str, query: str, rows: int) -> dict[str, float]:
    from bench.pages import asgi_get
    from django.core.asgi import get_asgi_application

    app = get_asgi_application()
    body: list[bytes] = []
    asyncio.run(asgi_get(app, "/ledger/export.csv", "date_from=2000-01-01&date_to=2000-01-01", cookie, body))  # warm
    counted = {"lines": 0}

    class Counter(list):
        def append(self, part):
            counted["lines"] += part.count(b"\n")

    status, first, total, size = asyncio.run(asgi_get(app, "/ledger/export.csv", query, cookie, Counter()))
    lines = counted["lines"] - 1
    assert status == 200 and lines == rows, (status, lines, rows)
    # Memory in a pass of its own (tracemalloc slows every allocation down): the peak of Python allocations.
    tracemalloc.start()
    asyncio.run(asgi_get(app, "/ledger/export.csv", query, cookie, Counter()))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"ttfb_ms": first * 1000, "total_s": total, "rows_per_s": rows / total, "bytes": size,
            "peak_mib": peak / 2**20}


def load_big_cluster(nodes: int, pods: int) -> tuple[object, float]:
    """A 5,000-node / 150,000-pod cluster through the sync's writer (Mirror: rows and pods' lifetimes)."""
    from kubesim import generate_cluster
    from nodepools import services as pool_services
    from projects import services as org
    from projects.models import ProjectNamespace

    cluster = pool_services.cluster_create(actor=None, name="big")
    for pool in ("a100-train", "h100-train", "a100-spot", "l4-inference", "t4-batch"):
        pool_services.pool_create(actor=None, cluster=cluster, name=pool, label_key="karpenter.sh/nodepool",
                                  label_value=pool)
    department = org.department_create(actor=None, cluster=cluster, name="research")
    for name in ("ml-training", "inference", "research", "batch", "data-eng"):
        project = org.project_create(actor=None, department=department, name=f"{name}-team")
        ProjectNamespace.objects.filter(project=project).update(name=name)
    node_objs, pod_objs = generate_cluster(nodes, pods, seed=1)
    # Every running pod bound six hours ago: all of them hold their GPUs through the hours closed here.
    now = dt.datetime.now(UTC)
    bound = (now - dt.timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for pod in pod_objs:
        for condition in pod.get("status", {}).get("conditions") or ():
            if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
                condition["lastTransitionTime"] = bound
    started = time.perf_counter()
    pool_services.cluster_objects_replace(cluster=cluster, nodes=node_objs, pods=pod_objs)
    return cluster, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--projects", type=int, default=200)
    parser.add_argument("--pools", type=int, default=6)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--fill", type=float, default=0.55, help="Share of (hour, pool, project) with a row.")
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150000)
    parser.add_argument("--close-runs", type=int, default=3)
    parser.add_argument("--no-reference", action="store_true",
                        help="leave out the machine reference (bench/reference.py) measured at the start and end")
    args = parser.parse_args()

    from bench.reference import Reference

    ref = Reference.off() if args.no_reference else Reference.start()
    load_before = os.getloadavg()
    from bench.pages import setup_django

    setup_django(prepare_database())
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from access.rules import Role
    from ledger import services as ledger_services
    from ledger.models import LedgerEntry
    from projects import services as org

    admin = get_user_model().objects.create_user("bench-admin", password="x")
    org.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=admin)
    manager = get_user_model().objects.create_user("bench-manager", password="x")

    log("organisation")
    cluster, pools, departments, projects = organisation(args.projects, args.pools)
    org.role_assign(actor=None, role=Role.DEPARTMENT_VIEWER, user=manager, department=departments[3])
    end = dt.datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)  # this month's start
    start = end - dt.timedelta(days=args.days)
    log(f"a year of hourly rows with COPY ({start:%Y-%m-%d} to {end:%Y-%m-%d})")
    started = time.perf_counter()
    rows = write_year(cluster, pools, projects, start=start, hours=args.days * 24, fill=args.fill)
    write_s, write_load = time.perf_counter() - started, load1()
    rates(start.date())
    log(f"{rows:,} rows in {write_s:.0f} s")

    manager_client = Client()
    manager_client.force_login(manager)
    month = (end - dt.timedelta(days=1)).strftime("%Y-%m")  # the last full month
    url = f"/departments/{departments[3].pk}/statement/?month={month}"
    log(f"statement {url}")
    statement_times, statement_queries = time_pages(manager_client, url, args.repeat)
    statement_load = load1()
    from ledger.selectors import Month, department_statement

    lines = len(department_statement(user=manager, department=departments[3], month=Month.parse(month)).lines)

    admin_client = Client()
    admin_client.force_login(admin)
    cookie = f"{settings.SESSION_COOKIE_NAME}={admin_client.cookies[settings.SESSION_COOKIE_NAME].value}"
    query = f"cluster={cluster.pk}&date_from={start:%Y-%m-%d}&date_to={end - dt.timedelta(days=1):%Y-%m-%d}"
    log("cluster-wide year CSV")
    csv_rows = LedgerEntry.objects.filter(cluster_id=cluster.pk).count()
    csv = measure_csv(cookie, query, csv_rows)
    csv_load = load1()

    log(f"a {args.nodes}-node / {args.pods}-pod cluster through the sync's writer")
    big, load_s = load_big_cluster(args.nodes, args.pods)
    load_s_load = load1()
    ledger_services.ledger_state(cluster=big)
    first = ledger_services.hour_floor(dt.datetime.now(UTC)) - dt.timedelta(hours=5)
    closes = []
    for i in range(args.close_runs):
        started = time.perf_counter()
        closed = ledger_services.ledger_hour_close(cluster=big, hour=first + dt.timedelta(hours=i))
        closes.append((time.perf_counter() - started, load1(), closed.pods))
    # Pages while the leader closes hours in its own thread.
    during: list[float] = []
    done = threading.Event()

    def leader():
        from django.db import connection

        try:
            for i in range(args.close_runs, args.close_runs + 2):
                ledger_services.ledger_hour_close(cluster=big, hour=first + dt.timedelta(hours=i))
        finally:
            connection.close()
            done.set()

    thread = threading.Thread(target=leader)
    thread.start()
    while not done.is_set():
        started = time.perf_counter()
        assert manager_client.get(url).status_code == 200
        during.append(time.perf_counter() - started)
    thread.join()
    during_load = load1()
    load_after = os.getloadavg()
    ref.finish()

    ms = [t * 1000 for t in statement_times]
    print(f"\nbench/ledger.py on PostgreSQL: {args.projects} projects × {args.pools} pools × {len(MODELS)} GPU models, "
          f"{args.days} days: {rows:,} hourly rows (fill {args.fill:g})")
    print(f"load average before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
          f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} (2 cores shared: re-measure on a quiet machine)")
    print(f"{'figure':58} {'value':>14} {'target':>12} {'load':>6}  against the machine reference")
    print(f"{'writing the year with COPY (+ days, marks)':58} {write_s:12.1f} s {'':>12} {write_load:6.2f}  {ref.seconds(write_s, digits=1)}")
    print(f"{'department month statement, median':58} {statistics.median(ms):11.1f} ms {'':>12} {statement_load:6.2f}  {ref.ms(statistics.median(ms))}")
    print(f"{'department month statement, p95 (' + str(lines) + ' lines, ' + str(statement_queries) + ' SQL)':58} "
          f"{p95(ms):11.1f} ms {'<= ' + str(TARGETS['statement_p95_ms']) + ' ms':>12} {statement_load:6.2f}  {ref.ms(p95(ms))}")
    print(f"{'cluster-wide year CSV, first byte':58} {csv['ttfb_ms']:11.1f} ms {'':>12} {csv_load:6.2f}  {ref.ms(csv['ttfb_ms'])}")
    print(f"{'cluster-wide year CSV, rows/s (' + format(csv_rows, ',') + ' rows, ' + format(csv['bytes'] / 2**20, '.0f') + ' MiB)':58} "
          f"{csv['rows_per_s']:14,.0f} {'>= 50,000':>12} {csv_load:6.2f}  {ref.rate(csv['rows_per_s'], 'rows/s')}")
    print(f"{'cluster-wide year CSV, peak Python allocations':58} {csv['peak_mib']:10.1f} MiB "
          f"{'<= ' + str(TARGETS['csv_peak_mib']) + ' MiB':>12} {csv_load:6.2f}")
    print(f"{'full list of the big cluster through the writer (lifetimes)':58} {load_s:12.1f} s {'':>12} {load_s_load:6.2f}  {ref.seconds(load_s, digits=1)}")
    for i, (seconds, load_now, pods) in enumerate(closes):
        print(f"{'closing an hour of ' + str(args.nodes) + ' nodes / ' + format(pods, ',') + ' pods, run ' + str(i + 1):58} "
              f"{seconds:12.2f} s {'<= 5 s':>12} {load_now:6.2f}  {ref.seconds(seconds)}")
    during_ms = [t * 1000 for t in during]
    print(f"{'statement p95 while hours close (' + str(len(during)) + ' requests)':58} {p95(during_ms):11.1f} ms "
          f"{'<= 300 ms':>12} {during_load:6.2f}  {ref.ms(p95(during_ms))}")
    ok = (p95(ms) <= TARGETS["statement_p95_ms"] and csv["rows_per_s"] >= TARGETS["csv_rows_per_s"]
          and csv["peak_mib"] <= TARGETS["csv_peak_mib"] and max(c[0] for c in closes) <= TARGETS["close_s"])
    print("targets met" if ok else "targets NOT met (see the load beside each figure)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
