"""Benchmark of the console's pages at 5,000 nodes and 50,000 pods, with GPU utilization from a real
Prometheus holding an hour of DCGM-exporter samples of 40,000 GPUs.

    .venv/bin/python bench/pages.py [--database sqlite|postgres] [--nodes 5000] [--pods 50000] [--repeat 40]
                                    [--gpus-per-node 8] [--prom-interval 30] [--prom-minutes 60] [--no-prometheus]
                                    [--quiet LOAD]     # before each page, wait for the load average to fall
                                    [--only REGEX]     # only the pages whose name matches (no CSV)
    .venv/bin/python bench/pages.py --check     # the guard .ci/run runs: query counts only, 1,000 nodes and 1/100
    .venv/bin/python bench/pages.py --csv-only  # the CSV's figures (and every query count), no page timing
    .venv/bin/python bench/pages.py --profile DIR --only REGEX   # cProfile of each timed page: where its time goes

In one run, on a fresh database filled with a generated fleet (nine node pools, three of them of shared GPUs:
MIG mixed, MIG single, time-sliced, with quota in GPU-equivalents; three departments,
five projects):

  pages   server time (median, p95) of the nodes table (first page, filtered, sorted), the pools table,
          the overview, the quota grid, the department and project pages (with pending workloads and why
          they wait), the workloads list (and its start estimates, fetched after it) and a workload's page, the department and cluster statements, a
          pool's page (its fragmentation) and its fit API, the pages of a MIG pool (its slices by profile) and a
          time-sliced pool and the nodes of the MIG pool, the enforcement and platforms pages (a Job per
          10 nodes, 100 at least, mirrored as the sync writes them), each with its SQL query count; the same query counts
          measured first on a fleet 100 times smaller, to show they do not grow with the rows; the nodes
          and pools pages also with every column shown (GPU utilization, GPU memory, idle allocated GPUs),
          each with its number of Prometheus queries at both sizes (must not grow either), and every
          figure shown (a "—" fails the run). The nodes tables (the nodes page, a pool's page) and the
          pools page read the figures the sync's leader stored in its last round (`pool_gpu_figures_refresh`,
          one Prometheus query per cluster every 30 s: the idle count reads a 30-minute window of every
          allocated GPU); that round is timed too, and taken again between two pages once it is 30 s old
          (never while a page is timed), as a running sync keeps it fresh. "nodes + utilization: no fresh
          round" is the nodes page when there is no fresh round (no sync running): its table then asks
          Prometheus for its rows (the answer cache is off while timing, so its times include the query).
          --quiet LOAD waits before each page for a 1-minute load average of at most LOAD.
  prometheus  Debian's /usr/bin/prometheus on a TSDB backfilled with `promtool tsdb create-blocks-from
          openmetrics`: every node has --gpus-per-node GPUs, samples every --prom-interval seconds over
          the last --prom-minutes (and the next 20, so that they are current while the bench runs), the
          exporter's label set (bench/dcgm_fleet.py); both fleets in one Prometheus, told apart by a
          `cluster` label (each cluster's extra label matcher)
  csv     the CSV export of every node with all columns, through Django's ASGI handler (the async
          stream Daphne serves): time to first byte, total time, rows/s (the median of seven runs) and
          memory growth; its GPU figures are the ones the leader's round stored (every GPU node must
          have them)
          (tracemalloc peak of Python allocations during the export, measured in a separate pass)

Every run (but --check) measures the machine reference (bench/reference.py) at its start and end and prints each
page's p95 also as a multiple of it and, when the reference machine is recorded, scaled to it (--no-reference:
without). --profile DIR profiles each timed page and each page after a change (its times are then cProfile's,
slower): the page's time split into the SQL driver, Django's ORM, the templates, the console's code and the rest,
and its dearest functions.

What a page sums of every node and pod is kept while the fleet holds still (nodepools/memo.py `fleet_memoised`:
the database's triggers raise a cluster's data version at each write of a node or pod): the pages are timed as a
page after an unchanged fleet, then the overview, pools table, quota grid, department, project and workloads pages
again with a change of the fleet before each request ("after a change": no target, printed beside). The query
counts are those of a page after a change, at both sizes (a query per row hides nowhere).

Targets: p95 <= 100 ms per page (<= 150 ms for a page that asks Prometheus; <= 1 s for a section slow by nature
that its page fetches after it loads: the start estimates, the workloads' "why is it waiting"); equal query counts at both sizes
(the CSV's too); CSV >= 50,000 rows/s and <= 50 MiB peak memory. The machine may be shared: the load average
(1 min) is printed beside every figure.

--check (the guard of .ci/run): the same pages at a reduced size (1,000 nodes, 10,000 pods, 10 minutes of
samples) and at 1/100 of it, query counts only (no timing: a CI machine's times say little); exit 1 when a
page's SQL or Prometheus query count differs between the two sizes (a query per row), a page answers other
than 200 or a figure is missing. About 20 s.
"""
from __future__ import annotations

