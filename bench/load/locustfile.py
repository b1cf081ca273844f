"""Many users at once (issue 24): page readers and open live pages, split between the Daphne processes.

Run by bench/load.py, which starts the console and hands over, in the environment:

  BENCH_HOSTS       the Daphne base URLs, comma-separated (users take them in turn)
  BENCH_COOKIE      a logged-in session (`sessionid`)
  BENCH_PAGES       JSON {kind: [paths]}: the readers request the kinds in turn, each kind's paths in turn
  BENCH_CLUSTER     the cluster's id (the live pages' `?clusters=`)
  BENCH_RATE        page requests per second, all readers together
  BENCH_READERS     number of page readers
  BENCH_LIVE        number of open live pages
  BENCH_OUT         a directory: each live page writes what it received there when the run stops

`PageReader` requests the nodes, pools, quota, workloads and department pages (`constant_throughput`,
together BENCH_RATE per second). `LivePage` opens `/ws/live/` as a page does and records, for every
"changed" hint, when it arrived and until when the sync's writes it covers were committed (`written`);
bench/load.py checks from these that every change reached every open page within a second.
"""
from __future__ import annotations

import itertools
import json
import os
import random
import time
import uuid

import gevent
import websocket
from locust import HttpUser, User, constant, constant_throughput, events, task

HOSTS = [h for h in os.environ.get("BENCH_HOSTS", "http://127.0.0.1:18400").split(",") if h]
COOKIE = os.environ.get("BENCH_COOKIE", "")
PAGES = json.loads(os.environ.get("BENCH_PAGES", '{"nodes": ["/nodes/"]}'))  # kind -> its pages
CLUSTER = os.environ.get("BENCH_CLUSTER", "1")
RATE = float(os.environ.get("BENCH_RATE", "20"))
READERS = int(os.environ.get("BENCH_READERS", "20"))
LIVE = int(os.environ.get("BENCH_LIVE", "200"))
OUT = os.environ.get("BENCH_OUT", "")
_turn = itertools.count()


class PageReader(HttpUser):
    fixed_count = READERS
    wait_time = constant_throughput(RATE / max(1, READERS))
    host = HOSTS[0]

    def on_start(self):
        i = next(_turn)
        self.base = HOSTS[i % len(HOSTS)]
        self.client.cookies.set("sessionid", COOKIE)
        kinds = random.Random(i).sample(sorted(PAGES), len(PAGES))
        self.kinds = itertools.cycle(kinds)
        self.variants = {kind: itertools.cycle(random.Random(i).sample(paths, len(paths))) for kind, paths in PAGES.items()}

    @task
    def page(self):
        kind = next(self.kinds)
        path = next(self.variants[kind])
        with self.client.get(self.base + path, name=kind, catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"status {response.status_code}")
            elif "<table" not in response.text:
                response.failure("no table in the page")


class LivePage(User):
    """An open live page: its websocket only (a hint carries no data; a real page would then refetch)."""

    fixed_count = LIVE
    wait_time = constant(1)

    def on_start(self):
        i = next(_turn)
        base = HOSTS[i % len(HOSTS)]
        self.name = f"live-{uuid.uuid4().hex[:8]}"
        self.hints: list[list[float]] = []  # [arrival, written]
        self.connected = None
        self.closed = False
        # As static/js/live.js opens it: hints and the clusters' state (re-read every few seconds).
        url = base.replace("http://", "ws://") + f"/ws/live/?state=1&clusters={CLUSTER}"
        started = time.perf_counter()
        try:
            self.ws = websocket.create_connection(url, timeout=30, header=[f"Cookie: sessionid={COOKIE}"],
                                                  origin=base)
            hello = json.loads(self.ws.recv())
            assert hello.get("type") == "hello" and int(CLUSTER) in hello.get("clusters", []), hello
        except Exception as exc:
            events.request.fire(request_type="WS", name="connect", response_time=(time.perf_counter() - started) * 1000,
                                response_length=0, exception=exc)
            self.ws = None
            return
        self.connected = time.time()  # (only failures are reported to Locust: its p95 is the pages')
        self.reader = gevent.spawn(self._read)

    def _read(self):
        while not self.closed:
            try:
                text = self.ws.recv()
            except websocket.WebSocketTimeoutException:
                continue
            except Exception as exc:
                if not self.closed:
                    events.request.fire(request_type="WS", name="dropped", response_time=0, response_length=0,
                                        exception=exc)
                return
            arrived = time.time()
            try:
                data = json.loads(text)
            except ValueError:
                continue
            if data.get("type") == "changed" and "written" in data:
                self.hints.append([arrived, data["written"]])

    @task
    def idle(self):
        pass  # everything happens in `_read`

    def on_stop(self):
        self.closed = True
        if self.ws is not None:
            try:
                self.ws.close()
            except Exception:
                pass
        if OUT and self.connected:
            with open(os.path.join(OUT, self.name + ".json"), "w") as out:
                json.dump({"connected": self.connected, "stopped": time.time(), "hints": self.hints}, out)
