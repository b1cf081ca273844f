"""Hostile input, measured: what one request costs the web process (issue 19).

    .venv/bin/python bench/hostile.py [--code DIR] [--only NAME ...] [--mem-limit-gib 3] [--timeout 60]

Each case runs in a fresh child process of its own (Django's test client against a copy of one prepared
SQLite database), capped with RLIMIT_AS (default 3 GiB) and a wall-clock timeout, so that a case that
would eat the host (the YAML alias bomb did: 23 GB) ends as a MemoryError or a timeout instead. Printed
per case: the HTTP status, the seconds the request took, the growth of the child's peak resident memory
(VmHWM after the request minus VmRSS before it) and the first words of the answer, with the load average
and the seconds against the machine reference (bench/reference.py, measured at the start and end).

`--code DIR` runs the cases against another checkout (e.g. `--code /work/main` for the code before the
fix): the same requests, so the figures of both runs compare. The cases are the ones issue 19 names:
the ~500-byte "billion laughs" pod template, 10,000 levels of YAML and 900 levels of JSON in a template
body, 3,000 levels of JSON nesting in a request, a researcher's command of 400 KB / 1 MB / 2 MB / 10 MB
given as one string, a NUL in a command, a path as an image reference, a 2 MB pod template, and
capabilities a baseline platform must refuse.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

BOMB = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]" for prev, name in zip("abcdefgh", "bcdefghi")]
)


def _nested_json(levels: int) -> str:
    return "[" * levels + "]" * levels


CASES: dict[str, tuple[str, str, object]] = {
    # name: (user, path, body); a str body is sent as is (raw JSON text)
    "yaml-alias-bomb": ("sysadmin", "/api/v1/pod-templates/", lambda w: {"cluster": w["cluster"], "name": "bomb",
                                                                        "body": BOMB}),
    "yaml-10000-levels": ("sysadmin", "/api/v1/pod-templates/", lambda w: {
        "cluster": w["cluster"], "name": "deep", "body": "spec: " + "[" * 10000 + "]" * 10000}),
    "json-900-levels-in-template": ("sysadmin", "/api/v1/pod-templates/", lambda w: {
        "cluster": w["cluster"], "name": "deep", "body": '{"spec": ' + _nested_json(900) + "}"}),
    "json-3000-levels-request": ("researcher", "/api/v1/workloads/", lambda w: _nested_json(3000)),
    "command-400KB": ("researcher", "/api/v1/workloads/", lambda w: w["submit"]("a " * 200_000)),
    "command-1MB": ("researcher", "/api/v1/workloads/", lambda w: w["submit"]("a " * 500_000)),
    "command-2MB": ("researcher", "/api/v1/workloads/", lambda w: w["submit"]("a " * 1_000_000)),
    "command-10MB": ("researcher", "/api/v1/workloads/", lambda w: w["submit"]("a " * 5_000_000)),
    "command-1MB-one-word": ("researcher", "/api/v1/workloads/", lambda w: w["submit"]("a" * 1_000_000)),
    "command-10MB-one-word": ("researcher", "/api/v1/workloads/", lambda w: w["submit"]("a" * 10_000_000)),
    "command-NUL": ("researcher", "/api/v1/workloads/", lambda w: w["submit"]("echo \x00 done")),
    "image-path": ("researcher", "/api/v1/workloads/", lambda w: {**w["submit"]("true"), "image": "../../etc/passwd"}),
    "image-BusyBox:ÄÖ": ("researcher", "/api/v1/workloads/", lambda w: {**w["submit"]("true"), "image": "BusyBox:ÄÖ"}),
    "template-2MB": ("sysadmin", "/api/v1/pod-templates/", lambda w: {
        "cluster": w["cluster"], "name": "big", "body": {"metadata": {"annotations": {"x": "y" * 2_000_000}}}}),
    "template-SYS_ADMIN": ("setup", "/api/v1/workloads/", lambda w: {**w["submit"]("true"), "platform": "caps"}),
}


def loadavg() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _django(code: Path, database: Path) -> None:
    sys.path.insert(0, str(code))
    os.chdir(code)
    os.environ["DJANGO_SETTINGS_MODULE"] = "console.settings"
    os.environ["DATABASE_URL"] = f"sqlite:///{database}"
    os.environ.setdefault("LOG_LEVEL", "CRITICAL")
    import django

    django.setup()


def setup(code: Path, database: Path) -> None:
    """Migrate a fresh database and build the small world every case uses."""
    _django(code, database)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model
    from access.rules import Role
    from kubesim import make_node
    from nodepools import services as pools
    from projects import services as projects
    from workloads import services as workloads

    cluster = pools.cluster_create(actor=None, name="lab")
    department = projects.department_create(actor=None, cluster=cluster, name="rnd")
    project = projects.project_create(actor=None, department=department, name="rnd-a")
    pools.cluster_objects_replace(cluster=cluster, nodes=[make_node("gpu-1", gpus=4, cpu="32", memory="256Gi")],
                                  pods=[])
    users = get_user_model().objects
    admin = users.create_user("sysadmin", password="x")
    researcher = users.create_user("researcher", password="x")
    projects.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=admin)
    projects.role_assign(actor=None, role=Role.RESEARCHER, user=researcher, project=project)
    # A platform whose (only) template adds SYS_ADMIN: a baseline platform must refuse it.
    workloads.pod_template_create(actor=None, cluster=cluster, name="caps", body={"spec": {"containers": [
        {"name": "main", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]}})
    workloads.platform_create(actor=None, pool=cluster.default_pool, name="caps", override_templates=["caps"])
    Path(str(database) + ".json").write_text(json.dumps({"cluster": cluster.pk, "project": project.pk}))


def run_case(code: Path, database: Path, name: str) -> None:
    _django(code, database)
    from django.contrib.auth import get_user_model
    from django.test import Client

    world = json.loads(Path(str(database) + ".json").read_text())
    world["submit"] = lambda command: {"project": world["project"], "image": "busybox", "command": command,
                                       "dry_run": True, "pools": ["default"]}
    user, path, make = CASES[name]
    body = make(world)
    raw = body if isinstance(body, str) else json.dumps(body)
    client = Client(raise_request_exception=False)
    client.force_login(get_user_model().objects.get(username="researcher" if user == "setup" else user))
    client.get("/api/v1/clusters/")  # warm up: imports, the first queries
    before = _status_kib("VmRSS")
    started = time.perf_counter()
    try:
        response = client.post(path, data=raw, content_type="application/json")
        status, text = response.status_code, response.content[:160].decode("utf-8", "replace")
    except MemoryError:
        status, text = "MemoryError", ""
    seconds = time.perf_counter() - started
    grown = (_status_kib("VmHWM") - before) / 1024
    print(json.dumps({"status": status, "seconds": seconds, "grown_mib": grown, "answer": text}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=HERE, help="the checkout to measure (default: this one)")
    parser.add_argument("--only", nargs="*", default=None, choices=sorted(CASES))
    parser.add_argument("--mem-limit-gib", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--no-reference", action="store_true",
                        help="leave out the machine reference (bench/reference.py) measured at the start and end")
    parser.add_argument("--child", nargs=2, metavar=("DATABASE", "CASE"), help=argparse.SUPPRESS)
    parser.add_argument("--setup", metavar="DATABASE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    code = args.code.resolve()
    if args.setup:
        return setup(code, Path(args.setup))
    if args.child:
        limit = int(args.mem_limit_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        return run_case(code, Path(args.child[0]), args.child[1])

    sys.path.insert(0, str(HERE))
    from bench.reference import Reference

    ref = Reference.off() if args.no_reference else Reference.start()
    workdir = Path(tempfile.mkdtemp(prefix="hostile-bench-"))
    base = workdir / "base.sqlite3"
    me = [sys.executable, str(Path(__file__).resolve()), "--code", str(code)]
    print(f"code: {code}   memory cap per case: {args.mem_limit_gib} GiB   timeout: {args.timeout:.0f} s   {loadavg()}")
    subprocess.run(me + ["--setup", str(base)], check=True)
    print(f"{'case':30} {'status':>12} {'seconds':>9} {'peak +MiB':>10}  answer")
    for name in args.only or CASES:
        database = workdir / f"{name}.sqlite3"
        shutil.copy(base, database)
        shutil.copy(str(base) + ".json", str(database) + ".json")
        started = time.perf_counter()
        try:
            done = subprocess.run(me + ["--mem-limit-gib", str(args.mem_limit_gib), "--child", str(database), name],
                                  capture_output=True, text=True, timeout=args.timeout)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if lines:
                row = json.loads(lines[-1])
                print(f"{name:30} {row['status']!s:>12} {row['seconds']:9.3f} {row['grown_mib']:10.1f}  "
                      f"{row['answer'][:90]!r}   {loadavg()}   {ref.seconds(row['seconds'], digits=3)}")
            else:
                tail = (done.stderr.strip().splitlines() or ["?"])[-1]
                print(f"{name:30} {'died':>12} {time.perf_counter() - started:9.1f} {'':>10}  {tail[:90]!r}   {loadavg()}")
        except subprocess.TimeoutExpired:
            print(f"{name:30} {'no answer':>12} {'>' + str(int(args.timeout)):>9} {'':>10}  (killed after the timeout)"
                  f"   {loadavg()}")
    shutil.rmtree(workdir, ignore_errors=True)
    ref.finish()


if __name__ == "__main__":
    main()
