"""What one hostile request costs the web process, measured: each answers a 4xx within a second, with the
memory of the process growing by less than 50 MiB (the peak of Python's allocations while the request
runs, tracemalloc; and the resident set, VmRSS).

The cases are issue 19's: the "billion laughs" pod template (~500 bytes of YAML that expands to 387
million strings: before the fix the web process grew to 23 GB), 10,000 levels of YAML and 900 of JSON in
a template, 3,000 levels of JSON in a request, a researcher's command of 1 MB and of 10 MB given as one
word (shlex.split took 7.5 s for 1 MB and gave no answer in a minute for 10 MB). While a request runs,
the process's address space is capped (RLIMIT_AS, 2 GiB above what it uses), so that code that would
expand the bomb fails here with a MemoryError instead of taking the machine down.
"""
from __future__ import annotations

import gc
import json
import resource
import signal
import time
import tracemalloc
from pathlib import Path

import pytest

from tests.hostile.conftest import BOMB, DEEP_JSON, DEEP_YAML, nested_json, snapshot

pytestmark = pytest.mark.django_db

SECONDS = 1.0
MIB = 2**20
GROWTH = 50 * MIB


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


class _Late(Exception):
    pass


def measured(call, *, timeout: float = 30.0):
    """(response, seconds, peak of Python allocations, growth of the resident set) of `call()`, under a cap
    of the address space and an alarm: a call still running after `timeout` fails the test."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _status_bytes("VmSize") + 2 * 2**30
    if hard == resource.RLIM_INFINITY or cap < hard:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))

    def late(signum, frame):
        raise _Late()

    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    gc.collect()
    rss_before = _status_bytes("VmRSS")
    tracemalloc.start()
    started = time.perf_counter()
    try:
        response = call()
    except MemoryError:
        response = "MemoryError"
    except _Late:
        response = "late"
    finally:
        seconds = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert response != "late", f"no answer within {timeout:.0f} s"
    return response, seconds, peak, _status_bytes("VmRSS") - rss_before


def _template(world, body: str):
    return {"cluster": world.cluster.pk, "name": "hostile", "body": body}


def _command(world, command: str):
    return {"project": world.org.rnd_a.pk, "pools": ["a100"], "image": "busybox", "command": command,
            "dry_run": True}


CASES = {
    "the YAML alias bomb in a pod template": ("/api/v1/pod-templates/", lambda w: _template(w, BOMB), 400, "body",
                                              "YAML anchors and aliases"),
    "10,000 levels of YAML in a pod template": ("/api/v1/pod-templates/", lambda w: _template(w, DEEP_YAML), 400,
                                                "body", "Nested deeper than 64 levels"),
    "900 levels of JSON in a pod template": ("/api/v1/pod-templates/",
                                             lambda w: _template(w, '{"spec": ' + nested_json(900) + "}"), 400, "body",
                                             "Nested deeper than 64 levels"),
    "3,000 levels of JSON in a request": ("/api/v1/workloads/", lambda w: DEEP_JSON, 400, "non_field_errors",
                                          "Nested deeper than 64 levels"),
    "a 1 MB command of one word": ("/api/v1/workloads/", lambda w: _command(w, "a" * 1_000_000), 400, "command",
                                   "The command is 1000000 characters long: at most 65536."),
    "a 1 MB command of short words": ("/api/v1/workloads/", lambda w: _command(w, "a " * 500_000), 400, "command",
                                      "The command is 1000000 characters long: at most 65536."),
    "a 10 MB command of one word": ("/api/v1/workloads/", lambda w: _command(w, "a" * 10_000_000), 413, "request_body",
                                    "At most 1048576 bytes (1 MiB)."),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_hostile_request_costs_little_time_and_memory(world, case):
    path, make, status, field, rule = CASES[case]
    body = make(world)
    raw = (body if isinstance(body, str) else json.dumps(body)).encode()
    client = world.api()
    client.get("/api/v1/clusters/")  # warm: imports and first queries are not the request's cost
    check = snapshot(world)
    response, seconds, peak, rss = measured(lambda: client.post(path, data=raw, content_type="application/json"))
    assert response != "MemoryError", f"{case}: the request ran out of the 2 GiB allowed"
    print(f"{case}: {response.status_code} in {seconds * 1000:.0f} ms, Python peak {peak / MIB:.1f} MiB, "
          f"RSS +{rss / MIB:.1f} MiB")
    assert response.status_code == status, response.content[:300]
    errors = response.json()["errors"]
    assert list(errors) == [field] and rule in errors[field][0], errors
    assert seconds < SECONDS, f"{case}: {seconds:.2f} s"
    assert peak < GROWTH, f"{case}: Python allocations peaked at {peak / MIB:.0f} MiB"
    assert rss < GROWTH, f"{case}: the resident set grew by {rss / MIB:.0f} MiB"
    check(client)