import argparse
from decimal import Decimal
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))
from kube import gpu as kube_gpu  # noqa: E402  (the repository is on the path from here)
PG_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/console_bench_pages")
CSV_RUNS = 7
AHEAD_MINUTES = 20
TARGETS = {"page_p95_ms": 100, "prom_page_p95_ms": 150, "after_section_p95_ms": 1000, "csv_rows_per_s": 50_000,
           "csv_growth_mib": 50}
POOLS = ("a100-train", "h100-train", "a100-spot", "l4-inference", "t4-batch")
# The fleet's pools of shared GPUs (kubesim's shared fleet): MIG mixed (A100 80GB, all-balanced), MIG single
# (H100, all-1g.10gb), time-sliced L4s (4 replicas); their pods ask slices and replicas.
SHARED_POOLS = ("a100-mig", "h100-mig", "l4-shared")
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


def fleet_objects(nodes: int, pods: int, gpus_per_node: int):
    from bench.dcgm_fleet import widen
    from kubesim import generate_cluster

    from kube import gpu as kube_gpu

    node_objs, pod_objs = generate_cluster(nodes, pods, seed=1, shared=True)
    # The generated pods are bare pods (rows of the workloads pages too); a few of them wait, the more the larger
    # the fleet: one waiting 1-GPU bare pod in every namespace at any size, so that what a page reads per project
    # and pool for the waiting ones is read at both sizes.
    from kubesim import make_pod

    for namespace in sorted({p["metadata"]["namespace"] for p in pod_objs}):
        pod_objs.append(make_pod(f"waiting-{namespace}", namespace, phase="Pending", containers=[
            {"name": "main", "requests": {"cpu": "1", "memory": "4Gi", kube_gpu.GPU_RESOURCE: 1}}]))
    if gpus_per_node:
        # Whole-GPU nodes only: a shared node's resources follow its MIG layout or its replicas.
        widen([n for n in node_objs if kube_gpu.node_gpus(n["metadata"].get("labels"), n["status"]["capacity"]).exposure
               in (kube_gpu.NONE, kube_gpu.WHOLE)], gpus_per_node)
    return node_objs, pod_objs


def start_prometheus(fleets: dict[str, tuple[list, list]], *, interval: float, minutes: float):
    """A real Prometheus holding the last `minutes` of DCGM samples of every fleet (a `cluster` label each)."""
    from bench.dcgm_fleet import backfill, fleet_gpus
    from gpumetrics.localprom import LocalPrometheus

    gpus = []
    for name, (node_objs, pod_objs) in fleets.items():
        gpus += fleet_gpus(node_objs, pod_objs, cluster=name)
    # The samples run on for AHEAD_MINUTES past now: backfilling and loading the fleets take minutes, and
    # an instant query only sees the last 5 minutes (a live Prometheus would have scraped meanwhile).
    tsdb = backfill(gpus, seconds=minutes * 60, interval=interval, ahead=AHEAD_MINUTES * 60, log=log)
    prom = LocalPrometheus(tsdb_dir=str(tsdb), retention="30d")
    prom.start(timeout=300)
    count = prom.query("count(DCGM_FI_DEV_GPU_UTIL)")
    log(f"prometheus at {prom.url} holds {int(float(count[0]['value'][1])) if count else 0:,} GPU series")
    return prom, len(gpus)


