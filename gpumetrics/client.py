"""The Prometheus HTTP API client: instant and range queries with a per-call timeout, a short cache
per (Prometheus, query) and every failure turned into a reason a person can read.

Nothing here knows the console's models: a cluster's Prometheus is a :class:`PrometheusConfig`
(``config_from(cluster)`` reads one from any object with the ``prometheus_*`` attributes).
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

import requests

from common import caches

DEFAULT_TIMEOUT = 0.5  # seconds a page waits for Prometheus before it renders "—"
DEFAULT_CACHE_SECONDS = 5.0


def _setting(name: str, default: float) -> float:
    try:
        from django.conf import settings  # late: guarded, gpumetrics also serves Django-free callers

        return float(getattr(settings, name, default)) if settings.configured else default
    except Exception:  # settings not importable (a Django-free caller)
        return default


def default_timeout() -> float:
    """``settings.GPUMETRICS_TIMEOUT`` (seconds, default 0.5): a page's budget (a call's without one)."""
    return _setting("GPUMETRICS_TIMEOUT", DEFAULT_TIMEOUT)


def cache_seconds() -> float:
    """``settings.GPUMETRICS_CACHE_SECONDS`` (default 5): how long an answer (or a failure) is reused."""
    return _setting("GPUMETRICS_CACHE_SECONDS", DEFAULT_CACHE_SECONDS)


# ---------------------------------------------------------------------------------------------------
# Label matchers

_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def parse_matchers(text: str) -> list[tuple[str, str, str]]:
    """``'cluster="prod", env=~"a|b"'`` -> ``[("cluster", "=", "prod"), ("env", "=~", "a|b")]``.

    Raises ValueError naming the part that is not ``name OP "value"`` (OP one of = != =~ !~)."""
    text = (text or "").strip()
    out: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(text):
        m = _MATCHER.match(text, pos)
        if not m or m.end() == pos:
            rest = text[pos:].strip()
            raise ValueError(f'“{rest[:40]}” is not a label matcher: write name="value" (or !=, =~, !~), '
                             "separated by commas")
        name, op, value = m.groups()
        if op in ("=~", "!~"):
            try:
                re.compile(value.encode().decode("unicode_escape"))
            except re.error as exc:
                raise ValueError(f"{name}{op}\"{value}\": the regular expression is invalid ({exc})") from None
        out.append((name, op, value.encode().decode("unicode_escape")))
        pos = m.end()
        if not m.group(0).rstrip().endswith(",") and pos < len(text):
            raise ValueError(f"separate the label matchers with commas (after {name})")
    return out


def promql_string(value: str) -> str:
    """A PromQL string literal of ``value`` (double-quoted, escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


_RE_SPECIAL = set(".^$*+?()[]{}|\\")


def regex_literal(value: str) -> str:
    """``value`` as a regular expression matching exactly it (RE2 syntax)."""
    return "".join("\\" + c if c in _RE_SPECIAL else c for c in value)


def names_regex(names) -> str:
    """One RE2 alternation matching exactly these names (sorted, so the same set gives the same query)."""
    return "|".join(regex_literal(n) for n in sorted(set(names)))


# ---------------------------------------------------------------------------------------------------
# Configuration

@dataclass(frozen=True)
class PrometheusConfig:
    """Where a cluster's Prometheus is and how to reach it."""

    url: str
    bearer_token_file: str = ""
    basic_auth_file: str = ""  # one line "user:password"
    matchers: tuple[tuple[str, str, str], ...] = ()
    name: str = ""  # the cluster's name, for messages

    def selector(self, metric: str = "", **labels: str | tuple[str, str]) -> str:
        """``metric{extra matchers, label="v", other=~"re"}``: ``labels`` values are exact, or ``(op, value)``."""
        parts = [f"{n}{op}{promql_string(v)}" for n, op, v in self.matchers]
        for name, value in labels.items():
            op, text = value if isinstance(value, tuple) else ("=", value)
            parts.append(f"{name}{op}{promql_string(text)}")
        return f"{metric}{{{','.join(parts)}}}"


def config_from(obj: Any) -> PrometheusConfig | None:
    """A PrometheusConfig from a cluster-like object (``prometheus_url``, ``prometheus_bearer_token_file``,
    ``prometheus_basic_auth_file``, ``prometheus_label_matchers``, ``name``), or None without a URL.
    A PrometheusConfig is returned as it is."""
    if obj is None or isinstance(obj, PrometheusConfig):
        return obj
    url = (getattr(obj, "prometheus_url", "") or "").strip()
    if not url:
        return None
    try:
        matchers = tuple(parse_matchers(getattr(obj, "prometheus_label_matchers", "") or ""))
    except ValueError:
        matchers = ()  # the model refuses these; an old row must not break the page
    return PrometheusConfig(
        url=url.rstrip("/"), bearer_token_file=getattr(obj, "prometheus_bearer_token_file", "") or "",
        basic_auth_file=getattr(obj, "prometheus_basic_auth_file", "") or "", matchers=matchers,
        name=getattr(obj, "name", "") or "",
    )


# ---------------------------------------------------------------------------------------------------
# Errors

class PrometheusError(Exception):
    """A query that gave no answer; ``reason`` is what the page shows on hover."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value >= 0.1 else f"{value:.2f} s"


def _connection_reason(exc: Exception) -> str:
    text = str(exc)
    for needle, said in (("Connection refused", "connection refused"), ("Name or service not known", "unknown host"),
                         ("nodename nor servname", "unknown host"), ("No route to host", "no route to host"),
                         ("Connection reset", "connection reset"), ("RemoteDisconnected", "connection closed")):
        if needle in text:
            return said
    inner = exc.args[0] if exc.args else exc
    reason = getattr(inner, "reason", None)
    return str(reason or inner)[:200]


# ---------------------------------------------------------------------------------------------------
# Transport

_local = threading.local()


def _session() -> requests.Session:
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = requests.Session()
        session.trust_env = False  # no proxy from the environment between the console and its Prometheus
    return session


def _auth(config: PrometheusConfig) -> tuple[dict[str, str], tuple[str, str] | None]:
    headers: dict[str, str] = {}
    auth = None
    if config.bearer_token_file:
        try:
            with open(config.bearer_token_file, encoding="utf-8") as fh:
                headers["Authorization"] = "Bearer " + fh.read().strip()
        except OSError as exc:
            raise PrometheusError(f"cannot read the bearer token file {config.bearer_token_file}: "
                                  f"{exc.strerror or exc}") from None
    if config.basic_auth_file:
        try:
            with open(config.basic_auth_file, encoding="utf-8") as fh:
                line = fh.readline().strip()
        except OSError as exc:
            raise PrometheusError(f"cannot read the basic auth file {config.basic_auth_file}: "
                                  f"{exc.strerror or exc}") from None
        user, sep, password = line.partition(":")
        if not sep:
            raise PrometheusError(f"the basic auth file {config.basic_auth_file} must hold one line user:password")
        auth = (user, password)
    return headers, auth


class _Stats:
    """How many HTTP requests reached Prometheus (tests and the benchmark count them)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0

    def add(self) -> None:
        with self.lock:
            self.requests += 1


stats = _Stats()


def _call(config: PrometheusConfig, path: str, data: Mapping[str, str], timeout: float) -> Any:
    headers, auth = _auth(config)
    stats.add()
    started = time.monotonic()
    try:
        response = _session().post(config.url + path, data=data, headers=headers, auth=auth,
                                   timeout=(timeout, timeout))
    except requests.Timeout:
        raise PrometheusError(f"Prometheus timed out after {_seconds(timeout)}") from None
    except requests.ConnectionError as exc:
        if time.monotonic() - started >= timeout * 0.95 and "timed out" in str(exc).lower():
            raise PrometheusError(f"Prometheus timed out after {_seconds(timeout)}") from None
        raise PrometheusError(f"Prometheus unreachable: {_connection_reason(exc)}") from None
    except requests.RequestException as exc:
        raise PrometheusError(f"Prometheus unreachable: {exc}") from None
    if response.status_code in (401, 403):
        raise PrometheusError(f"Prometheus refused the credentials (HTTP {response.status_code})")
    try:
        body = response.json()
    except ValueError:
        raise PrometheusError(f"Prometheus answered HTTP {response.status_code} without JSON "
                              f"(is {config.url} a Prometheus?)") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, dict) else None
        raise PrometheusError(f"Prometheus refused the query: {error or f'HTTP {response.status_code}'}")
    data_ = body.get("data") or {}
    return data_


