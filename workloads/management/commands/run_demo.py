"""`make run`: the emulator serving the demo cluster (with chaos), the sync and the web server, until Ctrl-C.

First checks that the web port is free (a busy port fails at once, naming it). Starts four child
processes: `python -m kubesim` (the demo cluster of `nodepools.demo_cluster`, changing now
and then), `manage.py sync_clusters`, daphne and, once the sync's first full list of the demo cluster
is written (so that the usage charts do not start at zero), `manage.py snapshot_usage` (every minute,
for the demo's charts); then the demo's story runs in a thread of this process (`workloads.demo.DemoStory`:
the researchers' workloads submitted through the console over time; `--no-story` leaves it out), while the
emulator's chaos only fails and heals nodes (and asks Karpenter for nodes). Loads the demo organisation with cluster `demo` registered at the emulator's
kubeconfig (its nodes and pods come from the sync), prints the logins and the kubeconfig (for
kubectl), and stops every child on Ctrl-C (or, failing, when one of them dies). The web server and the
sync run with `console.settings_demo` (DEBUG off: the console's own error pages).
"""
from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.utils import timezone

from gpumetrics import localprom
from kube.client import api_error_message
from nodepools import services
from nodepools.demo_cluster import demo_karpenter_nodepools, demo_karpenter_pods, demo_objects
from nodepools.models import Cluster
from nodepools.sync import api_client_for
from workloads.demo import DemoStory, demo_submissions

DEMO_CLUSTER = "demo"  # the name `manage.py demo` registers
FIRST_SYNC_TIMEOUT = 90  # seconds
STORY_STEP_SECONDS = 5