def load(name: str, objects, prometheus_url: str = ""):
    from nodepools import services
    from nodepools.models import Cluster
    from projects import services as org

    node_objs, pod_objs = objects
    nodes, pods = len(node_objs), len(pod_objs)

    cluster = services.cluster_create(actor=None, name=name)
    pools = [services.pool_create(actor=None, cluster=cluster, name=p, label_key="karpenter.sh/nodepool", label_value=p)
             for p in POOLS + SHARED_POOLS]
    for department_name, namespaces in ORG.items():
        department = org.department_create(actor=None, cluster=cluster, name=department_name)
        for pool in pools[:3]:
            org.quota_update(actor=None, quota=department.quotas.get(pool=pool), expected_version=None,
                             gpu_deserved=nodes // 10)
        for pool in pools[len(POOLS):]:
            org.quota_update(actor=None, quota=department.quotas.get(pool=pool), expected_version=None,
                             gpu_deserved=Decimal(nodes) / 20 + Decimal("0.5"))
        for ns in namespaces:
            project = org.project_create(actor=None, department=department, name=ns, namespaces=[ns])
            org.quota_update(actor=None, quota=project.quotas.get(pool=pools[0]), expected_version=None,
                             gpu_deserved=nodes // 30)
            # Quota of shared GPUs in GPU-equivalents, with decimals.
            for pool in pools[len(POOLS):]:
                org.quota_update(actor=None, quota=project.quotas.get(pool=pool), expected_version=None,
                                 gpu_deserved=Decimal(nodes) / 100 + Decimal("0.5"))
    if prometheus_url:
        Cluster.objects.filter(pk=cluster.pk).update(prometheus_url=prometheus_url,
                                                     prometheus_label_matchers=f'cluster="{name}"')
        cluster.refresh_from_db()
    started = time.perf_counter()
    services.cluster_objects_replace(cluster=cluster, nodes=node_objs, pods=pod_objs)
    log(f"loaded cluster {name}: {nodes} nodes, {pods} pods in {time.perf_counter() - started:.1f}s")
    # Fresh tables have no planner statistics yet (in production autovacuum / a periodic ANALYZE
    # keeps them): gather them, as a running database would have.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return cluster, pools


def load_workloads(cluster, count: int) -> None:
    """`count` Jobs (batch/v1) mirrored as the sync writes them, spread over the projects' namespaces and
    the pools, a third of them finished: the workloads pages and the statements read them."""
    from workloads import render
    from workloads.sync import jobs_mirror

    namespaces = [ns for names in ORG.values() for ns in names]
    jobs = []
    for i in range(count):
        finished = i % 3 == 0
        status = ({"startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T01:00:00Z",
                   "conditions": [{"type": "Complete", "status": "True"}]} if finished else {})
        jobs.append({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"job-{i}", "namespace": namespaces[i % len(namespaces)],
                         "annotations": {render.POOLS_ANNOTATION: ",".join(POOLS[i % 3:i % 3 + 2]),
                                         render.SUBMITTED_BY_ANNOTATION: "bench-admin"},
                         "labels": {render.KAI_QUEUE_LABEL: namespaces[i % len(namespaces)]}},
            "spec": {"parallelism": 1 + i % 2, "template": {"spec": {
                "priorityClassName": ("train", "build", "inference")[i % 3], "schedulerName": "kai-scheduler",
                "containers": [{"name": "main", "image": "pytorch", "resources": {
                    "requests": {kube_gpu.GPU_RESOURCE: str(1 + i % 4), "cpu": "4", "memory": "16Gi"},
                    "limits": {kube_gpu.GPU_RESOURCE: str(1 + i % 4)}}}]}}},
            "status": status,
        })
    jobs_mirror(cluster=cluster, jobs=jobs)


def page_urls(cluster, pools) -> dict[str, str]:
    """The pages timed, by name; the department's, project's and workload's ids are looked up."""
    from projects.models import Department, Project
    from workloads.models import Workload

    department = Department.objects.get(cluster=cluster, name="training")
    project = Project.objects.get(cluster=cluster, name="ml-training")
    workload = Workload.objects.filter(cluster=cluster).order_by("pk").first()
    return {
        "nodes: first page": "/nodes/",
        "nodes: filtered": f"/nodes/?cluster={cluster.pk}&pool={pools[1].pk}&status=ready&q=h100",
        "nodes: sorted": "/nodes/?sort=-gpu_allocated",
        "nodes: sorted by name, page 40": "/nodes/?sort=name&page=40",
        "pools table": "/pools/",
        "overview": f"/clusters/{cluster.pk}/",
        "quota grid": f"/clusters/{cluster.pk}/quota/",
        "department page": f"/departments/{department.pk}/",
        "project page": f"/projects/{project.pk}/",
        # Fetched after the project page (htmx): the start estimates simulate the pools' queues.
        "project: start estimates (after)": f"/projects/{project.pk}/start-estimates/",
        # Its start estimates are fetched after it (htmx), from the address the page gives (AFTER_PAGES).
        "workloads": "/workloads/",
        "workload page": f"/workloads/{workload.pk}/",
        "department statement": f"/departments/{department.pk}/statement/",
        "cluster statement": f"/clusters/{cluster.pk}/statement/",
        "pool page (fragmentation)": f"/pools/{pools[0].pk}/",
        "pool fit (API)": f"/api/v1/node-pools/{pools[0].pk}/fit/",
        # A pool of MIG slices (its slices by profile, free on Ready nodes) and a time-sliced one.
        "pool page (MIG slices)": f"/pools/{pools[len(POOLS)].pk}/",
        "pool page (time-sliced)": f"/pools/{pools[len(POOLS) + 2].pk}/",
        "nodes: a MIG pool": f"/nodes/?pool={pools[len(POOLS)].pk}",
        "enforcement": f"/clusters/{cluster.pk}/enforcement/",
        "platforms": "/platforms/",
    }


STALE_ROUND_PAGE = "nodes + utilization: no fresh round (asks Prometheus)"

# Sections a page fetches after it loads (htmx), at the address the page itself gives: page -> section's name.
AFTER_PAGES = {"workloads": "workloads: after the page (estimates, why waiting, queue turns)"}
# Every section fetched after its page: the ones above and the project page's start estimates.
AFTER_SECTIONS = {"project: start estimates (after)", *AFTER_PAGES.values()}
AFTER = re.compile(r'hx-get="([^"]+)" hx-trigger="load" hx-swap="none"')


def fetched_after(client, url: str) -> str:
    """The address of the section the page at `url` fetches after it loads (its start estimates, "Why is it
    waiting?" answers and KAI queue turns)."""
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    found = AFTER.search(response.content.decode())
    assert found, f"{url} fetches no section after it loads"
    return found.group(1).replace("&amp;", "&")


def insert_after(urls: dict[str, str], name: str, url: str) -> dict[str, str]:
    """`urls` with the section `name` right after the page that fetches it."""
    page = next(p for p, section in AFTER_PAGES.items() if section == name)
    out = {}
    for key, value in urls.items():
        out[key] = value
        if key == page:
            out[name] = url
    return out


UTILIZATION_PAGES = {  # shown by a user who chose every column (utilization, GPU memory, idle GPUs)
    "nodes + utilization: first page": "/nodes/",
    "nodes + utilization: sorted, page 40": "/nodes/?sort=name&page=40",
    "pools + utilization": "/pools/",
    # The same page when the sync's leader has no fresh round (not running, or its last read failed): the
    # nodes table then asks Prometheus for its rows' figures.
    STALE_ROUND_PAGE: "/nodes/",
}


def refresh_pool_figures(cluster) -> float:
    """What the sync's leader does every GPUMETRICS_POOLS_EVERY seconds: read every GPU node's figures of
    the cluster (one Prometheus query) and store the pools' sums; returns the seconds it took."""
    import gpumetrics
    from nodepools.models import NodePool
    from nodepools.services import pool_gpu_figures_refresh

    gpumetrics.cache_clear()
    started = time.perf_counter()
    pool_gpu_figures_refresh(cluster=cluster, timeout=120)
    took = time.perf_counter() - started
    reasons = set(NodePool.objects.filter(cluster=cluster).values_list("gpu_figures_reason", flat=True)) - {""}
    assert not reasons, f"the pools of {cluster.name} got no GPU figures: {reasons}"
    return took


class LeaderRounds:
    """The sync's leader, as far as the pages see it: its round of GPU figures (`refresh_pool_figures`) is
    taken again, between two pages (never while one is timed), once it is GPUMETRICS_POOLS_EVERY seconds old,
    so that the pages read a fresh round as they do beside a running sync; STALE_ROUND_PAGE is measured with
    the round made old (as when no sync runs), so that its nodes table asks Prometheus."""

    def __init__(self, cluster, every: float):
        self.cluster, self.every, self.at = cluster, every, time.monotonic()

    def before(self, name: str) -> None:
        from datetime import timedelta

        from django.utils import timezone

        from nodepools.models import NodePool

        if name == STALE_ROUND_PAGE:
            NodePool.objects.filter(cluster=self.cluster).update(gpu_figures_at=timezone.now() - timedelta(hours=1))
            self.at = float("-inf")
        elif time.monotonic() - self.at >= self.every:
            refresh_pool_figures(self.cluster)
            self.at = time.monotonic()


def settle(load: float, *, most: float = 180) -> None:
    """Wait (at most `most` seconds) until the 1-minute load average is at most `load` (0: do not wait)."""
    deadline = time.monotonic() + most
    while load and os.getloadavg()[0] > load and time.monotonic() < deadline:
        time.sleep(2)


MISSING = re.compile(r'<span class="na" title="([^"]*)">—</span>')
EMPTY_FIGURES = {"no allocated GPU reports utilization", "no GPU on this node"}


def fleet_changed() -> None:
    """Raise every cluster's data version, as the sync's next write of a node or pod would: what the pages keep
    while the fleet holds still (`nodepools.memo.fleet_memoised`) is computed again by the next request."""
    from django.db.models import F
    from nodepools.models import DataVersion

    DataVersion.objects.update(seq=F("seq") + 1)


# The pages timed a second time, each request the first after a change of the fleet (every sum of its nodes and
# pods made again): what a page costs while the fleet changes faster than the page is asked for.
AFTER_CHANGE = re.compile(r"^(overview|department page|project page|pools table|quota grid|workloads)$")


def measure_after_change(clients, urls, repeat: int, quiet: float = 0, profile: str = ""
                         ) -> dict[str, tuple[float, float, float]]:
    """(median ms, p95 ms, load average) of the pages `AFTER_CHANGE` names, the fleet changed before each request;
    with `profile`, each page's requests (not the change before each) profiled as "<page>: after a change"."""
    results = {}
    for name, url in urls.items():
        if not AFTER_CHANGE.match(name):
            continue
        settle(quiet)
        times = []
        profiler = None
        if profile:
            import cProfile

            profiler = cProfile.Profile()
        for _ in range(repeat):
            fleet_changed()
            if profiler is not None:
                profiler.enable()
            started = time.perf_counter()
            response = clients[name].get(url)
            times.append((time.perf_counter() - started) * 1000)
            if profiler is not None:
                profiler.disable()
            assert response.status_code == 200
        if profiler is not None:
            label = f"{name}: after a change"
            Path(profile).mkdir(parents=True, exist_ok=True)
            path = Path(profile) / (re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") + ".prof")
            profiler.dump_stats(str(path))
            print_profile(label, path, repeat)
        times.sort()
        results[name] = (statistics.median(times), times[max(0, int(round(0.95 * len(times))) - 1)],
                         os.getloadavg()[0])
    return results


def measure_queries(clients, urls, rounds: LeaderRounds | None = None) -> dict[str, tuple[int, int]]:
    """(SQL queries, Prometheus queries) of one request of each page (Prometheus' answer cache emptied
    first); the utilization pages must show every figure (a "—" with a reason fails the benchmark)."""
    import gpumetrics
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = {}
    for name, url in urls.items():
        if rounds:
            rounds.before(name)
        fleet_changed()  # counted as the first page after a change: its sums of every pod and node made again
        gpumetrics.cache_clear()
        before = gpumetrics.stats.requests
        with CaptureQueriesContext(connection) as ctx:
            response = clients[name].get(url)
        assert response.status_code == 200, (url, response.status_code)
        counts[name] = (len(ctx.captured_queries), gpumetrics.stats.requests - before)
        if name in UTILIZATION_PAGES and rounds is not None:  # (no Prometheus, no rounds: no figures either)
            # "—" for a figure that is truly empty is right; one that Prometheus failed to give is not.
            missing = set(MISSING.findall(response.content.decode())) - EMPTY_FIGURES
            assert not missing, f"{name}: figures missing: {missing}"
    return counts


TEMPLATE_FILES = ("/django/template/", "/django/templatetags/", "/django/utils/html.py", "/django/utils/safestring.py",
                  "/django/utils/formats.py", "/django/utils/numberformat.py", "/django/utils/dateformat.py",
                  "/django/utils/functional.py", "/django_tables2/", "/templates/")


def is_console(filename: str) -> bool:
    """A file of the console's own code (not the bench's, not a library's)."""
    try:
        relative = Path(filename).relative_to(BASE_DIR).as_posix()
    except ValueError:
        return False
    return not relative.startswith((".venv/", "bench/"))


def profile_split(stats) -> dict[str, float]:
    """Seconds of a cProfile's functions' own time (tottime, so nothing counted twice), by where they are:
    the database driver, Django's ORM, the templates (Django's template engine, its filters and
    django-tables2's rendering), the console's own code, the rest (Django's request cycle, Python)."""
    split = dict.fromkeys(("SQL driver", "ORM", "templates", "console code", "other"), 0.0)
    for (filename, _, function), (_, _, tottime, _, _) in stats.stats.items():
        if filename == "~" and ("sqlite3" in function or "psycopg" in function or "cursor" in function.lower()):
            kind = "SQL driver"
        elif "/psycopg/" in filename or "/sqlite3/" in filename:
            kind = "SQL driver"
        elif "/django/db/" in filename:
            kind = "ORM"
        elif any(part in filename for part in TEMPLATE_FILES):
            kind = "templates"
        elif is_console(filename):
            kind = "console code"
        else:
            kind = "other"
        split[kind] += tottime
    return split


def print_profile(name: str, path: Path, requests: int) -> None:
    """Where one page's time goes: the split (per request) and its dearest functions of the console's code."""
    import pstats

    stats = pstats.Stats(str(path))
    split = profile_split(stats)
    total = sum(split.values())
    print(f"\nprofile of {name!r} ({requests} requests, {total / requests * 1000:.1f} ms each under cProfile; {path}):")
    print("  " + ", ".join(f"{kind} {seconds / requests * 1000:.1f} ms ({seconds / total:.0%})"
                           for kind, seconds in split.items()))
    rows = sorted(((v[3], key) for key, v in stats.stats.items() if is_console(key[0])), reverse=True)[:25]
    print("  the console's functions by cumulative time (ms per request):")
    for cumulative, (filename, line, function) in rows:
        print(f"    {cumulative / requests * 1000:8.1f}  {Path(filename).relative_to(BASE_DIR)}:{line} {function}")


def measure_pages(clients, urls, repeat: int, rounds: LeaderRounds | None = None,
                  quiet: float = 0, profile: str = "") -> dict[str, tuple[float, float, float]]:
    """(median ms, p95 ms, load average) per page; Prometheus' answer cache is off (each request queries it).
    Before each page: the leader's round when due (`rounds`), then a wait for a 1-minute load average of at
    most `quiet` (0: no wait)."""
    from django.conf import settings

    results = {}
    cache = getattr(settings, "GPUMETRICS_CACHE_SECONDS", None)
    settings.GPUMETRICS_CACHE_SECONDS = 0
    try:
        for name, url in urls.items():
            client = clients[name]
            if rounds:
                rounds.before(name)
            settle(quiet)
            client.get(url)  # warm caches, compile templates
            times = []
            profiler = None
            if profile:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            for _ in range(repeat):
                started = time.perf_counter()
                response = client.get(url)
                times.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200
            if profiler is not None:
                profiler.disable()
                Path(profile).mkdir(parents=True, exist_ok=True)
                path = Path(profile) / (re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") + ".prof")
                profiler.dump_stats(str(path))
                print_profile(name, path, repeat)
            times.sort()
            results[name] = (statistics.median(times), times[max(0, int(round(0.95 * len(times))) - 1)],
                             os.getloadavg()[0])
    finally:
        if cache is None:
            del settings.GPUMETRICS_CACHE_SECONDS
        else:
            settings.GPUMETRICS_CACHE_SECONDS = cache
    return results


async def asgi_get(app, path: str, query: str, cookie: str, body: list | None = None):
    """GET through Django's ASGI handler; returns (status, first-byte seconds, total seconds, bytes); the
    body's parts are appended to `body` when one is given."""
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
                if body is not None:
                    body.append(message["body"])

    await app(scope, receive, send)
    return state["status"], state["first"], time.perf_counter() - started, state["bytes"]


def measure_csv(cookie: str, rows: int, figures: bool = True) -> dict[str, float]:
    """The CSV carries the GPU figures the sync's leader stored in its last round (NodeGpuFigures): every
    GPU node must have them (an empty cell fails the run), unless there is no Prometheus (`figures=False`)."""
    import csv
    import io

    from django.core.asgi import get_asgi_application

    app = get_asgi_application()
    query = "format=csv&columns=all"
    body: list[bytes] = []
    asyncio.run(asgi_get(app, "/nodes/", query, cookie, body))  # warm, and check what it carries
    table = list(csv.reader(io.StringIO(b"".join(body).decode())))
    util, gpus = table[0].index("GPU utilization (%)"), table[0].index("Total GPU devices")
    empty = [row[0] for row in table[1:] if figures and row[gpus] not in ("", "0") and row[util] == ""]
    assert len(table) == rows + 1 and not empty, f"{len(empty)} GPU nodes without figures in the CSV: {empty[:5]}"
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


def csv_queries(client, url: str) -> int:
    """SQL queries of one CSV export of every node (its rows streamed and read whole): must not grow."""
    from asgiref.sync import async_to_sync
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    async def read(stream) -> int:
        return sum([len(part) async for part in stream])

    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        # Its database reads run in this thread (thread-sensitive), so that they are counted.
        async_to_sync(read)(response.streaming_content)
    return len(ctx.captured_queries)


def page_target(name: str, prom_counts: tuple[int, int]) -> int:
    """p95 target of a page: 100 ms; 150 ms for the pages that ask Prometheus; 1 s for a section slow by
    nature that its page fetches after it loads (the page shows "reading…" there meanwhile)."""
    if name in AFTER_SECTIONS:
        return TARGETS["after_section_p95_ms"]
    return TARGETS["prom_page_p95_ms"] if any(prom_counts) else TARGETS["page_p95_ms"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs given to every node (0: the generator's)")
    parser.add_argument("--prom-interval", type=float, default=30, help="Seconds between backfilled samples.")
    parser.add_argument("--prom-minutes", type=float, default=60, help="Minutes of backfilled samples.")
    parser.add_argument("--no-prometheus", action="store_true", help="Pages without GPU utilization.")
    parser.add_argument("--quiet", metavar="LOAD", type=float, default=0,
                        help="Before each page, wait (at most 3 min) for a 1-minute load average of at most LOAD.")
    parser.add_argument("--only", metavar="REGEX", default="",
                        help="Only the pages whose name matches REGEX (e.g. '^overview$'); the CSV is left out.")
    parser.add_argument("--no-reference", action="store_true",
                        help="Leave out the machine reference (bench/reference.py) measured at the start and end.")
    parser.add_argument("--profile", metavar="DIR", default="",
                        help="Profile the timed requests of each page with cProfile: DIR/<page>.prof, and the "
                             "page's time split into templates, SQL and the rest printed.")
    parser.add_argument("--csv-only", action="store_true",
                        help="Time only the CSV export (the pages' query counts are still checked).")
    parser.add_argument("--check", action="store_true",
                        help="The guard (.ci/run): query counts only, at a reduced size (default 1,000 nodes, "
                             "10,000 pods, 10 minutes of samples) and at 1/100 of it; exit 1 when a page's SQL or "
                             "Prometheus query count differs between the two sizes, a page fails or a figure is "
                             "missing. No timing targets (a CI machine's times say little).")
    args = parser.parse_args()
    if args.check:
        given = set(a.split("=")[0] for a in sys.argv[1:])
        if "--nodes" not in given:
            args.nodes = 1000
        if "--pods" not in given:
            args.pods = 10000
        if "--prom-minutes" not in given:
            args.prom_minutes = 10

    sys.path.insert(0, str(BASE_DIR))
    from bench.reference import Reference

    # The machine reference (no timing in --check: none there).
    ref = Reference.off() if args.check or args.no_reference else Reference.start()
    load_before = os.getloadavg()
    setup_django(prepare_database(args.database))
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from projects import services as org
    from access.rules import Role

    from nodepools.tables import NodePoolTable, NodeTable
    from ui.services import table_preference_set

    admin = get_user_model().objects.create_user("bench-admin", password="x")
    org.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=admin)
    client = Client()
    client.force_login(admin)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    # A second administrator shows every column of the nodes and pools tables (the utilization ones too).
    every = get_user_model().objects.create_user("bench-every-column", password="x")
    org.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=every)
    for table in (NodeTable, NodePoolTable):
        table_preference_set(user=every, table=table.key, columns=table.column_names(), allowed=table.column_names())
    every_client = Client()
    every_client.force_login(every)

    small_size = (max(args.nodes // 100, 6), max(args.pods // 100, 6))
    fleets = {"small": fleet_objects(*small_size, args.gpus_per_node),
              "fleet": fleet_objects(args.nodes, args.pods, args.gpus_per_node)}
    prom, gpu_count = (None, 0) if args.no_prometheus else start_prometheus(
        fleets, interval=args.prom_interval, minutes=args.prom_minutes)
    csv_url = "/nodes/?format=csv&columns=all"
    try:
        def all_urls(cluster, pools):
            urls = page_urls(cluster, pools)
            after = {}
            for name, url in list(urls.items()):
                if name in AFTER_PAGES:  # fetched after the page, from the address the page gives
                    after[AFTER_PAGES[name]] = fetched_after(client, url)
            for name, url in after.items():
                urls = insert_after(urls, name, url)
            urls.update(UTILIZATION_PAGES)
            if args.only:
                urls = {name: url for name, url in urls.items() if re.search(args.only, name)}
            clients = {name: every_client if name in UTILIZATION_PAGES else client for name in urls}
            return urls, clients

        # The same pages on a fleet 100 times smaller: the query counts must be the same.
        small, small_pools = load("small", fleets.pop("small"), prom.url if prom else "")
        # 100 workloads at least: every (project, first pool, phase) the full fleet's workloads have, so that
        # what a page reads per pool or per project (not per row) is read at both sizes; and more than a page of
        # the workloads list (50 rows), so that its first page holds the console's Jobs at both sizes, as the full
        # fleet's does (the generated fleet's pods are bare pods: rows too, after them).
        load_workloads(small, max(small_size[0] // 10, 100))
        if prom:
            refresh_pool_figures(small)
        small_urls, clients = all_urls(small, small_pools)
        every = float(settings.GPUMETRICS_POOLS_EVERY)
        small_counts = measure_queries(clients, small_urls, LeaderRounds(small, every) if prom else None)
        small_csv_q = csv_queries(client, csv_url)
        from nodepools import services

        services.cluster_delete(actor=None, cluster=small)

        cluster, pools = load("fleet", fleets.pop("fleet"), prom.url if prom else "")
        load_workloads(cluster, max(args.nodes // 10, 30))
        refresh = []
        if prom:
            for _ in range(1 if args.check else 5):  # the leader's round, five times: its median
                refresh.append((refresh_pool_figures(cluster), os.getloadavg()[0]))
        urls, clients = all_urls(cluster, pools)
        rounds = LeaderRounds(cluster, every) if prom else None
        counts = measure_queries(clients, urls, rounds)
        if prom:
            refresh_pool_figures(cluster)
        csv_q = csv_queries(client, csv_url)
        timings = {} if args.check or args.csv_only else measure_pages(clients, urls, args.repeat, rounds,
                                                                        args.quiet, args.profile)
        changed = {} if args.check or args.csv_only else measure_after_change(
            clients, urls, args.repeat, args.quiet, args.profile)
        if prom:
            refresh_pool_figures(cluster)  # the leader's round of the last 30 s, which the CSV carries
        csv = None if args.check or args.only else measure_csv(cookie, args.nodes, figures=prom is not None)
        csv_load = os.getloadavg()[0]
    finally:
        if prom is not None:
            prom.stop()
    load_after = os.getloadavg()
    ref.finish()

    print(f"\nbench/pages.py{' --check' if args.check else ''} on "
          f"{settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[1]}: {args.nodes} nodes, "
          f"{args.pods} pods, " + (f"{gpu_count:,} GPUs in a real Prometheus ({args.prom_minutes:g} min of samples "
                                   f"every {args.prom_interval:g} s, both fleets), " if prom else "no Prometheus, ")
          + (f"{args.repeat} requests per page; " if not (args.check or args.csv_only) else "")
          + f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after (2 cores)")
    if ref.enabled:
        print(f"p95 × ref: the p95 over this run's machine reference ({ref.value():.1f} ms, bench/reference.py); "
              "on ref. m.: the p95 scaled to the reference machine (bench/reference.json)")
    print(f"{'page':38} {'median ms':>10} {'p95 ms':>8} {'× ref':>6} {'on ref. m.':>10} {'target':>6} {'load':>5} "
          f"{'SQL q':>6} {'at 1/100':>9} {'Prom q':>7} {'at 1/100':>9}  equal query counts at both sizes")
    ok = True
    for name in urls:
        (sql, prom_q), (small_sql, small_prom) = counts[name], small_counts[name]
        same = sql == small_sql and prom_q == small_prom
        target = page_target(name, (prom_q, small_prom))
        if name not in timings:  # --check, --csv-only: query counts only
            median = p95 = float("nan")
            load_now = os.getloadavg()[0]
            good = same
        else:
            median, p95, load_now = timings[name]
            good = p95 <= target and same
        ok &= good
        verdict = "ok" if good else ("QUERY COUNTS DIFFER" if not same else "MISSED")
        times_ref, on_ref = ref.columns(p95) if name in timings else ("", "")
        print(f"{name:38} {median:10.1f} {p95:8.1f} {times_ref:>6} {on_ref:>10} {target:6d} {load_now:5.2f} {sql:6d} "
              f"{small_sql:9d} {prom_q:7d} {small_prom:9d}  {verdict}")
    if changed:
        print("\nthe same pages, each request the first after a change of the fleet (a node's or pod's row written: "
              "the sums of every pod and node made again; no target, what a page costs while the fleet changes "
              "faster than it is asked for):")
        for name, (median, p95, load_now) in changed.items():
            times_ref, on_ref = ref.columns(p95)
            print(f"{name + ': after a change':38} {median:10.1f} {p95:8.1f} {times_ref:>6} {on_ref:>10} {'':>6} "
                  f"{load_now:5.2f}")
        print()
    same = csv_q == small_csv_q
    ok &= same
    print(f"{'CSV of all nodes, all columns':38} {'':10} {'':8} {'':6} {'':10} {'':6} {'':5} {csv_q:6d} {small_csv_q:9d} {0:7d} "
          f"{0:9d}  {'ok' if same else 'QUERY COUNTS DIFFER'}")
    if refresh and not args.check:
        took, load_now = sorted(refresh)[len(refresh) // 2]
        print(f"pools' GPU figures, read by the sync's leader every {settings.GPUMETRICS_POOLS_EVERY:g} s (off the "
              f"pages' path; one Prometheus query for all {gpu_count:,} GPUs, idle window included): median "
              f"{ref.ms(took * 1000, digits=0)} of {len(refresh)}, load {load_now:.2f}")
    if csv is not None:
        csv_ok = csv["rows_per_s"] >= TARGETS["csv_rows_per_s"] and csv["growth_mib"] <= TARGETS["csv_growth_mib"]
        ok &= csv_ok
        print(f"CSV of all {args.nodes} nodes, all columns ({csv['bytes'] / 2**20:.2f} MiB): first byte "
              f"{csv['ttfb_ms']:.0f} ms, total {csv['total_s'] * 1000:.0f} ms = {ref.rate(csv['rows_per_s'], 'rows/s')} "
              f"(target >= {TARGETS['csv_rows_per_s']:,}), peak memory of the export {csv['growth_mib']:.1f} MiB "
              f"(target <= {TARGETS['csv_growth_mib']}), load {csv_load:.2f}  {'ok' if csv_ok else 'MISSED'}")
    if args.check:
        print("query-count guard: " + ("ok" if ok else "FAILED (a page's query count grows with the fleet)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
