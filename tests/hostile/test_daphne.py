"""The same hostile requests against the server as it runs in production: Daphne serving
console.asgi.application in a process of its own (its own SQLite database), over real HTTP.

This is where the body limit lives (common/limits.py): the ASGI wrapper refuses a body whose
Content-Length is over CONSOLE_MAX_BODY_BYTES, or whose bytes pass it as they arrive (a chunked body has
no Content-Length), and Daphne is made to keep at most the limit of any body (it would otherwise buffer
all of it, then queue all of it as messages). Measured on the server process: each hostile request is
answered with a 4xx within a second, its peak resident set (VmHWM) grows by less than 50 MiB, nothing is
stored, and the server answers the next request.
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.hostile.conftest import BOMB, DEEP_JSON, DEEP_YAML

BASE_DIR = Path(__file__).resolve().parents[2]
MIB = 2**20
SETUP = """
from django.contrib.auth import get_user_model
from access.rules import Role
from accounts.services import token_create
from nodepools import services as pools
from projects import services as projects
admin = get_user_model().objects.create_user("admin", password="x")
projects.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=admin)
cluster = pools.cluster_create(actor=None, name="lab")
department = projects.department_create(actor=None, cluster=cluster, name="rnd")
project = projects.project_create(actor=None, department=department, name="rnd-a")
print("WORLD", cluster.pk, project.pk, token_create(actor=admin, name="hostile")[1])
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


class Server:
    def __init__(self, directory: Path):
        self.database = directory / "console.sqlite3"
        self.env = {**os.environ, "DATABASE_URL": f"sqlite:///{self.database}", "LOG_LEVEL": "ERROR",
                    "DJANGO_SETTINGS_MODULE": "console.settings"}
        self.env.pop("CONSOLE_MAX_BODY_BYTES", None)
        manage = [sys.executable, "manage.py"]
        subprocess.run(manage + ["migrate", "--noinput", "-v", "0"], cwd=BASE_DIR, env=self.env, check=True)
        out = subprocess.run(manage + ["shell", "-c", SETUP], cwd=BASE_DIR, env=self.env, check=True,
                             capture_output=True, text=True).stdout
        _, cluster, project, self.token = next(line for line in out.splitlines() if line.startswith("WORLD")).split()
        self.cluster, self.project = int(cluster), int(project)
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen([sys.executable, "-m", "daphne", "-v", "0", "-b", "127.0.0.1", "-p", str(port),
                                         "console.asgi:application"], cwd=BASE_DIR, env=self.env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/healthz", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.2)
        else:
            raise RuntimeError("Daphne did not answer /healthz")
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def rows(self, table: str) -> int:
        with sqlite3.connect(self.database) as db:
            return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]

    def stop(self):
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("daphne"))
    yield running
    running.stop()


def _ten_megabytes():
    chunk = b"x" * 65536
    for _ in range(160):
        yield chunk


def _cases(server):
    template = {"cluster": server.cluster, "name": "hostile"}
    submit = {"project": server.project, "image": "busybox", "dry_run": True}
    ten_mb = json.dumps({**submit, "command": "a" * 10_000_000})
    return {
        "10 MB body with its Content-Length": ("/api/v1/workloads/", ten_mb, {}, 413, "request_body"),
        "10 MB chunked body (no Content-Length)": ("/api/v1/workloads/", _ten_megabytes(), {}, 413, "request_body"),
        "10 MB form on a page": ("/login/", b"username=" + b"x" * 10_000_000, {
            "Content-Type": "application/x-www-form-urlencoded"}, 413, None),
        "the YAML alias bomb": ("/api/v1/pod-templates/", json.dumps({**template, "body": BOMB}), {}, 400, "body"),
        "10,000 levels of YAML": ("/api/v1/pod-templates/", json.dumps({**template, "body": DEEP_YAML}), {}, 400, "body"),
        "3,000 levels of JSON": ("/api/v1/workloads/", DEEP_JSON, {}, 400, "non_field_errors"),
        "a 1 MB command": ("/api/v1/workloads/", json.dumps({**submit, "command": "a" * 1_000_000}), {}, 400, "command"),
        "a NUL in the command": ("/api/v1/workloads/", json.dumps({**submit, "command": ["echo", "\x00"]}), {}, 400,
                                 "command"),
    }


