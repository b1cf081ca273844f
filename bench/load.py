"""Many users at once (issue 24, point 8), measured with Locust (bench/load/locustfile.py).

    .venv/bin/python bench/load.py [--rates 5,10,20] [--duration 60] [--live 200] [--events 50]
                                   [--nodes 5000] [--pods 50000] [--port 18400]

(Locust is in pyproject's `bench` extra: `.venv/bin/pip install locust==2.47.0`.)

One run starts the console as in production (bench/stack.py): PostgreSQL + Redis, the emulator holding
the 5,000-node / 50,000-pod fleet, a real `sync_clusters` and two Daphne processes (users take them in
turn). While the fleet changes at --events per second (nodes cordoned and uncordoned through the
emulator with the kubernetes client, each change on a node of its own), Locust runs, for each rate of
--rates in turn, for --duration seconds:

  readers  page requests at that rate over the nodes (first page, sorted, filtered, a later page),
           pools, quota, workloads and department pages
  live     --live open live pages (`/ws/live/`), each recording its hints

and prints per rate: requests, failures, median and p95 (Locust's), the open pages' delivery of each
change (the first hint covering the change's commit, `written`, after it was sent: every page, every
change, worst and p99), and the load average. Targets: p95 <= 300 ms, no error, every open page gets
each change within 1 s. The most requests/s held at p95 <= 300 ms is printed last, with its load average.
The machine may be shared: the load average is printed beside every figure.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stack import BASE_DIR, PG_URL, Stack, load_avg, log  # noqa: E402

TARGETS = {"p95_ms": 300, "delivery_s": 1.0}
READERS = 20


class Changes:
    """Cordons and uncordons nodes at `rate` per second through the emulator, each change on a node not
    changed before in this step; remembers what it sent and when."""

    def __init__(self, stack: Stack, names: list[str], rate: float, threads: int = 4) -> None:
        self.stack, self.names, self.rate, self.threads = stack, names, rate, threads
        self.sent: list[tuple[str, bool, float]] = []
        self.errors = 0
        self.late = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.cursor = 0
        self.cordon = True

    def start(self) -> None:
        self.stop.clear()
        self.sent = []
        self.started = time.monotonic()
        self.count = 0
        self.workers = [threading.Thread(target=self._run, daemon=True) for _ in range(self.threads)]
        for worker in self.workers:
            worker.start()

    def _next(self):
        with self.lock:
            if self.cursor >= len(self.names):  # every node changed once: the next changes undo them
                self.cursor, self.cordon = 0, not self.cordon
            name, cordon = self.names[self.cursor], self.cordon
            self.cursor += 1
            due = self.started + self.count / self.rate
            self.count += 1
            return name, cordon, due

    def _run(self) -> None:
        api = self.stack.kube_api()
        while not self.stop.is_set():
            name, cordon, due = self._next()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            elif wait < -0.5:
                self.late += 1
            sent = time.time()
            try:
                api.patch_node(name, {"spec": {"unschedulable": cordon}})
            except Exception:
                self.errors += 1
                continue
            with self.lock:
                self.sent.append((name, cordon, sent))

    def finish(self) -> list[tuple[str, bool, float]]:
        self.stop.set()
        for worker in self.workers:
            worker.join(timeout=10)
        return list(self.sent)


class Connections:
    """The most PostgreSQL connections seen during a step, this bench's database and the server's in all
    (the server is shared: its `max_connections` refused are the errors other users cause too)."""

    def __init__(self, url: str) -> None:
        self.url, self.stop, self.mine, self.total = url, threading.Event(), 0, 0

    def start(self) -> None:
        self.stop.clear()
        self.mine = self.total = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import psycopg
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        name = parts.path.lstrip("/")
        with psycopg.connect(host=parts.hostname, port=parts.port or 5432, user=parts.username or "postgres",
                             dbname="postgres", autocommit=True) as conn:
            while not self.stop.wait(1.0):
                mine, total = conn.execute("SELECT count(*) FILTER (WHERE datname = %s), count(*) FROM pg_stat_activity",
                                           [name]).fetchone()
                self.mine, self.total = max(self.mine, mine), max(self.total, total)

    def finish(self) -> tuple[int, int]:
        self.stop.set()
        self.thread.join(timeout=5)
        return self.mine, self.total


def delivery(stack: Stack, sent, out_dir: Path, settle: float) -> dict:
    """For each open page and each change sent after it connected: seconds from sending the change to the
    first hint covering its commit (`written` >= the row's `updated`). A change of a node changed twice in
    the step is judged by its last write only (the other is skipped)."""
    from nodepools.models import Node

    rows = dict(Node.objects.filter(cluster=stack.cluster, name__in=[n for n, _, _ in sent])
                .values_list("name", "updated"))
    by_name: dict[str, list] = {}
    for name, cordon, at in sent:
        by_name.setdefault(name, []).append((at, cordon))
    changes = []  # (sent at, committed at)
    unwritten = 0
    states = dict(Node.objects.filter(cluster=stack.cluster, name__in=list(by_name))
                  .values_list("name", "unschedulable"))
    for name, items in by_name.items():
        at, cordon = max(items)
        if states.get(name) != cordon:
            unwritten += 1
            continue
        changes.append((at, rows[name].timestamp()))
    pages = [json.loads(p.read_text()) for p in out_dir.glob("live-*.json")]
    latencies, missed, hints = [], 0, 0
    for page in pages:
        arrivals = sorted(page["hints"], key=lambda h: h[0])
        hints += len(arrivals)
        for at, committed in changes:
            if at < page["connected"] or at > page["stopped"] - settle:
                continue  # sent before the page was open, or too shortly before it closed
            got = next((arrived for arrived, written in arrivals if written >= committed - 1e-6), None)
            if got is None:
                missed += 1
            else:
                latencies.append(got - at)
    latencies.sort()
    # Where the time goes: from sending the change to its row committed by the sync, and from there to the
    # page (the hint's coalescing, Redis, Daphne, the socket).
    write_lags = sorted(committed - at for at, committed in changes)
    hint_lags = []
    for page in pages[:20]:  # a sample of pages is enough for the split
        arrivals = sorted(page["hints"], key=lambda h: h[0])
        for at, committed in changes:
            if page["connected"] <= at <= page["stopped"] - settle:
                got = next((arrived for arrived, written in arrivals if written >= committed - 1e-6), None)
                if got is not None:
                    hint_lags.append(got - committed)
    hint_lags.sort()
    mid = (lambda xs: xs[len(xs) // 2] if xs else float("nan"))
    pick = (lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]) if latencies else (lambda q: float("nan"))
    return {"pages": len(pages), "changes": len(changes), "unwritten": unwritten, "hints": hints,
            "checked": len(latencies), "missed": missed, "median": pick(0.5), "p99": pick(0.99),
            "worst": latencies[-1] if latencies else float("nan"),
            "over_1s": sum(1 for x in latencies if x > TARGETS["delivery_s"]),
            "write_median": mid(write_lags), "hint_median": mid(hint_lags)}


def run_locust(stack: Stack, rate: float, args, pages: dict[str, list[str]], cookie: str, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "BENCH_HOSTS": ",".join(stack.urls), "BENCH_COOKIE": cookie,
           "BENCH_PAGES": json.dumps(pages), "BENCH_CLUSTER": str(stack.cluster.pk), "BENCH_RATE": str(rate),
           "BENCH_READERS": str(READERS), "BENCH_LIVE": str(args.live), "BENCH_OUT": str(out)}
    users = READERS + args.live
    command = [sys.executable, "-m", "locust", "-f", str(BASE_DIR / "bench" / "load" / "locustfile.py"),
               "--headless", "-u", str(users), "-r", str(max(50, users // 4)), "-t", f"{args.duration}s",
               "--csv", str(out / "stats"), "--only-summary", "--stop-timeout", "5", "--host", stack.urls[0],
               "--loglevel", "WARNING"]
    with open(out / "locust.log", "wb") as logfile:
        subprocess.run(command, cwd=BASE_DIR, env=env, stdout=logfile, stderr=subprocess.STDOUT, check=False)
    stats = {}
    with open(out / "stats_stats.csv") as f:
        for row in csv.DictReader(f):
            stats[(row["Type"], row["Name"])] = row
    return stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="5,10,20", help="page requests per second, one step each")
    parser.add_argument("--duration", type=int, default=60, help="seconds per step")
    parser.add_argument("--live", type=int, default=200, help="open live pages")
    parser.add_argument("--events", type=float, default=50, help="changes in the cluster per second")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--port", type=int, default=18400)
    parser.add_argument("--no-reference", action="store_true",
                        help="leave out the machine reference (bench/reference.py) measured at the start and end")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r]
    from bench.reference import Reference

    # Before the stack starts and after it stops. (A rate's p95 is mostly queueing: it scales with the
    # machine's speed only while the machine keeps up, and with its cores, which the reference does not
    # measure; the reference machine's cores are recorded beside it.)
    ref = Reference.off() if args.no_reference else Reference.start()
    os.environ["CONN_MAX_AGE"] = os.environ.get("CONN_MAX_AGE", "60")  # as deploy/base/configmap.yaml

    stack = Stack(nodes=args.nodes, pods=args.pods, daphnes=2, port=args.port)
    results = []
    try:
        stack.env["CONN_MAX_AGE"] = os.environ["CONN_MAX_AGE"]
        stack.start()
        cookie = stack.session_cookie()
        cluster = stack.cluster
        # The five kinds of page in equal shares, each kind's variants in turn.
        pages = {
            "nodes": ["/nodes/", "/nodes/?sort=name&page=40", "/nodes/?sort=-gpu_allocated",
                      f"/nodes/?cluster={cluster.pk}&pool={stack.pools[1].pk}&status=ready"],
            "pools": ["/pools/"],
            "quota": [f"/clusters/{cluster.pk}/quota/"],
            "workloads": ["/workloads/"],
            "department": [f"/departments/{d.pk}/" for d in stack.departments],
        }
        from nodepools.models import Node

        names = list(Node.objects.filter(cluster=cluster).order_by("?").values_list("name", flat=True))
        changes = Changes(stack, names, args.events)
        connections = Connections(PG_URL)
        workdir = Path(tempfile.mkdtemp(prefix="bench-load-"))
        log(f"warming up (a few requests of each page); {load_avg()}")
        import urllib.request

        for base in stack.urls:
            for path in (p for variants in pages.values() for p in variants):
                request = urllib.request.Request(base + path, headers={"Cookie": f"sessionid={cookie}"})
                assert urllib.request.urlopen(request, timeout=120).status == 200, path
        for rate in rates:
            log(f"step: {rate:g} page requests/s, {args.live} live pages, {args.events:g} changes/s for "
                f"{args.duration} s; {load_avg()}")
            changes.start()
            connections.start()
            stats = run_locust(stack, rate, args, pages, cookie, workdir / f"rate-{rate:g}")
            sent = changes.finish()
            pg_mine, pg_total = connections.finish()
            load_after = load_avg()
            time.sleep(2)  # the last changes' hints
            agg = stats.get(("", "Aggregated")) or stats.get((None, "Aggregated")) or {}
            http = [row for (kind, name), row in stats.items() if kind == "GET"]
            requests = sum(int(r["Request Count"]) for r in http)
            failures = sum(int(r["Failure Count"]) for r in http)
            ws_fail = sum(int(r["Failure Count"]) for (kind, _), r in stats.items() if kind == "WS")
            p95 = max((float(r["95%"]) for r in http if int(r["Request Count"])), default=float("nan"))
            got = delivery(stack, sent, workdir / f"rate-{rate:g}", settle=1.0)
            row = {"rate": rate, "requests": requests, "rps": requests / args.duration, "failures": failures,
                   "ws_failures": ws_fail, "p95_page_max": p95, "per_page": {name: (r["50%"], r["95%"], r["Request Count"])
                                                                             for (kind, name), r in stats.items() if kind == "GET"},
                   "changes_sent": len(sent), "change_errors": changes.errors, "late": changes.late,
                   "delivery": got, "load": load_after}
            all_p95 = float(agg.get("95%") or "nan")  # every page request (websockets report failures only)
            row["p95_all"] = all_p95
            results.append(row)
            print(f"\n{rate:g} page requests/s asked: {requests} requests ({requests / args.duration:.1f}/s), "
                  f"{failures} failed, p95 of all pages {all_p95:.0f} ms; websockets failed {ws_fail}; {load_after}")
            for name, (p50, p95_, n) in sorted(row["per_page"].items()):
                print(f"    {name:12s} {n:>6s} requests  median {p50:>5s} ms  p95 {p95_:>5s} ms")
            print(f"    changes: {len(sent)} sent ({len(sent) / args.duration:.1f}/s, {changes.errors} errors, "
                  f"{got['unwritten']} not written at the end); {got['pages']} live pages, {got['hints']} hints; "
                  f"{got['checked']} page x change deliveries: median {got['median'] * 1000:.0f} ms, p99 "
                  f"{got['p99'] * 1000:.0f} ms, worst {got['worst'] * 1000:.0f} ms, {got['over_1s']} over 1 s, "
                  f"{got['missed']} missed; of which the row committed {got['write_median'] * 1000:.0f} ms (median) after "
                  f"the change was sent, the hint on the page {got['hint_median'] * 1000:.0f} ms after the commit",
                  flush=True)
            print(f"    PostgreSQL connections at most: {pg_mine} of this bench, {pg_total} on the server in all "
                  f"(the server is shared)", flush=True)
            if failures:
                print(f"    failures: see {workdir / f'rate-{rate:g}' / 'stats_failures.csv'} and {stack.workdir}/daphne-*.log")
    finally:
        stack.stop()
    ref.finish()

    print(f"\nmany users at once: {args.nodes:,} nodes / {args.pods:,} pods changing at {args.events:g}/s, "
          f"PostgreSQL + Redis, two Daphne processes, {args.live} open live pages")
    held = None
    for row in results:
        d = row["delivery"]
        ok = (row["p95_all"] <= TARGETS["p95_ms"] and row["failures"] == 0 and row["ws_failures"] == 0
              and d["over_1s"] == 0 and d["missed"] == 0 and d["checked"] > 0)
        if ok:
            held = row
        print(f"  {row['rate']:>4g} req/s asked, {row['rps']:5.1f} served: p95 {ref.ms(row['p95_all'], digits=0)}, "
              f"{row['failures']} errors, changes within 1 s: {d['checked'] - d['over_1s']}/{d['checked']} "
              f"(worst {d['worst'] * 1000:.0f} ms, {d['missed']} missed)  {'MET' if ok else 'NOT MET'}; {row['load']}")
    if held:
        print(f"  most requests/s held with every target met: {held['rps']:.1f}; {held['load']}")
    else:
        print("  no rate held every target on this machine at this load")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
