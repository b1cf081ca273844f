"""The console as it runs in production, started for a benchmark: PostgreSQL, Redis, the Kubernetes API
emulator (a process of its own, holding a generated fleet), a real `manage.py sync_clusters` process with
its production intervals, and Daphne processes serving the console (DEBUG off, static files collected).

Used by bench/live.py (the time from a change in the cluster to the open page) and bench/load.py (many
users at once). Everything it starts is stopped by `Stack.stop()` (also on Ctrl-C).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

PG_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/console_live")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/6")
POOLS = ("a100-train", "h100-train", "a100-spot", "l4-inference", "t4-batch")
ORG = {"training": ["ml-training", "research"], "serving": ["inference", "batch"], "data": ["data-eng"]}


def load_avg() -> str:
    return "load " + "/".join(f"{x:.1f}" for x in os.getloadavg())


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def recreate_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    with psycopg.connect(host=parts.hostname, port=parts.port or 5432, user=parts.username or "postgres",
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def flush_redis(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


class Stack:
    """PostgreSQL + Redis + emulator + sync + `daphnes` Daphne processes on `port`, `port + 1`, ..."""

    def __init__(self, *, nodes: int, pods: int, daphnes: int = 1, port: int = 18400, workdir: Path | None = None,
                 sync_args: list[str] | None = None) -> None:
        self.nodes, self.pods, self.daphnes, self.port = nodes, pods, daphnes, port
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="bench-stack-"))
        self.sync_args = sync_args or []
        self.procs: list[subprocess.Popen] = []
        self.urls: list[str] = []
        self.env = {
            **os.environ, "DATABASE_URL": PG_URL, "REDIS_URL": REDIS_URL, "SECRET_KEY": "bench-not-secret",
            "DEBUG": "0", "SECURE_SSL_REDIRECT": "0", "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "STATIC_ROOT": str(self.workdir / "static"), "LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "console.settings",
        }
        self.cluster = None
        self.kubeconfig = ""

    # -- pieces ----------------------------------------------------------------------------------------
    def setup_django(self) -> None:
        for key in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG", "SECURE_SSL_REDIRECT", "ALLOWED_HOSTS",
                    "STATIC_ROOT", "LOG_LEVEL", "DJANGO_SETTINGS_MODULE"):
            os.environ[key] = self.env[key]
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        call_command("collectstatic", verbosity=0, interactive=False)

    def _spawn(self, args: list[str], name: str, **kwargs) -> subprocess.Popen:
        out = open(self.workdir / f"{name}.log", "wb")
        proc = subprocess.Popen(args, cwd=BASE_DIR, env=self.env, stdout=kwargs.pop("stdout", out),
                                stderr=subprocess.STDOUT, **kwargs)
        self.procs.append(proc)
        return proc

    def start_emulator(self) -> str:
        kubeconfig = self.workdir / "kubeconfig"
        proc = self._spawn([sys.executable, "-m", "kubesim", "--port", "0", "--kubeconfig", str(kubeconfig),
                            "--demo-nodes", str(self.nodes), "--demo-pods", str(self.pods), "--seed", "1",
                            "--history-size", "100000", "--bookmark-interval", "1"], "emulator",
                           stdout=subprocess.PIPE)
        for line in proc.stdout:  # the emulator prints its kubeconfig line once it serves
            if line.startswith(b"kubeconfig:"):
                break
        else:
            raise RuntimeError("the emulator ended before serving")
        # Keep reading its output so that it never blocks on a full pipe.
        import threading

        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        self.kubeconfig = str(kubeconfig)
        return self.kubeconfig

    def create_org(self):
        """The cluster, six node pools, three departments and five projects with quotas (as bench/pages.py)."""
        from nodepools import services
        from projects import services as org

        cluster = services.cluster_create(actor=None, name="bench", kubeconfig_path=self.kubeconfig,
                                          kube_context="emulator")
        pools = [services.pool_create(actor=None, cluster=cluster, name=p, label_key="karpenter.sh/nodepool",
                                      label_value=p) for p in POOLS]
        departments = []
        for department_name, namespaces in ORG.items():
            department = org.department_create(actor=None, cluster=cluster, name=department_name)
            departments.append(department)
            for pool in pools[:3]:
                org.quota_update(actor=None, quota=department.quotas.get(pool=pool), expected_version=None,
                                 gpu_deserved=self.nodes // 10)
            for ns in namespaces:
                project = org.project_create(actor=None, department=department, name=ns, namespaces=[ns])
                org.quota_update(actor=None, quota=project.quotas.get(pool=pools[0]), expected_version=None,
                                 gpu_deserved=self.nodes // 30)
        self.cluster, self.pools, self.departments = cluster, pools, departments
        return cluster

    def start_sync(self, timeout: float = 900) -> float:
        from nodepools.models import Cluster

        started = time.monotonic()
        self._spawn([sys.executable, "manage.py", "sync_clusters", "--cluster", "bench", "--unreachable-after",
                     "3600", *self.sync_args], "sync")
        while not Cluster.objects.filter(pk=self.cluster.pk, last_full_sync__isnull=False).exists():
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"the initial sync did not finish in {timeout:.0f} s (see {self.workdir}/sync.log)")
            time.sleep(0.5)
        from django.db import connection

        with connection.cursor() as cursor:  # planner statistics, as autovacuum would have gathered
            cursor.execute("ANALYZE")
        return time.monotonic() - started

    def start_daphnes(self) -> list[str]:
        import urllib.request

        for i in range(self.daphnes):
            port = self.port + i
            self._spawn([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"],
                        f"daphne-{i}")
            self.urls.append(f"http://127.0.0.1:{port}")
        for url in self.urls:
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(url + "/login/", timeout=5).read()
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"Daphne at {url} did not answer (see {self.workdir})")
                    time.sleep(0.3)
        return self.urls

    def session_cookie(self, username: str = "bench-admin") -> str:
        """A logged-in session of a system administrator (the value of the `sessionid` cookie)."""
        from django.contrib.auth import get_user_model
        from django.test import Client

        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        if user is None:
            user = user_model.objects.create_superuser(username, f"{username}@example.com", "pw-bench")
        client = Client()
        client.force_login(user)
        return client.cookies["sessionid"].value

    def start(self) -> "Stack":
        log(f"database {PG_URL}, redis {REDIS_URL}, work dir {self.workdir}")
        recreate_database(PG_URL)
        flush_redis(REDIS_URL)
        self.setup_django()
        log(f"emulator: {self.nodes:,} nodes, {self.pods:,} pods")
        self.start_emulator()
        self.create_org()
        took = self.start_sync()
        log(f"initial sync {took:.1f} s; {load_avg()}")
        self.start_daphnes()
        log(f"daphne at {', '.join(self.urls)}")
        return self

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs = []

    def kube_api(self):
        from kubernetes import client, config

        return client.CoreV1Api(config.new_client_from_config(config_file=self.kubeconfig, context="emulator"))