def test_hostile_requests_cost_the_server_little_and_it_answers_the_next_one(server):
    requests.get(server.url + "/api/v1/clusters/", headers=server.headers, timeout=10)  # warm
    templates, events = server.rows("workloads_podtemplate"), server.rows("audit_auditevent")
    report = []
    for case, (path, body, headers, status, field) in _cases(server).items():
        before = _peak_rss(server.process.pid)
        started = time.perf_counter()
        response = requests.post(server.url + path, data=body, timeout=30,
                                 headers={**server.headers, "Content-Type": "application/json", **headers})
        seconds = time.perf_counter() - started
        grown = _peak_rss(server.process.pid) - before
        report.append(f"{case}: {response.status_code} in {seconds * 1000:.0f} ms, server peak RSS +{grown / MIB:.1f} MiB")
        assert response.status_code == status, (case, response.text[:300])
        if field is not None:
            assert list(response.json()["errors"]) == [field], (case, response.text[:300])
        else:
            assert "at most 1 MiB (1048576 bytes)" in response.text
        assert seconds < 1.0, report[-1]
        assert grown < 50 * MIB, report[-1]
        assert requests.get(server.url + "/healthz", timeout=5).status_code == 200
        assert requests.get(server.url + "/api/v1/clusters/", headers=server.headers, timeout=5).status_code == 200
    print("\n".join(report))
    assert (server.rows("workloads_podtemplate"), server.rows("audit_auditevent")) == (templates, events)


def test_a_200_mb_body_costs_the_server_no_more_memory_than_a_small_one(server):
    """Daphne would keep all of a body (Twisted's buffer, then a queue of messages); capped, it keeps the limit."""
    def body():
        chunk = b"x" * (1 << 20)
        for _ in range(200):
            yield chunk

    before = _peak_rss(server.process.pid)
    response = requests.post(server.url + "/api/v1/pod-templates/", data=body(), timeout=60,
                             headers={**server.headers, "Content-Type": "application/json"})
    grown = _peak_rss(server.process.pid) - before
    print(f"200 MB chunked body: {response.status_code}, server peak RSS +{grown / MIB:.1f} MiB")
    assert response.status_code == 413
    assert grown < 50 * MIB
    assert requests.get(server.url + "/healthz", timeout=5).status_code == 200


def _raw(server, request: bytes) -> bytes:
    """Send `request` over a plain socket and read the whole answer (until the server closes)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def _answer(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def test_a_request_line_over_the_limit_is_answered_414(server):
    """`ids=` with 4,000 values: a request line of about 24 KB, once answered by a closed connection."""
    ids = ",".join(str(1000 + n) for n in range(4000))
    status, headers, body = _answer(_raw(server, f"GET /api/v1/workloads/?ids={ids} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                 "\r\n".encode()))
    assert status == 414
    answer = json.loads(body)
    assert answer["detail"].startswith("The request line is too long: at most 16384 bytes")
    assert answer["request_id"] == headers["X-Request-ID"]
    status, headers, body = _answer(_raw(server, b"GET /workloads/?q=" + b"x" * 20000 + b" HTTP/1.1\r\n\r\n"))
    assert status == 414 and headers["Content-Type"].startswith("text/plain")
    assert body.decode().startswith("414 URI Too Long: The request line is too long")
    assert requests.get(server.url + "/healthz", timeout=5).status_code == 200


def test_headers_over_the_limit_are_answered_431(server):
    cases = {
        "one header over 16 KiB": b"Cookie: " + b"a" * 17000 + b"\r\n",
        "headers summing past 16 KiB": b"".join(b"X-Pad-%d: %s\r\n" % (n, b"b" * 900) for n in range(20)),
        "more than 500 headers": b"".join(b"X-H%d: 1\r\n" % n for n in range(600)),
    }
    for case, headers_sent in cases.items():
        raw = _raw(server, b"GET /api/v1/clusters/ HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers_sent + b"\r\n")
        status, headers, body = _answer(raw)
        assert status == 431, case
        assert json.loads(body)["detail"].startswith("The request's headers are too large: at most 16384 bytes"), case
    # Under the limits the same request is answered as usual.
    raw = _raw(server, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
               + b"".join(b"X-Pad-%d: %s\r\n" % (n, b"b" * 100) for n in range(20)) + b"\r\n")
    assert _answer(raw)[0] == 200
