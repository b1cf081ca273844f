"""A real Prometheus on this machine, for the tests, ``make run`` and the benchmark (stdlib only).

``LocalPrometheus`` starts Debian's ``/usr/bin/prometheus`` on a free local port with a generated
configuration scraping the given targets (e.g. the emulator's ``/dcgm/metrics``) and its TSDB in a
temporary directory, and waits until it is ready::

    with LocalPrometheus([emulator.url + "/dcgm/metrics"], scrape_interval="1s") as prom:
        prom.wait_for_series('DCGM_FI_DEV_GPU_UTIL')
        print(prom.url)

``backfill_openmetrics()`` writes samples into a TSDB directory before Prometheus starts (``promtool
tsdb create-blocks-from openmetrics``), e.g. an hour of the exporter's text for a benchmark.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable

PROMETHEUS = os.environ.get("PROMETHEUS_BIN") or shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = os.environ.get("PROMTOOL_BIN") or shutil.which("promtool") or "/usr/bin/promtool"


def available() -> bool:
    """Whether a Prometheus binary is installed (Debian's ``prometheus`` package)."""
    return os.path.exists(PROMETHEUS) and os.access(PROMETHEUS, os.X_OK)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def scrape_config(targets: Iterable[str], *, scrape_interval: str = "1s", job: str = "dcgm-exporter") -> str:
    """The prometheus.yml scraping these URLs (``http://host:port/path``), one job; JSON is valid YAML."""
    configs = []
    for i, target in enumerate(targets):
        parts = urllib.parse.urlsplit(target)
        configs.append({
            "job_name": job if i == 0 else f"{job}-{i}",
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "metrics_path": parts.path or "/metrics",
            "scheme": parts.scheme or "http",
            # The exporter's Hostname, pod, namespace labels are kept as the exporter set them.
            "honor_labels": True,
            "static_configs": [{"targets": [parts.netloc]}],
        })
    return json.dumps({"global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
                       "scrape_configs": configs}, indent=2)


class LocalPrometheus:
    """``/usr/bin/prometheus`` on 127.0.0.1:<free port>, TSDB in a temporary directory (removed at stop)."""

    def __init__(self, targets: Iterable[str] = (), *, scrape_interval: str = "1s", tsdb_dir: str | None = None,
                 host: str = "127.0.0.1", binary: str = PROMETHEUS, retention: str = "2d") -> None:
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        self.host = host
        self.binary = binary
        self.retention = retention
        self._own_dir = tempfile.mkdtemp(prefix="console-prometheus-")
        self.tsdb_dir = tsdb_dir or os.path.join(self._own_dir, "tsdb")
        os.makedirs(self.tsdb_dir, exist_ok=True)
        self.config_path = os.path.join(self._own_dir, "prometheus.yml")
        self.log_path = os.path.join(self._own_dir, "prometheus.log")
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.url = ""

    def start(self, timeout: float = 30.0) -> str:
        """Start and wait until ``/-/ready``; returns the URL. Raises RuntimeError with the log's tail."""
        with open(self.config_path, "w", encoding="utf-8") as fh:
            fh.write(scrape_config(self.targets, scrape_interval=self.scrape_interval))
        last_error = ""
        for _ in range(3):  # the free port may be taken between the probe and Prometheus binding it
            self.port = _free_port(self.host)
            self.url = f"http://{self.host}:{self.port}"
            log = open(self.log_path, "ab")
            self.process = subprocess.Popen(
                [self.binary, f"--config.file={self.config_path}", f"--storage.tsdb.path={self.tsdb_dir}",
                 f"--web.listen-address={self.host}:{self.port}", f"--storage.tsdb.retention.time={self.retention}",
                 "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )
            log.close()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break
                try:
                    with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as response:
                        if response.status == 200:
                            return self.url
                except (urllib.error.URLError, OSError):
                    pass
                time.sleep(0.1)
            last_error = self.log_tail()
            self._kill()
            if "address already in use" not in last_error:
                break
        raise RuntimeError(f"Prometheus did not become ready: {last_error}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return ""

    def _kill(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def stop(self) -> None:
        """Stop Prometheus and remove its temporary directory (a given ``tsdb_dir`` is the caller's)."""
        self._kill()
        shutil.rmtree(self._own_dir, ignore_errors=True)

    def __enter__(self) -> LocalPrometheus:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------------------------------------

    def query(self, promql: str) -> list[dict]:
        """The instant query's result (``data.result``), for tests."""
        url = self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())["data"]["result"]

    def wait_for_series(self, promql: str, *, count: int = 1, timeout: float = 20.0,
                        check=None) -> list[dict]:
        """Wait until ``promql`` returns at least ``count`` series (and ``check(result)`` holds)."""
        deadline = time.monotonic() + timeout
        result: list[dict] = []
        while time.monotonic() < deadline:
            try:
                result = self.query(promql)
            except (urllib.error.URLError, OSError, KeyError, ValueError):
                result = []
            if len(result) >= count and (check is None or check(result)):
                return result
            time.sleep(0.2)
        raise TimeoutError(f"Prometheus at {self.url} has no {count} series of {promql} after {timeout}s "
                           f"(last: {result[:3]})")
def openmetrics_lines(exposition: str, times: Iterable[float]) -> Iterable[str]:
    """The Prometheus text ``exposition`` (e.g. the exporter's) repeated at each of ``times``, in
    OpenMetrics (families kept together, samples of a series in time order), ending ``# EOF``."""
    times = list(times)
    family_lines: list[str] = []

    def flush() -> Iterable[str]:
        for line in family_lines:
            if line.startswith("#"):
                yield line
                continue
            for t in times:
                yield f"{line} {t:.3f}"

    for raw in exposition.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("# HELP"):
            yield from flush()
            family_lines = [line]
        elif line.startswith("# TYPE"):
            family_lines.append(line)
        elif line.startswith("#"):
            continue
        else:
            family_lines.append(line)
    yield from flush()
    yield "# EOF"


def backfill_openmetrics(tsdb_dir: str, exposition: str, *, start: float, end: float, step: float = 15.0,
                         promtool: str = PROMTOOL) -> None:
    """Write ``exposition`` (Prometheus text, values constant) as samples every ``step`` seconds from
    ``start`` to ``end`` (Unix times) into ``tsdb_dir`` with ``promtool tsdb create-blocks-from
    openmetrics``; start Prometheus on that directory afterwards (``LocalPrometheus(tsdb_dir=...)``).
    Call it several times for windows with different values."""
    count = max(1, int((end - start) // step) + 1)
    times = [start + i * step for i in range(count)]
    os.makedirs(tsdb_dir, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".om", delete=False, encoding="utf-8") as fh:
        path = fh.name
        for line in openmetrics_lines(exposition, times):
            fh.write(line)
            fh.write("\n")
    try:
        proc = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", path, tsdb_dir],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"promtool could not backfill: {proc.stderr.strip() or proc.stdout.strip()}")
    finally:
        os.unlink(path)
