"""Benchmark of "Will it fit?" on a 5,000-node pool (issue 23, point 1: at most 100 ms).

    .venv/bin/python bench/fit.py [--database sqlite|postgres] [--nodes 5000] [--pods 40000] [--repeat 30]

One pool (the cluster's default pool) of --nodes nodes of 8 GPUs in three zones, with --pods pods of five
projects (the generator's fleet: pods of 1, 2, 4 and 8 GPUs, priorities 0, 1000 and 100000) and the NVIDIA
operands on every node (so they are Ready). Measured, each --repeat times (median and p95, with the load
average of that moment, and the SQL queries):

  fragmentation      `projects.selectors.pool_fit` (pods of 1/2/4/8 GPUs that fit now, the largest gang in
                     the pool and in one zone, the free-GPU histogram): the figure the issue asks for
  make room 4 × 8    the same with "what would make room for 4 pods of 8 GPUs" (the preemptible pods of the
                     owners above their deserved quota)
  API fit            GET /api/v1/node-pools/{id}/fit/ through Django (authentication, serializers)
  overview lines     `pools_attach_fit` for every pool of the cluster (the overview's compact line)
  dry run, starts    `workloads.forecast.submission_verdict` of a 1-GPU workload that starts now (nodes filtered
                     by its affinity and taints, standings with fair shares, victims, Karpenter), with KAI's rules
  dry run, waits     the same for an 8-GPU workload of a project whose limit is 0: it waits, so the dry run also
                     estimates until when (the pool's outlook below)
  pool outlook       `workloads.forecast.pool_outlook`: what the start estimates of the pool read

The machine reference (bench/reference.py) is measured at the start and end; each p95 is printed also as a
multiple of it ("× ref") and scaled to the reference machine ("on ref. m.") when it is recorded.
The query counts are measured on a fleet 100 times smaller too: they must be the same. Target: the
fragmentation's p95 <= 100 ms. The machine may be shared: the load average is printed beside every figure.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))
os.environ.setdefault("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/console_bench_fit")

from bench.pages import log, prepare_database, setup_django  # noqa: E402

TARGET_MS = 100
PROJECTS = {"ml-training": ("training", 4000), "research": ("training", 2000), "inference": ("serving", 6000),
            "batch": ("serving", 0), "data-eng": ("data", 1000), "capped": ("data", 0)}


def load(name: str, nodes: int, pods: int):
    """A cluster whose default pool holds every node; five projects owning the generator's namespaces."""
    from bench.dcgm_fleet import widen
    from kubesim import generate_cluster
    from nodepools import services
    from nodepools.demo_cluster import operand_pods
    from projects import services as org

    node_objs, pod_objs = generate_cluster(nodes, pods, seed=1)
    widen(node_objs, 8)
    for node in node_objs:  # one pool: the default one (no other pool's label)
        node["metadata"]["labels"].pop("karpenter.sh/nodepool", None)
    pod_objs += operand_pods(node_objs)
    cluster = services.cluster_create(actor=None, name=name)
    pool = cluster.default_pool
    departments = {}
    for project, (department, deserved) in PROJECTS.items():
        if department not in departments:
            departments[department] = org.department_create(actor=None, cluster=cluster, name=department)
            org.quota_update(actor=None, quota=departments[department].quotas.get(pool=pool), expected_version=None,
                             gpu_deserved=nodes * 8 // 4)
        made = org.project_create(actor=None, department=departments[department], name=project, namespaces=[project])
        org.quota_update(actor=None, quota=made.quotas.get(pool=pool), expected_version=None,
                         gpu_deserved=deserved * nodes // 5000, **({"gpu_limit": 0} if project == "capped" else {}))
    from enforcers.services import enforcement_set

    enforcement_set(actor=None, cluster=cluster, enforcer="kai")  # the dry run reads KAI's rules
    started = time.perf_counter()
    services.cluster_objects_replace(cluster=cluster, nodes=node_objs, pods=pod_objs)
    log(f"loaded {name}: {nodes} nodes, {len(pod_objs)} pods in {time.perf_counter() - started:.1f}s")
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    pool.refresh_from_db()
    return cluster, pool


def operations(cluster, pool, admin, client):
    from nodepools.models import NodePool
    from projects import selectors
    from projects.models import Project
    from workloads import forecast, submission

    def dry_run(project_name: str, gpus: int):
        project = Project.objects.get(cluster=cluster, name=project_name)
        request = submission.Request(project=project, pools=[pool], image="img:1", gpus=gpus, pods=1, cpu="1",
                                     memory="1Gi", name="bench-probe")
        preview = submission.workload_preview(actor=admin, request=request)
        return lambda: forecast.submission_verdict(user=admin, request=request, preview=preview)

    def api():
        response = client.get(f"/api/v1/node-pools/{pool.pk}/fit/")
        assert response.status_code == 200, response.content[:300]

    return {
        "fragmentation": lambda: selectors.pool_fit(user=admin, pool=pool),
        "make room 4 × 8": lambda: selectors.pool_fit(user=admin, pool=pool, shape=(4, 8)),
        "API fit": api,
        "overview lines": lambda: selectors.pools_attach_fit(list(NodePool.objects.filter(cluster=cluster))),
        "dry run, starts": dry_run("research", 1),
        "dry run, waits": dry_run("capped", 8),
        "pool outlook": lambda: forecast.pool_outlook(user=admin, pool=pool),
    }


def count_queries(ops) -> dict[str, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    out = {}
    for name, op in ops.items():
        op()  # warm
        with CaptureQueriesContext(connection) as captured:
            op()
        out[name] = len(captured.captured_queries)
    return out


def measure(ops, repeat: int) -> dict[str, tuple[float, float, float]]:
    out = {}
    for name, op in ops.items():
        op()
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            op()
            times.append((time.perf_counter() - started) * 1000)
        times.sort()
        out[name] = (statistics.median(times), times[max(0, int(round(0.95 * len(times))) - 1)], os.getloadavg()[0])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=40000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--no-reference", action="store_true",
                        help="leave out the machine reference (bench/reference.py) measured at the start and end")
    args = parser.parse_args()

    from bench.reference import Reference

    ref = Reference.off() if args.no_reference else Reference.start()
    load_before = os.getloadavg()
    url = prepare_database(args.database)
    setup_django(url)
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from access.rules import Role
    from nodepools import services
    from projects import services as org

    admin = get_user_model().objects.create_user("bench-admin", password="x")
    org.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=admin)
    client = Client()
    client.force_login(admin)

    small, small_pool = load("small", max(args.nodes // 100, 6), max(args.pods // 100, 6))
    small_counts = count_queries(operations(small, small_pool, admin, client))
    services.cluster_delete(actor=None, cluster=small)
    cluster, pool = load("fleet", args.nodes, args.pods)
    ops = operations(cluster, pool, admin, client)
    counts = count_queries(ops)
    timings = measure(ops, args.repeat)
    load_after = os.getloadavg()
    ref.finish()

    from projects import selectors

    frag = selectors.pool_fit(user=admin, pool=pool).fragmentation
    print(f"\nbench/fit.py on {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[1]}: one pool of {args.nodes} "
          f"nodes ({frag.nodes} Ready, {frag.gpus} GPUs: {frag.line()}), {args.pods} pods; "
          f"{args.repeat} runs each; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after (2 cores)")
    print(f"{'operation':22} {'median ms':>10} {'p95 ms':>8} {'× ref':>6} {'on ref. m.':>10} {'load':>5} {'SQL q':>6} "
          f"{'at 1/100':>9}")
    ok = True
    for name, (median, p95, load_now) in timings.items():
        same = counts[name] == small_counts[name]
        verdict = "" if same else "  MISSED: queries grow with the rows"
        if name == "fragmentation":
            verdict += f"  target p95 <= {TARGET_MS} ms: {'ok' if p95 <= TARGET_MS else 'MISSED'}"
            ok &= p95 <= TARGET_MS
        ok &= same
        times_ref, on_ref = ref.columns(p95)
        print(f"{name:22} {median:10.1f} {p95:8.1f} {times_ref:>6} {on_ref:>10} {load_now:5.2f} {counts[name]:6d} "
              f"{small_counts[name]:9d}{verdict}")
    if url.startswith("sqlite:///"):
        for suffix in ("", "-wal", "-shm"):
            Path(url.removeprefix("sqlite:///") + suffix).unlink(missing_ok=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
