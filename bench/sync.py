"""Benchmark of the live mirror (nodepools/sync/) at 5,000 nodes and 150,000 pods.

    .venv/bin/python bench/sync.py [--database sqlite|postgres|both] [--nodes 5000] [--pods 150000] [--no-fleet]

Per database, in one run, against the Kubernetes API emulator (in this process) and a real
`manage.py sync_clusters` process:

  (a) floor: fetch every list page (limit 500) of every kind the sync mirrors (nodes, pods, and the kinds
      the apps register: Jobs, KAI PodGroups, Kueue Workloads, eviction Events, Karpenter NodePools and
      NodeClaims) with the kubernetes client, as the informers list them, and parse it with orjson; per kind,
      and the nodes and pods alone (what the floor was before the other kinds)
  (b) initial full sync (from starting the sync process to every row stored: its start, Django's set-up and
      system checks included), and b/a
  (c) a watch burst of 200 pod changes/s for 60 s: how long after the burst the database caught up
  (d) a relist after 410 with 1 % of objects changed: rows written per changed object, no-op writes
  (e) the sync process's peak RSS

and on PostgreSQL the fleet case:

  (f) three clusters of that size (three emulator processes) synced by one `sync_clusters` process
      (a thread per cluster): each cluster's initial sync time against its single-cluster time (b),
      and the process's peak RSS

After (b), after (d) and in the fleet case the derived state (pool, conflicts, status, reasons) of a sample
of nodes (--check-nodes) is checked against the Python rules of nodepools/sync/derived.py.

The machine reference (bench/reference.py) is measured at the start and end of the run; the times are
printed also as multiples of it and, when the reference machine is recorded, scaled to it (--no-reference:
without). --py-spy PREFIX samples the sync process during (b) (PREFIX-<database>.txt, folded stacks).

Targets: b <= 30 s and b/a <= 3; c <= 30 s; d = 1.000 rows per changed object with 0 no-op writes;
e <= 512 MiB; f: every cluster within 3 x b, RSS <= 1 GiB.
The machine may be shared: the load average (1, 5, 15 min) is printed beside every figure; compare
ratios when it is high.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/console_bench_sync")
TARGETS = {"b_seconds": 30, "b_over_a": 3, "c_seconds": 30, "d_rows_per_change": 1.0, "d_noop_writes": 0,
           "e_peak_rss_mib": 512, "f_over_b": 3, "f_peak_rss_mib": 1024}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def load_text(values) -> str:
    return "load " + "/".join(f"{x:.1f}" for x in values)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def database_url(kind: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tempfile.gettempdir()}/bench-sync-{os.getpid()}.sqlite3"
    return PG_URL


def recreate_database(url: str) -> None:
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        return
    sys.path.insert(0, str(BASE_DIR))
    from bench.stack import recreate_database as recreate_postgres  # the stack bench's, one copy

    recreate_postgres(url)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def check_derived(cluster, node_names: list[str], rng: random.Random, sample: int) -> tuple[int, list[str]]:
    """Pool, conflicts, status and reasons of a sample of stored nodes against the Python rules
    (nodepools/sync/derived.py) over the stored rows, whichever path (SQL or Python) derived them."""
    from nodepools.models import Node
    from nodepools.sync.derived import derive_from_database

    names = rng.sample(node_names, min(sample, len(node_names)))
    expected = derive_from_database(cluster.pk, names)
    stored = {name: (pool, conflicts, status, reasons) for name, pool, conflicts, status, reasons in
              Node.objects.filter(cluster=cluster, name__in=names).values_list(
                  "name", "pool_id", "pool_conflicts", "status", "status_reasons")}
    return len(names), sorted(name for name in names if stored.get(name) != expected.get(name))


def derived_text(checked: int, wrong: list[str]) -> str:
    return (f"derived state of {checked} sampled nodes = Python rules: "
            + ("yes" if not wrong else f"NO ({len(wrong)} differ, e.g. {', '.join(wrong[:3])})"))


def wait_for(condition, timeout: float, poll: float = 0.2) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(poll)
    return None


def measure_floor(cluster, runs: int) -> tuple[list[float], dict[str, tuple[int, float]]]:
    """The floor: every list page (limit 500) of every kind the sync mirrors (nodepools.sync's registry:
    nodes, pods and the kinds the apps register, e.g. Jobs, KAI PodGroups, Kueue Workloads, eviction
    Events, Karpenter NodePools and NodeClaims) fetched with the kubernetes client as the sync's informers
    do (their own list call) and parsed with orjson, nothing else; an optional kind the cluster does not
    serve (404) counts as none. Returns each run's seconds and, for the median run, per kind (objects,
    seconds)."""
    import orjson
    from kubernetes.client.exceptions import ApiException

    from nodepools.sync import REGISTRY, api_client_for
    from nodepools.sync.informer import list_call

    floors, kinds_of_runs = [], []
    with api_client_for(cluster) as api_client:
        calls = {name: list_call(api_client, resource) for name, resource in REGISTRY.items()}
        for _ in range(runs):
            per_kind = {}
            for name, call in calls.items():
                started, count, token = time.monotonic(), 0, None
                while True:
                    try:
                        body = orjson.loads(call(limit=500, _continue=token).data)
                    except ApiException as exc:
                        if exc.status == 404 and REGISTRY[name].optional:
                            break
                        raise
                    count += len(body.get("items") or [])
                    token = (body.get("metadata") or {}).get("continue")
                    if not token:
                        break
                per_kind[name] = (count, time.monotonic() - started)
                del body
            floors.append(sum(seconds for _, seconds in per_kind.values()))
            kinds_of_runs.append(per_kind)
    median = sorted(range(runs), key=lambda i: floors[i])[runs // 2]
    return floors, kinds_of_runs[median]


def start_py_spy(pid: int, prefix: str, kind: str):
    """py-spy sampling the sync process from its start to the end of its first full sync (b): a speedscope
    profile (<prefix>-<database>.json) and the raw folded stacks (.txt) beside it."""
    import shutil

    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out = Path(f"{prefix}-{kind}.txt")
    proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", "50", "--format", "raw", "--output", str(out),
                             "--idle", "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, out


def stop_py_spy(spy) -> str:
    proc, out = spy
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log(f"py-spy profile of the first full sync: {out}")
    return str(out)


def run_one(kind: str, args) -> dict:
    """One database: everything in this process (Django configured for that database)."""
    url = database_url(kind)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    sys.path.insert(0, str(BASE_DIR))
    recreate_database(url)
    import django

    django.setup()
    import orjson
    from django.core.management import call_command
    from django.db import connection

    from nodepools import services
    from kubesim import KubeEmulator, generate_cluster
    from nodepools.models import Cluster, Node, Pod
    from projects import services as project_services

    result: dict = {"database": kind, "load_before": load()}
    call_command("migrate", verbosity=0)
    log(f"{kind}: generating {args.nodes} nodes / {args.pods} pods")
    nodes, pods = generate_cluster(args.nodes, args.pods, seed=1)
    emu = KubeEmulator(history_size=100_000, bookmark_interval=1.0)
    emu.load(nodes=nodes, pods=pods)
    pod_keys = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods]
    node_names = [n["metadata"]["name"] for n in nodes]
    del nodes, pods
    gc.collect()
    emu.start()
    workdir = Path(tempfile.mkdtemp(prefix="bench-sync-"))
    kubeconfig = emu.write_kubeconfig(workdir / "kubeconfig")

    cluster = services.cluster_create(actor=None, name="bench", kubeconfig_path=kubeconfig, kube_context="emulator")
    for pool in ("a100-train", "h100-train", "a100-spot", "l4-inference", "t4-batch"):
        services.pool_create(actor=None, cluster=cluster, name=pool, label_key="karpenter.sh/nodepool", label_value=pool)
    department = project_services.department_create(actor=None, cluster=cluster, name="ai")
    for ns in ("ml-training", "inference", "research", "batch", "data-eng"):
        project_services.project_create(actor=None, department=department, name=ns, namespaces=[ns])

    # (a) the floor: every page of every kind the sync mirrors fetched and parsed, nothing else.
    floors, per_kind = measure_floor(cluster, args.floor_runs)
    count = sum(n for n, _ in per_kind.values())
    result["a_runs"] = floors
    result["a_seconds"] = statistics.median(floors)
    result["a_kinds"] = {kind: [n, seconds] for kind, (n, seconds) in per_kind.items()}
    result["a_nodes_pods_seconds"] = sum(per_kind[k][1] for k in ("nodes", "pods") if k in per_kind)
    result["a_load"] = load()
    log(f"{kind}: (a) floor {result['a_seconds']:.2f}s ({count} objects of {len(per_kind)} kinds; runs "
        f"{', '.join(f'{f:.2f}' for f in floors)}); {load_text(result['a_load'])}")

    # (b) initial full sync by a real sync process.
    env = {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1", "LOG_LEVEL": "WARNING"}
    sync_log = open(workdir / "sync.log", "wb")
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "sync_clusters", "--cluster", "bench", "--unreachable-after", "3600",
         "--backoff-base", "0.2", "--backoff-max", "2", *args.sync_option],
        cwd=BASE_DIR, env=env, stdout=sync_log, stderr=subprocess.STDOUT,
    )
    spy = start_py_spy(proc.pid, args.py_spy, kind) if args.py_spy else None
    try:
        def synced():
            return Cluster.objects.filter(pk=cluster.pk, last_full_sync__isnull=False).exists()

        done = wait_for(synced, timeout=600)
        if done is None:
            raise RuntimeError("initial sync did not finish in 10 minutes")
        result["b_seconds"] = done - start
        if spy is not None:
            result["b_profile"] = stop_py_spy(spy)
        result["b_over_a"] = result["b_seconds"] / result["a_seconds"]
        result["b_load"] = load()
        counts = (Node.objects.filter(cluster=cluster).count(), Pod.objects.filter(cluster=cluster).count())
        result["rows"] = counts
        log(f"{kind}: (b) initial sync {result['b_seconds']:.2f}s, b/a {result['b_over_a']:.2f}; rows {counts}; "
            f"{load_text(result['b_load'])}")
        assert counts == (len(node_names), len(pod_keys)), counts
        check_rng = random.Random(3)
        result["b_derived"] = check_derived(cluster, node_names, check_rng, args.check_nodes)
        log(f"{kind}: (b) {derived_text(*result['b_derived'])}")

        # (c) a watch burst: `rate` pod changes per second for `seconds`.
        rng = random.Random(2)
        targets = rng.sample(pod_keys, 2000)
        expected: dict[tuple[str, str], str] = {}
        total = args.burst_rate * args.burst_seconds
        burst_start = time.monotonic()
        for i in range(total):
            due = burst_start + i / args.burst_rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            ns, name = targets[i % len(targets)] if i < len(targets) else rng.choice(targets)
            value = str(i)
            emu.update_pod(ns, name, lambda p, v=value: p["metadata"].setdefault("labels", {}).__setitem__("bench-burst", v))
            expected[(ns, name)] = value
        burst_end = time.monotonic()
        result["c_burst_seconds"] = burst_end - burst_start
        names = sorted({name for _, name in expected})

        def caught_up():
            stored = {}
            for i in range(0, len(names), 500):
                for ns, name, labels in Pod.objects.filter(cluster=cluster, name__in=names[i:i + 500]).values_list(
                        "namespace", "name", "labels"):
                    stored[(ns, name)] = (labels or {}).get("bench-burst")
            return all(stored.get(key) == value for key, value in expected.items())

        done = wait_for(caught_up, timeout=600, poll=0.25)
        result["c_seconds"] = (done - burst_end) if done else float("inf")
        result["c_load"] = load()
        log(f"{kind}: (c) {total} events in {result['c_burst_seconds']:.1f}s; caught up {result['c_seconds']:.2f}s after")

        # (d) relist after 410 with 1 % of the objects changed while the watch was down.
        def snapshot():
            rows = {}
            for model, key in ((Node, ("name",)), (Pod, ("namespace", "name"))):
                fields = [f.attname for f in model._meta.concrete_fields if f.attname not in ("id",)]
                for row in model.objects.filter(cluster=cluster).values_list(*fields).iterator(chunk_size=5000):
                    values = dict(zip(fields, row))
                    updated = values.pop("updated")
                    rows[(model.__name__,) + tuple(values[k] for k in key)] = (updated, orjson.dumps(values, default=str))
            return rows

        time.sleep(2)
        before = snapshot()
        last_sync = Cluster.objects.get(pk=cluster.pk).last_full_sync
        emu.set_offline(True, mode="reset")
        time.sleep(1)
        n_nodes, n_pods = max(1, len(node_names) // 100), max(1, len(pod_keys) // 100)
        changed_nodes = rng.sample(node_names, n_nodes)
        changed_pods = rng.sample(pod_keys, n_pods)
        for name in changed_nodes:
            emu.set_node_labels(name, {"bench-touched": "yes"})
        for ns, name in changed_pods:
            emu.update_pod(ns, name, lambda p: p["metadata"].setdefault("labels", {}).__setitem__("bench-touched", "yes"))
        emu.compact()  # the watch's resourceVersion is now too old: 410 Gone, then a relist
        online = time.monotonic()
        emu.set_offline(False)
        touched_pods = sorted({name for _, name in changed_pods})

        def relisted():
            if Cluster.objects.get(pk=cluster.pk).last_full_sync == last_sync:
                return False
            if Node.objects.filter(cluster=cluster, name__in=changed_nodes, labels__has_key="bench-touched").count() < n_nodes:
                return False
            return sum(Pod.objects.filter(cluster=cluster, name__in=touched_pods[i:i + 500],
                                          labels__has_key="bench-touched").count()
                       for i in range(0, len(touched_pods), 500)) >= n_pods

        done = wait_for(relisted, timeout=600, poll=0.5)
        result["d_relist_seconds"] = (done - online) if done else float("inf")
        time.sleep(3)  # anything still in flight
        after = snapshot()
        written = noop = 0
        for key, (updated, values) in after.items():
            old = before.get(key)
            if old is None or updated != old[0]:
                written += 1
                if old is not None and values == old[1]:
                    noop += 1
        deleted = len(set(before) - set(after))
        changed = n_nodes + n_pods
        result.update(d_changed_objects=changed, d_rows_written=written + deleted, d_noop_writes=noop,
                      d_rows_per_change=(written + deleted) / changed, d_load=load())
        log(f"{kind}: (d) relist {result['d_relist_seconds']:.2f}s; {written + deleted} rows written for {changed} "
            f"changed objects ({result['d_rows_per_change']:.3f}), {noop} no-op writes")
        # The changed nodes and a fresh sample (the relist derived them set-wise in SQL on PostgreSQL).
        names = sorted(set(changed_nodes) | set(check_rng.sample(node_names, min(len(node_names), args.check_nodes))))
        checked, wrong = check_derived(cluster, names, check_rng, len(names))
        result["d_derived"] = (checked, wrong)
        log(f"{kind}: (d) {derived_text(checked, wrong)}")
        result["e_peak_rss_mib"] = peak_rss_mib(proc.pid)
        result["e_load"] = load()
        log(f"{kind}: (e) sync peak RSS {result['e_peak_rss_mib']:.0f} MiB")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        sync_log.close()
        emu.stop()
        connection.close()
    result["load_after"] = load()
    errors = [line for line in (workdir / "sync.log").read_text(errors="replace").splitlines()
              if "ERROR" in line or "Traceback" in line]
    result["sync_errors"] = errors[:5]
    return result


def start_emulators(count: int, args, workdir: Path) -> list[tuple[subprocess.Popen, str]]:
    """`count` emulator processes (so that serving does not share one interpreter), each with its own fleet."""
    started = []
    for i in range(count):
        kubeconfig = workdir / f"kubeconfig-{i}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "kubesim", "--port", "0", "--kubeconfig", str(kubeconfig),
             "--demo-nodes", str(args.nodes), "--demo-pods", str(args.pods), "--seed", str(i + 1),
             "--history-size", "100000", "--bookmark-interval", "1"],
            cwd=BASE_DIR, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        started.append((proc, str(kubeconfig)))
    for proc, kubeconfig in started:
        for line in proc.stdout:  # the emulator prints its kubeconfig line once it serves
            if line.startswith(b"kubeconfig:"):
                break
        else:
            raise RuntimeError("an emulator process ended before serving")
    return started


def run_fleet(args) -> dict:
    """PostgreSQL: three clusters, three emulator processes, one sync_clusters process."""
    url = PG_URL
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    sys.path.insert(0, str(BASE_DIR))
    recreate_database(url)
    import django

    django.setup()
    import orjson
    from django.core.management import call_command
    from django.db import connection
    from kubernetes import client

    from nodepools import services
    from nodepools.models import Cluster, Node, Pod
    from nodepools.sync import api_client_for
    from projects import services as project_services

    result: dict = {"database": "postgres", "clusters": args.fleet_clusters, "load_before": load()}
    call_command("migrate", verbosity=0)
    workdir = Path(tempfile.mkdtemp(prefix="bench-sync-fleet-"))
    log(f"fleet: starting {args.fleet_clusters} emulators of {args.nodes} nodes / {args.pods} pods")
    emulators = start_emulators(args.fleet_clusters, args, workdir)
    proc = None
    try:
        clusters = []
        for i, (_, kubeconfig) in enumerate(emulators):
            cluster = services.cluster_create(actor=None, name=f"fleet-{i + 1}", kubeconfig_path=kubeconfig,
                                              kube_context="emulator")
            for pool in ("a100-train", "h100-train", "a100-spot", "l4-inference", "t4-batch"):
                services.pool_create(actor=None, cluster=cluster, name=pool, label_key="karpenter.sh/nodepool",
                                     label_value=pool)
            department = project_services.department_create(actor=None, cluster=cluster, name="ai")
            for ns in ("ml-training", "inference", "research", "batch", "data-eng"):
                project_services.project_create(actor=None, department=department, name=f"{ns}-{i + 1}",
                                                namespaces=[ns])
            clusters.append(cluster)
        # Each cluster's floor (fetch + parse every page), one after the other.
        floors = []
        for cluster in clusters:
            with api_client_for(cluster) as api_client:
                api = client.CoreV1Api(api_client)
                start = time.monotonic()
                for fn in (api.list_node, api.list_pod_for_all_namespaces):
                    token = None
                    while True:
                        body = orjson.loads(fn(limit=500, _continue=token, _preload_content=False).data)
                        token = body["metadata"].get("continue")
                        if not token:
                            break
                floors.append(time.monotonic() - start)
        result["f_floors"] = floors
        result["f_floor_load"] = load()
        log(f"fleet: floors {', '.join(f'{f:.2f}s' for f in floors)}; {load_text(result['f_floor_load'])}")

        env = {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1", "LOG_LEVEL": "WARNING"}
        sync_log = open(workdir / "sync.log", "wb")
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "sync_clusters", "--unreachable-after", "3600", "--backoff-base", "0.2",
             "--backoff-max", "2", "--rescan", "1"],
            cwd=BASE_DIR, env=env, stdout=sync_log, stderr=subprocess.STDOUT,
        )
        done: dict[int, float] = {}
        loads: dict[int, list[float]] = {}
        deadline = time.monotonic() + 1200
        while len(done) < len(clusters) and time.monotonic() < deadline:
            for pk in Cluster.objects.filter(pk__in=[c.pk for c in clusters], last_full_sync__isnull=False).values_list(
                    "pk", flat=True):
                if pk not in done:
                    done[pk] = time.monotonic() - start
                    loads[pk] = load()
                    log(f"fleet: cluster {pk} synced after {done[pk]:.2f}s; {load_text(loads[pk])}")
            time.sleep(0.2)
        if len(done) < len(clusters):
            raise RuntimeError("the fleet's initial sync did not finish in 20 minutes")
        result["f_seconds"] = [done[c.pk] for c in clusters]
        result["f_loads"] = [loads[c.pk] for c in clusters]
        result["f_rows"] = [(Node.objects.filter(cluster=c).count(), Pod.objects.filter(cluster=c).count())
                            for c in clusters]
        assert all(rows == (args.nodes, args.pods) for rows in result["f_rows"]), result["f_rows"]
        check_rng = random.Random(3)
        result["f_derived"] = [check_derived(c, list(Node.objects.filter(cluster=c).values_list("name", flat=True)),
                                             check_rng, args.check_nodes) for c in clusters]
        for c, (checked, wrong) in zip(clusters, result["f_derived"]):
            log(f"fleet: cluster {c.pk} {derived_text(checked, wrong)}")
        result["f_peak_rss_mib"] = peak_rss_mib(proc.pid)
        result["f_rss_load"] = load()
        log(f"fleet: peak RSS {result['f_peak_rss_mib']:.0f} MiB; {load_text(result['f_rss_load'])}")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for emu_proc, _ in emulators:
            emu_proc.terminate()
            try:
                emu_proc.wait(20)
            except subprocess.TimeoutExpired:
                emu_proc.kill()
        connection.close()
    result["load_after"] = load()
    errors = [line for line in (workdir / "sync.log").read_text(errors="replace").splitlines()
              if "ERROR" in line or "Traceback" in line]
    result["sync_errors"] = errors[:5]
    return result


def verdict(name: str, value: float) -> str:
    target = TARGETS[name]
    return "met" if value <= target else "NOT met"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--burst-rate", type=int, default=200)
    parser.add_argument("--burst-seconds", type=int, default=60)
    parser.add_argument("--floor-runs", type=int, default=3)
    parser.add_argument("--fleet-clusters", type=int, default=3)
    parser.add_argument("--check-nodes", type=int, default=500,
                        help="nodes sampled to check derived state (pool, status, reasons) against the Python rules")
    parser.add_argument("--no-fleet", action="store_true", help="skip the fleet case (PostgreSQL)")
    parser.add_argument("--fleet-only", action="store_true", help="only the fleet case; compare with --single-b")
    parser.add_argument("--single-b", type=float, help="the single-cluster b (s) to compare the fleet with")
    parser.add_argument("--sync-option", action="append", default=[], metavar="=--OPTION=VALUE",
                        help="an option given to the single-cluster sync_clusters process, e.g. "
                             "--sync-option=--batch-delay=0.1 (to measure a tunable)")
    parser.add_argument("--py-spy", metavar="PREFIX", default="",
                        help="sample the sync process with py-spy during (b): PREFIX-<database>.txt (folded stacks)")
    parser.add_argument("--no-reference", action="store_true",
                        help="leave out the machine reference (bench/reference.py) measured at the start and end")
    parser.add_argument("--one", choices=["sqlite", "postgres", "fleet"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child: one case, result as JSON on stdout
        print(json.dumps(run_fleet(args) if args.one == "fleet" else run_one(args.one, args)))
        return 0
    kinds = ["sqlite", "postgres"] if args.database == "both" else [args.database]
    if args.fleet_only:
        kinds = []
    if "postgres" in kinds or args.fleet_only:
        if not args.no_fleet:
            kinds.append("fleet")
    sys.path.insert(0, str(BASE_DIR))
    from bench.reference import Reference

    ref = Reference.off() if args.no_reference else Reference.start()
    results = []
    for kind in kinds:
        argv = [sys.executable, __file__, "--one", kind, "--nodes", str(args.nodes), "--pods", str(args.pods),
                "--burst-rate", str(args.burst_rate), "--burst-seconds", str(args.burst_seconds),
                "--floor-runs", str(args.floor_runs), "--fleet-clusters", str(args.fleet_clusters),
                "--check-nodes", str(args.check_nodes)] + (["--py-spy", args.py_spy] if args.py_spy else []) \
            + [f"--sync-option={option}" for option in args.sync_option]
        out = subprocess.run(argv, cwd=BASE_DIR, stdout=subprocess.PIPE, check=True).stdout
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    ref.finish()
    print(f"\nSync benchmark: {args.nodes} nodes, {args.pods} pods; burst {args.burst_rate}/s for {args.burst_seconds}s; "
          f"{os.cpu_count()} CPUs")
    single_b = args.single_b
    for r in results:
        if r["database"] == "postgres" and "b_seconds" in r:
            single_b = r["b_seconds"]
    for r in results:
        if "clusters" in r:
            print(f"\n[fleet: {r['clusters']} clusters, one sync_clusters process, PostgreSQL]  "
                  f"{load_text(r['load_before'])} before, {load_text(r['load_after'])} after")
            print(f"  floors (fetch + parse)                    {', '.join(f'{x:.2f}' for x in r['f_floors'])} s   "
                  f"{load_text(r['f_floor_load'])}")
            for i, (seconds, at) in enumerate(zip(r["f_seconds"], r["f_loads"])):
                ratio = f"{seconds / single_b:.2f} x single b" if single_b else "no single b to compare"
                met = verdict("f_over_b", seconds / single_b) if single_b else "n/a"
                print(f"  (f) cluster {i + 1} initial full sync          {seconds:8.2f} s   {ratio}, target <= 3: {met}   "
                      f"{load_text(at)}   {ref.seconds(seconds)}")
            print(f"      sync process peak RSS                 {r['f_peak_rss_mib']:8.0f} MiB target <= 1024: "
                  f"{verdict('f_peak_rss_mib', r['f_peak_rss_mib'])}   {load_text(r['f_rss_load'])}")
            for i, (checked, wrong) in enumerate(r["f_derived"]):
                print(f"      cluster {i + 1}: {derived_text(checked, wrong)}")
            if r["sync_errors"]:
                print("  sync errors:", *r["sync_errors"], sep="\n    ")
            continue
        print(f"\n[{r['database']}]  {load_text(r['load_before'])} before, {load_text(r['load_after'])} after")
        print(f"  (a) floor: fetch + orjson every page      {r['a_seconds']:8.2f} s   "
              f"(runs: {', '.join(f'{x:.2f}' for x in r['a_runs'])})   {load_text(r['a_load'])}   "
              f"{ref.seconds(r['a_seconds'])}")
        print("      of every kind the sync mirrors: " + ", ".join(
            f"{kind} {n:,} in {seconds:.2f} s" for kind, (n, seconds) in r["a_kinds"].items())
            + f"; nodes and pods alone {r['a_nodes_pods_seconds']:.2f} s (the floor before other kinds were mirrored)")
        print(f"  (b) initial full sync                     {r['b_seconds']:8.2f} s   target <= 30 s: "
              f"{verdict('b_seconds', r['b_seconds'])}   {load_text(r['b_load'])}   {ref.seconds(r['b_seconds'])}")
        print(f"      b/a                                   {r['b_over_a']:8.2f}     target <= 3: {verdict('b_over_a', r['b_over_a'])}")
        print(f"  (c) caught up after the watch burst       {r['c_seconds']:8.2f} s   target <= 30 s: {verdict('c_seconds', r['c_seconds'])}"
              f"   (burst took {r['c_burst_seconds']:.1f} s)   {load_text(r['c_load'])}   {ref.seconds(r['c_seconds'])}")
        print(f"  (d) rows written per changed object       {r['d_rows_per_change']:8.3f}     target 1.000: "
              f"{verdict('d_rows_per_change', r['d_rows_per_change'])}   ({r['d_rows_written']} rows for "
              f"{r['d_changed_objects']} objects; relist {ref.seconds(r['d_relist_seconds'], digits=1)})   {load_text(r['d_load'])}")
        print(f"      no-op writes                          {r['d_noop_writes']:8d}       target 0: "
              f"{verdict('d_noop_writes', r['d_noop_writes'])}")
        print(f"  (e) sync process peak RSS                 {r['e_peak_rss_mib']:8.0f} MiB target <= 512: "
              f"{verdict('e_peak_rss_mib', r['e_peak_rss_mib'])}   {load_text(r['e_load'])}")
        print(f"  after (b): {derived_text(*r['b_derived'])}")
        print(f"  after (d): {derived_text(*r['d_derived'])}")
        if r["sync_errors"]:
            print("  sync errors:", *r["sync_errors"], sep="\n    ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