def check_port_free(host: str, port: int) -> None:
    """Fail now, naming the port, rather than after starting everything (daphne would only log it)."""
    if not 0 < port < 65536:
        raise CommandError(f"port {port} is not a TCP port (1-65535)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # Like daphne: a port left in TIME_WAIT by a previous run is free; one someone listens on is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
            probe.listen(1)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CommandError(f"port {port} on {host} is already in use (another `make run`?); "
                                   f"choose another one: PORT={port + 1} make run") from None
            if exc.errno == errno.EACCES:
                raise CommandError(f"port {port} on {host} needs privileges; choose one above 1023: "
                                   "PORT=8001 make run") from None
            raise CommandError(f"cannot listen on {host} port {port}: {exc.strerror}") from None


APT_INSTALL_PROMETHEUS = "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus"
INSTALL_TIMEOUT = 600  # seconds: a slow mirror, not a hung one


def prometheus_plan(*, available: bool, install: bool, is_root: bool, apt_get: str | None) -> str:
    """What `make run` does about the demo's Prometheus: "ready" (installed), "install" (Debian's package,
    as root with apt-get, when asked to), or why it runs without: "not-asked", "not-root", "no-apt"."""
    if available:
        return "ready"
    if not install:
        return "not-asked"
    if apt_get is None:
        return "no-apt"
    if not is_root:
        return "not-root"
    return "install"


def prometheus_advice(binary: str, why: str) -> str:
    """The one message saying the demo runs without GPU utilization, and how to get it."""
    lead = f"No Prometheus at {binary}: the demo runs without GPU utilization, idle GPUs and their charts."
    if why == "no-apt":
        how = ("To see them, install Prometheus (Debian's and Ubuntu's package is `prometheus`) or name a "
               "prometheus binary (PROMETHEUS_BIN=/path/to/prometheus make run), then start `make run` again.")
    elif why == "not-root":
        how = "To see them: sudo apt-get install prometheus, then start `make run` again."
    elif why.startswith("failed"):
        how = (f"Installing Debian's prometheus {why}. To see them: sudo apt-get install prometheus, "
               "then start `make run` again.")
    else:
        how = "To see them: apt-get install prometheus (as root), then start `make run` again."
    return f"{lead} {how}"


def ensure_prometheus(*, install: bool, write, available=localprom.available, binary: str = localprom.PROMETHEUS,
                      is_root: bool | None = None, apt_get: str | None | bool = False, run=subprocess.run) -> bool:
    """Whether the demo has a Prometheus binary, after installing Debian's `prometheus` when it is missing
    and `install` (root and apt-get, as CI does); else `write` is told once how to get one."""
    if is_root is None:
        is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    if apt_get is False:
        apt_get = shutil.which("apt-get")
    plan = prometheus_plan(available=available(), install=install, is_root=is_root, apt_get=apt_get)
    if plan == "ready":
        return True
    if plan != "install":
        write(prometheus_advice(binary, plan))
        return False
    write("Installing Debian's prometheus, for the demo's GPU utilization (once; a minute or two) ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        result = run(["sh", "-c", APT_INSTALL_PROMETHEUS], capture_output=True, text=True, env=env,
                     timeout=INSTALL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        write(prometheus_advice(binary, f"failed ({exc})"))
        return False
    if result.returncode != 0:
        said = [line for line in (result.stderr or result.stdout or "").splitlines() if line.strip()]
        detail = f": {said[-1].strip()[:200]}" if said else ""
        write(prometheus_advice(binary, f"failed (apt-get exited {result.returncode}{detail})"))
        return False
    if not available():
        write(prometheus_advice(binary, "failed (installed, but no prometheus binary there)"))
        return False
    write(f"Installed Debian's prometheus ({binary}).")
    return True


def wait_listening(host: str, port: int, alive, timeout: float = 30) -> bool:
    address = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


class Command(BaseCommand):
    help = "Run the demo: Kubernetes API emulator + sync + usage snapshots + web server; Ctrl-C stops everything."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000, help="web server port (default 8000; `PORT=8001 make run`)")
        parser.add_argument("--emulator-port", type=int, default=0, help="emulator port (default: a free one)")
        parser.add_argument("--chaos", type=float, default=5.0, help="seconds between random cluster changes (0: off)")
        parser.add_argument("--snapshot-every", type=int, default=60,
                            help="seconds between usage-history snapshots (production default: 900)")
        parser.add_argument("--install-prometheus", action="store_true",
                            help="install Debian's prometheus when it is missing (as root, with apt-get), for the "
                                 "demo's GPU utilization; `make run` asks for it")
        parser.add_argument("--no-story", dest="story", action="store_false",
                            help="do not run the demo's story (the researchers' workloads submitted over time)")

    def handle(self, *args, host, port, emulator_port, chaos, snapshot_every, story=True, install_prometheus=False,
               **options):
        self._install_prometheus = install_prometheus
        self._story_stop = threading.Event()
        check_port_free(host, port)
        # CONSOLE_RUN_DIR: where the demo's scenario and kubeconfig go (default .run/ in the checkout), so
        # that two demos (or two test runs) on one machine do not overwrite each other's kubeconfig.
        run_dir = Path(os.environ.get("CONSOLE_RUN_DIR") or Path(settings.BASE_DIR) / ".run")
        run_dir.mkdir(parents=True, exist_ok=True)
        scenario, kubeconfig = run_dir / "demo-cluster.json", run_dir / "emulator.kubeconfig"
        nodes, pods = demo_objects()
        # Two Karpenter-backed pools: their NodePools, and a pod waiting for Karpenter's first node.
        scenario.write_bytes(orjson.dumps({"nodes": nodes, "pods": pods + demo_karpenter_pods(),
                                           "objects": {"nodepools.karpenter.sh": demo_karpenter_nodepools()}}))
        kubeconfig.unlink(missing_ok=True)
        python = sys.executable
        children: list[tuple[str, subprocess.Popen]] = []
        # DEBUG off in the web server: the console's own 404/403/500 pages (console/settings_demo.py).
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings_demo"}

        def start(name, argv):
            # A session of its own: Ctrl-C reaches this command only, which then stops the children in order.
            children.append((name, subprocess.Popen(argv, cwd=settings.BASE_DIR, start_new_session=True, env=env)))

        def dead() -> list[str]:
            return [name for name, proc in children if proc.poll() is not None]

        stopping = {"signal": None}

        def on_signal(signum, frame):
            stopping["signal"] = signum

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        prometheus = None
        story_thread = None
        try:
            # --controllers: the Jobs submitted through the console get pods, and bound pods run their time.
            emulator = [python, "-m", "kubesim", "--port", str(emulator_port), "--kubeconfig",
                        str(kubeconfig), "--scenario", str(scenario), "--controllers"]
            if chaos:
                # Chaos keeps nodes failing and recovering (and Karpenter's pending pods); the workloads come
                # from the console: the demo's story submits them (workloads.demo.DemoStory).
                emulator += ["--chaos", str(chaos), "--no-chaos-workloads"]
            start("emulator", emulator)
            deadline = time.monotonic() + 30
            while not kubeconfig.exists():
                if time.monotonic() > deadline or children[0][1].poll() is not None:
                    raise CommandError("the Kubernetes API emulator did not start")
                time.sleep(0.1)
            call_command("demo", kubeconfig=str(kubeconfig), stdout=self.stdout)
            prometheus = self._start_prometheus(kubeconfig)
            sync_started = timezone.now()
            start("sync", [python, "manage.py", "sync_clusters"])
            # No access log (-v 0): every live refetch would be a line; Django's own log says what matters,
            # a refused request in one line (common/log.py).
            start("web", [python, "-m", "daphne", "-v", "0", "-b", host, "-p", str(port), "console.asgi:application"])
            # The first usage snapshot after the first full sync: the charts then start at the real figures.
            if self._wait_first_full_sync(sync_started, dead, stopping):
                self._submit_demo_workloads()
                if story:
                    story_thread = self._start_story(stopping)
                # Often, so that the usage charts of the demo fill within minutes.
                start("snapshots", [python, "manage.py", "snapshot_usage", "--every", str(snapshot_every)])
            if stopping["signal"] is None and not dead():
                if not wait_listening(host, port, lambda: not dead() and stopping["signal"] is None):
                    raise CommandError(f"the web server did not start listening on {host} port {port}")
            failed: list[str] = []
            if stopping["signal"] is None and not dead():
                self.stdout.write(f"\nThe demo cluster, for the tools you know:\n"
                                  f"kubeconfig: {kubeconfig}\n"
                                  f"  e.g. kubectl --kubeconfig {kubeconfig} get nodes -L gpu-type")
                if prometheus is not None:
                    self.stdout.write(f"Prometheus (the demo's DCGM exporter, scraped every 2 s): {prometheus.url}")
                self.stdout.write(f"\nServing on http://{host}:{port}  (log in with one of the demo logins above; "
                                  "the demo cluster changes every few seconds; Ctrl-C stops)")
                self.stdout.flush()
            while stopping["signal"] is None:
                failed = dead()
                if failed:
                    break
                time.sleep(0.3)
            if failed:
                raise CommandError(f"{', '.join(failed)} stopped; stopped the rest")
        finally:
            self._story_stop.set()
            if story_thread is not None:
                story_thread.join(10)
            if prometheus is not None:
                prometheus.stop()
            for name, proc in reversed(children):  # snapshots, web, sync, then the emulator
                if proc.poll() is None:
                    proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self.stdout.write("stopped: " + ", ".join(name for name, _ in children))

    def _start_prometheus(self, kubeconfig: Path):
        """A real Prometheus scraping the emulator's DCGM exporter, named as the demo cluster's, when
        Debian's prometheus is installed; without it the GPU utilization columns say why they are empty."""
        cluster = Cluster.objects.get(name=DEMO_CLUSTER)
        if not ensure_prometheus(install=getattr(self, "_install_prometheus", False), write=self.stdout.write):
            if cluster.prometheus_url:
                services.cluster_update(actor=None, cluster=cluster, prometheus_url="")
            return None
        server = orjson.loads(kubeconfig.read_bytes())["clusters"][0]["cluster"]["server"]
        prometheus = localprom.LocalPrometheus([server + "/dcgm/metrics"], scrape_interval="2s")
        try:
            prometheus.start()
        except RuntimeError as exc:
            self.stderr.write(f"Prometheus did not start, the demo runs without GPU utilization: {exc}")
            prometheus.stop()
            return None
        services.cluster_update(actor=None, cluster=cluster, prometheus_url=prometheus.url,
                                prometheus_bearer_token_file="", prometheus_basic_auth_file="",
                                prometheus_label_matchers="")
        return prometheus

    def _submit_demo_workloads(self) -> None:
        """A few workloads submitted to the demo cluster (workloads.demo), once the sync knows its nodes."""
        cluster = Cluster.objects.get(name=DEMO_CLUSTER)
        try:
            with api_client_for(cluster) as api_client:
                names = demo_submissions(cluster=cluster, api_client=api_client)
        except Exception as exc:  # noqa: BLE001 - the demo runs on without them
            self.stderr.write(f"demo workloads not submitted: {api_error_message(exc)}")
            return
        if names:
            self.stdout.write(f"submitted demo workloads: {', '.join(names)}")

    def _start_story(self, stopping) -> threading.Thread:
        """The demo's story (workloads.demo.DemoStory) in a thread of this process: every few seconds it
        submits what is due through the console's submission service, as the demo's researchers."""
        cluster = Cluster.objects.get(name=DEMO_CLUSTER)
        driver = DemoStory(cluster=cluster)
        stop = self._story_stop

        def run() -> None:
            try:
                while not stop.is_set() and stopping["signal"] is None:
                    try:
                        with api_client_for(cluster) as api_client:
                            names = driver.step(time.time(), api_client)
                        if names:
                            self.stdout.write(f"the demo's researchers submitted: {', '.join(names)}")
                        while driver.log:
                            self.stderr.write(f"demo story: {driver.log.pop(0)}")
                    except Exception as exc:  # noqa: BLE001 - the demo goes on; the next step tries again
                        self.stderr.write(f"demo story: {api_error_message(exc)}")
                    stop.wait(STORY_STEP_SECONDS)
            finally:
                connection.close()

        thread = threading.Thread(target=run, name="demo-story", daemon=True)
        thread.start()
        return thread

    def _wait_first_full_sync(self, since, dead, stopping) -> bool:
        deadline = time.monotonic() + FIRST_SYNC_TIMEOUT
        while time.monotonic() < deadline and stopping["signal"] is None and not dead():
            synced = Cluster.objects.filter(name=DEMO_CLUSTER).values_list("last_full_sync", flat=True).first()
            if synced is not None and synced >= since:
                self.stdout.write(f"cluster {DEMO_CLUSTER}: first full sync done")
                return True
            time.sleep(0.2)
        if stopping["signal"] is None and not dead():
            self.stderr.write(f"cluster {DEMO_CLUSTER}: no full sync within {FIRST_SYNC_TIMEOUT} s; "
                              "usage snapshots start anyway")
            return True
        return False
