"""Informers: list (paginated) then watch one registered resource over HTTP, raw JSON read with orjson.

An `Informer` thread lists with `limit`/`continue`, then watches from the list's resourceVersion
(bookmarks, a client-side read timeout, a randomised server timeout), resumes a watch that ends, relists
on 410 Gone (also for an expired `continue`) and backs off with jitter on errors. It only talks HTTP: it
hands pages and events to the cluster's writer through a bounded queue. What it lists is a `Resource`
registration (group/version/resource, namespaced or not), so any resource is informed the same way.
"""
from __future__ import annotations

import logging
import queue
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator

import orjson
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from common import metrics
from kube.client import api_client, api_error_message
from nodepools.sync.options import SyncOptions

if TYPE_CHECKING:
    from nodepools.models import Cluster
    from nodepools.sync.resources import Resource

logger = logging.getLogger("nodepools.sync")


def api_client_for(cluster: "Cluster"):
    """An ApiClient for a cluster (kube.client.api_client) from its kubeconfig path/context or the in-cluster
    service account. Retries are off: the sync backs off itself, and a patch must fail fast."""
    if not cluster.in_cluster and not cluster.kubeconfig_path:
        raise ValueError(f"cluster {cluster.name} has neither a kubeconfig path nor in-cluster access")
    return api_client(kubeconfig=cluster.kubeconfig_path, context=cluster.kube_context or None,
                      in_cluster=cluster.in_cluster)


# What `_list` returns for an optional resource the cluster does not serve (404: its CRD is not installed).
ABSENT = "<absent>"


class StreamBroken(Exception):
    """A watch stream cut off mid-way (connection reset, read timeout)."""


class Gone(Exception):
    """410: the resourceVersion (or continue token) is older than the server's history: relist."""


class Backoff:
    """Jittered exponential backoff: about `base` doubling to `cap`."""

    def __init__(self, base: float, cap: float) -> None:
        self.base, self.cap, self.failures = base, cap, 0

    def next(self, at_least: float = 0.0) -> float:
        delay = min(self.cap, self.base * (2 ** self.failures))
        self.failures += 1
        return max(at_least, delay * random.uniform(0.8, 1.2))

    def reset(self) -> None:
        self.failures = 0


def _retry_after(exc: BaseException) -> float:
    headers = getattr(exc, "headers", None) or {}
    try:
        return float(headers.get("Retry-After") or 0)
    except (TypeError, ValueError):
        return 0.0


def list_call(api_client: Any, resource: "Resource"):
    """`fn(**query)` -> the raw urllib3 response of GET on the resource's collection (all namespaces).

    Query keywords as the generated clients name them: limit, _continue, watch, resource_version,
    allow_watch_bookmarks, timeout_seconds; plus _request_timeout. The resource's field selector, if any,
    goes with every list and watch.
    """
    names = {"limit": "limit", "_continue": "continue", "watch": "watch", "resource_version": "resourceVersion",
             "allow_watch_bookmarks": "allowWatchBookmarks", "timeout_seconds": "timeoutSeconds"}
    path = resource.path
    selector = [("fieldSelector", resource.field_selector)] if resource.field_selector else []

    def call(_request_timeout=None, **query):
        params = [(names[k], v) for k, v in query.items() if v is not None] + selector
        return api_client.call_api(
            path, "GET", {}, params, {"Accept": "application/json"}, auth_settings=["BearerToken"],
            _return_http_data_only=True, _preload_content=False, _request_timeout=_request_timeout,
        )

    return call