# ---------------------------------------------------------------------------------------------------
# Cache

_cache: dict[tuple, tuple[float, Any]] = {}
_cache_lock = threading.Lock()
_CACHE_MAX = 2048


@caches.register
def cache_clear() -> None:
    """Forget every cached answer (tests)."""
    with _cache_lock:
        _cache.clear()


def _cached(key: tuple, compute, *, keep_failure: bool = True):
    ttl = cache_seconds()
    now = time.monotonic()
    if ttl > 0:
        with _cache_lock:
            hit = _cache.get(key)
        if hit is not None and hit[0] > now:
            value = hit[1]
            if isinstance(value, PrometheusError):
                raise PrometheusError(value.reason)
            return value
    try:
        value = compute()
    except PrometheusError as exc:
        value = exc
    if ttl > 0 and (keep_failure or not isinstance(value, PrometheusError)):
        with _cache_lock:
            if len(_cache) >= _CACHE_MAX:
                for k in [k for k, (t, _) in _cache.items() if t <= now] or list(_cache)[: _CACHE_MAX // 2]:
                    _cache.pop(k, None)
            _cache[key] = (time.monotonic() + ttl, value)
    if isinstance(value, PrometheusError):
        raise PrometheusError(value.reason)
    return value


def _config_key(config: PrometheusConfig) -> tuple:
    return (config.url, config.bearer_token_file, config.basic_auth_file, config.matchers)


# ---------------------------------------------------------------------------------------------------
# Queries

def query(config: PrometheusConfig, promql: str, *, timeout: float | None = None, cache: bool = True) -> list[dict]:
    """``/api/v1/query``: the instant vector's samples, ``[{"metric": {...}, "value": float}]``.

    Raises PrometheusError with the reason (unreachable, timed out, refused the query, ...)."""
    timeout = default_timeout() if timeout is None else timeout

    def compute():
        data = _call(config, "/api/v1/query", {"query": promql}, timeout)
        if data.get("resultType") not in ("vector", None):
            raise PrometheusError(f"Prometheus answered a {data.get('resultType')}, not an instant vector")
        return [{"metric": r.get("metric") or {}, "value": float(r["value"][1])} for r in data.get("result") or []]

    if not cache:
        return compute()
    # A failure within a cut budget (what other clusters of the page left) is not kept for the next page.
    return _cached((_config_key(config), "query", promql), compute, keep_failure=timeout >= default_timeout() * 0.9)


def query_range(config: PrometheusConfig, promql: str, *, start: float, end: float, step: float,
                timeout: float | None = None, cache: bool = True) -> list[dict]:
    """``/api/v1/query_range``: ``[{"metric": {...}, "values": [(unix time, float), ...]}]``.

    ``start``/``end`` are Unix times (seconds), ``step`` seconds. Raises PrometheusError."""
    timeout = default_timeout() if timeout is None else timeout

    def compute():
        data = _call(config, "/api/v1/query_range",
                     {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}, timeout)
        return [{"metric": r.get("metric") or {},
                 "values": [(float(t), float(v)) for t, v in r.get("values") or []]}
                for r in data.get("result") or []]

    if not cache:
        return compute()
    return _cached((_config_key(config), "range", promql, start, end, step), compute,
                   keep_failure=timeout >= default_timeout() * 0.9)


class Budget:
    """What is left of a page's time budget for Prometheus (seconds), shared by all its queries: each
    query may wait what is left (``left()``); once it is spent, the next ones are not sent (``spent()``)
    and show the reason of the query that spent it (``note``/``spent_reason``), else ``NO_BUDGET``."""

    MIN_SECONDS = 0.02  # less than this left: a query would only time out

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = default_timeout() if seconds is None else float(seconds)
        self._clock = time.monotonic
        self.deadline = self._clock() + self.seconds
        self._spent_by: dict[Any, str] = {}

    def left(self) -> float:
        return max(0.0, self.deadline - self._clock())

    def spent(self) -> bool:
        return self.left() < self.MIN_SECONDS

    def note(self, key: Any, reason: str) -> None:
        """A query of ``key`` (a cluster) failed with ``reason``: when it spent the budget, the next
        queries of that key show this reason rather than "skipped"."""
        if reason and self.spent():
            self._spent_by.setdefault(key, reason)

    def spent_reason(self, key: Any = None) -> str:
        return self._spent_by.get(key) or NO_BUDGET


NO_BUDGET = "Prometheus skipped: the page's time budget is spent"


@dataclass(frozen=True)
class Unavailable:
    """No figures: ``reason`` says why ("Prometheus unreachable: connection refused", ...). Falsy."""

    reason: str

    def __bool__(self) -> bool:
        return False


NOT_CONFIGURED = Unavailable("no Prometheus configured for this cluster")
