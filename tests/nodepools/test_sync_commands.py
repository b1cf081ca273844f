"""`cluster_add`, `sync_clusters` and `demo --kubeconfig`: registering clusters and running the sync."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from nodepools.models import Cluster, ConnectionState, Node, Pod
from tests.nodepools.test_sync import load_small_cluster

BASE_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture
def kubeconfig(sim, tmp_path):
    return sim.write_kubeconfig(tmp_path / "kubeconfig", context="lab-admin")


def add(*args):
    out = StringIO()
    call_command("cluster_add", *args, stdout=out)
    return out.getvalue()


def test_cluster_add_registers_path_and_context_but_no_credentials(db, kubeconfig):
    output = add("lab", "--kubeconfig", kubeconfig, "--context", "lab-admin")
    assert "registered" in output
    cluster = Cluster.objects.get(name="lab")
    assert (cluster.kubeconfig_path, cluster.kube_context, cluster.in_cluster) == (kubeconfig, "lab-admin", False)
    assert cluster.default_pool.name == "default"
    # The token of the kubeconfig is nowhere in the database row.
    token = json.loads(Path(kubeconfig).read_text())["users"][0]["user"]["token"]
    assert token not in json.dumps(list(Cluster.objects.values())[0], default=str)


def test_cluster_add_in_cluster(db):
    add("local", "--in-cluster")
    assert Cluster.objects.get(name="local").in_cluster


@pytest.mark.parametrize("args, message", [
    (["lab", "--kubeconfig", "/nonexistent/kc"], "no file at /nonexistent/kc"),
    (["lab", "--kubeconfig", "{kc}", "--context", "other"], "has no context 'other' (it has: lab-admin)"),
    (["Lab_1", "--kubeconfig", "{kc}"], "name: Use lowercase letters, digits and '-'; start and end with a letter or digit; at most 63 characters "
                                       "(“Lab_1” holds capital letters and '_')."),
    (["lab", "--in-cluster", "--context", "x"], "--context applies to --kubeconfig only"),
])
def test_cluster_add_refuses_bad_input_with_a_clear_message(db, kubeconfig, args, message):
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        add(*[a.replace("{kc}", kubeconfig) for a in args])
    assert not Cluster.objects.exists()


def test_cluster_add_twice_needs_update(db, kubeconfig, tmp_path):
    add("lab", "--kubeconfig", kubeconfig)
    with pytest.raises(CommandError, match="already exists"):
        add("lab", "--in-cluster")
    add("lab", "--in-cluster", "--update")
    assert Cluster.objects.get(name="lab").in_cluster


def test_demo_with_kubeconfig_registers_the_cluster_and_leaves_objects_to_the_sync(db, kubeconfig):
    out = StringIO()
    call_command("demo", kubeconfig=kubeconfig, context="lab-admin", stdout=out)
    cluster = Cluster.objects.get(name="demo")
    assert (cluster.kubeconfig_path, cluster.kube_context) == (kubeconfig, "lab-admin")
    assert not Node.objects.exists() and not Pod.objects.exists()
    # The guide's three pools, the three of shared GPUs, and the two backed by Karpenter NodePools (the sync
    # mirrors those NodePools).
    assert "admin" in out.getvalue()
    assert sorted(cluster.pools.values_list("name", flat=True)) == [
        "a100-40gb", "a100-80gb", "a100-mig", "a10g", "default", "h100-prod", "l4-shared", "t4-spot"]


def test_sync_clusters_process_mirrors_and_stops_on_sigterm(transactional_db, sim, kubeconfig, tmp_path):
    from django.db import connection

    if connection.vendor == "sqlite":
        db_path = tmp_path / "sync.sqlite3"
        # The test database lives in memory here: give the process a file database of its own.
        env_url = f"sqlite:///{db_path}"
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=BASE_DIR, check=True,
                       env={**os.environ, "DATABASE_URL": env_url})
    else:
        s = connection.settings_dict
        env_url = f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    env = {**os.environ, "DATABASE_URL": env_url, "PYTHONUNBUFFERED": "1"}
    subprocess.run([sys.executable, "manage.py", "cluster_add", "lab", "--kubeconfig", kubeconfig], cwd=BASE_DIR,
                   env=env, check=True, capture_output=True)
    load_small_cluster(sim)
    log = open(tmp_path / "sync.log", "wb")
    proc = subprocess.Popen([sys.executable, "manage.py", "sync_clusters", "--tick", "0.1", "--backoff-base", "0.1"],
                            cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        def probe():
            if connection.vendor != "sqlite":
                cluster = Cluster.objects.get(name="lab")
                return [cluster.connection_state, Node.objects.count(), Pod.objects.count()]
            import sqlite3

            with sqlite3.connect(db_path) as db:
                return [db.execute("SELECT connection_state FROM nodepools_cluster").fetchone()[0],
                        db.execute("SELECT count(*) FROM nodepools_node").fetchone()[0],
                        db.execute("SELECT count(*) FROM nodepools_pod").fetchone()[0]]

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = probe()
            if state == [ConnectionState.CONNECTED, 4, 8]:
                break
            time.sleep(0.2)
        assert state == [ConnectionState.CONNECTED, 4, 8]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert "sync stopped" in (tmp_path / "sync.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