class Informer(threading.Thread):
    """List then watch one resource; sends ("page"|"listed"|"events"|"health", name, ...) to the writer.

    "page" and "events" messages end with the time.time() they were received from the API server: the
    writer reports how long after that it committed them (console_sync_lag_seconds)."""

    def __init__(self, resource: "Resource", api_client: Any, out: queue.Queue, options: SyncOptions,
                 cluster_name: str) -> None:
        super().__init__(name=f"informer:{cluster_name}:{resource.name}", daemon=True)
        self.resource, self.kind = resource, resource.name
        self.out, self.options, self.cluster_name = out, options, cluster_name
        self.list_fn = list_call(api_client, resource)
        self.stop_event = threading.Event()
        self.healthy: bool | None = None
        self._response = None
        self._quick_breaks = 0

    def stop(self) -> None:
        self.stop_event.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # unblocks a read waiting on the watch socket
            except Exception:  # pragma: no cover - best effort
                pass

    def _put(self, message: tuple) -> None:
        while not self.stop_event.is_set():
            try:
                self.out.put(message, timeout=0.2)
                return
            except queue.Full:
                continue

    def _health(self, error: str | None) -> None:
        healthy = error is None
        if healthy != self.healthy or not healthy:
            self.healthy = healthy
            self._put(("health", self.kind, error))

    def run(self) -> None:
        backoff = Backoff(self.options.backoff_base, self.options.backoff_max)
        rv: str | None = None
        while not self.stop_event.is_set():
            try:
                if rv is None:
                    rv = self._list()
                if self.stop_event.is_set():
                    break
                if rv is ABSENT:
                    # The cluster does not serve this optional resource (its CRD is not installed): it
                    # listed as nothing; look again later (installing the CRD later is picked up).
                    rv = None
                    backoff.reset()
                    self.stop_event.wait(self.options.absent_recheck)
                    continue
                rv = self._watch(rv)
                backoff.reset()
                metrics.sync_watch_restarted(self.cluster_name, self.kind)  # the watch ended: resumed from rv
            except Gone as exc:
                logger.info("cluster %s: %s: %s; relisting", self.cluster_name, self.kind, exc)
                if rv is None:  # the list itself kept expiring: do not spin
                    self.stop_event.wait(backoff.next())
                else:  # the watch's history was compacted away: it restarts after a full list
                    metrics.sync_watch_restarted(self.cluster_name, self.kind)
                rv = None
            except Exception as exc:  # network, 429, 5xx, bad JSON: back off and resume from `rv`
                if self.stop_event.is_set():
                    break

                if isinstance(exc, ApiException) and exc.status == 410:
                    if rv is not None:
                        metrics.sync_watch_restarted(self.cluster_name, self.kind)
                    rv = None
                    continue
                message = api_error_message(exc)
                delay = backoff.next(_retry_after(exc))
                logger.warning("cluster %s: %s: %s; retrying in %.1fs", self.cluster_name, self.kind, message, delay)
                self._health(f"{self.kind}: {message}")
                self.stop_event.wait(delay)
            finally:
                self._response = None

    def _list(self) -> str:
        """Every page (raw JSON) to the writer, then ("listed", seen keys); returns the list's rv."""
        token, seen, rv = None, set(), ""
        timeout = (self.options.connect_timeout, self.options.list_timeout)
        first = True
        while True:
            try:
                response = self.list_fn(limit=self.options.page_limit, _continue=token, _request_timeout=timeout)
            except ApiException as exc:
                if exc.status == 410:
                    raise Gone("list continue token expired") from exc
                if exc.status == 404 and self.resource.optional and first:
                    # Not served here (no such CRD): an empty complete list, so rows left are swept.
                    self._health(None)
                    self._put(("page", self.kind, [], seen, True, time.time()))
                    self._put(("listed", self.kind, seen, ""))
                    return ABSENT
                raise
            received = time.time()
            body = orjson.loads(response.data)
            if self.stop_event.is_set():
                return rv
            self._health(None)
            metadata = body.get("metadata") or {}
            rv = metadata.get("resourceVersion") or rv
            self._put(("page", self.kind, body.get("items") or [], seen, first, received))
            first = False
            token = metadata.get("continue")
            if not token:
                break
        self._put(("listed", self.kind, seen, rv))
        return rv

    def _watch(self, rv: str) -> str:
        """Watch from `rv` until the stream ends; returns the last rv seen (events or bookmarks)."""
        options = self.options
        response = self.list_fn(
            watch=True, resource_version=rv, allow_watch_bookmarks=True,
            timeout_seconds=random.randint(options.watch_timeout_min, options.watch_timeout_max),
            _request_timeout=(options.connect_timeout, options.read_timeout),
        )
        self._response = response
        opened, received = time.monotonic(), 0.0
        try:
            if response.status != 200:  # pragma: no cover - the client raises for error statuses
                raise RuntimeError(f"watch answered HTTP {response.status}")
            self._health(None)
            buffer = b""
            for chunk in self._chunks(response):
                received = time.time()
                if self.stop_event.is_set():
                    break
                buffer += chunk
                if b"\n" not in buffer:
                    continue
                *lines, buffer = buffer.split(b"\n")
                events = []
                for line in lines:
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise Gone(obj.get("message") or "watch history expired")
                        raise RuntimeError(f"watch error: {obj.get('message') or obj}")
                    new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if kind != "BOOKMARK":
                        events.append((kind, obj))
                    if new_rv:
                        rv = new_rv
                if events:
                    self._put(("events", self.kind, events, received))
        except StreamBroken as exc:
            worked = received > 0 or time.monotonic() - opened > 1.0
            self._quick_breaks = 0 if worked else self._quick_breaks + 1
            if self._quick_breaks > 1:
                raise exc.__cause__ from None  # streams keep breaking at once: an error, with backoff
            # A watch that worked ended abruptly (or was silent past the read timeout): resume from rv.
            logger.info("cluster %s: %s watch ended (%s); resuming from %s", self.cluster_name, self.kind,
                        exc.__cause__.__class__.__name__, rv)
        finally:
            response.release_conn()
        return rv

    @staticmethod
    def _chunks(response) -> Iterator[bytes]:
        try:
            yield from response.stream(amt=None, decode_content=False)
        except (ProtocolError, ReadTimeoutError, OSError) as exc:
            raise StreamBroken() from exc
