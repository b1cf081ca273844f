"""`make run` as a new user meets it: a busy port, the kubeconfig for kubectl, the console's own pages,
and usage charts that start at the real figures."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def demo_env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DJANGO_SETTINGS_MODULE", "DEBUG"}}
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'demo.sqlite3'}"
    env["PYTHONUNBUFFERED"] = "1"
    env["CONSOLE_RUN_DIR"] = str(tmp_path / "run")  # the SQLite and PostgreSQL runs of CI go side by side
    return env


def test_a_busy_port_fails_at_once_naming_the_port(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "manage.py", "run_demo", "--port", str(port)], cwd=ROOT,
                                env=demo_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "PORT=" in result.stderr  # says how to choose another
    assert "Serving" not in result.stdout
    assert "emulator" not in result.stdout  # nothing was started


def test_make_run_takes_the_port_from_PORT():
    if shutil.which("make") is None:
        pytest.skip("needs make")
    default = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True, env={
        k: v for k, v in os.environ.items() if k != "PORT"}, timeout=30)
    assert "manage.py run_demo --port 8000" in default.stdout
    chosen = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PORT": "8001"}, timeout=30)
    assert "manage.py run_demo --port 8001" in chosen.stdout


@pytest.fixture
def demo(tmp_path):
    """`manage.py run_demo` on a database of its own and a free port, until it says it is serving."""
    env = demo_env(tmp_path)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=300)
    port = free_port()
    out = tmp_path / "run_demo.out"
    with out.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "manage.py", "run_demo", "--port", str(port), "--chaos", "0"],
                                cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "Serving on" not in out.read_text():
            assert proc.poll() is None, f"run_demo stopped:\n{out.read_text()}"
            assert time.monotonic() < deadline, f"run_demo did not serve in time:\n{out.read_text()}"
            time.sleep(0.2)
        yield {"url": f"http://127.0.0.1:{port}", "out": out, "db": tmp_path / "demo.sqlite3", "proc": proc}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C in the terminal
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def test_the_demo_prints_its_kubeconfig_serves_the_consoles_pages_and_snapshots_after_the_first_sync(demo):
    text = demo["out"].read_text()
    serving = text.index("Serving on")
    kubeconfig_lines = [line for line in text[:serving].splitlines() if line.startswith("kubeconfig: ")]
    assert kubeconfig_lines, text
    path = kubeconfig_lines[-1].split(" ", 1)[1].strip()
    assert Path(path).is_file()
    assert f"kubectl --kubeconfig {path} get nodes" in text
    if shutil.which("kubectl"):
        # The demo cluster's nodes; the emulator's controllers run (Karpenter among them), so a node launched
        # for the demo's pending H100 pod may have joined them: not counted here.
        nodes = subprocess.run(["kubectl", "--kubeconfig", path, "get", "nodes", "-o", "name",
                                "-l", "!karpenter.sh/nodepool"], capture_output=True, text=True, timeout=30)
        assert nodes.returncode == 0, nodes.stderr
        # 30 of whole GPUs and 8 of shared ones (MIG slices, time-sliced replicas, KAI fractions).
        assert len(nodes.stdout.split()) == 38

    # The console's own pages, even for a wrong address: DEBUG is off in the demo.
    status, headers, body = fetch(demo["url"] + "/favicon.ico")
    assert status == 200 and headers["Content-Type"] == "image/vnd.microsoft.icon"
    assert body == (ROOT / "static" / "favicon.ico").read_bytes()
    status, _, body = fetch(demo["url"] + "/no-such-page/")
    assert status == 404
    assert b"<h1>Not found</h1>" in body and b"DEBUG = True" not in body and b"URLconf" not in body
    deadline = time.monotonic() + 10  # the access log line is written after the answer went out
    while "/no-such-page/" not in demo["out"].read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    logged = [line for line in demo["out"].read_text().splitlines() if "/no-such-page/" in line]
    # One line, with the request id the answer carried (X-Request-ID) at its end.
    assert len(logged) == 1 and re.search(r"GET /no-such-page/ 404 user=anonymous \(Not Found\) request_id=[0-9a-f]{32}$",
                                          logged[0]), logged
    status, _, body = fetch(demo["url"] + "/login/")
    assert status == 200 and b"/static/css/console.css" in body
    assert fetch(demo["url"] + "/static/css/console.css")[0] == 200

    # The first usage snapshot is taken after the first full sync: its GPUs are the cluster's, not zero.
    deadline = time.monotonic() + 60
    first = None
    while first is None and time.monotonic() < deadline:
        with sqlite3.connect(demo["db"], timeout=20) as db:
            first = db.execute("SELECT MIN(taken) FROM usage_usagesnapshot").fetchone()[0]
            allocated = db.execute("SELECT SUM(gpu_allocated) FROM usage_usagesnapshot WHERE taken = ?",
                                   (first,)).fetchone()[0] if first else None
        time.sleep(0.5)
    assert first is not None, demo["out"].read_text()
    assert float(allocated) > 0
    text = demo["out"].read_text()
    assert text.index("first full sync done") < text.index("usage snapshot:")

    # With Debian's prometheus, the demo's Prometheus scrapes the emulator's DCGM exporter: project
    # team-nlp holds its 12 GPUs idle.
    from gpumetrics import localprom
    from gpumetrics.localprom import LocalPrometheus

    if localprom.available() or os.environ.get("CONSOLE_REQUIRE_PROMETHEUS") == "1":
        named = [line for line in text.splitlines() if line.startswith("Prometheus (")]
        assert named, text
        prom = LocalPrometheus()
        prom.url = named[0].rsplit(" ", 1)[1]
        idle = prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL{namespace="runai-team-nlp"}', count=12, timeout=30)
        assert {row["value"][1] for row in idle} == {"1"}
        prom.stop()  # only its own temporary directory: the demo's Prometheus is the demo's to stop
    else:
        assert "No Prometheus at" in text

    # The demo's story: a thread of run_demo submits the researchers' first workloads through the console;
    # the sync brings them into the workloads table, submitted by the researchers.
    deadline = time.monotonic() + 60
    while "the demo's researchers submitted: scoring-a" not in demo["out"].read_text():
        assert time.monotonic() < deadline, demo["out"].read_text()
        time.sleep(0.5)
    deadline = time.monotonic() + 60
    found = None
    while found is None and time.monotonic() < deadline:
        with sqlite3.connect(demo["db"], timeout=20) as db:
            found = db.execute("SELECT submitted_by FROM workloads_workload WHERE name = 'scoring-a'").fetchone()
        time.sleep(0.5)
    assert found == ("batch-scoring-researcher",), demo["out"].read_text()

    # Ctrl-C stops everything, cleanly.
    os.killpg(demo["proc"].pid, signal.SIGINT)
    assert demo["proc"].wait(40) == 0
    assert "stopped: " in demo["out"].read_text()


def test_the_readme_starts_with_the_two_commands_and_points_only_inside_the_repository():
    import re

    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```sh", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in first_block.strip().splitlines()] == ["make run", "make test"]
    assert "../" not in readme and "DOMAIN.md" not in readme
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if target.startswith(("http://", "https://")):
            continue
        assert (ROOT / target).resolve().is_relative_to(ROOT) and (ROOT / target).exists(), target
    assert "docs/concepts.md" in readme
    concepts = (ROOT / "docs" / "concepts.md").read_text()
    for term in ("default pool", "Over-quota", "Fair share", "priority list", "Roles", "Exports",
                 "last full sync", "Scheduling disabled"):
        assert term.lower() in concepts.lower(), term
    assert "PORT=8001 make run" in readme


# --- The demo's Prometheus on a fresh machine (decided with fakes: nothing is installed here) -------------

def _ensure(*, present=False, install=True, root=True, apt="/usr/bin/apt-get", returncode=0, installs=True,
            stderr=""):
    from workloads.management.commands import run_demo

    said, ran, state = [], [], {"present": present}

    def run(argv, **kwargs):
        ran.append(argv)
        if returncode == 0 and installs:
            state["present"] = True
        return subprocess.CompletedProcess(argv, returncode, stdout="", stderr=stderr)

    ok = run_demo.ensure_prometheus(install=install, write=said.append, available=lambda: state["present"],
                                    binary="/usr/bin/prometheus", is_root=root, apt_get=apt, run=run)
    return ok, said, ran


def test_make_run_asks_for_prometheus_to_be_installed():
    if shutil.which("make") is None:
        pytest.skip("needs make")
    dry = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert "run_demo --port" in dry.stdout and "--install-prometheus" in dry.stdout


def test_a_missing_prometheus_is_installed_with_apt_get_as_root():
    ok, said, ran = _ensure()
    assert ok is True
    assert len(ran) == 1 and "apt-get install -y -qq prometheus" in ran[0][-1] and "apt-get update" in ran[0][-1]
    assert not any("No Prometheus" in line for line in said)
    assert said[-1] == "Installed Debian's prometheus (/usr/bin/prometheus)."


def test_an_installed_prometheus_is_used_as_is_and_nothing_is_said():
    ok, said, ran = _ensure(present=True)
    assert ok is True and ran == [] and said == []


@pytest.mark.parametrize("case, how", [
    ({"root": False}, "sudo apt-get install prometheus"),
    ({"apt": None}, "PROMETHEUS_BIN=/path/to/prometheus make run"),
    ({"returncode": 100, "stderr": "E: Unable to locate package prometheus\n"},
     "apt-get exited 100: E: Unable to locate package prometheus"),
    ({"installs": False}, "installed, but no prometheus binary there"),
    ({"install": False}, "apt-get install prometheus"),
])
def test_where_it_cannot_install_it_says_once_how_to_get_utilization(case, how):
    ok, said, ran = _ensure(**case)
    assert ok is False
    advice = [line for line in said if line.startswith("No Prometheus at /usr/bin/prometheus")]
    assert len(advice) == 1, said
    assert "GPU utilization, idle GPUs and their charts" in advice[0] and how in advice[0]
    assert "make run" in advice[0]
    if case.get("root") is False or case.get("apt", "x") is None or case.get("install") is False:
        assert ran == []  # nothing tried that cannot work
