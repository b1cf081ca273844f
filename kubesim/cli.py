"""``python -m kubesim``: serve until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import gc
import os
import signal
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

import orjson

from kubesim.emulator import KubeEmulator
from kubesim.factories import iter_cluster


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kubesim``: serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m kubesim", description="Kubernetes API emulator (core, batch, scheduling and custom resources)."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8001, help="port to listen on; 0 picks a free one (default 8001)")
    parser.add_argument(
        "--kubeconfig", help="where to write a kubeconfig for this server (default: a file in the temp dir)"
    )
    parser.add_argument("--context", default="emulator", help="kubeconfig context name (default emulator)")
    parser.add_argument(
        "--scenario",
        help='JSON file {"nodes": [...], "pods": [...], "namespaces": [...], "objects": {"queues": [...]}} to load',
    )
    parser.add_argument(
        "--demo-nodes",
        type=int,
        default=0,
        help="generate a demo fleet of this many nodes when no scenario is given",
    )
    parser.add_argument(
        "--demo-pods", type=int, default=None, help="pods in the generated demo fleet (default: 8 per node)"
    )
    parser.add_argument("--chaos", type=float, metavar="SECONDS", help="make one plausible random change every SECONDS")
    parser.add_argument("--no-chaos-workloads", dest="chaos_workloads", action="store_false",
                        help="chaos starts no GPU workload pods of its own (node faults and Karpenter's pending "
                             "pods go on): the workloads come from elsewhere, e.g. the console's demo")
    parser.add_argument(
        "--controllers", action="store_true",
        help="run the controllers (Job controller, schedulers' slot, kubelets, Karpenter, queue status) in a "
             "background loop: Jobs get pods, bound pods run for their emulator.gpu-capacity.io/run-seconds",
    )
    parser.add_argument(
        "--controller-interval", type=float, default=1.0, metavar="SECONDS",
        help="seconds between two runs of the controllers (default 1.0)",
    )
    parser.add_argument("--demo-shared", action="store_true",
                        help="--demo-nodes also makes pools whose GPUs are shared: MIG mixed (all-balanced), MIG "
                             "single (all-1g.10gb) and time-sliced (4 replicas), their pods asking slices and replicas")
    parser.add_argument(
        "--mig-manager-seconds", type=float, nargs=2, default=None, metavar=("APPLY", "REBOOT"),
        help="seconds NVIDIA's MIG manager takes to apply a new nvidia.com/mig.config layout, and to reboot "
             "when the MIG mode changes with --mig-manager-reboot (default 30 120)")
    parser.add_argument("--mig-manager-reboot", action="store_true",
                        help="the MIG manager's WITH_REBOOT: a change of MIG mode reboots the node")
    parser.add_argument("--seed", type=int, default=None, help="random seed for --chaos and --demo-nodes")
    parser.add_argument(
        "--history-size", type=int, default=10_000, help="watch history length in events (default 10000)"
    )
    parser.add_argument(
        "--bookmark-interval", type=float, default=1.0, help="seconds between watch bookmarks (default 1.0)"
    )
    args = parser.parse_args(argv)

    emu = KubeEmulator(history_size=args.history_size, bookmark_interval=args.bookmark_interval,
                       controllers=args.controllers, controller_interval=args.controller_interval)
    emu.set_mig_manager(seconds=args.mig_manager_seconds, reboot=args.mig_manager_reboot)
    # The source objects are dropped right after loading: the store keeps only serialized bytes.
    if args.scenario:
        with open(args.scenario, "rb") as fh:
            scenario = orjson.loads(fh.read())
        emu.load(
            nodes=scenario.get("nodes", []),
            pods=scenario.get("pods", []),
            namespaces=scenario.get("namespaces", []),
            objects=scenario.get("objects") or {},
        )
        del scenario
    elif args.demo_nodes:
        nodes, pod_iter = iter_cluster(args.demo_nodes, args.demo_pods, seed=args.seed or 0, shared=args.demo_shared)
        emu.load(nodes=nodes, pods=pod_iter)
        del nodes, pod_iter
    gc.collect()
    url = emu.start(args.host, args.port)
    kubeconfig = args.kubeconfig or os.path.join(tempfile.gettempdir(), f"kube-emulator-{emu._port}.kubeconfig")
    emu.write_kubeconfig(kubeconfig, context=args.context)
    if args.chaos:
        emu.chaos_workloads = args.chaos_workloads
        emu.start_chaos(args.chaos, args.seed)
    stats = emu.stats()
    print(f"Kubernetes API emulator listening on {url}", flush=True)
    print(f"kubeconfig: {os.path.abspath(kubeconfig)} (context {args.context})", flush=True)
    print(
        f"objects: {stats['nodes']} nodes, {stats['pods']} pods"
        + (f"; chaos every {args.chaos}s" if args.chaos else "")
        + (f"; controllers every {args.controller_interval}s" if args.controllers else ""),
        flush=True,
    )

    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop.wait(0.5):
        pass
    emu.stop()
    print("emulator stopped", flush=True)
    return 0


