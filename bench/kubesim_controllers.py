"""Benchmark of the emulator's controller loop (kubesim.controllers) at 5,000 nodes and 150,000 pods.

    .venv/bin/python bench/kubesim_controllers.py [--nodes 5000] [--pods 150000] [--jobs 200]

In one process, one run (no Django), on a manual clock:

  (a) bulk load of the generated fleet with controllers off, and on (what noting every write costs): s, ratio
  (b) a tick with nothing to do: median and worst of 50, ms
  (c) the first tick of an emulator whose controllers were off (it looks at every object once): s
  (d) --jobs Jobs of 2 pods each created at once: the tick that creates their pods, the tick that starts
      them once bound, the tick that ends them, the tick that completes the Jobs: ms each
  (e) a tick with nothing to do again, the Jobs' pods among the fleet: median of 50, ms
  (f) with KAI Queues present and nothing changed: median of 50, ms

The machine reference (bench/reference.py) is measured at the start and end; each time is printed also
against its pure-Python loop ("× py-ref", and scaled to the reference machine when it is recorded).

Targets: a ratio <= 1.2; b and e median <= 5 ms; f median <= 5 ms.
The machine may be shared: the load average (1, 5, 15 min) is printed beside every figure.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.reference import Reference  # noqa: E402
from kubesim import KubeEmulator, ManualClock, generate_cluster  # noqa: E402

TARGETS = {"a_ratio": 1.2, "b_ms": 5.0, "e_ms": 5.0, "f_ms": 5.0}


def load_text() -> str:
    return "load " + "/".join(f"{x:.1f}" for x in os.getloadavg())


REF = Reference.off()  # the machine reference of this run (main), pure Python: its Python loop


def report(label: str, value: float, unit: str, target: float | None = None) -> None:
    verdict = "" if target is None else ("  ok" if value <= target else f"  OVER target {target}")
    against = ""
    if REF.enabled and unit in ("s", "ms"):
        against = "  " + (REF.seconds(value, basis="python", digits=3) if unit == "s"
                          else REF.ms(value, basis="python", digits=3))
    print(f"{label:<64} {value:10.3f} {unit:<3} ({load_text()}){verdict}{against}", flush=True)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def quiet_ticks(emu: KubeEmulator, n: int = 50) -> list[float]:
    out = []
    for _ in range(n):
        out.append(timed(emu.tick) * 1000)
    return out


def job(i: int) -> dict:
    return {"metadata": {"name": f"bench-{i:04d}", "namespace": "bench"}, "spec": {
        "completions": 2, "parallelism": 2, "template": {
            "metadata": {"annotations": {"emulator.gpu-capacity.io/run-seconds": "60"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "bench:1"}]}}}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--no-reference", action="store_true",
                        help="leave out the machine reference (bench/reference.py) measured at the start and end")
    args = parser.parse_args()
    global REF
    REF = Reference.off() if args.no_reference else Reference.start()
    nodes, pods = generate_cluster(args.nodes, args.pods, seed=1)
    print(f"fleet: {len(nodes)} nodes, {len(pods)} pods ({load_text()})", flush=True)

    # Each load twice, alternating, the best of two: the first load of a process pays for growing its heap.
    t_off = t_on = float("inf")
    for _round in range(2):
        for controllers in (False, True):
            gc.collect()
            # The Job controller and kubelets on their own: the bench binds the pods itself (the schedulers'
            # pass is bench/scheduling.py's).
            emu = KubeEmulator(clock=ManualClock(), controllers=controllers, history_size=1000, schedulers=False)
            took = timed(lambda emu=emu: emu.load(nodes, pods))
            if controllers:
                t_on, on = min(t_on, took), emu
            else:
                t_off, off = min(t_off, took), emu
            del emu
    on_clock = on.clock
    del nodes, pods
    gc.collect()
    report("(a) bulk load, controllers off (best of 2)", t_off, "s")
    report("(a) bulk load, controllers on (best of 2)", t_on, "s")
    report("(a) ratio on/off", t_on / t_off, "x", TARGETS["a_ratio"])

    on.tick()
    ticks = quiet_ticks(on)
    report("(b) tick with nothing to do, median", statistics.median(ticks), "ms", TARGETS["b_ms"])
    report("(b) tick with nothing to do, worst", max(ticks), "ms")

    report("(c) first tick of an emulator without controllers (one look at all)", timed(off.tick), "s")
    del off
    gc.collect()

    on.add_namespace("bench")
    for i in range(args.jobs):
        on.create("jobs.batch", job(i))
    report(f"(d) tick creating the pods of {args.jobs} Jobs", timed(on.tick) * 1000, "ms")
    node_names = [n["metadata"]["name"] for n in on.list("nodes")]
    unbound = [p for p in on.list("pods", "bench") if not p["spec"].get("nodeName")]
    for i, pod in enumerate(unbound):
        on.bind_pod("bench", pod["metadata"]["name"], node_names[i % len(node_names)])
    on_clock.advance(1)
    report(f"(d) tick starting their {len(unbound)} bound pods", timed(on.tick) * 1000, "ms")
    on.tick()
    on_clock.advance(60)
    report(f"(d) tick ending the {len(unbound)} pods", timed(on.tick) * 1000, "ms")
    report(f"(d) tick completing the {args.jobs} Jobs", timed(on.tick) * 1000, "ms")
    complete = sum(1 for j in on.list("jobs.batch", "bench")
                   if any(c["type"] == "Complete" for c in (j.get("status") or {}).get("conditions") or []))
    print(f"    {complete} of {args.jobs} Jobs Complete", flush=True)
    on.tick()
    ticks = quiet_ticks(on)
    report("(e) tick with nothing to do, Jobs' pods among the fleet, median", statistics.median(ticks), "ms",
           TARGETS["e_ms"])

    on.create("queues.scheduling.run.ai", {"metadata": {"name": "team-a"}, "spec": {"resources": {
        "gpu": {"quota": 8, "limit": -1, "overQuotaWeight": 1}, "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}})
    report("(f) the tick reporting the new queue (scans every pod, parses queued ones)", timed(on.tick), "s")
    ticks = quiet_ticks(on)
    report("(f) tick with KAI Queues and nothing changed, median", statistics.median(ticks), "ms", TARGETS["f_ms"])
    REF.finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
