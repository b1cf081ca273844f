"""`make run`: the emulator serving the demo cluster (with chaos), the sync and the web server, until Ctrl-C.

Starts four child processes: `python -m kubesim` (the demo cluster of
`nodepools.demo_cluster`, changing now and then), `manage.py sync_clusters`, `manage.py
snapshot_usage` (every minute, for the demo's usage charts) and daphne; loads the demo
organisation with cluster `demo` registered at the emulator's kubeconfig (its nodes and pods come from
the sync), prints the logins, and stops every child on Ctrl-C (or when one of them dies).
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from nodepools.demo_cluster import demo_objects


class Command(BaseCommand):
    help = "Run the demo: Kubernetes API emulator + sync + usage snapshots + web server; Ctrl-C stops everything."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000, help="web server port (default 8000)")
        parser.add_argument("--emulator-port", type=int, default=0, help="emulator port (default: a free one)")
        parser.add_argument("--chaos", type=float, default=5.0, help="seconds between random cluster changes (0: off)")
        parser.add_argument("--snapshot-every", type=int, default=60,
                            help="seconds between usage-history snapshots (production default: 900)")

    def handle(self, *args, host, port, emulator_port, chaos, snapshot_every, **options):
        run_dir = Path(settings.BASE_DIR) / ".run"
        run_dir.mkdir(exist_ok=True)
        scenario, kubeconfig = run_dir / "demo-cluster.json", run_dir / "emulator.kubeconfig"
        nodes, pods = demo_objects()
        scenario.write_bytes(orjson.dumps({"nodes": nodes, "pods": pods}))
        kubeconfig.unlink(missing_ok=True)
        python = sys.executable
        children: list[tuple[str, subprocess.Popen]] = []

        def start(name, argv):
            # A session of its own: Ctrl-C reaches this command only, which then stops the children in order.
            children.append((name, subprocess.Popen(argv, cwd=settings.BASE_DIR, start_new_session=True)))

        stopping = {"signal": None}

        def on_signal(signum, frame):
            stopping["signal"] = signum

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        try:
            emulator = [python, "-m", "kubesim", "--port", str(emulator_port), "--kubeconfig",
                        str(kubeconfig), "--scenario", str(scenario)]
            if chaos:
                emulator += ["--chaos", str(chaos)]
            start("emulator", emulator)
            deadline = time.monotonic() + 30
            while not kubeconfig.exists():
                if time.monotonic() > deadline or children[0][1].poll() is not None:
                    raise CommandError("the Kubernetes API emulator did not start")
                time.sleep(0.1)
            call_command("demo", kubeconfig=str(kubeconfig), stdout=self.stdout)
            start("sync", [python, "manage.py", "sync_clusters"])
            # Often, so that the usage charts of the demo fill within minutes.
            start("snapshots", [python, "manage.py", "snapshot_usage", "--every", str(snapshot_every)])
            start("web", [python, "-m", "daphne", "-b", host, "-p", str(port), "console.asgi:application"])
            self.stdout.write(f"\nServing on http://{host}:{port}  (log in with one of the demo logins above; "
                              "the demo cluster changes every few seconds; Ctrl-C stops)")
            while stopping["signal"] is None:
                dead = [name for name, proc in children if proc.poll() is not None]
                if dead:
                    self.stderr.write(f"{', '.join(dead)} stopped; stopping the rest")
                    break
                time.sleep(0.3)
        finally:
            for name, proc in reversed(children):  # web, snapshots, sync, then the emulator
                if proc.poll() is None:
                    proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self.stdout.write("stopped: " + ", ".join(name for name, _ in children))
